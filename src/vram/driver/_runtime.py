"""The CUDA runtime library (libcudart) in the process's global symbols, for code compiled
against it that does not link it: an AOTInductor model built with ``link_libtorch=False``
calls cudaMalloc, cudaEventRecord and the like, and expects the process to provide them.

cuda-pathfinder finds the library (NVIDIA's wheels, conda, ``$CUDA_HOME``, the system);
it is then opened ``RTLD_GLOBAL`` so that libraries loaded afterwards resolve against it.
vram itself never calls it: its device layer is the driver API.
"""

from __future__ import annotations

import ctypes
import os
import threading

__all__ = ["load_cuda_runtime"]

_lock = threading.Lock()
_loaded: str | None = None


def load_cuda_runtime() -> str:
    """Make libcudart's symbols global in this process (once); returns its path.

    RuntimeError naming what was looked for when no CUDA runtime library is found.
    """
    global _loaded
    with _lock:
        if _loaded is None:
            try:
                from cuda.pathfinder import load_nvidia_dynamic_lib

                path = load_nvidia_dynamic_lib("cudart").abs_path
            except Exception as exc:  # not found, or an unusable cuda-pathfinder
                raise RuntimeError(
                    "no CUDA runtime library (libcudart) was found, and the model calls it: "
                    "install NVIDIA's runtime wheel (pip install 'vram[cu13]', or "
                    "nvidia-cuda-runtime) or set CUDA_HOME to a CUDA toolkit "
                    f"(cuda-pathfinder: {exc})"
                ) from None
            # opened again RTLD_GLOBAL: a library another component opened RTLD_LOCAL is
            # promoted, so that its symbols resolve the model's
            ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
            _loaded = path or ""
        return _loaded
