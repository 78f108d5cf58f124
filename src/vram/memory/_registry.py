"""One allocator a device: ``allocator_for(device)`` makes it on first use, as the
settings say (the caching allocator, VRAM_NO_CACHING's uncached one, or the driver's pool
with ``backend:cudaMallocAsync``), and ``allocate`` hands out an Allocation from it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from .._device import Device, as_device
from .._streams import Stream, current_stream
from ._allocation import Allocation
from ._async import AsyncAllocator
from ._caching import DeviceCachingAllocator
from ._config import default_config
from ._uncached import UncachedAllocator, no_caching_requested

__all__ = ["allocator_for", "allocate", "allocator_created_hooks", "made_allocator"]

_allocators: dict[Device, DeviceCachingAllocator] = {}
# the allocator of a Device if allocator_for made it, else None (dict.get: no Python frame,
# for the paths that run once per tensor; the rest call allocator_for)
made_allocator: Callable[[Device], DeviceCachingAllocator | None] = _allocators.get
_allocators_lock = threading.Lock()
# called with each allocator allocator_for creates (memory history attaches itself here)
allocator_created_hooks: list[Callable[[DeviceCachingAllocator], None]] = []


def allocator_for(device: object = None) -> DeviceCachingAllocator:
    """The caching allocator of a device (created on first use)."""
    found = device if type(device) is Device else as_device(device)
    allocator = _allocators.get(found)
    if allocator is None:
        if found.type == "cpu":
            raise ValueError("device: the cpu device has no caching allocator")
        with _allocators_lock:
            allocator = _allocators.get(found)
            if allocator is None:
                config = default_config()
                if config.backend == "cudaMallocAsync":  # the driver's pool (_async)
                    kind: type = AsyncAllocator
                elif no_caching_requested():
                    kind = UncachedAllocator
                else:
                    kind = DeviceCachingAllocator
                allocator = _allocators[found] = kind(found, config)
                for hook in allocator_created_hooks:
                    hook(allocator)
    return allocator


def allocate(nbytes: int, device: Device, stream: Stream | None = None) -> Allocation:
    """An Allocation of ``nbytes`` on ``device`` for ``stream`` (current stream if None)."""
    if stream is None:
        stream = current_stream(device)
    allocator = _allocators.get(device) or allocator_for(device)
    ptr = allocator.malloc(nbytes, stream.cuda_stream) if nbytes else 0
    return Allocation(ptr, nbytes, device, stream, allocator)
