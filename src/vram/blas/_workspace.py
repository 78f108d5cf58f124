"""How much workspace cuBLAS and cuBLASLt get, as PyTorch sizes it (CublasHandlePool.cpp).

- cuBLAS: ``CUBLAS_WORKSPACE_CONFIG`` in NVIDIA's syntax, ``:SIZE_KiB:COUNT`` repeated
  (``:4096:8`` is 8 buffers of 4096 KiB, 32 MiB in all; the sizes add up). Unset: 32 MiB on
  a Hopper GPU (compute capability 9.0), else ``:4096:2:16:8`` (8 MiB + 128 KiB). A value
  that holds no ``:SIZE:COUNT`` pair is warned about and the default used.
- cuBLASLt: ``CUBLASLT_WORKSPACE_SIZE`` in KiB (default 1024, pytorch#73328), capped at the
  cuBLAS size unless ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=0``.

The buffers themselves come from ``vram.memory.get_workspace``: one per (library, device,
stream, thread), kept across calls. Variables are read each time a size is asked for.
"""

from __future__ import annotations

import os
import re
import warnings

__all__ = ["cublas_workspace_size", "cublaslt_workspace_size"]

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


def cublaslt_workspace_size(major: int, minor: int) -> int:
    """Bytes of cuBLASLt workspace for a GPU of compute capability ``major.minor``."""
    text = os.environ.get("CUBLASLT_WORKSPACE_SIZE")
    kib = _LT_DEFAULT_KiB
    if text is not None:
        try:
            kib = int(text.strip())
        except ValueError:
            warnings.warn(
                f"invalid CUBLASLT_WORKSPACE_SIZE={text!r} (KiB), using the default "
                f"workspace size of {_LT_DEFAULT_KiB} KiB.",
                RuntimeWarning,
                stacklevel=2,
            )
    size = max(kib, 0) * _KiB
    unified = os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "1").strip().lower()
    if unified not in ("0", "false", "off", "no"):
        size = min(size, cublas_workspace_size(major, minor))
    return size
