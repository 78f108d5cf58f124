"""Private memory pools: memory that only the pool's users get, at stable addresses.

``with vram.use_mem_pool(pool):`` routes the current thread's allocations on the pool's
device into the pool's own small and large block pools. Nothing else is ever handed that
memory; freed blocks stay in the pool (same addresses next time) until the pool is gone
and ``empty_cache`` returns its segments.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .._device import as_device
from ._blocks import BlockPool
from ._caching import allocator_for

__all__ = ["MemPool", "use_mem_pool", "PrivatePool"]

_ids = itertools.count(1)


class PrivatePool:
    """The allocator-side half of a MemPool: its block pools and segment count."""

    def __init__(self, pool_id: tuple[int, int]) -> None:
        self.id = pool_id
        self.small = BlockPool(is_small=True, owner=self)
        self.large = BlockPool(is_small=False, owner=self)
        self.segment_count = 0  # device segments the pool holds (guarded by the allocator)
        self.use_count = 1  # the MemPool itself, plus each active use_mem_pool
        self.freeable = False  # the MemPool is gone: empty_cache may release its segments


class MemPool:
    """A private pool of device memory (PyTorch's torch.cuda.MemPool)."""

    def __init__(self, device: object = None) -> None:
        self.device = as_device(device)
        self._allocator = allocator_for(self.device)
        self._private = PrivatePool((0, next(_ids)))
        with self._allocator.locked():
            self._allocator.private_pools[self._private.id] = self._private

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
        try:
            private, allocator = self._private, self._allocator
            with allocator.locked():
                private.use_count -= 1
                private.freeable = private.use_count <= 0
        except Exception:  # finalizers never raise
            pass

    def __repr__(self) -> str:
        return f"<vram.MemPool id={self.id} on {self.device}>"


_local = threading.local()


@contextmanager
def use_mem_pool(pool: MemPool, device: object = None) -> Iterator[MemPool]:
    """Route this thread's allocations on the pool's device into ``pool`` inside the block."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"pool must be a vram.MemPool, got {type(pool).__name__}")
    if device is not None and as_device(device) != pool.device:
        raise ValueError(f"device: {as_device(device)} is not the pool's device {pool.device}")
    allocator = pool._allocator
    stack = allocator.active_pools.__dict__.setdefault("stack", [])
    with allocator.locked():
        pool._private.use_count += 1
    stack.append(pool._private)
    try:
        yield pool
    finally:
        stack.pop()
        with allocator.locked():
            pool._private.use_count -= 1
