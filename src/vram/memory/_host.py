"""The pinned host allocator: PyTorch's CachingHostAllocator, in Python.

Policy (PyTorch's):
- A request is rounded up to the next power of two; that size names its bucket. Blocks are
  never split or merged: each bucket keeps a free list of whole blocks (last freed, first
  reused).
- A bucket with no free block grows by one page-locked allocation (``driver.host_alloc``:
  cuMemHostAlloc on a GPU, the simulator's host memory without one).
- ``record_event(ptr, stream)``: an asynchronous copy on ``stream`` uses the block. vram
  records the event at the call (right after the copy is queued), not at free as PyTorch
  does, so the block waits for the copy only, never for later work on that stream.
- A freed block goes back to its free list once every event recorded on it has completed.
  Events are queried at each allocation and at ``empty_cache``; nothing ever waits on the
  host for them.
- ``empty_cache`` gives every free block back to the driver; blocks in use or waiting for
  their events stay.

Stats are PyTorch's ``host_memory_stats`` keys: ``allocations`` and ``allocated_bytes``
count every block the allocator holds (in use or cached), ``active_requests`` and
``active_bytes`` the blocks handed out and not yet reusable, ``num_host_alloc`` /
``num_host_free`` the driver calls, ``host_alloc_time`` / ``host_free_time`` their
duration in microseconds.

Locking: every public method takes ``_lock``. Finalizers never take it: a dropped
PinnedAllocation hands its pointer to ``free_later`` (an atomic deque append), and the next
call of any public method frees it first (``free`` does the same when the lock is busy).
"""

from __future__ import annotations

import bisect
import os
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from ..driver import Driver, cuda_usable, get_driver
from ._allocation import FreedWhenDropped
from ._stats import Stat

if TYPE_CHECKING:
    from .._streams import Stream

__all__ = [
    "CachingHostAllocator",
    "PinnedAllocation",
    "allocate_pinned",
    "host_allocator",
    "host_empty_cache",
    "host_memory_stats",
    "host_record_event",
    "is_pinned",
    "reset_accumulated_host_memory_stats",
    "reset_peak_host_memory_stats",
]


class _DurationStat:
    """A PyTorch DurationStat, in microseconds."""

    __slots__ = ("total", "max", "min", "count")

    def __init__(self) -> None:
        self.total = self.max = self.min = self.count = 0

    def add(self, micros: int) -> None:
        self.total += micros
        self.max = max(self.max, micros)
        self.min = micros if self.count == 0 else min(self.min, micros)
        self.count += 1

    def fields(self) -> dict[str, int]:
        avg = self.total // self.count if self.count else 0
        return {
            "total": self.total,
            "max": self.max,
            "min": self.min,
            "count": self.count,
            "avg": avg,
        }


class _HostBlock:
    """One page-locked allocation: in use, waiting for its events, or free in its bucket."""

    __slots__ = ("ptr", "size", "allocated", "events")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr = ptr
        self.size = size  # a power of two, in bytes
        self.allocated = True
        self.events: list[tuple[Driver, int, int]] = []  # (driver, device, event) since allocation


def _bucket(size: int) -> int:
    """PyTorch's size_index: log2 of the power-of-two size."""
    return (size - 1).bit_length()


