"""Allocation: what a tensor holds on to. Dropping the last reference frees the memory."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from .._streams import Stream, as_stream

if TYPE_CHECKING:
    from .._device import Device

__all__ = ["Allocation", "FreedWhenDropped"]


class FreedWhenDropped:
    """What Allocation and PinnedAllocation share: ``ptr`` goes back to ``_allocator`` by
    ``free()``, or when the object is dropped. The finalizer never takes the allocator's
    lock (the allocator may be inside a call on this very thread): it hands the pointer to
    ``_allocator.free_later``, and the allocator frees it at its next call."""

    __slots__ = ()
    ptr: int
    _allocator: object

    def free(self) -> None:
        """Give the memory back to the allocator now (idempotent)."""
        ptr, self.ptr = self.ptr, 0
        if ptr:
            self._allocator.free(ptr)  # type: ignore[attr-defined]

    def __del__(self) -> None:
        ptr = self.ptr
        if ptr:
            self.ptr = 0
            try:
                self._allocator.free_later(ptr)  # type: ignore[attr-defined]
            except Exception:  # finalizers never raise
                pass


class Allocation(FreedWhenDropped):
    """``size`` bytes of device memory at ``ptr`` on ``device``, from its caching allocator.

    Freed when the object is dropped (or by ``free()``); the allocator's stream rules, not
    this object, decide when the memory may be handed out again.
    """

    __slots__ = ("ptr", "size", "device", "stream", "_allocator", "__weakref__")

    def __init__(self, ptr: int, size: int, device: Device, stream: Stream, allocator) -> None:
        self.ptr = ptr
        self.size = size
        self.device = device
        self.stream = stream  # the stream it was allocated on
        self._allocator = allocator

    def record_stream(self, stream: Stream) -> None:
        """The memory is in use on ``stream``: keep it until work queued there by free runs.

        ValueError when ``stream`` belongs to another device.
        """
        stream = as_stream(stream, "stream")
        if stream.device != self.device:
            raise ValueError(f"stream: {stream} belongs to {stream.device}, not {self.device}")
        if self.ptr:
            self._allocator.record_stream(self.ptr, stream.cuda_stream)

    def record_use(self, stream: Stream) -> None:
        """The last use on ``stream`` is queued now: the next owner waits for it (no host wait).

        Call it right after the last read or write queued on ``stream``. The stream may be
        another device's (one that reads this memory through peer access): the next owner's
        stream waits on that device's event. A stream of another kind of device, or an
        empty allocation, is ignored with a warning.
        """
        stream = as_stream(stream, "stream")
        if stream.device.type != self.device.type:
            warnings.warn(
                f"record_use: {stream} is on {stream.device}, not {self.device}; ignored",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        if not self.ptr:
            warnings.warn("record_use: null pointer ignored", RuntimeWarning, stacklevel=2)
            return
        if stream.device == self.device:
            self._allocator.record_use(self.ptr, stream.cuda_stream)
        else:  # a peer's stream: its event is that device's
            self._allocator.record_use(self.ptr, stream.cuda_stream, stream.device.index)

    def __repr__(self) -> str:
        return f"<vram Allocation {self.size} B at {self.ptr:#x} on {self.device}>"
