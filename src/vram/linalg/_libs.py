"""The library calls vram.linalg makes, for each kind of device: one interface, two devices.

- ``CudaLibs`` (``_cuda_libs``): cuSOLVER, cuBLAS's batched LU and vram's helper kernels.
- ``SimLibs`` (``_sim_libs``): the same calls on the simulated GPU, in NumPy, queued.

So the dispatch above (``_lu``, ``_solve``) is one piece of code for both devices: its
workspaces, streams, events and pointer arrays are exercised in CI exactly as on a GPU.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ._sim_libs import SimLibs

__all__ = ["libs_for", "PinnedArray", "per_thread"]

T = TypeVar("T")

_cuda_libs = None
_sim_libs = SimLibs()


def libs_for(device_type: str):
    """The libraries of a device type ("cuda" or "sim")."""
    global _cuda_libs
    if device_type == "sim":
        return _sim_libs
    if _cuda_libs is None:
        from ._cuda_libs import CudaLibs

        _cuda_libs = CudaLibs()
    return _cuda_libs


class PinnedArray:
    """``count`` values of ``dtype`` in page-locked host memory, which kernels write at the
    same address (unified addressing) and the host reads once the stream is synchronized;
    given back when dropped."""

    def __init__(self, driver: Any, count: int, dtype: type) -> None:
        nbytes = count * np.dtype(dtype).itemsize
        self.ptr = driver.host_alloc(nbytes)
        self.values = driver.host_view(self.ptr, nbytes).view(dtype)
        weakref.finalize(self, driver.host_free, self.ptr)


_threads = threading.local()  # .objects: (driver, name) -> this thread's object


def per_thread(driver: Any, name: str, make: Callable[[Any], T]) -> T:
    """This thread's ``name`` object for ``driver``, made by ``make(driver)`` the first time
    (a buffer the device writes for the host: one a thread, reused call after call)."""
    objects = _threads.__dict__.setdefault("objects", {})
    found = objects.get((driver, name))
    if found is None:
        found = objects[(driver, name)] = make(driver)
    return found
