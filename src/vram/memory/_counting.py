"""Counting what a region of code asks of the device: ``with count_device_calls() as c:``.

    with vram.memory.count_device_calls() as calls:
        step(batch)
    assert calls.device_malloc == 0      # warm: everything came from the cache

Counts are of the device's caching allocator, from every thread, while the block runs:
``device_malloc`` / ``device_free`` (segments allocated and freed with cudaMalloc/cudaFree),
``map`` / ``unmap`` (expandable-segment pages mapped and unmapped), ``alloc`` / ``free``
(requests to the allocator), ``oom`` (OutOfMemoryErrors raised) and ``sync`` (times the
allocator synchronized every stream, from memory_stats' num_sync_all_streams). The counts
are live inside the block and frozen when it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ._caching import DeviceCachingAllocator
from ._history import attach, detach
from ._registry import allocator_for

__all__ = ["DeviceCalls", "count_device_calls"]

_FIELDS = {  # attribute -> the allocator event it counts
    "device_malloc": "segment_alloc",
    "device_free": "segment_free",
    "map": "segment_map",
    "unmap": "segment_unmap",
    "alloc": "alloc",
    "free": "free_requested",
    "oom": "oom",
}


class DeviceCalls:
    """What one ``count_device_calls`` block counted (see the module docstring)."""

    def __init__(self, allocator: DeviceCachingAllocator) -> None:
        self.device = allocator.device
        self._allocator = allocator
        self._counts: dict[str, int] = {}
        self._sync_start = allocator.stats.num_sync_all_streams
        self._sync_end: int | None = None

    def __getattr__(self, name: str) -> int:
        action = _FIELDS.get(name)
        if action is None:
            raise AttributeError(name)
        return self._counts.get(action, 0)

    @property
    def sync(self) -> int:
        end = self._sync_end
        if end is None:
            end = self._allocator.stats.num_sync_all_streams
        return end - self._sync_start

    def as_dict(self) -> dict[str, int]:
        out = {name: getattr(self, name) for name in _FIELDS}
        out["sync"] = self.sync
        return out

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in self.as_dict().items())
        return f"DeviceCalls({self.device}: {fields})"


@contextmanager
def count_device_calls(device: object = None) -> Iterator[DeviceCalls]:
    """Count the device calls and allocator requests on ``device`` (current if None)."""
    allocator = allocator_for(device)
    with allocator.locked():
        calls = DeviceCalls(allocator)
        attach(allocator).counters.append(calls._counts)
    try:
        yield calls
    finally:
        with allocator.locked():
            calls._sync_end = allocator.stats.num_sync_all_streams
            recorder = allocator.recorder
            recorder.counters = [c for c in recorder.counters if c is not calls._counts]
            detach(allocator)
