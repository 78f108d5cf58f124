"""The pool: segments, the blocks that tile them, and the index of the free ones.

A *segment* is one piece of device memory from a segment source: a cudaMalloc, or one
reserved virtual range of an expandable segment. Its *blocks* tile it: ``prev``/``next``
link them in address order, contiguous, with no gaps and no overlap. A block is in one of
four states (``Block.state``): handed to a user (ALLOCATED), freed but waiting for
record_stream events (PENDING), free and in its pool's index (FREE), or, in an expandable
segment, a stretch with no pages mapped (UNMAPPED, in the pool's unmapped index).

A *pool* holds the free blocks of one size class (small or large) of one owner (the
allocator itself, or a private pool). The only ways to change a pool are its primitives,
each with its invariant checked where it is declared:

- ``insert(block)``: a FREE block enters the index;
- ``remove(block)``: it leaves the index (``best_fit`` finds, the caller removes);
- ``take(block, size, min_rest)``: it (or, given None, best fit's answer) leaves the index
  to be handed out, split when that leaves at least ``min_rest`` bytes (the allocator's
  cached path), and ``give(block)``: a block whose uses are
  over merges with its FREE neighbours and enters the index (``merge``, then ``insert``);
- ``split(block, size, state)``: a block outside the index keeps its first ``size`` bytes;
  the rest becomes a new block, in ``state``, in that state's index;
- ``merge(block)``: a block outside the index absorbs its FREE neighbours;
- ``insert_unmapped`` / ``remove_unmapped`` and ``merge_unmapped``: the same for UNMAPPED
  stretches of expandable segments.

Invariants: the blocks of a segment tile it; a FREE block is in exactly one index entry;
no two FREE neighbours of one segment (they are merged as they become free), nor two
UNMAPPED ones.

Note [The free-block index]
Best fit is PyTorch's order (stream, size, address): the smallest free block of the
request's stream that fits, the lowest address among blocks of that size. Per stream the
index keeps the FREE blocks by address (``blocks``), the sorted list of the distinct sizes
present (``sizes``), and per size a min-heap of those blocks' addresses (``heaps``). Best
fit is a bisection over the k distinct sizes and a heap peek. A block that leaves from the
top of its heap (best fit's answer, taken) is popped, and its size goes from ``sizes`` when
its heap empties; one that leaves from below the top (a neighbour absorbed by a merge)
only leaves ``blocks``: its address stays in its heap, stale, and ``stale`` counts it. Best
fit pops a stale top when it meets one (its address is not in ``blocks``, or the block
there has another size), and a block that enters at an address already on top of its
size's heap revives that entry instead of pushing another. Stale entries never outnumber
live ones (plus 64): a removal rebuilds the stream's heaps from ``blocks`` then. So every
operation is O(log n) amortized (a size entering or leaving ``sizes`` moves the k sizes
above it, a memmove), and none walks the blocks.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from heapq import heappop, heappush
from typing import Any

__all__ = [
    "ALLOCATED",
    "PENDING",
    "FREE",
    "UNMAPPED",
    "MIN_BLOCK_SIZE",
    "SMALL_SIZE",
    "SMALL_BUFFER",
    "MIN_LARGE_ALLOC",
    "LARGE_BUFFER",
    "ROUND_LARGE",
    "Segment",
    "Block",
    "Pool",
    "PrivatePool",
]

MIN_BLOCK_SIZE = 512  # bytes; every request is rounded up to a multiple of this
SMALL_SIZE = 1 << 20  # bytes; requests up to this come from the small pool
SMALL_BUFFER = 2 << 20  # bytes; the segment size (expandable: the page) of the small pool
MIN_LARGE_ALLOC = 10 << 20  # bytes; large requests below this share a LARGE_BUFFER segment
LARGE_BUFFER = 20 << 20  # bytes; the shared segment size of the large pool
ROUND_LARGE = 2 << 20  # bytes; larger requests get a segment rounded up to this

# Block states
ALLOCATED = 0  # handed out to a user
PENDING = 1  # freed by the user, waiting for record_stream events to complete
FREE = 2  # free, in its pool's index
UNMAPPED = 3  # an expandable segment's stretch with no pages behind it


class Segment:
    """Device memory from one source: a device allocation, or a reserved VMM range.

    ``source`` is the segment source that made it (``_sources``): it gives the memory back
    and says what kind of memory it is (``source.expandable``), so the allocator asks the
    source instead of branching on the kind. ``stream`` is the stream every block of the
    segment belongs to; it changes only when a whole unsplit segment moves to another
    stream (cross_stream_reuse).
    """

    __slots__ = ("ptr", "size", "stream", "pool", "source", "vmm", "oversize", "context", "tag")

    def __init__(
        self, ptr: int, size: int, stream: int, pool: Pool, source: Any, vmm: Any = None
    ) -> None:
        self.ptr = ptr
        self.size = size  # bytes reserved (expandable: the whole range, mapped or not)
        self.stream = stream
        self.pool = pool
        self.source = source  # the DeviceMalloc or Expandable that made it
        self.vmm = vmm  # the ExpandableRange behind an expandable segment, else None
        self.oversize = False  # counted in oversize_segments when it was made
        self.context: Any = None  # frames of the segment_alloc, when history is on
        self.tag = ""  # who asked for it, when not a user: "cublas workspace", ...

    @property
    def expandable(self) -> bool:
        """True for a range of expandable segments (pages mapped on demand)."""
        return self.source.expandable

    def __repr__(self) -> str:
        kind = "expandable " if self.source.expandable else ""
        return f"<Segment {kind}{self.size} B at {self.ptr:#x} stream {self.stream:#x}>"


class Block:
    """A piece of a segment (see the module docstring for its states)."""

    __slots__ = (
        "ptr",
        "size",
        "segment",
        "prev",  # the block before it in its segment (lower address), or None
        "next",  # the block after it, or None
        "state",
        "requested_size",  # bytes the user asked for (ALLOCATED and PENDING blocks)
        "use_events",  # record_use events the next owner's stream waits on; None if none
        "gc_age",  # the pool's get_free_blocks count when it became FREE (GC's age)
        "context",  # frames of the alloc, when history is on
        "mark",  # its stream index's version right after take handed it out, else -1
    )

    def __init__(self, ptr: int, size: int, segment: Segment, state: int) -> None:
        self.ptr = ptr
        self.size = size
        self.segment = segment
        self.prev: Block | None = None
        self.next: Block | None = None
        self.state = state
        self.requested_size = 0
        self.use_events: list | None = None
        self.gc_age = 0
        self.context: Any = None
        self.mark = -1

    def is_split(self) -> bool:
        """True when the block does not span its whole segment."""
        return self.prev is not None or self.next is not None

    def __repr__(self) -> str:
        state = ("allocated", "pending", "free", "unmapped")[self.state]
        return f"<Block {self.size} B at {self.ptr:#x} {state}>"


class _StreamIndex:
    """The FREE blocks of one stream in one pool (Note [The free-block index])."""

    __slots__ = ("sizes", "heaps", "blocks", "stale", "version")

    def __init__(self) -> None:
        self.sizes: list[int] = []  # sorted distinct sizes that have a heap
        self.heaps: dict[int, list[int]] = {}  # size -> min-heap of addresses (some stale)
        self.blocks: dict[int, Block] = {}  # address -> FREE block
        self.stale = 0  # addresses in the heaps whose block has left
        self.version = 0  # counts the changes of ``blocks``: best fit's answers change only then

    def add(self, block: Block) -> None:
        """``block`` enters (pushed, or its stale entry on top revived)."""
        ptr, size = block.ptr, block.size
        self.blocks[ptr] = block
        self.version += 1
        heap = self.heaps.get(size)
        if heap is None:
            self.heaps[size] = [ptr]
            insort(self.sizes, size)
        elif heap[0] != ptr:
            heappush(heap, ptr)
        else:
            self.stale -= 1

    def remove(self, block: Block) -> None:
        """``block`` leaves: popped from the top of its heap, else left stale there."""
        ptr, size = block.ptr, block.size
        blocks = self.blocks
        del blocks[ptr]
        self.version += 1
        heap = self.heaps[size]
        if heap[0] == ptr:
            heappop(heap)
            if not heap:
                del self.heaps[size]
                sizes = self.sizes
                del sizes[bisect_left(sizes, size)]
        else:
            self.stale += 1
            if self.stale > len(blocks) + 64:
                self.rebuild()

    def rebuild(self) -> None:
        """Drop every stale heap entry: the heaps again hold exactly the FREE blocks."""
        heaps: dict[int, list[int]] = {}
        for ptr in sorted(self.blocks):
            heaps.setdefault(self.blocks[ptr].size, []).append(ptr)  # sorted: a heap
        self.heaps = heaps
        self.sizes = sorted(heaps)
        self.stale = 0
        self.version += 1


class Pool:
    """The free blocks of one size class of one owner, indexed for best fit."""

    __slots__ = (
        "is_small",
        "owner",
        "index",
        "unmapped",
        "get_free_blocks_call_count",
    )

    def __init__(self, is_small: bool, owner: Any = None) -> None:
        self.is_small = is_small
        self.owner = owner  # None for the allocator's own pools, else the private pool
        self.index: dict[int, _StreamIndex] = {}  # stream -> its FREE blocks
        self.unmapped: dict[int, list[Block]] = {}  # stream -> UNMAPPED blocks by address
        self.get_free_blocks_call_count = 0  # counted only while GC is on (PyTorch's)

    # ---- the index ----------------------------------------------------------------------
    def insert(self, block: Block) -> None:
        """A FREE block enters the index. Pre: it is FREE and not in the index."""
        found = self.index.get(block.segment.stream)
        if found is None:
            found = self.index[block.segment.stream] = _StreamIndex()
        assert block.state == FREE and block.ptr not in found.blocks, "FREE blocks enter once"
        found.add(block)
        block.gc_age = self.get_free_blocks_call_count

    def remove(self, block: Block) -> None:
        """A FREE block leaves the index (to be handed out, merged or released)."""
        self.index[block.segment.stream].remove(block)

    def take(
        self, block: Block | None, size: int, min_rest: int = 1, stream: int = 0
    ) -> tuple[Block, int, int] | None:
        """A FREE block leaves the index to be handed out: ``block``, or when None the
        best fit for ``size`` on ``stream`` (``best_fit``'s answer; None if nothing fits).
        It keeps its first ``size`` bytes when that leaves at least ``min_rest`` bytes (the
        allocator's split rule; at least 1), the rest staying in the index as a new FREE block
        (``split``); else it goes whole. Returns the block and how that changed the free
        blocks of split device allocations (PyTorch's inactive_split): (blocks, bytes).

        (Given None, ``best_fit``, the removal and ``split`` in one frame: the allocator's
        cached path runs it on nearly every malloc. A given block leaves by ``remove``.)
        """
        if block is None:  # (``best_fit``, inline: its answer leaves from its heap's top)
            found = self.index.get(stream)
            if found is None:
                return None
            sizes, heaps, blocks = found.sizes, found.heaps, found.blocks
            i = bisect_left(sizes, size)
            while block is None:
                if i >= len(sizes):
                    return None
                whole = sizes[i]
                heap = heaps[whole]
                while heap:
                    ptr = heap[0]
                    block = blocks.get(ptr)
                    if block is not None and block.size == whole:
                        break
                    block = None
                    heappop(heap)  # stale: its block was removed from below the top
                    found.stale -= 1
                if block is None:
                    del heaps[whole], sizes[i]  # only stale entries were left
            del blocks[ptr]
            heappop(heap)
            if not heap:
                del heaps[whole], sizes[i]
        else:  # (the find hook's or the oversize rules' answer, or grown memory)
            found = self.index[block.segment.stream]
            found.remove(block)
            ptr, whole = block.ptr, block.size
            blocks, heaps = found.blocks, found.heaps  # (after a rebuild the remove made)
        after = block.next
        was_split = block.prev is not None or after is not None
        if whole - size < min_rest:  # handed out whole
            found.version += 1
            if block.segment.source.expandable:  # (pages, not split device allocations)
                block.mark = -1
                return block, 0, 0
            block.mark = found.version
            if not was_split:
                return block, 0, 0
            return block, -1, -whole  # a free block of a split allocation is handed out whole
        assert 0 < size, "a split leaves two non-empty blocks"
        rest = Block(ptr + size, whole - size, block.segment, FREE)
        rest.next = after
        if after is not None:
            after.prev = rest
        rest.prev = block
        block.next = rest
        block.size = size
        if block.use_events:
            rest.use_events = list(block.use_events)
        ptr, whole = rest.ptr, whole - size  # (_StreamIndex.add, inline)
        blocks[ptr] = rest
        heap = heaps.get(whole)
        if heap is None:
            heaps[whole] = [ptr]
            insort(found.sizes, whole)
        elif heap[0] != ptr:
            heappush(heap, ptr)
        else:
            found.stale -= 1
        rest.gc_age = self.get_free_blocks_call_count
        found.version += 2
        if block.segment.source.expandable:  # (pages, not split device allocations)
            block.mark = -1
            return block, 0, 0
        block.mark = found.version
        if was_split:
            return block, 0, -size  # the free block shrank by what is handed out
        return block, 1, whole  # the rest is a new free block of a split allocation

    def give(self, block: Block) -> tuple[int, int]:
        """A block outside the index, its uses over, becomes FREE: it absorbs its FREE
        neighbours (``merge``) and enters the index. Returns how that changed the free
        blocks of split device allocations (PyTorch's inactive_split): (blocks, bytes).

        (``merge``, inline: the cached path runs it on every free.)
        """
        size = block.size
        found = self.index.get(block.segment.stream)
        if found is None:
            found = self.index[block.segment.stream] = _StreamIndex()
        absorbed = 0
        prev = block.prev
        if prev is not None and prev.state == FREE:  # (``merge``, inline)
            found.remove(prev)
            block.ptr = prev.ptr
            block.prev = before = prev.prev
            if before is not None:
                before.next = block
            block.size += prev.size
            absorbed = 1
            if prev.use_events:
                block.use_events = _union(block.use_events, prev.use_events)
        nxt = block.next
        if nxt is not None and nxt.state == FREE:
            found.remove(nxt)
            block.next = after = nxt.next
            if after is not None:
                after.prev = block
            block.size += nxt.size
            absorbed += 1
            if nxt.use_events:
                block.use_events = _union(block.use_events, nxt.use_events)
        block.state = FREE
        assert block.ptr not in found.blocks, "FREE blocks enter once"
        found.add(block)
        block.gc_age = self.get_free_blocks_call_count
        if block.segment.source.expandable:  # (pages, not split device allocations)
            return 0, 0
        if block.prev is None and block.next is None:  # a whole segment now
            return -absorbed, size - block.size
        return 1 - absorbed, size  # it stays split: itself in, its absorbed neighbours out

    def best_fit(self, stream: int, size: int) -> Block | None:
        """The first FREE block of ``stream`` in (size, address) order with at least ``size``
        bytes, left in the index; None if there is none."""
        found = self.index.get(stream)
        if found is None:
            return None
        sizes = found.sizes
        i = bisect_left(sizes, size)
        while i < len(sizes):
            fit = sizes[i]
            heap = found.heaps[fit]
            while heap:
                block = found.blocks.get(heap[0])
                if block is not None and block.size == fit:
                    return block
                heappop(heap)  # stale: its block was removed from below the top
                found.stale -= 1
            del found.heaps[fit], sizes[i]  # only stale entries were left
        return None

    def blocks_from(self, stream: int, size: int = 0) -> list[Block]:
        """The FREE blocks of ``stream`` with at least ``size`` bytes, in (size, address)
        order (for the searches that walk the order: not on the cached path)."""
        found = self.index.get(stream)
        if found is None:
            return []
        chosen = [b for b in found.blocks.values() if b.size >= size]
        return sorted(chosen, key=lambda b: (b.size, b.ptr))

    def free_blocks(self) -> list[Block]:
        """Every FREE block, in PyTorch's set order (stream, size, address)."""
        return [b for stream in sorted(self.index) for b in self.blocks_from(stream)]

    def largest_free(self) -> int:
        """The size of the largest FREE block (0 if none)."""
        return max((b.size for f in self.index.values() for b in f.blocks.values()), default=0)

    def streams(self) -> list[int]:
        """The streams that have FREE blocks in this pool."""
        return [stream for stream, found in self.index.items() if found.blocks]

    # ---- unmapped stretches of expandable segments --------------------------------------
    def insert_unmapped(self, block: Block) -> None:
        assert block.state == UNMAPPED, "only UNMAPPED blocks enter the unmapped index"
        blocks = self.unmapped.setdefault(block.segment.stream, [])
        blocks.insert(bisect_left([b.ptr for b in blocks], block.ptr), block)

    def remove_unmapped(self, block: Block) -> None:
        self.unmapped[block.segment.stream].remove(block)

    # ---- changing the tiling ------------------------------------------------------------
    def split(self, block: Block, size: int, rest_state: int = FREE) -> Block:
        """Cut ``block`` (not in an index) after its first ``size`` bytes: ``block`` keeps
        the front; the rest becomes a new block in ``rest_state`` (FREE or UNMAPPED), put
        into that state's index. Returns the rest.

        Pre: 0 < size < block.size. The rest inherits the block's record_use events.
        """
        assert 0 < size < block.size, "a split leaves two non-empty blocks"
        rest = Block(block.ptr + size, block.size - size, block.segment, rest_state)
        after = rest.next = block.next
        if after is not None:
            after.prev = rest
        rest.prev = block
        block.next = rest
        block.size = size
        if block.use_events:
            rest.use_events = list(block.use_events)
        if rest_state == FREE:
            self.insert(rest)
        else:
            self.insert_unmapped(rest)
        return rest

    def merge(self, block: Block, state: int = FREE) -> int:
        """``block`` (outside both indexes) absorbs its neighbours that are in ``state``
        (FREE or UNMAPPED), taking them out of their index; returns how many it absorbed
        (0, 1 or 2). Blocks never merge across segments: the links end at their edges.
        """
        absorbed = 0
        prev, nxt = block.prev, block.next
        if prev is not None and prev.state == state:
            if state == FREE:
                self.index[prev.segment.stream].remove(prev)  # (``remove``, one call less)
            else:
                self.remove_unmapped(prev)
            block.ptr = prev.ptr
            block.prev = prev.prev
            if block.prev is not None:
                block.prev.next = block
            block.size += prev.size
            absorbed = 1
            if prev.use_events:
                block.use_events = _union(block.use_events, prev.use_events)
        if nxt is not None and nxt.state == state:
            if state == FREE:
                self.index[nxt.segment.stream].remove(nxt)
            else:
                self.remove_unmapped(nxt)
            block.next = nxt.next
            if block.next is not None:
                block.next.prev = block
            block.size += nxt.size
            absorbed += 1
            if nxt.use_events:
                block.use_events = _union(block.use_events, nxt.use_events)
        return absorbed


class PrivatePool:
    """The allocator-side half of a private pool (a MemPool, or a CUDA graph's pool): its
    small and large pools and its holders (guarded by the allocator's lock)."""

    def __init__(self, pool_id: tuple[int, int]) -> None:
        self.id = pool_id
        self.small = Pool(is_small=True, owner=self)
        self.large = Pool(is_small=False, owner=self)
        self.segment_count = 0  # device segments the pool holds
        self.use_count = 1  # the MemPool (or graph) itself, plus each active use
        self.freeable = False  # no holder left: empty_cache may release its segments
        self.captures = 0  # CUDA graph captures recording into it now (_graph_pools)

    def release_one(self) -> None:
        """A holder is gone (call under the allocator's lock)."""
        self.use_count -= 1
        self.freeable = self.use_count <= 0

    def __repr__(self) -> str:
        return f"<PrivatePool {self.id} segments={self.segment_count} uses={self.use_count}>"


def _union(mine: list | None, theirs: list) -> list:
    """The record_use events of two merged blocks: the newest of each stream (a wait on it
    covers the earlier ones there)."""
    newest: dict[tuple[int, int], Any] = {}
    for event in (*(mine or ()), *theirs):
        key = (event.device, event.stream)
        found = newest.get(key)
        if found is None or event.seq > found.seq:
            newest[key] = event
    return list(newest.values())
