"""The allocator's data: blocks, and pools that index the free ones.

A segment is one device allocation (or, with expandable segments, one reserved virtual
range); it is cut into blocks that tile it: ``prev``/``next`` link the blocks of a segment
in address order, contiguous, with no gaps.

A pool holds the free blocks of one size class (small or large) of one owner (the
allocator itself, or a private MemPool). Its index orders them by (stream, size, address),
PyTorch's BlockComparatorSize: best fit is the first key at or after (stream, size, 0).
"""

from __future__ import annotations

import bisect
from typing import Any

__all__ = [
    "Block",
    "BlockPool",
    "FreeList",
    "KEY_SHIFT",
    "MIN_BLOCK_SIZE",
    "SMALL_SIZE",
    "SMALL_BUFFER",
    "MIN_LARGE_ALLOC",
    "LARGE_BUFFER",
    "ROUND_LARGE",
]

KEY_SHIFT = 64  # a free-list key is (size << 64) | ptr: ordered by size, then address

MIN_BLOCK_SIZE = 512  # bytes; every request is rounded up to a multiple of this
SMALL_SIZE = 1 << 20  # bytes; requests up to this come from the small pool
SMALL_BUFFER = 2 << 20  # bytes; the segment size (expandable: the page) of the small pool
MIN_LARGE_ALLOC = 10 << 20  # bytes; large requests below this share a LARGE_BUFFER segment
LARGE_BUFFER = 20 << 20  # bytes; the shared segment size of the large pool
ROUND_LARGE = 2 << 20  # bytes; larger requests get a segment rounded up to this


class Block:
    """A piece of a segment: allocated to a user, waiting on events, or free."""

    __slots__ = (
        "ptr",
        "size",
        "requested_size",
        "stream",  # handle of the stream that owns the block
        "pool",
        "prev",
        "next",
        "allocated",
        "event_count",  # events recorded at free (record_stream) still pending
        "stream_uses",  # streams recorded with record_stream; None when empty
        "use_events",  # record_use: events the next owner's stream must wait on; None when empty
        "mapped",
        "expandable",  # the ExpandableSegment the block lives in, or None
        "gc_count_base",
        "context",  # stack frames captured at allocation when history is on
    )

    def __init__(self, ptr: int, size: int, stream: int, pool: BlockPool) -> None:
        self.ptr = ptr
        self.size = size
        self.requested_size = 0
        self.stream = stream
        self.pool = pool
        self.prev: Block | None = None
        self.next: Block | None = None
        self.allocated = False
        self.event_count = 0
        self.stream_uses: set | None = None
        self.use_events: list | None = None
        self.mapped = True
        self.expandable: Any = None
        self.gc_count_base = 0
        self.context: Any = None

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    @property
    def key(self) -> int:
        return (self.size << KEY_SHIFT) | self.ptr

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else "free"
        return f"<Block {self.size} B at {self.ptr:#x} stream {self.stream:#x} {state}>"


class FreeList:
    """The free blocks of one stream in one pool, ordered by (size, address)."""

    __slots__ = ("keys", "blocks")

    def __init__(self) -> None:
        self.keys: list[int] = []  # sorted; keys[i] belongs to blocks[i]
        self.blocks: list[Block] = []

    def remove(self, block: Block) -> None:
        i = bisect.bisect_left(self.keys, (block.size << KEY_SHIFT) | block.ptr)
        assert self.blocks[i] is block, "free list out of order"
        del self.keys[i]
        del self.blocks[i]

    def lower_bound(self, size: int) -> int:
        """Index of the first block of at least ``size`` bytes (len if none)."""
        return bisect.bisect_left(self.keys, size << KEY_SHIFT)

    def __len__(self) -> int:
        return len(self.keys)


class BlockPool:
    """Free blocks of one size class, per stream; plus unmapped expandable ranges."""

    __slots__ = ("is_small", "owner", "free", "unmapped", "get_free_blocks_call_count")

    def __init__(self, is_small: bool, owner: Any = None) -> None:
        self.is_small = is_small
        self.owner = owner  # None for the allocator's own pools, else the private pool
        self.free: dict[int, FreeList] = {}  # stream handle -> its free list
        self.unmapped: dict[int, list[Block]] = {}  # stream -> unmapped blocks by address
        self.get_free_blocks_call_count = 0

    def insert(self, block: Block) -> None:
        """Add a free block to its stream's free list (kept in (size, address) order)."""
        block.gc_count_base = self.get_free_blocks_call_count
        found = self.free.get(block.stream)
        if found is None:
            found = self.free[block.stream] = FreeList()
        key = (block.size << KEY_SHIFT) | block.ptr
        i = bisect.bisect_left(found.keys, key)
        found.keys.insert(i, key)
        found.blocks.insert(i, block)

    def remove(self, block: Block) -> None:
        self.free[block.stream].remove(block)

    def all_free(self) -> list[Block]:
        """Every free mapped block, in PyTorch's set order (stream, size, address)."""
        out: list[Block] = []
        for stream in sorted(self.free):
            out.extend(self.free[stream].blocks)
        return out

    def insert_unmapped(self, block: Block) -> None:
        blocks = self.unmapped.setdefault(block.stream, [])
        ptrs = [b.ptr for b in blocks]
        blocks.insert(bisect.bisect_left(ptrs, block.ptr), block)

    def remove_unmapped(self, block: Block) -> None:
        self.unmapped[block.stream].remove(block)
