"""Private memory pools: memory that only the pool's users get, at stable addresses.

``with vram.use_mem_pool(pool):`` routes the current thread's allocations on the pool's
device into the pool's own small and large block pools (a route of the allocator, as CUDA
graph capture routes a capturing stream's). Nothing else is ever handed that memory;
freed blocks stay in the pool (same addresses next time) until the pool is gone and
``empty_cache`` returns its segments.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .._device import as_device
from ._pool import PrivatePool
from ._registry import allocator_for

__all__ = ["MemPool", "use_mem_pool", "PrivatePool"]

_ids = itertools.count(1)


class MemPool:
    """A private pool of device memory (PyTorch's torch.cuda.MemPool)."""

    def __init__(self, device: object = None) -> None:
        self.device = as_device(device)
        self._allocator = allocator_for(self.device)
        self._private = PrivatePool((0, next(_ids)))
        self._allocator.add_private_pool(self._private)

    @property
    def id(self) -> tuple[int, int]:
        return self._private.id

    def use_count(self) -> int:
        """How many holders the pool has: the MemPool, plus each active use_mem_pool."""
        return self._private.use_count

    def snapshot(self) -> list[dict]:
        """The segments of this pool, in memory_snapshot()'s format."""
        from ._snapshot import segments_of

        return segments_of(self._allocator, pool_id=self._private.id)

    def __del__(self) -> None:
        try:  # no lock in a finalizer: the allocator does it at its next call
            self._allocator.later(self._private.release_one)
        except Exception:  # finalizers never raise
            pass

    def __repr__(self) -> str:
        return f"<vram.MemPool id={self.id} on {self.device}>"


@contextmanager
def use_mem_pool(pool: MemPool, device: object = None) -> Iterator[MemPool]:
    """Route this thread's allocations on the pool's device into ``pool`` inside the block."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"pool must be a vram.MemPool, got {type(pool).__name__}")
    if device is not None and as_device(device) != pool.device:
        raise ValueError(f"device: {as_device(device)} is not the pool's device {pool.device}")
    allocator = pool._allocator
    thread = threading.get_ident()
    with allocator.locked():
        pool._private.use_count += 1
    route = allocator.add_route(pool._private, lambda stream: threading.get_ident() == thread)
    try:
        yield pool
    finally:
        allocator.remove_route(route)
        with allocator.locked():
            pool._private.release_one()
