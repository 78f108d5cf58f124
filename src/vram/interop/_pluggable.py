"""PyTorch's pluggable allocator, served by vram: the two C callbacks it calls.

``CUDAPluggableAllocator`` takes C function pointers ``void* alloc(size_t size, int device,
cudaStream_t stream)`` and ``void free(void* ptr, size_t size, int device, cudaStream_t
stream)``; ``Callbacks`` makes them with ctypes over vram's caching allocator. Nothing here
imports PyTorch (``vram.interop.torch`` hands the pointers to it), so the callbacks run
and are tested on the simulated GPU too.

A callback must never raise into C: a failure is kept (``error``), warned about, and the
caller gets NULL.
"""

from __future__ import annotations

import ctypes
import threading
import time
import warnings
from collections.abc import Callable

from .._device import Device
from ..driver import get_driver
from ..memory import allocator_for
from ._streams import peer_stream

__all__ = ["Callbacks"]

# PyTorch's pluggable allocator signatures (torch/csrc/cuda/CUDAPluggableAllocator.h):
# void* alloc(size_t size, int device, cudaStream_t stream)
# void free(void* ptr, size_t size, int device, cudaStream_t stream)
_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)


class Callbacks:
    """The two callbacks PyTorch calls, and what they have cost so far.

    ``kind`` is the device type the device indices PyTorch passes refer to ("cuda"; "sim"
    in tests, with ``current_device`` standing for PyTorch's current device).
    """

    def __init__(self, kind: str, current_device: Callable[[], int]) -> None:
        self.kind = kind
        self.driver = get_driver(kind)
        # with one device nothing can make another device's context current behind vram
        self.several = self.driver.device_count() > 1
        self.current_device = current_device
        self.lock = threading.Lock()
        self.alloc_calls = 0
        self.free_calls = 0
        self.seconds = 0.0
        self.error: BaseException | None = None
        self.c_alloc = _ALLOC(self.alloc)  # kept alive as long as this object (the process)
        self.c_free = _FREE(self.free)

    @property
    def addresses(self) -> tuple[int, int]:
        """The C function pointers of alloc and free, as ``_cuda_customAllocator`` takes them."""
        alloc = ctypes.cast(self.c_alloc, ctypes.c_void_p).value
        free = ctypes.cast(self.c_free, ctypes.c_void_p).value
        assert alloc is not None and free is not None
        return alloc, free

    def alloc(self, size: int, device: int, stream: int | None) -> int | None:
        """PyTorch's alloc: ``size`` bytes on ``device`` for ``stream``; None (NULL) on error.

        PyTorch calls it with ``device`` current, so vram's view of the current device is
        brought in line first where several devices exist.
        """
        start = time.perf_counter()
        try:
            if size == 0:
                return None
            if self.several:
                self.driver.set_device(device)
            found = Device(self.kind, device)
            handle = peer_stream(stream or 0, found).cuda_stream
            return allocator_for(found).malloc(size, handle)
        except BaseException as exc:  # nothing may cross the C boundary: PyTorch gets NULL
            self._failed("alloc", size, exc)
            return None
        finally:
            self._count(start, alloc=True)

    def free(self, ptr: int | None, size: int, device: int, stream: int | None) -> None:
        """PyTorch's free: give ``ptr`` back to vram's allocator of ``device``.

        PyTorch may free from any current device. vram then acts in ``device``'s context and
        makes PyTorch's current device current again before returning.
        """
        start = time.perf_counter()
        try:
            if not ptr:
                return
            current = self.current_device() if self.several else device
            if current != device:
                self.driver.set_device(device)
            try:
                allocator_for(Device(self.kind, device)).free(ptr)
            finally:
                if current != device:
                    self.driver.set_device(current)
        except BaseException as exc:
            self._failed("free", size, exc)
        finally:
            self._count(start, alloc=False)

    def _count(self, start: float, alloc: bool) -> None:
        elapsed = time.perf_counter() - start
        with self.lock:
            if alloc:
                self.alloc_calls += 1
            else:
                self.free_calls += 1
            self.seconds += elapsed

    def _failed(self, what: str, size: int, exc: BaseException) -> None:
        self.error = exc
        try:
            warnings.warn(
                f"vram.interop.torch: {what} of {size} bytes failed: {exc!r}",
                RuntimeWarning,
                stacklevel=2,
            )
        except Exception:  # a warning filter set to "error" must not cross the C boundary
            pass
