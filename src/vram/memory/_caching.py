"""The caching device allocator: PyTorch's CUDACachingAllocator policy, in Python.

Policy (PyTorch's, exactly, unless a vram option says otherwise):
- Sizes are rounded up to 512 B, or to the next of N divisions of a power-of-two interval
  with ``roundup_power2_divisions``.
- Requests up to 1 MiB come from the small pool, whose segments are 2 MiB; larger ones
  from the large pool: a 20 MiB segment below 10 MiB, else the request rounded to 2 MiB.
- Best fit among free blocks ordered by (stream, size, address); a block is reused only
  on the stream it was allocated on. Oversize blocks (>= max_split_size) serve only
  requests that are oversize too, and at most max_non_split_rounding_size larger.
- A block bigger than needed is split: the request takes the front, the remainder stays
  free (small pool: remainder >= 512 B; large: remainder > 1 MiB and the request below
  max_split_size). Freeing merges a block with its free neighbours.
- record_stream: at free, an event is recorded on every stream the block was used on; the
  block returns to its pool when all have completed (checked at the start of each malloc).
- record_use (pytorch#181191): the block returns to the pool at free; the next owner's
  stream waits on the events recorded at the consumers' last uses (no host wait).
- Out of memory, in order: free-memory callbacks; garbage collection (with a fraction and
  garbage_collection_threshold); device malloc; release one oversize free block (or
  several) and retry; synchronize, release every cached segment and retry (counted in
  num_alloc_retries); call the OOM observers and raise OutOfMemoryError.
- ``VRAM_NO_CACHING=1`` (read when an allocator is created): every request is a device
  allocation of its own, given back to the device at free; the stats are kept as usual.

Note [Claims]: the cached path's common case is "take a free block (or split its front
off), use it, free it" (a temporary buffer, a workspace). Done literally, that is a split,
two free-list updates, a merge and two more on every pair. Instead, the block (or front)
is handed out as a *claim*: free block B stays in its free list, standing for "the claimed
part plus the free rest", and the allocator makes it real (``_settle``) the moment
anything else touches it. Freeing the claimed block first undoes the claim, leaving
exactly the state PyTorch's free leaves: B free, same address, same size; and the same
request coming again right away takes the same block back without a search. Decisions and
stats are PyTorch's either way (tests/memory/test_claims.py compares them step by step).

Locking: every public method takes ``_lock`` and never calls another public method. A
finalizer may free memory on a thread that is already inside the allocator (the garbage
collector runs anywhere); such a free is queued in ``_deferred`` and done when the outer
call finishes, so the allocator's state is never changed under its own feet.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._device import Device, as_device
from .._errors import OutOfMemoryError
from .._streams import Stream, current_stream
from ..driver import Driver
from ._allocation import Allocation
from ._blocks import (
    KEY_SHIFT,
    LARGE_BUFFER,
    MIN_BLOCK_SIZE,
    MIN_LARGE_ALLOC,
    ROUND_LARGE,
    SMALL_BUFFER,
    SMALL_SIZE,
    Block,
    BlockPool,
)
from ._config import SIZE_MAX, AllocatorConfig, default_config
from ._expandable import ExpandableSegment, ExpandableSteps, best_expandable, skip_expandable
from ._release import ReleaseSteps
from ._stats import (
    _FLUSH_AT,
    ALLOCATED_BYTES,
    LARGE,
    OP_ALLOC,
    OP_FREE,
    OP_FREE_COMPLETED,
    OP_FREE_REQUESTED,
    OP_PAIR,
    RESERVED_BYTES,
    SEGMENT,
    SMALL,
    Stats,
)

__all__ = ["DeviceCachingAllocator", "allocator_for", "allocate", "format_size"]

_PRUNE_USE_EVENTS = 8  # a free block with more record_use events than this drops finished ones
_CLAIMS_TRIED = 4  # claims settled in a row (none undone) before claims pause
_CLAIMS_PAUSE = 64  # mallocs that then split at once


def format_size(size: int) -> str:
    """PyTorch's format_size: '512 bytes', '1.50 KiB', '20.00 MiB', '2.00 GiB'."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576:.2f} MiB"
    return f"{size / 1073741824:.2f} GiB"


class _UseEvent:
    """An event recorded by record_use (or at a free, for cross-stream reuse)."""

    __slots__ = ("handle", "stream", "owner")

    def __init__(self, handle: int, stream: int, owner: DeviceCachingAllocator) -> None:
        self.handle = handle
        self.stream = stream
        self.owner = owner

    def __del__(self) -> None:
        try:
            self.owner._spare_events.append(self.handle)  # list.append is atomic
        except Exception:  # finalizers never raise
            pass


