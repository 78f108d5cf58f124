"""The NVRTC source of the random kernels: the shared header, then kernels/random.cu."""

from __future__ import annotations

from functools import cache

from .._kernels import KERNEL_DIR

__all__ = ["source"]


@cache
def source() -> str:
    return (KERNEL_DIR / "common.cuh").read_text() + (KERNEL_DIR / "random.cu").read_text()
