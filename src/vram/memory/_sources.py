"""Where new memory comes from: the caching allocator's segment sources.

Each source makes device memory into blocks of a pool, and gives it back:

- ``DeviceMalloc``: one device allocation (cudaMalloc) per segment, released whole. Private
  pools (MemPool, CUDA graphs) take their segments from it too, into their own pools.
- ``Expandable`` (Note [Expandable segments]): one reserved virtual range per stream and
  pool, with pages mapped when a request needs them and unmapped when wholly free.

Both have ``grow(pool, stream, size, ...)``, which returns a FREE block of at least
``size`` bytes in the pool's index (or None when the device, or the byte budget, has no
room for it), ``release(block)``, which gives the memory of a FREE block (taken out of
the index) back, ``releasable(block)`` and ``whole(block)``, which say whether
``release`` can give anything of a FREE block back and whether the block is a whole device
allocation, and ``expandable``, the kind of memory. Each segment carries the source that
made it (``Segment.source``): the allocator asks it, instead of branching on the kind.
They report what they reserve and give back through ``on_reserve(pool, segment, start,
nbytes, action)`` (the allocator's accounting: stats, the reserved total, history).

Note [Expandable segments]
With ``expandable_segments:True`` a pool does not cut its memory into separate device
allocations. For each stream it reserves one virtual range as large as 1 1/8 of the
device's memory (PyTorch's size) and maps physical pages into it (2 MiB pages for the
small pool, 20 MiB for the large, or ``expandable_page_mb``) when a request needs them;
``empty_cache`` unmaps pages that are wholly free. Blocks in the range never have to be
released to make room for a differently shaped request, so fragmentation stays near zero.
Unmapped stretches are blocks too (UNMAPPED), kept in the pool's unmapped index by address.
A reservation that fails (the address space is used up) counts as out of memory, so the
allocator frees what it caches and retries before it raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ._pool import FREE, UNMAPPED, Block, Pool, Segment

if TYPE_CHECKING:
    from ..driver import Driver

__all__ = ["DeviceMalloc", "Expandable", "ExpandableRange"]

Account = Callable[[Pool, Segment, int, int, str], None]  # (pool, segment, start, nbytes, action)


def _out_of_memory(exc: Exception) -> bool:
    return bool(getattr(exc, "is_out_of_memory", False))


class DeviceMalloc:
    """Segments that are device allocations of their own (cudaMalloc / cudaFree)."""

    def __init__(self, driver: Driver, device: int, on_reserve: Account) -> None:
        self.expandable = False  # (an instance attribute: read on every malloc and free)
        self.driver = driver
        self.device = device
        self.on_reserve = on_reserve

    def grow(self, pool: Pool, stream: int, nbytes: int) -> Block | None:
        """A new segment of ``nbytes``: one FREE block, in the index (None when full)."""
        try:
            ptr = self.driver.malloc(self.device, nbytes)
        except Exception as exc:
            if _out_of_memory(exc):
                return None
            raise
        segment = Segment(ptr, nbytes, stream, pool, self)
        self.on_reserve(pool, segment, ptr, nbytes, "segment_alloc")
        block = Block(ptr, nbytes, segment, FREE)
        pool.insert(block)
        return block

    @staticmethod
    def whole(block: Block) -> bool:
        """True when FREE ``block`` spans its whole segment (a device allocation)."""
        return block.prev is None and block.next is None

    releasable = whole  # only a whole segment can go back

    def release(self, block: Block) -> None:
        """cudaFree a whole FREE segment (out of the index already). On a GPU cudaFree waits
        for the device, so no queued work can still use it."""
        segment = block.segment
        assert block.prev is None and block.next is None and segment.source is self
        self.driver.free(self.device, segment.ptr)
        self.on_reserve(segment.pool, segment, segment.ptr, -segment.size, "segment_free")


class ExpandableRange:
    """A reserved range ``[ptr, ptr + size)`` whose pages are mapped on demand."""

    __slots__ = ("driver", "device", "ptr", "size", "page", "handles")

    def __init__(self, driver: Driver, device: int, size: int, page: int) -> None:
        granularity = driver.vmm_granularity(device)
        page = -(-page // granularity) * granularity
        pages = -(-size // page)
        self.driver = driver
        self.device = device
        self.page = page  # bytes per mapped page
        self.size = pages * page
        self.ptr = driver.vmm_reserve(device, self.size)
        self.handles: list[int | None] = [None] * pages  # physical handle of each page

    def pages_for(self, ptr: int, size: int) -> tuple[int, int]:
        """The first page and one past the last that cover ``[ptr, ptr + size)``."""
        return (ptr - self.ptr) // self.page, -(-(ptr + size - self.ptr) // self.page)

    def map(self, ptr: int, size: int) -> int:
        """Map the pages covering ``[ptr, ptr + size)`` (``ptr`` page-aligned); the bytes
        mapped, 0 when the device is full (then nothing stays mapped)."""
        first, last = self.pages_for(ptr, size)
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
            for i in done:
                self._unmap_page(i)
            if _out_of_memory(exc):
                return 0
            raise
        return (last - first) * self.page

    def unmap(self, ptr: int, size: int) -> tuple[int, int]:
        """Unmap the whole pages inside ``[ptr, ptr + size)``; (start, length) unmapped,
        (0, 0) if none. The caller has made sure no queued work uses them."""
        first = -(-(ptr - self.ptr) // self.page)
        last = (ptr + size - self.ptr) // self.page
        if first >= last:
            return 0, 0
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
        assert all(h is None for h in self.handles), "releasing a range with mapped pages"
        self.driver.vmm_release(self.device, self.ptr, self.size)


class Expandable:
    """Expandable segments (Note [Expandable segments]): the allocator's VMM ranges."""

    def __init__(self, driver: Driver, device: int, on_reserve: Account) -> None:
        self.expandable = True
        self.driver = driver
        self.device = device
        self.on_reserve = on_reserve
        self.ranges: list[Segment] = []  # every live range's segment
        self.peers: tuple[int, ...] = ()  # devices that may access the pages too

    def add_peer(self, peer: int) -> None:
        """Let ``peer`` access every page mapped now and from now on (cuMemSetAccess)."""
        if peer in self.peers:
            return
        self.peers = (*self.peers, peer)
        for segment in self.ranges:
            memory = segment.vmm
            for i, handle in enumerate(memory.handles):
                if handle is not None:
                    va = memory.ptr + i * memory.page
                    self.driver.vmm_set_access(self.device, va, memory.page, self.peers)

    def grow(
        self, pool: Pool, stream: int, size: int, page: int, budget: int | None
    ) -> Block | None:
        """A FREE block of at least ``size`` bytes (in the index), mapping pages of
        ``page`` bytes as needed but never more than ``budget`` bytes (None: no limit).
        None when the device (or the budget) has no room."""
        candidate = self._find(pool, stream, size, page)
        if candidate is None:
            return None
        need = self._bytes_to_map(candidate, size)
        if budget is not None and need > budget:
            return None
        if candidate.state == UNMAPPED and not self._map(candidate, min(candidate.size, size)):
            return None
        while candidate.size < size:  # FREE, then UNMAPPED after it: map more and merge
            following = candidate.next
            assert following is not None and following.state == UNMAPPED
            if not self._map(following, min(size - candidate.size, following.size)):
                return None
            candidate = following
        return candidate

    def _find(self, pool: Pool, stream: int, size: int, page: int) -> Block | None:
        """PyTorch's find_expandable_block: the lowest unmapped stretch of the stream's
        ranges (with the FREE block before it) that has room; else a new range."""

        def room_from(block: Block | None) -> int:
            room = 0
            while room < size and block is not None and block.state in (FREE, UNMAPPED):
                room += block.size
                block = block.next
            return room

        for stretch in list(pool.unmapped.get(stream, ())):
            before = stretch.prev
            start = before if before is not None and before.state == FREE else stretch
            if room_from(start) >= size:
                return start
        total = self.driver.properties(self.device).total_memory
        try:
            memory = ExpandableRange(self.driver, self.device, total + total // 8, page)
        except Exception as exc:  # no address space left: out of memory, as a malloc would be
            if _out_of_memory(exc):
                return None
            raise
        segment = Segment(memory.ptr, memory.size, stream, pool, self, memory)
        self.ranges.append(segment)
        block = Block(memory.ptr, memory.size, segment, UNMAPPED)
        pool.insert_unmapped(block)
        return block

    @staticmethod
    def _bytes_to_map(block: Block, size: int) -> int:
        """The page bytes that mapping ``size`` bytes from ``block`` on would map."""
        memory = block.segment.vmm
        need, at = 0, block
        covered = 0
        while covered < size and at is not None:
            take = min(at.size, size - covered)
            if at.state == UNMAPPED:
                first, last = memory.pages_for(at.ptr, take)
                need += (last - first) * memory.page
            covered += at.size
            at = at.next
        return need

    def _map(self, block: Block, size: int) -> bool:
        """Map pages at the front of UNMAPPED ``block`` covering ``size`` bytes; the mapped
        part becomes FREE (merged with a FREE block before it) and enters the index."""
        pool, segment = block.segment.pool, block.segment
        start = block.ptr
        mapped = segment.vmm.map(start, size)
        if mapped == 0:
            return False
        assert mapped >= size
        if self.peers:
            self.driver.vmm_set_access(self.device, start, mapped, self.peers)
        pool.remove_unmapped(block)
        if mapped < block.size:
            pool.split(block, mapped, UNMAPPED)
        block.state = FREE
        pool.merge(block, FREE)
        pool.insert(block)
        self.on_reserve(pool, segment, start, mapped, "segment_map")
        return True

    @staticmethod
    def whole(block: Block) -> bool:
        """False: a mapped run of a range is never a device allocation of its own."""
        return False

    @staticmethod
    def releasable(block: Block) -> bool:
        """True: the whole pages inside any FREE block can be unmapped."""
        return True

    def release(self, block: Block) -> None:
        """Unmap the whole free pages of FREE ``block`` (out of the index); what stays mapped
        goes back into the index. The caller has waited for the block's record_use events;
        its stream is synchronized here (unmapping, unlike cudaFree, does not wait).
        Synchronizes."""
        pool, segment = block.segment.pool, block.segment
        self.driver.stream_synchronize(segment.stream)
        start, length = segment.vmm.unmap(block.ptr, block.size)
        if length == 0:
            pool.insert(block)
            return
        head = start - block.ptr
        if block.size > head + length:  # a mapped tail stays FREE
            pool.split(block, head + length, FREE)
        if head:  # a mapped head stays FREE: block keeps it
            stretch = pool.split(block, head, UNMAPPED)
            pool.insert(block)
            pool.remove_unmapped(stretch)
        else:
            stretch = block
        stretch.state = UNMAPPED
        pool.merge(stretch, UNMAPPED)
        pool.insert_unmapped(stretch)
        self.on_reserve(pool, segment, start, -length, "segment_unmap")
        if stretch.prev is None and stretch.next is None:  # the whole range is unmapped
            pool.remove_unmapped(stretch)
            segment.vmm.release()
            self.ranges.remove(segment)
