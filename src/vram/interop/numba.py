"""Numba (numba-cuda) on vram's caching allocator: an External Memory Management plugin.

Turn it on before Numba makes its first CUDA context, either with the environment
(``NUMBA_CUDA_MEMORY_MANAGER=vram.interop.numba``: Numba imports this module and takes its
``_numba_memory_manager``) or in code with ``numba.cuda.set_memory_manager(VramMemoryManager)``.

Device memory comes from vram; pinned and mapped host memory stays Numba's own
(``HostOnlyCUDAMemoryManager``). Numba's EMM interface has no stream argument: memory is
allocated for the device's default stream (the per-thread default stream when
``NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM=1``), and freed when Numba drops its last reference.
Memory used on another stream must be covered as for any stream-ordered allocation:
``vram.memory.record_stream`` / ``record_use`` with the Numba stream
(``vram.interop.peer_stream(stream.handle.value)``), or a synchronization before it is dropped.
"""

from __future__ import annotations

import ctypes
import weakref
from contextlib import AbstractContextManager

from numba import cuda

try:
    from numba.cuda.core import config  # numba-cuda
except ImportError:  # numba-cuda releases that still read Numba's own configuration
    from numba.core import config

from .._device import Device
from ..memory import allocate, empty_cache
from ._streams import enter_device, peer_stream

__all__ = ["VramMemoryManager"]

_CU_STREAM_PER_THREAD = 2  # cudaStreamPerThread


class VramMemoryManager(cuda.GetIpcHandleMixin, cuda.HostOnlyCUDAMemoryManager):
    """Numba's device allocations from vram's caching allocator of the context's device."""

    def initialize(self) -> None:
        """Nothing to prepare: vram's allocator of the device is made on first use."""

    @property
    def _device(self) -> Device:
        return Device("cuda", self.context.device.id)

    def memalloc(self, size: int) -> cuda.MemoryPointer:
        """``size`` bytes of device memory, owned by the returned pointer."""
        device = self._device
        enter_device(device)
        handle = _CU_STREAM_PER_THREAD if config.CUDA_PER_THREAD_DEFAULT_STREAM else 0
        allocation = allocate(size, device, peer_stream(handle, device))
        pointer = ctypes.c_void_p(allocation.ptr) if allocation.ptr else 0  # 0 B: a null one
        return cuda.MemoryPointer(
            weakref.proxy(self.context), pointer, size, finalizer=allocation.free
        )

    def get_memory_info(self) -> cuda.MemoryInfo:
        """(free, total) bytes of the device, as the driver reports them."""
        device = self._device
        free, total = device.driver.mem_get_info(device.index)  # type: ignore[arg-type]
        return cuda.MemoryInfo(free=free, total=total)

    def reset(self) -> None:
        """Numba's context reset: release the memory vram caches for the device (memory
        Numba still holds stays valid) and Numba's own host allocations."""
        super().reset()
        empty_cache(self._device)

    def defer_cleanup(self) -> AbstractContextManager[None]:
        """Numba's deferred cleanup of host allocations; vram frees device memory by its
        own stream rules, so nothing more is deferred."""
        return super().defer_cleanup()

    @property
    def interface_version(self) -> int:
        return 1


_numba_memory_manager = VramMemoryManager