class CachingHostAllocator:
    """Caching allocator of pinned host memory over one driver's ``host_alloc``."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self._lock = threading.Lock()
        self._dropped: deque[int] = deque()  # frees left by finalizers, done next call
        self._blocks: dict[int, _HostBlock] = {}  # ptr -> every block held
        self._starts: list[int] = []  # sorted ptrs of _blocks, for is_pinned
        self._free: dict[int, list[_HostBlock]] = {}  # bucket -> free blocks (LIFO)
        self._waiting: list[_HostBlock] = []  # freed, some event not yet complete
        self._spare_events: dict[tuple[int, int], list[int]] = {}  # (driver, device) -> events
        self.allocations = Stat()
        self.allocated_bytes = Stat()
        self.active_requests = Stat()
        self.active_bytes = Stat()
        self.host_alloc_time = _DurationStat()
        self.host_free_time = _DurationStat()

    # ============================================================ public
    def allocate(self, nbytes: int) -> int:
        """A pointer to at least ``nbytes`` of pinned host memory (0 for 0 bytes)."""
        if not isinstance(nbytes, int) or isinstance(nbytes, bool):
            raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
        if nbytes < 0:
            raise ValueError(f"nbytes must be non-negative, got {nbytes}")
        if nbytes == 0:
            return 0
        with self._lock:
            if self._dropped:
                self._free_dropped()
            self._process_events()
            size = 1 << _bucket(nbytes)
            block = self._get_free_block(size)
            if block is None:
                block = self._new_block(size)
            block.allocated = True
            self.active_requests.increase(1)
            self.active_bytes.increase(size)
            return block.ptr

    def free(self, ptr: int) -> None:
        """Give a block back: reusable once the events recorded on it have completed.

        When the lock is busy (another thread, or a finalizer inside a call of this one)
        the free is left for the next call, as ``free_later``."""
        if ptr == 0:
            return
        if not self._lock.acquire(False):
            self._dropped.append(ptr)
            return
        try:
            if self._dropped:
                self._free_dropped()
            self._free_one(ptr)
        finally:
            self._lock.release()

    def free_later(self, ptr: int) -> None:
        """Free ``ptr`` at the next call (for finalizers: they never take the lock)."""
        self._dropped.append(ptr)

    def record_event(self, ptr: int, stream: Stream) -> bool:
        """An async copy queued on ``stream`` uses the block holding ``ptr``: record an event
        there now. False (and nothing recorded) when ``ptr`` is not this allocator's."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            block = self._block_of(ptr)
            if block is None or not block.allocated:
                return False
            driver, device = stream.device.driver, stream.device.index
            event = self._new_event(driver, device)  # type: ignore[arg-type]
            driver.event_record(event, stream.cuda_stream)
            block.events.append((driver, device, event))  # type: ignore[arg-type]
            return True

    def is_pinned(self, ptr: int) -> bool:
        """True when ``ptr`` lies inside a block of this allocator."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            return self._block_of(ptr) is not None

    def empty_cache(self) -> None:
        """Give every free block back to the driver (blocks still waiting on events stay)."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            self._process_events()
            for bucket in list(self._free):
                for block in self._free.pop(bucket):
                    self._release(block)

    def stats(self) -> dict[str, int]:
        """PyTorch's host_memory_stats: a flat dict, sorted by key."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            out: dict[str, int] = {}
            names = ("allocations", "allocated_bytes", "active_requests", "active_bytes")
            for name, stat in zip(names, self._stats(), strict=True):
                for field in ("current", "peak", "allocated", "freed"):
                    out[f"{name}.{field}"] = getattr(stat, field)
            for name in ("host_alloc_time", "host_free_time"):
                for field, value in getattr(self, name).fields().items():
                    out[f"{name}.{field}"] = value
            out["num_host_alloc"] = self.allocations.allocated
            out["num_host_free"] = self.allocations.freed
            return dict(sorted(out.items()))

    def reset_peak(self) -> None:
        with self._lock:
            if self._dropped:
                self._free_dropped()
            for stat in self._stats():
                stat.reset_peak()

    def reset_accumulated(self) -> None:
        with self._lock:
            for stat in self._stats():
                stat.reset_accumulated()
            self.host_alloc_time = _DurationStat()
            self.host_free_time = _DurationStat()

    def _stats(self) -> tuple[Stat, ...]:
        return (self.allocations, self.allocated_bytes, self.active_requests, self.active_bytes)

    # ============================================================ the steps
    def _get_free_block(self, size: int) -> _HostBlock | None:
        free = self._free.get(_bucket(size))
        return free.pop() if free else None

    def _new_block(self, size: int) -> _HostBlock:
        start = time.perf_counter()
        ptr = self.driver.host_alloc(size)
        self.host_alloc_time.add(int((time.perf_counter() - start) * 1e6))
        block = _HostBlock(ptr, size)
        self._blocks[ptr] = block
        bisect.insort(self._starts, ptr)
        self.allocations.increase(1)
        self.allocated_bytes.increase(size)
        return block

    def _free_one(self, ptr: int) -> None:
        block = self._blocks.get(ptr)
        if block is None or not block.allocated:
            raise ValueError(f"ptr: {ptr:#x} is not a live pinned allocation")
        block.allocated = False
        if block.events:
            self._waiting.append(block)
            self._process_events()
        else:
            self._make_reusable(block)

    def _process_events(self) -> None:
        """Move the freed blocks whose events have all completed to their free lists."""
        if not self._waiting:
            return
        still: list[_HostBlock] = []
        for block in self._waiting:
            pending = []
            for driver, device, event in block.events:
                if driver.event_query(event):
                    self._spare_events.setdefault((id(driver), device), []).append(event)
                else:
                    pending.append((driver, device, event))
            block.events = pending
            if pending:
                still.append(block)
            else:
                self._make_reusable(block)
        self._waiting = still

    def _make_reusable(self, block: _HostBlock) -> None:
        self._free.setdefault(_bucket(block.size), []).append(block)
        self.active_requests.decrease(1)
        self.active_bytes.decrease(block.size)

    def _release(self, block: _HostBlock) -> None:
        start = time.perf_counter()
        self.driver.host_free(block.ptr)
        self.host_free_time.add(int((time.perf_counter() - start) * 1e6))
        del self._blocks[block.ptr]
        del self._starts[bisect.bisect_left(self._starts, block.ptr)]
        self.allocations.decrease(1)
        self.allocated_bytes.decrease(block.size)

    def _block_of(self, ptr: int) -> _HostBlock | None:
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            return None
        block = self._blocks[self._starts[i]]
        return block if ptr < block.ptr + block.size else None

    def _new_event(self, driver: Driver, device: int) -> int:
        spare = self._spare_events.get((id(driver), device))
        return spare.pop() if spare else driver.event_create(device, False)

    def _free_dropped(self) -> None:
        dropped = self._dropped
        while dropped:
            ptr = dropped.popleft()
            block = self._blocks.get(ptr)
            if block is not None and block.allocated:
                self._free_one(ptr)


# ====================================================== the process's host allocator
_allocator: CachingHostAllocator | None = None
_allocator_lock = threading.Lock()


def host_allocator() -> CachingHostAllocator:
    """The process's pinned host allocator: over CUDA when a GPU is usable, else the sim's."""
    global _allocator
    if _allocator is None:
        with _allocator_lock:
            if _allocator is None:
                driver = get_driver("cuda" if cuda_usable() else "sim")
                _allocator = CachingHostAllocator(driver)
    return _allocator


class PinnedAllocation(FreedWhenDropped):
    """``size`` bytes of pinned host memory at ``ptr``; back to the cache when dropped.

    ``numpy()`` is a uint8 view of the bytes; it must not outlive the allocation.
    """

    __slots__ = ("ptr", "size", "_allocator", "__weakref__")

    def __init__(self, ptr: int, size: int, allocator: CachingHostAllocator) -> None:
        self.ptr = ptr
        self.size = size  # bytes requested (the block behind it is the next power of two)
        self._allocator = allocator

    def numpy(self) -> np.ndarray:
        """A writable uint8 NumPy view of the ``size`` bytes."""
        if not self.ptr:
            return np.empty(0, dtype=np.uint8)
        return self._allocator.driver.host_view(self.ptr, self.size)

    def record_event(self, stream: Stream) -> None:
        """An async copy queued on ``stream`` uses this memory (call right after queuing)."""
        if self.ptr:
            self._allocator.record_event(self.ptr, stream)

    def __repr__(self) -> str:
        return f"<vram PinnedAllocation {self.size} B at {self.ptr:#x}>"


def _check_address(ptr: object) -> None:
    if isinstance(ptr, bool) or not isinstance(ptr, int):
        raise TypeError(f"ptr: expected a host address (an int), got {ptr!r}")
    if ptr < 0:
        raise ValueError(f"ptr: expected a host address (an int >= 0), got {ptr}")


def _host_memory() -> int:
    """Bytes of this host's physical memory (pinned memory must fit in it)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not on this platform: no tighter bound
        return sys.maxsize


