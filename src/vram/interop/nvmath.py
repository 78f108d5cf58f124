"""nvmath-python on vram's caching allocator: ``VramAllocator``, for the ``allocator``
option of nvmath's matmul, FFT and the rest::

    options = {"allocator": vram.interop.nvmath.VramAllocator(device_id=0)}
    nvmath.linalg.advanced.matmul(a, b, options=options)
    nvmath.fft.fft(x, options=options)

It follows nvmath's ``BaseCUDAMemoryManagerAsync`` protocol: nvmath asks for workspace on
the stream it executes on (``memalloc_async(size, stream)``), and vram hands out memory for
that stream; the memory goes back to vram when nvmath drops the returned object (after it
has made the stream wait for its last use). ``memalloc(size)`` allocates for vram's current
stream. (``vram.interop.cuda_core.VramMemoryResource`` works as the option too.)
"""

from __future__ import annotations

from typing import Any

from .._device import Device
from .._streams import current_stream
from ..memory import Allocation, allocate
from ._streams import enter_device, peer_stream

__all__ = ["VramAllocator", "VramPointer"]


class VramPointer:
    """Device memory nvmath holds: ``device_ptr`` and ``size``; freed when dropped."""

    __slots__ = ("device_ptr", "size", "_allocation")

    def __init__(self, allocation: Allocation) -> None:
        self.device_ptr = allocation.ptr
        self.size = allocation.size
        self._allocation = allocation

    def free(self) -> None:
        """Give the memory back to vram now (idempotent)."""
        self._allocation.free()

    def __repr__(self) -> str:
        return f"<vram.interop.nvmath.VramPointer {self.size} B at {self.device_ptr:#x}>"


class VramAllocator:
    """nvmath's memory manager protocol over vram's caching allocator of one device."""

    def __init__(self, device_id: int = 0, logger: Any = None) -> None:
        if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
            raise TypeError(f"device_id: expected a device index, got {device_id!r}")
        self.device_id = device_id
        self.logger = logger
        self._device = Device("cuda", device_id)

    def memalloc_async(self, size: int, stream: Any) -> VramPointer:
        """``size`` bytes for ``stream`` (a cuda.core Stream, as nvmath passes)."""
        enter_device(self._device)
        handle = int(stream.handle) if stream is not None else 0
        return VramPointer(allocate(size, self._device, peer_stream(handle, self._device)))

    def memalloc(self, size: int) -> VramPointer:
        """``size`` bytes for vram's current stream of the device."""
        enter_device(self._device)
        return VramPointer(allocate(size, self._device, current_stream(self._device)))

    def __repr__(self) -> str:
        return f"<vram.interop.nvmath.VramAllocator on {self._device}>"
