"""Allocation: what a tensor holds on to. Dropping the last reference frees the memory."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._streams import Stream, as_stream

if TYPE_CHECKING:
    from .._device import Device

__all__ = ["Allocation", "FreedWhenDropped", "FreesDropped"]


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


class FreesDropped:
    """The device allocators' half of FreedWhenDropped (the caching allocator and the
    cudaMallocAsync backend): ``free``, ``free_later`` and ``later``, and ``_free_dropped``,
    which every call that takes the lock runs first. A subclass has ``_lock``, ``_dropped``
    (a deque), ``_allocated`` (ptr -> what it handed out) and ``_free(ptr)``.
    """

    _lock: Any
    _dropped: Any
    _allocated: dict
    device: Any

    def free(self, ptr: int) -> None:
        """Free an allocation (ValueError for a pointer it did not hand out).

        When the lock is held (by another thread, or by this one: a finalizer that runs
        inside an allocator call) the free is left for the allocator's next call, as
        ``free_later``: nothing the program can observe tells the two apart, since every
        call frees what was left before it does anything else.
        """
        lock = self._lock
        if not lock.acquire(False):
            if ptr not in self._allocated:
                raise ValueError(f"ptr: {ptr:#x} is not a live allocation of {self.device}")
            self._dropped.append(ptr)
            return
        try:
            if self._dropped:
                self._free_dropped()
            self._free(ptr)
        finally:
            lock.release()

    def free_later(self, ptr: int) -> None:
        """Free ``ptr`` at the allocator's next call: for finalizers, which must not take
        the lock (the allocator may be inside a call on this very thread)."""
        self._dropped.append(ptr)

    def later(self, work: Callable[[], None]) -> None:
        """Run ``work`` under the lock at the allocator's next call (for finalizers)."""
        self._dropped.append(work)

    def _free_dropped(self, keep: int = 0) -> None:
        """Free what finalizers dropped since the last call (and run the work they left), in
        the order they dropped it, all but the last ``keep``."""
        dropped = self._dropped
        while len(dropped) > keep:
            item = dropped.popleft()
            if type(item) is not int:
                item()  # work a finalizer left (``later``)
            elif item in self._allocated:
                self._free(item)


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