def allocate_pinned(nbytes: int) -> PinnedAllocation:
    """``nbytes`` of pinned host memory from the process's caching host allocator.

    TypeError / ValueError naming ``nbytes`` unless it is an int from 0 to the host's
    physical memory."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"nbytes: expected an int number of bytes, got {nbytes!r}")
    if nbytes < 0:
        raise ValueError(f"nbytes: must be non-negative, got {nbytes}")
    if nbytes > _host_memory():
        raise ValueError(
            f"nbytes: {nbytes} bytes is more than this host's memory "
            f"({_host_memory()} bytes), and pinned memory must fit in it"
        )
    allocator = host_allocator()
    return PinnedAllocation(allocator.allocate(nbytes), nbytes, allocator)


def host_record_event(ptr: int, stream: Stream) -> bool:
    """PyTorch's CachingHostAllocator_recordEvent: an async copy on ``stream`` uses ``ptr``.

    Returns False when ``ptr`` is not pinned memory of this allocator.
    """
    _check_address(ptr)
    if not (hasattr(stream, "cuda_stream") and hasattr(stream, "device")):
        raise TypeError(f"stream: expected a vram.Stream, got {stream!r}")
    return host_allocator().record_event(ptr, stream)


def is_pinned(ptr: int) -> bool:
    """True when the host address ``ptr`` lies in pinned memory of the host allocator."""
    _check_address(ptr)
    return host_allocator().is_pinned(ptr)


def host_memory_stats() -> dict[str, int]:
    """PyTorch's torch.cuda.host_memory_stats."""
    return host_allocator().stats()


def host_empty_cache() -> None:
    """Give every cached, reusable pinned block back (PyTorch's torch._C._host_emptyCache)."""
    host_allocator().empty_cache()


def reset_peak_host_memory_stats() -> None:
    host_allocator().reset_peak()


def reset_accumulated_host_memory_stats() -> None:
    host_allocator().reset_accumulated()
