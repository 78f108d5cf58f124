"""How much workspace cuBLAS and cuBLASLt get, as PyTorch sizes it (CublasHandlePool.cpp).

- cuBLAS: ``CUBLAS_WORKSPACE_CONFIG`` in NVIDIA's syntax, ``:SIZE_KiB:COUNT`` repeated
  (``:4096:8`` is 8 buffers of 4096 KiB, 32 MiB in all; the sizes add up). Unset: 32 MiB on
  a Hopper GPU (compute capability 9.0), else ``:4096:2:16:8`` (8 MiB + 128 KiB). A value
  that holds no ``:SIZE:COUNT`` pair is warned about and the default used.
- cuBLASLt: ``CUBLASLT_WORKSPACE_SIZE`` KiB (default 1024, pytorch#73328) offered to its
  heuristic. Unified with cuBLAS unless ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=0``, as current
  PyTorch: cuBLASLt calls then take the cuBLAS workspace of their stream, and a larger size
  is capped at the cuBLAS size (with PyTorch's warning); not unified, a workspace of its
  own. The size decides which algorithms the heuristic may pick: with all 32 MiB of a
  Hopper's cuBLAS workspace it picks split-K (two kernels: twice the launches) for small
  products where PyTorch's 1 MiB gets one kernel.

The buffers themselves come from ``vram.memory.get_workspace``: one per (library, device,
stream, thread), kept across calls; ``cublaslt_workspace_library()`` names the one cuBLASLt
calls take. Variables are read each time a size is asked for (when a GEMM plan is made).
"""

from __future__ import annotations

import os
import re
import warnings

__all__ = ["cublas_workspace_size", "cublaslt_workspace_size", "cublaslt_workspace_library"]

_KiB = 1024
_PAIR = re.compile(r":([0-9]+):([0-9]+)")
_HOPPER_DEFAULT = 4096 * _KiB * 8  # bytes: ":4096:8"
_OTHER_DEFAULT = 4096 * _KiB * 2 + 16 * _KiB * 8  # bytes: ":4096:2:16:8"
_LT_DEFAULT_KiB = 1024


def cublas_workspace_size(major: int, minor: int) -> int:
    """Bytes of cuBLAS workspace for a GPU of compute capability ``major.minor``."""
    default = _HOPPER_DEFAULT if (major, minor) == (9, 0) else _OTHER_DEFAULT
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if config is None:
        return default
    pairs = _PAIR.findall(config)
    if not pairs:
        warnings.warn(
            f"Could not parse CUBLAS_WORKSPACE_CONFIG={config!r} (expected ':SIZE_KiB:COUNT', "
            f"e.g. ':4096:8'), using the default workspace size of {default} bytes.",
            RuntimeWarning,
            stacklevel=2,
        )
        return default
    return sum(int(size) * _KiB * int(count) for size, count in pairs)


def _unified() -> bool:
    text = os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "1").strip().lower()
    return text not in ("0", "false", "off", "no")


def cublaslt_workspace_library() -> str:
    """The ``get_workspace`` library whose buffer cuBLASLt calls use: "cublas" when the
    workspaces are unified (the default), else "cublaslt"."""
    return "cublas" if _unified() else "cublaslt"


def cublaslt_workspace_size(major: int, minor: int) -> int:
    """Bytes of cuBLASLt workspace for a GPU of compute capability ``major.minor``."""
    default_kib = _LT_DEFAULT_KiB
    text = os.environ.get("CUBLASLT_WORKSPACE_SIZE")
    kib = default_kib
    if text is not None:
        try:
            kib = int(text.strip())
        except ValueError:
            warnings.warn(
                f"invalid CUBLASLT_WORKSPACE_SIZE={text!r} (KiB), using the default "
                f"workspace size of {default_kib} KiB.",
                RuntimeWarning,
                stacklevel=2,
            )
    size = max(kib, 0) * _KiB
    if _unified():
        cublas = cublas_workspace_size(major, minor)
        if cublas < size:
            warnings.warn(
                f"Requested unified CUBLASLT workspace size of {size} bytes exceeds CUBLAS "
                f"workspace size of {cublas} bytes. Please increase CUBLAS workspace size via "
                "CUBLAS_WORKSPACE_CONFIG or decrease requested CUBLASLT_WORKSPACE_SIZE. "
                "Otherwise CUBLASLT workspace size will be limited to the CUBLAS workspace size.",
                RuntimeWarning,
                stacklevel=2,
            )
            size = cublas
    return size
