"""The caching device allocator: PyTorch's CUDACachingAllocator policy, in Python.

Policy (PyTorch's, exactly, unless a vram option says otherwise):
- Sizes are rounded up to 512 B, or to the next of N divisions of a power-of-two interval
  with ``roundup_power2_divisions``.
- Requests up to 1 MiB come from the small pool, whose segments are 2 MiB; larger ones
  from the large pool: a 20 MiB segment below 10 MiB, else the request rounded to 2 MiB.
- Best fit among free blocks ordered by (stream, size, address); a block is reused only on
  the stream it was allocated on. Oversize blocks (>= max_split_size) serve only requests
  that are oversize too, and at most max_non_split_rounding_size larger.
- A block bigger than needed is split: the request takes the front, the rest stays free
  (small pool, or expandable segments: rest >= 512 B; large: rest > 1 MiB and the request
  below max_split_size). Freeing merges a block with its free neighbours.
- Blocks used on other streams wait for events (record_stream, record_use, cross-stream
  reuse: the lifetime policy in ``_lifetimes``).
- When no free block fits, the flat ladder: free-memory callbacks and search again; (vram)
  a whole free segment of another stream; garbage collection; new memory from the segment
  source (``_sources``: device malloc or expandable pages); release one oversize free block
  (or several) and retry; wait for pending frees, release every whole free segment and
  retry (num_alloc_retries); call the OOM observers and raise OutOfMemoryError.

The parts: ``_pool`` (segments, blocks, the free-block index), ``_lifetimes`` (events),
``_sources`` (where memory comes from), ``_stats`` (the counters). This module is the
policy that drives them.

Locking: one lock per allocator (``_lock``). Every public method takes it and never calls
another public method. Finalizers never take it: a dropped Allocation pushes its pointer
onto ``_dropped`` (an atomic deque append) and the next call of any public method frees
it first; ``free`` does the same when the lock is busy. The lock is let go only around
user code (free-memory callbacks, OOM observers), at points where the call has not
changed anything yet. A finalizer must not allocate (malloc would wait on the lock its
own thread holds).

``VRAM_NO_CACHING=1`` (or PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING, read when an allocator is
made) gives an ``UncachedAllocator`` instead (``_uncached``): every request is a device
allocation of its own, given back at free. ``_registry`` makes one allocator per device;
``_oom_report`` words the OutOfMemoryError and says why it happened.
"""

from __future__ import annotations

import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._device import Device
from ..driver import Driver
from ._allocation import FreesDropped
from ._config import SIZE_MAX, AllocatorConfig, default_config
from ._lifetimes import Lifetimes
from ._oom_report import dump_on_oom, out_of_memory
from ._pool import (
    ALLOCATED,
    LARGE_BUFFER,
    MIN_BLOCK_SIZE,
    MIN_LARGE_ALLOC,
    PENDING,
    ROUND_LARGE,
    SMALL_BUFFER,
    SMALL_SIZE,
    UNMAPPED,
    Block,
    Pool,
    Segment,
)
from ._sources import DeviceMalloc, Expandable
from ._stats import DeviceStats

__all__ = ["DeviceCachingAllocator"]

Route = tuple[Any, Callable[[int], bool]]  # (private pool, which streams' requests it takes)


