"""Giving cached memory back to the device: the steps of empty_cache, of the out-of-memory
path (release one oversize block, or every cached segment) and of garbage collection.

A mixin of DeviceCachingAllocator: these methods run with its lock held, on its state.
"""

from __future__ import annotations

from ._blocks import Block, BlockPool
from ._config import SIZE_MAX
from ._stats import LARGE, RESERVED_BYTES, SEGMENT, SMALL, Stats

__all__ = ["ReleaseSteps"]


class ReleaseSteps:
    """Releasing whole free segments (and, for expandable segments, free pages)."""

    def _release_block(self, block: Block) -> None:
        """cudaFree a whole free segment."""
        assert block.expandable is None and not block.is_split()
        pool = block.pool
        self.stats.num_device_free += 1
        self._trace("segment_free", block.ptr, block.size, block.stream)
        self._segments.pop(block.ptr, None)
        self.driver.free(self.index, block.ptr)
        self.total_allocated_memory -= block.size
        if pool.owner is not None:
            pool.owner.segment_count -= 1
        kind = SMALL if pool.is_small else LARGE
        self.stats.decrease(SEGMENT, kind, 1)
        self.stats.decrease(RESERVED_BYTES, kind, block.size)
        if block.size >= self.config.max_split_size:
            Stats.bump(self.stats.oversize_segments, -1)
        pool.remove(block)

    def _release_blocks(self, pool: BlockPool) -> None:
        """Free every whole free segment of the pool; unmap free expandable pages."""
        to_unmap = []
        for block in pool.all_free():
            if block.expandable is not None:
                to_unmap.append(block)
            elif not block.is_split():
                self._release_block(block)
        for block in to_unmap:
            self._unmap_block(block)
            if not block.is_split():
                self._release_expandable_segment(block)

    def _release_cached_blocks(self) -> bool:
        """Synchronize pending frees, then give every whole free segment back."""
        self._synchronize_and_free_events()
        self._release_blocks(self.large)
        self._release_blocks(self.small)
        for pool_id, private in list(self.private_pools.items()):
            if private.freeable:
                self._release_blocks(private.large)
                self._release_blocks(private.small)
                if private.segment_count == 0:
                    del self.private_pools[pool_id]
        return True

    def _release_available_cached_blocks(self, pool: BlockPool, size: int, stream: int) -> bool:
        """Release one oversize free block that covers the request, or several largest first.

        Only whole segments can be released: PyTorch never meets a split or expandable block
        here unless max_split_size changed since it was cut; vram passes over those.
        """
        max_split = self.config.max_split_size
        if max_split == SIZE_MAX:
            return False
        free = pool.free.get(stream)
        if free is None or not free.blocks:
            return False
        want = max(size, max_split)
        i = free.lower_bound(want)
        for block in free.blocks[i:]:
            if _whole_segment(block):
                self._release_block(block)
                return True
        released = 0
        for block in reversed(free.blocks[:i]):
            if released >= want or block.size < max_split:
                break
            if _whole_segment(block):
                released += block.size
                self._release_block(block)
        return released >= want

    def _garbage_collect_cached_blocks(self) -> None:
        """Release the oldest whole free large segments once reserved passes the threshold:
        in passes, every one at least as old as the mean, until the excess is reclaimed."""
        threshold = int(self.config.garbage_collection_threshold * self.allowed_memory_maximum)
        if self.total_allocated_memory <= threshold:
            return
        target = self.total_allocated_memory - threshold
        pool = self.large
        age = lambda b: pool.get_free_blocks_call_count - b.gc_count_base  # noqa: E731
        freeable = [b for b in pool.all_free() if _whole_segment(b)]
        total_age = sum(age(b) for b in freeable)
        reclaimed = 0
        count = len(freeable)
        freed_one = True
        while reclaimed < target and freed_one and count > 0:
            threshold_age = total_age / count
            freed_one = False
            for block in pool.all_free():
                if _whole_segment(block) and age(block) >= threshold_age:
                    freed_one = True
                    reclaimed += block.size
                    total_age -= age(block)
                    count -= 1
                    self._release_block(block)


def _whole_segment(block: Block) -> bool:
    """A free block that is a whole device allocation: release_block may cudaFree it."""
    return block.expandable is None and block.prev is None and block.next is None
