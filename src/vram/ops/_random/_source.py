"""The NVRTC source of the random kernels: the shared header, then kernels/random.cu."""

from __future__ import annotations

from functools import cache

from .. import _launch

__all__ = ["source"]


@cache
def source() -> str:
    folder = _launch.KERNEL_DIR
    return (folder / "common.cuh").read_text() + (folder / "random.cu").read_text()
