"""Expandable segments: one reserved virtual range per stream and pool, mapped page by page.

Note [Expandable segments]
With ``expandable_segments:True`` a pool does not cut its memory into separate device
allocations. For each stream it reserves one virtual range as large as 1 1/8 of the
device's memory and maps physical pages into it (2 MiB pages for the small pool, 20 MiB
for the large) when a request needs them; ``empty_cache`` unmaps pages that are wholly
free. Blocks in the range never have to be released to make room for a differently
shaped request, so fragmentation stays near zero. As in PyTorch, unmapped stretches are
blocks too (``mapped=False``), kept in the pool's ``unmapped`` index by address.
"""

from __future__ import annotations

from ..driver import Driver
from ._blocks import SMALL_BUFFER, Block, BlockPool
from ._stats import LARGE, RESERVED_BYTES, SMALL

__all__ = ["ExpandableSegment", "ExpandableSteps", "best_expandable", "skip_expandable"]


class ExpandableSegment:
    """A reserved range ``[ptr, ptr + size)`` whose pages are mapped on demand."""

    __slots__ = ("driver", "device", "stream", "ptr", "size", "page", "handles")

    def __init__(self, driver: Driver, device: int, stream: int, size: int, page: int) -> None:
        granularity = driver.vmm_granularity(device)
        page = -(-page // granularity) * granularity
        pages = -(-size // page)
        self.driver = driver
        self.device = device
        self.stream = stream
        self.page = page  # bytes per mapped page
        self.size = pages * page
        self.ptr = driver.vmm_reserve(device, self.size)
        self.handles: list[int | None] = [None] * pages  # physical handle of each page

    def map(self, ptr: int, size: int) -> tuple[int, int]:
        """Map the pages covering ``[ptr, ptr + size)``; (start, length) mapped, (0, 0) on OOM.

        Pages mapped before a failure are unmapped again, so a failure changes nothing.
        """
        first = (ptr - self.ptr) // self.page
        last = -(-(ptr + size - self.ptr) // self.page)
        done: list[int] = []
        try:
            for i in range(first, last):
                assert self.handles[i] is None, "page mapped twice"
                handle = self.driver.vmm_create(self.device, self.page)
                try:
                    self.driver.vmm_map(self.device, self.ptr + i * self.page, self.page, handle)
                except BaseException:
                    self.driver.vmm_release_handle(self.device, handle)
                    raise
                self.handles[i] = handle
                done.append(i)
        except Exception as exc:
            if not getattr(exc, "is_out_of_memory", False):
                raise
            for i in done:
                self._unmap_page(i)
            return 0, 0
        return self.ptr + first * self.page, (last - first) * self.page

    def unmap(self, ptr: int, size: int) -> tuple[int, int]:
        """Unmap the whole pages inside ``[ptr, ptr + size)``; (start, length), (0, 0) if none.

        Synchronizes the segment's stream first: unmapping does not wait for work in flight.
        """
        first = -(-(ptr - self.ptr) // self.page)
        last = (ptr + size - self.ptr) // self.page
        if first >= last:
            return 0, 0
        self.driver.stream_synchronize(self.stream)
        for i in range(first, last):
            self._unmap_page(i)
        return self.ptr + first * self.page, (last - first) * self.page

    def _unmap_page(self, i: int) -> None:
        handle = self.handles[i]
        assert handle is not None, "unmapping a page that is not mapped"
        self.driver.vmm_unmap(self.device, self.ptr + i * self.page, self.page)
        self.driver.vmm_release_handle(self.device, handle)
        self.handles[i] = None

    def release(self) -> None:
        """Give the reservation back; every page must be unmapped already."""
        assert all(h is None for h in self.handles), "releasing a segment with mapped pages"
        self.driver.vmm_release(self.device, self.ptr, self.size)


class ExpandableSteps:
    """The allocator's steps over expandable segments (a mixin of DeviceCachingAllocator;
    its methods run with the allocator's lock held, on its state)."""

    def _try_allocate_expandable_block(
        self, pool: BlockPool, size: int, stream: int
    ) -> Block | None:
        candidate = self._find_expandable_block(pool, size, stream)
        if not candidate.mapped and not self._map_block(candidate, min(candidate.size, size)):
            return None
        while candidate.size < size:  # free -> unmapped -> ...: map more and merge
            following = candidate.next
            assert following is not None and not following.mapped
            if not self._map_block(following, min(size - candidate.size, following.size)):
                return None
            candidate = following
        pool.remove(candidate)
        return candidate

    def _find_expandable_block(self, pool: BlockPool, size: int, stream: int) -> Block:
        def allocatable(b: Block | None) -> bool:
            return b is not None and not b.allocated and not b.event_count and not b.stream_uses

        def has_room(b: Block | None) -> bool:
            room = 0
            while room < size and allocatable(b):
                room += b.size  # type: ignore[union-attr]
                b = b.next  # type: ignore[union-attr]
            return room >= size

        for c in list(pool.unmapped.get(stream, ())):
            if allocatable(c.prev):
                c = c.prev  # type: ignore[assignment]
            if has_room(c):
                return c
        page = SMALL_BUFFER if pool.is_small else self.config.expandable_page_size
        total = self.driver.properties(self.index).total_memory
        segment = ExpandableSegment(self.driver, self.index, stream, total + total // 8, page)
        self._expandable.append(segment)
        block = Block(segment.ptr, segment.size, stream, pool)
        block.mapped = False
        block.expandable = segment
        pool.insert_unmapped(block)
        return block

    def _map_block(self, block: Block, size: int) -> bool:
        start, length = block.expandable.map(block.ptr, size)
        if length == 0:
            return False
        assert start == block.ptr and length >= size
        pool = block.pool
        pool.remove_unmapped(block)
        block.mapped = True
        if length < block.size:
            rest = Block(block.ptr + length, block.size - length, block.stream, pool)
            rest.mapped = False
            rest.expandable = block.expandable
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            pool.insert_unmapped(rest)
            block.size = length
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.insert(block)
        self.total_allocated_memory += length
        self.stats.increase(RESERVED_BYTES, SMALL if pool.is_small else LARGE, length)
        self.stats.num_device_alloc += 1
        self._trace("segment_map", start, length, block.stream)
        return True

    def _unmap_block(self, block: Block) -> None:
        start, length = block.expandable.unmap(block.ptr, block.size)
        if length == 0:
            return
        pool = block.pool
        pool.remove(block)
        before = start - block.ptr
        if before > 0:
            head = Block(block.ptr, before, block.stream, pool)
            head.expandable = block.expandable
            head.prev, head.next = block.prev, block
            if block.prev is not None:
                block.prev.next = head
            block.prev = head
            pool.insert(head)
        after = block.size - before - length
        if after > 0:
            tail = Block(start + length, after, block.stream, pool)
            tail.expandable = block.expandable
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next = tail
            pool.insert(tail)
        block.ptr, block.size, block.mapped = start, length, False
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.insert_unmapped(block)
        self.total_allocated_memory -= length
        self.stats.decrease(RESERVED_BYTES, SMALL if pool.is_small else LARGE, length)
        self.stats.num_device_free += 1
        self._trace("segment_unmap", start, length, block.stream)

    def _release_expandable_segment(self, block: Block) -> None:
        segment = block.expandable
        assert block.ptr == segment.ptr and block.size == segment.size and not block.mapped
        block.pool.remove_unmapped(block)
        segment.release()
        self._expandable.remove(segment)


def best_expandable(free, i: int) -> int:
    """Among expandable candidates, prefer the one that can grow least (PyTorch's rule)."""

    def expandable_size(b: Block) -> int:
        nxt = b.next
        return b.size + (nxt.size if nxt is not None and not nxt.mapped else 0)

    blocks = free.blocks
    while (
        blocks[i].expandable is not None
        and i + 1 < len(blocks)
        and expandable_size(blocks[i + 1]) < expandable_size(blocks[i])
    ):
        i += 1
    return i


def skip_expandable(free, i: int) -> int:
    """The index of the first non-expandable block at or after ``i`` (len if none)."""
    blocks = free.blocks
    while i < len(blocks) and blocks[i].expandable is not None:
        i += 1
    return i