class _Claim:
    """A block handed out while its free block stays in the free list (Note [Claims])."""

    __slots__ = ("block", "free", "size", "stream", "entry", "pair")

    def __init__(self, block: Block, free: Block, size: int, stream: int, entry: tuple) -> None:
        self.block = block
        self.free = free  # the free block it was taken from (the block itself if not split)
        self.size = size  # the request it answered, in bytes as asked
        self.stream = stream
        self.entry = entry  # its alloc entry in the stats log
        self.pair: tuple | None = None  # the same entry as an alloc-and-free pair, once needed


class DeviceCachingAllocator(ReleaseSteps, ExpandableSteps):
    """The caching allocator of one device (cuda:N or sim:N)."""

    def __init__(
        self, device: Device, config: AllocatorConfig | None = None, driver: Driver | None = None
    ) -> None:
        self.device = device
        self.index: int = device.index  # type: ignore[assignment]
        self.driver: Driver = driver or device.driver  # another driver: replays use their own
        self.config = config or default_config()
        self._lock = threading.RLock()
        self._depth = 0  # > 0 while a public method of this thread runs (guarded by _lock)
        self._deferred: list[int] = []  # frees that arrived re-entrantly; done after the call
        self.small = BlockPool(is_small=True)
        self.large = BlockPool(is_small=False)
        self._allocated: dict[int, Block] = {}  # ptr -> allocated block
        self._pending: dict[int, deque] = {}  # stream -> deque of (event, block): record_stream
        self._pending_count = 0
        self._claim: _Claim | None = None  # the claim in force (Note [Claims])
        self._undone: _Claim | None = None  # the last claim, undone, while it may come back
        self._claims_settled = 0  # claims in a row that something else settled, not undone
        self._claims_paused = 0  # mallocs left that split at once, without trying a claim
        self._spare_events: list[int] = []
        self._expandable: list[ExpandableSegment] = []
        self._segments: dict[int, Any] = {}  # ptr of each device segment -> its frames/context
        self.stats = Stats()
        self.total_allocated_memory = 0  # bytes reserved from the device
        self.allowed_memory_maximum: int | None = None
        self.fraction = 1.0
        self.free_memory_callbacks: list[Callable[[], bool]] = []
        self.oom_observers: list[Callable[[int, int, int, int], None]] = []
        self.recorder: Any = None  # the history recorder (vram.memory history), or None
        self.active_pools: threading.local = threading.local()  # per-thread MemPool stack
        self.private_pools: dict[tuple[int, int], Any] = {}  # id -> PrivatePool
        self.no_caching = os.environ.get("VRAM_NO_CACHING") == "1"  # read once, at creation
        self._derive_flags()
        if self.config.per_process_memory_fraction < 1.0:
            self._set_fraction(self.config.per_process_memory_fraction)

    # ================================================================ public: malloc / free
    def malloc(self, size: int, stream: int) -> int:
        """Return a device pointer to at least ``size`` bytes usable on ``stream``."""
        lock = self._lock
        lock.acquire()  # (not ``with``: this is the hot path, and ``with`` costs twice as much)
        undone = self._undone
        if (
            undone is not None
            and undone.size == size
            and undone.stream == stream
            and not self._pending_count  # (events may have completed since)
        ):  # the request whose claim was just undone, again: claim the same block
            # (nothing here makes a Python object, so no finalizer can run in between)
            self._undone = None
            self._claim = undone
            block = undone.block
            block.allocated = True
            self._allocated[block.ptr] = block
            self.stats.log.append(undone.entry)
            lock.release()
            return block.ptr
        self._depth += 1
        try:
            self._settle()
            if self._pending_count:
                self._process_events()
            block = self._malloc(size, stream)
            if len(self.stats.log) >= _FLUSH_AT:
                self.stats.flush()
        finally:
            self._depth -= 1
            if self._deferred and not self._depth:
                self._run_deferred()
            lock.release()
        return block.ptr

    def free(self, ptr: int) -> None:
        """Free an allocation. Re-entrant frees (from finalizers) are deferred, never lost."""
        lock = self._lock
        lock.acquire()
        try:
            if self._depth:
                self._deferred.append(ptr)
                return
            self._depth = 1
            try:
                claim = self._claim
                if claim is not None and claim.block.ptr == ptr:
                    self._undo_claim()
                else:
                    self._free(ptr)
            finally:
                self._depth = 0
                if self._deferred:
                    self._run_deferred()
        finally:
            lock.release()

    def record_stream(self, ptr: int, stream: int) -> None:
        """The allocation at ``ptr`` is used on ``stream`` (PyTorch's recordStream)."""
        with self._lock:
            self._settle()
            block = self._block(ptr, "record_stream")
            if stream == block.stream:
                return
            if block.stream_uses is None:
                block.stream_uses = {stream}
            else:
                block.stream_uses.add(stream)

    def record_use(self, ptr: int, stream: int) -> None:
        """The last use of ``ptr`` on ``stream`` is queued now (pytorch#181191's record_use)."""
        with self._lock:
            self._settle()
            block = self._block(ptr, "record_use")
            if stream == block.stream:
                return
            event = self._use_event(stream)
            if block.use_events is None:
                block.use_events = [event]
            else:
                block.use_events.append(event)

    # ============================================================== the steps of malloc
    def round_size(self, size: int) -> int:
        """PyTorch's round_size: 512 B multiples, or power-of-two divisions when set."""
        if size < MIN_BLOCK_SIZE:
            return MIN_BLOCK_SIZE
        if not self._any_divisions:
            return (size + MIN_BLOCK_SIZE - 1) & -MIN_BLOCK_SIZE
        divisions = self._divisions(size)
        if divisions > 1 and size > MIN_BLOCK_SIZE * divisions:
            return _next_division(size, divisions)
        return -(-size // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE

    def _divisions(self, size: int) -> int:
        table = self.config.roundup_power2_divisions
        index = max(size.bit_length() - 1 - 20, 0)  # interval 0 holds everything below 2 MiB
        return table[min(index, len(table) - 1)]

    @staticmethod
    def allocation_size(size: int) -> int:
        """The segment size a new segment for a rounded request of ``size`` bytes gets."""
        if size <= SMALL_SIZE:
            return SMALL_BUFFER
        if size < MIN_LARGE_ALLOC:
            return LARGE_BUFFER
        return -(-size // ROUND_LARGE) * ROUND_LARGE

    def _pool_for(self, size: int) -> BlockPool:
        if self.private_pools:  # only then can a thread be inside use_mem_pool
            stack = getattr(self.active_pools, "stack", None)
            if stack:
                private = stack[-1]
                return private.small if size <= SMALL_SIZE else private.large
        return self.small if size <= SMALL_SIZE else self.large

    def _malloc(self, orig_size: int, stream: int) -> Block:
        if self._any_divisions or orig_size < MIN_BLOCK_SIZE:
            size = self.round_size(orig_size)
        else:
            size = (orig_size + MIN_BLOCK_SIZE - 1) & -MIN_BLOCK_SIZE
        if self.private_pools:
            pool = self._pool_for(size)
        else:
            pool = self.small if size <= SMALL_SIZE else self.large
        if self.no_caching:
            return self._malloc_uncached(pool, size, orig_size, stream)
        block = self._get_free_block(pool, size, stream, take=False)
        if block is None:
            block = self._find_or_grow(pool, size, orig_size, stream)
        elif self._claimable(block):
            return self._claim_front(block, pool, size, orig_size, stream)
        else:
            pool.remove(block)
        return self._alloc_found_block(block, pool, size, orig_size, stream)

    def _claimable(self, block: Block) -> bool:
        """Can free ``block`` (or its front) be handed out as a claim (Note [Claims])?

        Where claims keep being settled rather than undone (a program that frees in another
        order), they only cost: after _CLAIMS_TRIED of them, the next _CLAIMS_PAUSE mallocs
        split at once. Either way the decisions are the same.
        """
        if self._claims_paused:
            self._claims_paused -= 1
            return False
        if self._no_claims or block.use_events or block.expandable is not None:
            return False
        if self.recorder is not None:  # history and counters see every split and merge
            return False
        return block.size < self.config.max_split_size  # oversize blocks keep their counters

    def _claim_front(
        self, free: Block, pool: BlockPool, size: int, orig_size: int, stream: int
    ) -> Block:
        """Hand out ``free``, or its front ``size`` bytes when PyTorch would split it,
        while it stays in its free list."""
        remaining = free.size - size
        if pool.is_small or self.config.expandable_segments:
            split = remaining >= MIN_BLOCK_SIZE
        else:
            split = remaining > SMALL_SIZE  # (and size < max_split_size: _claimable)
        was_split = free.prev is not None or free.next is not None
        if split:
            block = Block(free.ptr, size, stream, pool)
            if was_split:
                split_blocks, split_bytes = 0, -size  # an inactive split block shrinks
            else:
                split_blocks, split_bytes = 1, remaining  # a new inactive split block
        else:
            block = free
            split_blocks, split_bytes = (-1, -free.size) if was_split else (0, 0)
        block.allocated = True
        block.requested_size = orig_size
        kind = SMALL if pool.is_small else LARGE
        self._allocated[block.ptr] = block
        entry = (OP_ALLOC << 4 | kind, block.size, orig_size, split_blocks, split_bytes)
        self.stats.log.append(entry)
        self._claim = _Claim(block, free, orig_size, stream, entry)
        return block

    def _settle(self) -> None:
        """Make the claim real: take the free block out of its free list, and when the claim
        is its front, split it there (the free block becomes the rest behind it).

        Anything but the free of the claimed block, or a repeat of the request it undid,
        settles first: a claim only lives while nothing else happens.
        """
        self._undone = None
        claim = self._claim
        if claim is None:
            return
        self._claim = None
        self._claims_settled += 1
        if self._claims_settled >= _CLAIMS_TRIED:
            self._claims_settled = 0
            self._claims_paused = _CLAIMS_PAUSE
        block, rest = claim.block, claim.free
        rest.pool.remove(rest)
        if block is rest:
            return
        block.prev = rest.prev
        if block.prev is not None:
            block.prev.next = block
        block.next = rest
        rest.prev = block
        rest.ptr += block.size
        rest.size -= block.size
        rest.pool.insert(rest)

    def _undo_claim(self) -> None:
        """The claimed block is freed before anything else happened: drop the claim."""
        claim = self._claim
        self._claim = None
        self._claims_settled = 0
        if self.recorder is None and not self.private_pools:  # the same request may come back
            self._undone = claim
        block = claim.block  # type: ignore[union-attr]
        del self._allocated[block.ptr]
        block.allocated = False
        log = self.stats.log
        code, size, requested, split_blocks, split_bytes = claim.entry  # type: ignore[union-attr]
        if log and log[-1] is claim.entry:  # type: ignore[union-attr]
            if claim.pair is None:  # type: ignore[union-attr]
                claim.pair = (OP_PAIR << 4 | code & 15, size, requested, split_blocks, split_bytes)  # type: ignore[union-attr]
            log[-1] = claim.pair  # type: ignore[union-attr]  (the alloc and free as one)
        else:
            log.append((OP_FREE << 4 | code & 15, size, requested, -split_blocks, -split_bytes))

    def _get_free_block(
        self, pool: BlockPool, size: int, stream: int, take: bool = True
    ) -> Block | None:
        """Best fit on ``stream``: the smallest free block that fits, lowest address first.

        ``take``: remove it from the free list (else the caller does, or claims it).
        """
        config = self.config
        if self._gc_on:
            pool.get_free_blocks_call_count += 1
        free = pool.free.get(stream)
        if free is None:
            return None
        keys = free.keys
        i = bisect_left(keys, size << KEY_SHIFT)
        if i == len(keys):
            return None
        if free.blocks[i].expandable is not None:
            if config.expandable_segments:
                i = best_expandable(free, i)
            else:  # switched off since: only non-expandable blocks may serve
                i = skip_expandable(free, i)
                if i == len(free.blocks):
                    return None
        block = free.blocks[i]
        max_split = config.max_split_size
        if size < max_split and block.size >= max_split:
            return None  # do not hand an oversize block to a small request
        if size >= max_split and block.size >= size + config.max_non_split_rounding_size:
            return None  # nor a far larger oversize block to an oversize request
        if take:
            del free.keys[i]
            del free.blocks[i]
        return block

    def _find_or_grow(self, pool: BlockPool, size: int, orig_size: int, stream: int) -> Block:
        """The slow path: callbacks, other streams, GC, device malloc, release and retry."""
        block = None
        if self._trigger_free_memory_callbacks():
            block = self._get_free_block(pool, size, stream)
        if block is None and self.config.cross_stream_reuse:
            block = self._take_from_other_stream(pool, size, stream)
        if block is not None:
            return block
        if self._gc_on:
            self._garbage_collect_cached_blocks()
        alloc_size = self.allocation_size(size)
        block = self._alloc_block(pool, size, alloc_size, stream, retry=False)
        if block is None and self._release_available_cached_blocks(pool, size, stream):
            block = self._alloc_block(pool, size, alloc_size, stream, retry=False)
        if block is None and self._release_cached_blocks():
            block = self._alloc_block(pool, size, alloc_size, stream, retry=True)
        if block is None:
            self._raise_oom(pool, size, alloc_size, stream)
        return block

    def _trigger_free_memory_callbacks(self) -> bool:
        """Call the free-memory callbacks; True if one freed memory.

        The allocator is between steps here, so frees that the callbacks make (and those
        deferred so far) are done at once, where the search that follows can find them.
        """
        if not self.free_memory_callbacks:
            return False
        depth, self._depth = self._depth, 0
        try:
            freed = False
            for callback in list(self.free_memory_callbacks):
                freed = bool(callback()) or freed
            if self._deferred:
                self._run_deferred()
        finally:
            self._depth = depth
        return freed

    def _take_from_other_stream(self, pool: BlockPool, size: int, stream: int) -> Block | None:
        """cross_stream_reuse: the best fit among other streams' whole free segments.

        Only whole (unsplit) segments move, so every block of a segment keeps one stream and
        segments still merge and release as in PyTorch. The new stream waits on the event
        recorded at the block's free (``_note_free_for_other_streams``); a block freed
        before the option was on has none, and gets one recorded now instead.
        """
        best, best_list, best_i = None, None, 0
        max_split = self.config.max_split_size
        for other, free in pool.free.items():
            if other == stream:
                continue
            blocks = free.blocks
            i = free.lower_bound(size)
            while i < len(blocks) and (blocks[i].expandable is not None or blocks[i].is_split()):
                i += 1
            if i == len(blocks):
                continue
            candidate = blocks[i]
            if size < max_split <= candidate.size:
                continue
            if best is None or (candidate.size, candidate.ptr) < (best.size, best.ptr):
                best, best_list, best_i = candidate, free, i
        if best is None:
            return None
        del best_list.keys[best_i]  # type: ignore[union-attr]
        del best_list.blocks[best_i]  # type: ignore[union-attr]
        events = best.use_events
        if events is None:
            events = best.use_events = []
        if not any(e.stream == best.stream for e in events):
            events.append(self._use_event(best.stream))  # everything queued there so far
        best.stream = stream
        return best

    def _alloc_block(
        self, pool: BlockPool, size: int, alloc_size: int, stream: int, retry: bool
    ) -> Block | None:
        """A new segment (or, expandable, newly mapped pages) holding ``size`` bytes."""
        if retry:
            self.stats.num_alloc_retries += 1
        limit = self.allowed_memory_maximum
        if limit is not None and self.total_allocated_memory + alloc_size > limit:
            return None
        if self.config.expandable_segments and pool.owner is None:
            return self._try_allocate_expandable_block(pool, size, stream)
        return self._new_segment(pool, alloc_size, stream)

    def _new_segment(self, pool: BlockPool, alloc_size: int, stream: int) -> Block | None:
        """cudaMalloc a segment of ``alloc_size`` bytes: one free block (None when full)."""
        try:
            ptr = self.driver.malloc(self.index, alloc_size)
        except Exception as exc:
            if getattr(exc, "is_out_of_memory", False):
                return None
            raise
        if pool.owner is not None:
            pool.owner.segment_count += 1
        self.total_allocated_memory += alloc_size
        block = Block(ptr, alloc_size, stream, pool)
        kind = SMALL if pool.is_small else LARGE
        self.stats.increase(SEGMENT, kind, 1)
        self.stats.increase(RESERVED_BYTES, kind, alloc_size)
        if alloc_size >= self.config.max_split_size:
            Stats.bump(self.stats.oversize_segments, 1)
        self.stats.num_device_alloc += 1
        context = self._trace("segment_alloc", ptr, alloc_size, stream)
        self._segments[ptr] = context
        return block

    def _malloc_uncached(self, pool: BlockPool, size: int, orig_size: int, stream: int) -> Block:
        """VRAM_NO_CACHING=1: every request is its own device allocation of the rounded size."""
        limit = self.allowed_memory_maximum
        block = None
        if limit is None or self.total_allocated_memory + size <= limit:
            block = self._new_segment(pool, size, stream)
        if block is None:
            self._raise_oom(pool, size, size, stream)
        return self._alloc_found_block(block, pool, size, orig_size, stream)

    def _alloc_found_block(
        self, block: Block, pool: BlockPool, size: int, orig_size: int, stream: int
    ) -> Block:
        """Split off the front of ``block`` for the request when worth it; mark it allocated."""
        kind = SMALL if pool.is_small else LARGE
        expandable = block.expandable is not None
        remaining = block.size - size
        if pool.is_small or self.config.expandable_segments:
            split = remaining >= MIN_BLOCK_SIZE
        else:
            split = size < self.config.max_split_size and remaining > SMALL_SIZE
        already_split = block.prev is not None or block.next is not None
        split_blocks = split_bytes = 0  # change of inactive_split and inactive_split_bytes
        if split:
            rest = block
            block = Block(rest.ptr, size, stream, pool)
            block.expandable = rest.expandable
            block.prev = rest.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = rest
            rest.prev = block
            rest.ptr += size
            rest.size = remaining
            if rest.use_events:
                block.use_events = list(rest.use_events)
            pool.insert(rest)
            if not expandable:
                if already_split:
                    split_bytes = -size
                else:
                    split_blocks, split_bytes = 1, remaining
        elif already_split and not expandable:
            split_blocks, split_bytes = -1, -block.size
        if block.use_events:
            self._wait_use_events(block, stream)
        block.allocated = True
        block.requested_size = orig_size
        self._allocated[block.ptr] = block
        entry = (OP_ALLOC << 4 | kind, block.size, orig_size, split_blocks, split_bytes)
        self.stats.log.append(entry)
        if block.size >= self.config.max_split_size:
            Stats.bump(self.stats.oversize_allocations, 1)
        if self.recorder is not None:
            block.context = self._trace("alloc", block.ptr, orig_size, stream)
        return block

    def _wait_use_events(self, block: Block, stream: int) -> None:
        """The new owner's stream waits for every record_use event on the block."""
        wait = self.driver.stream_wait_event
        for event in block.use_events:  # type: ignore[union-attr]
            if event.stream != stream:
                wait(stream, event.handle)
        block.use_events = None

    # ================================================================ the steps of free
    def _free(self, ptr: int) -> None:
        claim = self._claim
        if claim is not None and claim.block.ptr == ptr:
            self._undo_claim()
            return
        self._settle()
        block = self._allocated.pop(ptr, None)
        if block is None:
            raise ValueError(f"ptr: {ptr:#x} was not allocated by the caching allocator")
        block.allocated = False
        if self.recorder is not None:
            self._trace("free_requested", block.ptr, block.requested_size, block.stream)
        if block.size >= self.config.max_split_size:
            Stats.bump(self.stats.oversize_allocations, -1)
        if self.config.cross_stream_reuse and not self.no_caching:
            self._note_free_for_other_streams(block)
        if self.no_caching or block.stream_uses:
            kind = SMALL if block.pool.is_small else LARGE
            self.stats.log.append((OP_FREE_REQUESTED << 4 | kind, block.size, 0, 0, 0))
            if self.no_caching:
                self._free_uncached(block)
            else:
                self._insert_events(block)
        else:
            self._free_block(block, OP_FREE)  # requested and completed at once

    def _free_uncached(self, block: Block) -> None:
        """VRAM_NO_CACHING=1: wait for the streams that used the block (as cudaFree would),
        then give its segment back to the device. Synchronizes."""
        streams = {block.stream, *(block.stream_uses or ())}
        block.stream_uses = None
        for stream in sorted(streams):
            self.driver.stream_synchronize(stream)
        self._free_block(block)
        self._release_block(block)

    def _note_free_for_other_streams(self, block: Block) -> None:
        """cross_stream_reuse: another stream taking this block waits on an event of its free."""
        if block.use_events is None:
            block.use_events = []
        block.use_events.append(self._use_event(block.stream))

    def _free_block(self, block: Block, op: int = OP_FREE_COMPLETED) -> None:
        """Return a block whose uses are over to its pool, merged with free neighbours.

        ``op`` is what the stats log: OP_FREE when the user's free happens now too.
        """
        if self.recorder is not None:
            self._trace("free_completed", block.ptr, block.requested_size, block.stream)
            block.context = None
        original_size = block.size
        pool = block.pool
        split_blocks = split_bytes = 0
        prev, nxt = block.prev, block.next
        if prev is not None and not prev.allocated:
            subsumed = self._try_merge(block, prev, pool)
            if subsumed:
                split_blocks, split_bytes = -1, -subsumed
        if nxt is not None and not nxt.allocated:
            subsumed = self._try_merge(block, nxt, pool)
            if subsumed:
                split_blocks, split_bytes = split_blocks - 1, split_bytes - subsumed
        pool.insert(block)
        if block.prev is not None or block.next is not None:
            split_blocks += 1
            split_bytes += block.size
        if block.expandable is not None:
            split_blocks = split_bytes = 0  # PyTorch leaves expandable blocks out of it
        entry = (op << 4 | (SMALL if pool.is_small else LARGE), original_size)
        self.stats.log.append((*entry, block.requested_size, split_blocks, split_bytes))

    def _try_merge(self, dst: Block, src: Block | None, pool: BlockPool) -> int:
        """Absorb free neighbour ``src`` into ``dst``; the bytes absorbed (0 if it can't)."""
        if (
            src is None
            or src.allocated
            or src.event_count
            or src.stream_uses
            or src.mapped != dst.mapped
            or src.stream != dst.stream
        ):
            return 0
        if src.mapped:
            free = pool.free[src.stream]
            i = bisect_left(free.keys, (src.size << KEY_SHIFT) | src.ptr)
            del free.keys[i]
            del free.blocks[i]
        else:
            pool.remove_unmapped(src)
        if dst.prev is src:  # [src dst]
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        if src.use_events:
            dst.use_events = _merged_events(dst.use_events, src.use_events, self.driver)
        return src.size

    def _insert_events(self, block: Block) -> None:
        """record_stream: record an event on each stream that used the block."""
        streams, block.stream_uses = block.stream_uses, None
        for stream in sorted(streams):  # type: ignore[arg-type]
            event = self._new_event()
            self.driver.event_record(event, stream)
            block.event_count += 1
            self._pending.setdefault(stream, deque()).append((event, block))
            self._pending_count += 1

    def _process_events(self) -> None:
        """Free the blocks whose record_stream events have all completed (no waiting)."""
        query = self.driver.event_query
        for stream in sorted(self._pending):
            queue = self._pending[stream]
            while queue:
                event, block = queue[0]
                if not query(event):
                    break
                queue.popleft()
                self._pending_count -= 1
                self._spare_events.append(event)
                block.event_count -= 1
                if block.event_count == 0:
                    self._free_block(block)
            if not queue:
                del self._pending[stream]

    def _synchronize_and_free_events(self) -> None:
        """Wait for every record_stream event and free its block. Synchronizes."""
        self.stats.num_sync_all_streams += 1
        for stream in sorted(self._pending):
            for event, block in self._pending[stream]:
                self.driver.event_synchronize(event)
                self._spare_events.append(event)
                block.event_count -= 1
                if block.event_count == 0:
                    self._free_block(block)
        self._pending.clear()
        self._pending_count = 0

    def _new_event(self) -> int:
        spare = self._spare_events
        return spare.pop() if spare else self.driver.event_create(self.index, False)

    def _use_event(self, stream: int) -> _UseEvent:
        event = self._new_event()
        self.driver.event_record(event, stream)
        return _UseEvent(event, stream, self)

    def _run_deferred(self) -> None:
        self._depth += 1
        try:
            while self._deferred:
                self._free(self._deferred.pop())
        finally:
            self._depth -= 1

    def _block(self, ptr: int, what: str) -> Block:
        block = self._allocated.get(ptr)
        if block is None:
            raise ValueError(f"{what}: ptr {ptr:#x} is not a live allocation of {self.device}")
        return block

    # ======================================================================= OOM
    def _raise_oom(self, pool: BlockPool, size: int, alloc_size: int, stream: int) -> None:
        free, total = self.driver.mem_get_info(self.index)
        self._trace("oom", free, size, stream)
        self.stats.num_ooms += 1
        allocated = self.stats.current(ALLOCATED_BYTES)
        reserved = self.stats.current(RESERVED_BYTES)
        limit = self.allowed_memory_maximum
        for observer in list(self.oom_observers):
            try:
                observer(self.index, alloc_size, total if limit is None else limit, free)
            except Exception:  # an observer must not hide the OOM itself
                pass
        allowed = "" if limit is None else f"{format_size(limit)} allowed; "
        raise OutOfMemoryError(
            f"{self.device.type.upper()} out of memory. Tried to allocate "
            f"{format_size(alloc_size)}. {self.device} has a total capacity of "
            f"{format_size(total)} of which {format_size(free)} is free. {allowed}"
            f"Of the allocated memory {format_size(allocated)} is allocated by vram, and "
            f"{format_size(reserved - allocated)} is reserved by vram but unallocated. "
            "If reserved but unallocated memory is large try setting "
            "VRAM_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
        )

    # ================================================================= history hook
    def _trace(self, action: str, addr: int, size: int, stream: int) -> Any:
        recorder = self.recorder
        if recorder is None:
            return None
        return recorder.record(self, action, addr, size, stream)

    # ====================================================== public: cache and limits
    def empty_cache(self) -> None:
        """Give every whole free segment back to the device (after pending frees finish)."""
        with self._lock:
            self._settle()
            self._depth += 1
            try:
                self._release_cached_blocks()
            finally:
                self._depth -= 1
                if self._deferred:
                    self._run_deferred()

    def set_memory_fraction(self, fraction: float) -> None:
        with self._lock:
            self._settle()
            self._set_fraction(fraction)

    def _set_fraction(self, fraction: float) -> None:
        """PyTorch's setMemoryFraction: a share of the total that cudaMemGetInfo reports now."""
        total = self.driver.mem_get_info(self.index)[1]
        self.fraction = fraction
        self.allowed_memory_maximum = int(fraction * total)
        self._derive_flags()

    def set_config(self, config: AllocatorConfig) -> None:
        with self._lock:
            self._settle()
            self.config = config
            self._derive_flags()

    def _derive_flags(self) -> None:
        """Flags the hot path reads instead of the settings they come from."""
        self._any_divisions = any(d > 1 for d in self.config.roundup_power2_divisions)
        self._gc_on = bool(
            self.allowed_memory_maximum is not None and self.config.garbage_collection_threshold
        )
        # claims skip the free-list updates that GC ages, cross-stream reuse's free events,
        # and the device frees of VRAM_NO_CACHING rely on
        self._no_claims = self._gc_on or self.config.cross_stream_reuse or self.no_caching

    def memory_stats(self) -> dict[str, int]:
        with self._lock:
            split = self.config.max_split_size
            return self.stats.as_dict(-1 if split == SIZE_MAX else split)

    def reset_peak(self) -> None:
        with self._lock:
            self.stats.reset_peak()

    def reset_accumulated(self) -> None:
        with self._lock:
            self.stats.reset_accumulated()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the allocator's lock, with its state settled, to read it (snapshots, tools)."""
        with self._lock:
            if not self._depth:  # a finalizer inside an allocator call must not settle
                self._settle()
            yield

    def all_blocks(self) -> list[Block]:
        """Every mapped block of every segment (allocated, pending and free), by address."""
        with self._lock:
            if not self._depth:
                self._settle()
            seen: dict[int, Block] = {}
            pools = [self.small, self.large]
            for private in self.private_pools.values():
                pools += [private.small, private.large]
            for pool in pools:
                for block in pool.all_free():
                    seen[id(block)] = block
            for block in self._allocated.values():
                seen[id(block)] = block
            for queue in self._pending.values():
                for _, block in queue:
                    seen[id(block)] = block
            return sorted(seen.values(), key=lambda b: b.ptr)


def _next_division(size: int, divisions: int) -> int:
    """PyTorch's roundup_power2_next_division."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def _merged_events(dst: list | None, src: list, driver: Driver) -> list:
    """The union of two blocks' record_use events; finished ones dropped past a few."""
    events = list(dst or ()) + [e for e in src if dst is None or e not in dst]
    if len(events) > _PRUNE_USE_EVENTS:
        events = [e for e in events if not driver.event_query(e.handle)]
    return events


# ================================================================ one allocator a device
_allocators: dict[Device, DeviceCachingAllocator] = {}
_allocators_lock = threading.Lock()
# called with each allocator allocator_for creates (memory history attaches itself here)
allocator_created_hooks: list[Callable[[DeviceCachingAllocator], None]] = []


def allocator_for(device: object = None) -> DeviceCachingAllocator:
    """The caching allocator of a device (created on first use)."""
    found = device if isinstance(device, Device) else as_device(device)
    allocator = _allocators.get(found)
    if allocator is None:
        if found.type == "cpu":
            raise ValueError("device: the cpu device has no caching allocator")
        with _allocators_lock:
            allocator = _allocators.get(found)
            if allocator is None:
                allocator = _allocators[found] = DeviceCachingAllocator(found)
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