class DeviceCachingAllocator(FreesDropped):
    """The caching allocator of one device (cuda:N or sim:N)."""

    no_caching = False

    def __init__(
        self, device: Device, config: AllocatorConfig | None = None, driver: Driver | None = None
    ) -> None:
        self.device = device
        self.index: int = device.index  # type: ignore[assignment]
        self.driver: Driver = driver or device.driver  # another driver: replays use their own
        self.config = config or default_config()
        self._lock = threading.Lock()
        self._dropped: deque[int] = deque()  # pointers freed by finalizers, freed next call
        self.small = Pool(is_small=True)
        self.large = Pool(is_small=False)
        self._allocated: dict[int, Block] = {}  # ptr -> ALLOCATED block
        self._oversize: set[Block] = set()  # allocated blocks counted in oversize_allocations
        self.lifetimes = Lifetimes(self.driver, self.index)
        self.device_malloc = DeviceMalloc(self.driver, self.index, self._account)
        self.expandable = Expandable(self.driver, self.index, self._account)
        self.stats = DeviceStats()
        self.total_allocated_memory = 0  # bytes reserved from the device (PyTorch's name)
        self.allowed_memory_maximum: int | None = None  # the memory-fraction cap, if set
        self.fraction = 1.0
        self.free_memory_callbacks: list[Callable[[], object]] = []
        self.oom_observers: list[Callable[[int, int, int, int], None]] = []
        self.recorder: Any = None  # the history recorder (vram.memory history), or None
        self.private_pools: dict[tuple[int, int], Any] = {}  # id -> PrivatePool
        self.routes: list[Route] = []  # requests routed to private pools, latest first
        self._gc_on = False
        self._settings(self.config)
        if self.config.per_process_memory_fraction < 1.0:
            self._set_fraction(self.config.per_process_memory_fraction)

    # ====================================================================== public API
    def malloc(self, size: int, stream: int) -> int:
        """Return a device pointer to at least ``size`` bytes usable on ``stream``."""
        lock = self._lock
        lock.acquire()  # (not ``with``: on the hot path that costs twice as much)
        try:
            if self._dropped:
                self._free_dropped()
            if self.lifetimes.waiting:
                self._free_completed()
            block = self._malloc(size, stream)
            if block is not None:
                return block.ptr
            error, report = out_of_memory(self, size, stream)
        finally:
            lock.release()
        dump_on_oom(self, error)  # VRAM_OOM_SNAPSHOT / oom_snapshot (_oom_report), unlocked
        for observer in list(self.oom_observers):  # without the lock, as PyTorch calls them
            try:
                observer(*report)
            except Exception:  # an observer must not hide the OOM itself
                pass
        try:
            raise error
        finally:  # (this frame must not keep the error: its traceback holds the frame, and
            del error  # the caller's frames with the failed attempt's tensors, in a cycle)

    def record_stream(self, ptr: int, stream: int) -> None:
        """The allocation at ``ptr`` is used on ``stream`` (PyTorch's recordStream)."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            block = self._live_block(ptr, "record_stream")
            if stream != block.segment.stream:
                self.lifetimes.note_stream_use(block, stream)

    def record_use(self, ptr: int, stream: int, device: int | None = None) -> None:
        """The last use of ``ptr`` on ``stream`` is queued now (pytorch#181191's record_use);
        ``device``: the stream's device when it is a peer of this one (None: this device).

        While a stream captures a graph, events recorded now could not be waited on later:
        it falls back to record_stream, as the RFC says.
        """
        with self._lock:
            if self._dropped:
                self._free_dropped()
            block = self._live_block(ptr, "record_use")
            peer = device is not None and device != self.index
            if stream == block.segment.stream and not peer:
                return
            if self.lifetimes.captures and not peer:
                self.lifetimes.note_stream_use(block, stream)
            else:
                self.lifetimes.note_use(block, stream, device if peer else None)

    def empty_cache(self) -> None:
        """Give every whole free segment (and free expandable page) back to the device,
        after waiting for pending frees. Synchronizes."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            self._release_cached_blocks()

    def add_peer(self, peer: int) -> None:
        """Device ``peer`` may now access this device's memory (peer access was enabled):
        expandable pages are mapped for it too (device allocations need nothing more)."""
        with self._lock:
            self.expandable.add_peer(peer)

    def set_memory_fraction(self, fraction: float) -> None:
        with self._lock:
            self._set_fraction(fraction)

    def set_config(self, config: AllocatorConfig) -> None:
        with self._lock:
            self._settings(config)
            self._gc_on = bool(
                self.allowed_memory_maximum is not None and config.garbage_collection_threshold
            )

    def memory_stats(self) -> dict[str, int]:
        with self._lock:
            if self._dropped:
                self._free_dropped()
            split = self.config.max_split_size
            return self.stats.as_dict(-1 if split == SIZE_MAX else split)

    def memory_allocated(self) -> int:
        """Bytes of live allocations (rounded sizes), in O(1). The lock is taken only to
        free what finalizers left first: the read itself is of plain ints."""
        if self._dropped:
            with self._lock:
                if self._dropped:
                    self._free_dropped()
        return self.stats.allocated_bytes()

    def reset_peak(self) -> None:
        with self._lock:
            if self._dropped:
                self._free_dropped()
            self.stats.reset_peak()

    def reset_accumulated(self) -> None:
        with self._lock:
            self.stats.reset_accumulated()

    def add_route(self, pool: Any, takes: Callable[[int], bool]) -> Route:
        """Route requests on the streams ``takes(stream)`` accepts to private ``pool``
        (use_mem_pool, graph capture) until ``remove_route``; the latest route wins."""
        with self._lock:
            route = (pool, takes)
            self.routes.insert(0, route)
            if pool.id not in self.private_pools:
                self.private_pools[pool.id] = pool
            return route

    def remove_route(self, route: Route) -> None:
        with self._lock:
            self.routes.remove(route)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the lock, with dropped allocations freed, to read the state (snapshots)."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            yield

    def all_blocks(self) -> list[Block]:
        """Every mapped block of every segment (allocated, pending and free), by address.
        Call under ``locked()``."""
        seen: dict[int, Block] = {}
        for pool in self._all_pools():
            for block in pool.free_blocks():
                seen[id(block)] = block
        for block in self._allocated.values():
            seen[id(block)] = block
        for block in self.lifetimes.event_counts:
            seen[id(block)] = block
        for block in self.lifetimes.deferred:
            seen[id(block)] = block
        return sorted(seen.values(), key=lambda b: b.ptr)

    # ================================================================= the steps of malloc
    def round_size(self, size: int) -> int:
        """PyTorch's round_size: 512 B multiples, or power-of-two divisions when set."""
        if size <= MIN_BLOCK_SIZE:
            return MIN_BLOCK_SIZE
        table = self.config.roundup_power2_divisions
        divisions = table[min(max(size.bit_length() - 21, 0), len(table) - 1)]
        if divisions > 1 and size > MIN_BLOCK_SIZE * divisions:
            return _next_division(size, divisions)
        return (size + MIN_BLOCK_SIZE - 1) & -MIN_BLOCK_SIZE

    @staticmethod
    def allocation_size(size: int) -> int:
        """The segment size a new segment for a rounded request of ``size`` bytes gets."""
        if size <= SMALL_SIZE:
            return SMALL_BUFFER
        if size < MIN_LARGE_ALLOC:
            return LARGE_BUFFER
        return -(-size // ROUND_LARGE) * ROUND_LARGE

    def _malloc(self, orig_size: int, stream: int) -> Block | None:
        """One request: resolve its size and pool, find or grow a block, hand it out."""
        if self._divisions is None:  # the common rounding, without a call
            size = (orig_size + MIN_BLOCK_SIZE - 1) & -MIN_BLOCK_SIZE or MIN_BLOCK_SIZE
        else:
            size = self.round_size(orig_size)
        small = size <= SMALL_SIZE
        if self.routes:
            private = self._route(stream)
            pool = self.small if private is None else private.small
            if not small:
                pool = self.large if private is None else private.large
        else:
            pool = self.small if small else self.large
        block = self._find_free_block(pool, size, stream)
        if block is None:
            block = self._grow(pool, size, stream)
            if block is None:
                return None
        return self._hand_out(block, pool, size, orig_size, stream)

    def _route(self, stream: int) -> Any:
        for private, takes in self.routes:
            if takes(stream):
                return private
        return None

    def _find_free_block(self, pool: Pool, size: int, stream: int) -> Block | None:
        """PyTorch's get_free_block: best fit on ``stream`` with the oversize rules; the
        block stays in the index (``_hand_out`` takes it)."""
        if self._gc_on:
            pool.get_free_blocks_call_count += 1
        block = pool.best_fit(stream, size)
        if block is None:
            return None
        if block.segment.expandable is not None:
            block = self._expandable_choice(pool, block, size, stream)
            if block is None:
                return None
        max_split = self._max_split
        if size < max_split:
            return None if block.size >= max_split else block  # no oversize block for it
        if block.size >= size + self.config.max_non_split_rounding_size:
            return None  # nor a far larger oversize block to an oversize request
        return block

    def _expandable_choice(self, pool: Pool, block: Block, size: int, stream: int) -> Block | None:
        """Among expandable candidates prefer the one that can grow least (PyTorch's rule);
        with expandable segments switched off since, only other blocks may serve."""
        candidates = pool.blocks_from(stream, size)
        if not self.config.expandable_segments:
            return next((b for b in candidates if b.segment.expandable is None), None)

        def growable(b: Block) -> int:  # its size, plus the unmapped stretch after it
            after = b.next
            return b.size + (after.size if after is not None and after.state == UNMAPPED else 0)

        i = 0
        while (
            candidates[i].segment.expandable is not None
            and i + 1 < len(candidates)
            and growable(candidates[i + 1]) < growable(candidates[i])
        ):
            i += 1
        return candidates[i]

    def _hand_out(self, block: Block, pool: Pool, size: int, orig_size: int, stream: int) -> Block:
        """Take ``block`` out of the index, split off its front for the request when worth
        it, and mark it allocated."""
        was_split = block.prev is not None or block.next is not None
        rest = block.size - size
        if pool.is_small or self._split_always:
            split = rest >= MIN_BLOCK_SIZE
        else:
            split = rest > SMALL_SIZE and size < self._max_split
        # inactive_split (free blocks of split segments, not expandable) as PyTorch counts it
        if split:
            split_blocks, split_bytes = (0, -size) if was_split else (1, rest)
        else:
            split_blocks, split_bytes = (-1, -block.size) if was_split else (0, 0)
        pool.take(block, size if split else block.size)
        if block.segment.expandable is not None:
            split_blocks = split_bytes = 0
        block.state = ALLOCATED
        block.requested_size = orig_size
        if block.use_events is not None:
            self.lifetimes.wait_uses(block, stream)
        self._allocated[block.ptr] = block
        self.stats.alloc(pool.is_small, block.size, orig_size, split_blocks, split_bytes)
        if block.size >= self._max_split:
            self._oversize.add(block)
            self.stats.oversize_allocations.increase(1)
        if self.recorder is not None:
            block.context = self._trace("alloc", block.ptr, orig_size, stream)
        return block

    # =============================================================== no block fits: grow
    def _grow(self, pool: Pool, size: int, stream: int) -> Block | None:
        """The slow path (PyTorch's ladder): a FREE block in the index, or None when even
        releasing everything cached leaves no room."""
        if self.free_memory_callbacks and self._run_free_memory_callbacks():
            block = self._find_free_block(pool, size, stream)
            if block is not None:
                return block
        if self.config.cross_stream_reuse and not self.lifetimes.captures:
            # (not while a stream captures: a capturing stream cannot wait on another's events)
            block = self._take_from_other_stream(pool, size, stream)
            if block is not None:
                return block
        if self._gc_on:
            self._garbage_collect()
        alloc_size = self.allocation_size(size)
        block = self._new_memory(pool, size, alloc_size, stream)
        if block is None and self._release_available_cached_blocks(pool, size, stream):
            block = self._new_memory(pool, size, alloc_size, stream)
        if block is None and not self.lifetimes.captures:
            self._release_cached_blocks()
            self.stats.num_alloc_retries += 1
            block = self._new_memory(pool, size, alloc_size, stream)
        return block

    def _run_free_memory_callbacks(self) -> bool:
        """Call the free-memory callbacks (without the lock: they may free memory); True if
        one says it freed some. A callback that raises is reported and counts as False."""
        freed = False
        self._lock.release()
        try:
            for callback in list(self.free_memory_callbacks):
                try:
                    freed = bool(callback()) or freed
                except Exception as exc:
                    warnings.warn(
                        f"free-memory callback {callback!r} raised {exc!r}; ignored",
                        RuntimeWarning,
                        stacklevel=2,
                    )
        finally:
            self._lock.acquire()
        if self._dropped:
            self._free_dropped()
        return freed

    def _take_from_other_stream(self, pool: Pool, size: int, stream: int) -> Block | None:
        """cross_stream_reuse: the best fit among other streams' whole free segments.

        Only whole (unsplit, not expandable) segments move, so every block of a segment
        keeps one stream and segments still merge and release as in PyTorch. The new
        stream waits on the event recorded at the block's free; a block freed before the
        option was on has none, and gets one recorded now instead.
        """
        max_split = self.config.max_split_size
        best = None
        for other in pool.streams():
            if other == stream:
                continue
            for candidate in pool.blocks_from(other, size):
                if candidate.segment.expandable is None and not candidate.is_split():
                    if not (size < max_split <= candidate.size) and (
                        best is None or (candidate.size, candidate.ptr) < (best.size, best.ptr)
                    ):
                        best = candidate
                    break
        if best is None:
            return None
        segment = best.segment
        if not any(e.stream == segment.stream for e in best.use_events or ()):
            self.lifetimes.note_free(best, segment.stream)  # everything queued there so far
        pool.remove(best)
        segment.stream = stream
        pool.insert(best)
        return best

    def _new_memory(self, pool: Pool, size: int, alloc_size: int, stream: int) -> Block | None:
        """PyTorch's alloc_block: new memory from the pool's segment source, as a FREE block
        in the index; None when the device (or the memory fraction) has no room. With
        expandable segments the cap is checked against the pages that would be mapped."""
        limit = self.allowed_memory_maximum
        if self.config.expandable_segments and pool.owner is None:
            page = SMALL_BUFFER if pool.is_small else self.config.expandable_page_size
            budget = None if limit is None else limit - self.total_allocated_memory
            return self.expandable.grow(pool, stream, size, page, budget)
        if limit is not None and self.total_allocated_memory + alloc_size > limit:
            return None
        return self.device_malloc.grow(pool, stream, alloc_size)

    def _account(self, pool: Pool, segment: Segment, start: int, nbytes: int, action: str) -> None:
        """What the segment sources reserve (nbytes > 0) and give back (< 0)."""
        stats = self.stats
        whole = action in ("segment_alloc", "segment_free")
        self.total_allocated_memory += nbytes
        if nbytes > 0:
            stats.segment_added(pool.is_small, nbytes, whole)
            stats.num_device_alloc += 1
            if whole and pool.owner is not None:
                pool.owner.segment_count += 1
            if whole and nbytes >= self.config.max_split_size:
                segment.oversize = True
                stats.oversize_segments.increase(1)
            context = self._trace(action, start, nbytes, segment.stream)
            if whole:
                segment.context = context
        else:
            stats.segment_removed(pool.is_small, -nbytes, whole)
            stats.num_device_free += 1
            if whole and pool.owner is not None:
                pool.owner.segment_count -= 1
            if whole and segment.oversize:
                stats.oversize_segments.decrease(1)
            self._trace(action, start, -nbytes, segment.stream, segment.context)

    # =================================================================== the steps of free
    def _free(self, ptr: int) -> None:
        block = self._allocated.get(ptr)
        if block is None:
            raise ValueError(f"ptr: {ptr:#x} is not a live allocation of {self.device}")
        lifetimes = self.lifetimes
        segment = block.segment
        if self._note_frees:
            lifetimes.note_free(block, segment.stream)
        pending = bool(lifetimes.stream_uses) and lifetimes.free_waits(block)
        del self._allocated[ptr]  # (the event records above may raise: nothing changed yet)
        if self._oversize and block in self._oversize:
            self._oversize.remove(block)
            self.stats.oversize_allocations.decrease(1)
        if self.recorder is not None:
            self._trace("free_requested", block.ptr, block.requested_size, segment.stream)
        if pending:
            block.state = PENDING
            self.stats.free_requested(segment.pool.is_small, block.size, block.requested_size)
            return
        size, requested = block.size, block.requested_size
        split_blocks, split_bytes = self._free_block(block)
        self.stats.free(segment.pool.is_small, size, requested, split_blocks, split_bytes)
        if block.use_events:
            lifetimes.prune(block)

    def _free_block(self, block: Block) -> tuple[int, int]:
        """Return a block whose uses are over to its pool, merged with free neighbours;
        the net change of inactive_split (count, bytes), as PyTorch counts it."""
        pool = block.segment.pool
        if self.recorder is not None:
            self._trace("free_completed", block.ptr, block.requested_size, block.segment.stream)
            block.context = None
        size = block.size
        absorbed = pool.give(block)
        if block.segment.expandable is not None:
            return 0, 0
        split_blocks, split_bytes = -absorbed, size - block.size  # the neighbours it took
        if block.prev is not None or block.next is not None:
            split_blocks += 1
            split_bytes += block.size
        return split_blocks, split_bytes

    def _free_completed(self) -> None:
        """Return the PENDING blocks whose record_stream events have completed."""
        for block in self.lifetimes.completed():
            self._complete(block)

    def _complete(self, block: Block) -> None:
        size, requested = block.size, block.requested_size
        split_blocks, split_bytes = self._free_block(block)
        self.stats.free_completed(
            block.segment.pool.is_small, size, requested, split_blocks, split_bytes
        )

    def _live_block(self, ptr: int, what: str) -> Block:
        block = self._allocated.get(ptr)
        if block is None:
            raise ValueError(f"{what}: ptr {ptr:#x} is not a live allocation of {self.device}")
        return block

    # ======================================================= giving memory back to the device
    def _give_back(self, block: Block) -> None:
        """Give a FREE block's memory back to the device: a whole segment, or the whole
        free pages of an expandable one. Waits for the block's record_use events first."""
        if block.use_events:
            self.lifetimes.wait_for_uses(block)
        block.segment.pool.remove(block)
        if block.segment.expandable is None:
            self.device_malloc.release(block)
        else:
            self.driver.stream_synchronize(block.segment.stream)  # unmapping does not wait
            self.expandable.release(block)

    def _release_pool(self, pool: Pool) -> None:
        """Release every whole free segment of the pool; unmap free expandable pages."""
        for block in pool.free_blocks():
            if block.segment.expandable is not None or not block.is_split():
                self._give_back(block)

    def _release_cached_blocks(self) -> None:
        """Wait for pending frees, then give every whole free segment back. Synchronizes."""
        if self.lifetimes.captures:
            return
        self.stats.num_sync_all_streams += 1
        for block in self.lifetimes.synchronize():
            self._complete(block)
        self._release_pool(self.large)
        self._release_pool(self.small)
        for pool_id, private in list(self.private_pools.items()):
            if private.freeable:
                self._release_pool(private.large)
                self._release_pool(private.small)
                if private.segment_count == 0:
                    del self.private_pools[pool_id]

    def _release_available_cached_blocks(self, pool: Pool, size: int, stream: int) -> bool:
        """Release one oversize free block that covers the request, or several, largest
        first. Only whole segments can go: vram passes over split or expandable blocks
        (PyTorch meets none here unless max_split_size changed since they were cut)."""
        max_split = self.config.max_split_size
        if max_split == SIZE_MAX:
            return False
        want = max(size, max_split)
        blocks = pool.blocks_from(stream)
        above = [b for b in blocks if b.size >= want]
        for block in above:
            if _whole_segment(block):
                self._give_back(block)
                return True
        released = 0
        for block in reversed([b for b in blocks if b.size < want]):
            if released >= want or block.size < max_split:
                break
            if _whole_segment(block):
                released += block.size
                self._give_back(block)
        return released >= want

    def _garbage_collect(self) -> None:
        """PyTorch's garbage_collect_cached_blocks: once reserved passes the threshold,
        release the oldest whole free large segments (in passes, every one at least as old
        as the mean) until the excess is reclaimed."""
        limit = self.allowed_memory_maximum
        threshold = int(self.config.garbage_collection_threshold * limit)  # type: ignore[operator]
        if self.total_allocated_memory <= threshold:
            return
        target = self.total_allocated_memory - threshold
        pool = self.large
        calls = pool.get_free_blocks_call_count
        freeable = [b for b in pool.free_blocks() if _whole_segment(b)]
        total_age = sum(calls - b.gc_age for b in freeable)
        count, reclaimed, freed_one = len(freeable), 0, True
        while reclaimed < target and freed_one and count > 0:
            threshold_age = total_age / count
            freed_one = False
            for block in pool.free_blocks():
                if _whole_segment(block) and calls - block.gc_age >= threshold_age:
                    freed_one = True
                    reclaimed += block.size
                    total_age -= calls - block.gc_age
                    count -= 1
                    self._give_back(block)

    # ====================================================================== the rest
    def _trace(self, action: str, addr: int, size: int, stream: int, context: Any = None) -> Any:
        recorder = self.recorder
        if recorder is None:
            return None
        return recorder.record(self, action, addr, size, stream, context)

    def _settings(self, config: AllocatorConfig) -> None:
        """Take ``config``, and the few of its values the cached path reads on every call."""
        self.config = config
        self._divisions = _divisions(config)
        self._max_split = config.max_split_size
        self._split_always = config.expandable_segments  # rest >= 512 B splits, as small
        self._note_frees = config.cross_stream_reuse

    def _set_fraction(self, fraction: float) -> None:
        """PyTorch's setMemoryFraction: a share of the total that cudaMemGetInfo reports now."""
        total = self.driver.mem_get_info(self.index)[1]
        self.fraction = fraction
        self.allowed_memory_maximum = int(fraction * total)
        self._gc_on = bool(self.config.garbage_collection_threshold)

    def _all_pools(self) -> list[Pool]:
        pools = [self.small, self.large]
        for private in self.private_pools.values():
            pools += [private.small, private.large]
        return pools


def _divisions(config: AllocatorConfig) -> list[int] | None:
    """The roundup_power2_divisions table when it rounds anything, else None."""
    table = config.roundup_power2_divisions
    return table if any(d > 1 for d in table) else None


def _whole_segment(block: Block) -> bool:
    """A free block that is a whole device allocation: release may cudaFree it."""
    return block.segment.expandable is None and block.prev is None and block.next is None


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
