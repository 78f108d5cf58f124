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
  source (``_sources``: device malloc or expandable pages; a capturing private pool grows
  in the relaxed capture mode); release one oversize free block (or several) and retry;
  wait for pending frees, release every whole free segment and retry (num_alloc_retries);
  call the OOM observers and raise OutOfMemoryError.

The parts: ``_pool`` (segments, blocks, the free-block index), ``_lifetimes`` (events),
``_sources`` (where memory comes from; each segment carries its source), ``_stats`` (the
counters). This module is the policy that drives them: ``malloc`` and ``_free`` are the
one place each decision is made, for every configuration and for the uncached allocator
(Note [The cached path]).

Extension points (Note [Hooks]): other modules observe or steer the allocator only through
what it declares here, called at one named place each; none assigns to an allocator.

Note [Taking a dropped block back]
A dropped tensor's pointer waits in ``_dropped`` until the next call. When that call is a
malloc of the block's own rounded size, on its stream and pool, and nothing has entered or
left the stream's free-block index since ``Pool.take`` handed the block out of the free
block that best fit chose (the index's ``version`` is the block's ``mark``), then freeing
it merges back into exactly that free block (split off it, with the rest, which nothing
has touched), and the malloc's best fit chooses that block again and cuts it in the same
place: the answer is the block itself. A block with no FREE neighbour is taken back
whatever the index's version: its free leaves it alone, a FREE block of just the request's
size, and best fit answers the lowest FREE block of that size, which is this one when its
size's heap holds no address below it (a stale entry there only makes the check refuse).
When several blocks were dropped, the others are freed first, in their order, as the
general path frees them, and the last is the one checked: its free is the one that comes
right before the malloc. ``malloc`` hands it out again at once, with the stats of the free
and of the malloc (``DeviceStats.reuse``), and the pool is left as the two steps would
leave it. When two were dropped and the last is not taken back (a chain such as
``y = relu(addmm(b, y, w))``: the old y's free merges with the free rest after it, and
best fit answers the addmm result dropped before it), one of the two may be
(``_take_back_pair``):
- the first, as a hole with no free or dropped neighbour, once the last is freed before
  it. The two frees then run in the other order, which leaves the same blocks and sums,
  and the same peaks when neither free lowers a peaked count: a free only lowers active,
  allocated and requested (falling counts: any order of two falls passes no peak), and
  raises inactive_split, unless it merges three blocks into one or makes a segment whole
  (on an expandable segment it moves nothing). So the last must keep a neighbour that
  stays allocated; the first has none free, so its own free only raises it (or, a whole
  segment, moves nothing).
- the lower of two next to each other, neither of whose outer neighbours is free: the
  frees merge them, and best fit (checked in the index first) cuts the lower one off the
  front, the higher one its free rest; the higher is freed, then the lower taken back as
  a block split off its free rest. The higher one must have no record_use events: the
  merged block would pass them to the lower one's next owner.
It is a cache of the simple path's answer, taken only where nothing else could decide
differently. A block has no mark (-1: it is never taken back) when it came from
growing (best fit did not choose it), from an expandable segment, or is oversize; it loses
its mark at record_use and record_stream (and when it waited for record_use events at its
malloc); a settings change forgets every mark; and no block is taken back while frees are
pending, nor while the event hook, the block finder, garbage collection, cross-stream
reuse or no_caching is on (``_takes_back``, set where they are).
tests/memory/test_differential.py checks it against the free and the malloc.

Locking: one lock per allocator (``_lock``). Every public method takes it and never calls
another public method, except those marked "call under ``locked()``", which run inside
the caller's ``with allocator.locked():``. Finalizers never take it: a dropped tensor's
storage pushes its pointer onto ``_dropped`` (``free_later``: an atomic deque append) and
the next call of any public method frees it first; ``free`` does the same when the lock is
busy. The lock is let go only around user code (free-memory callbacks, OOM observers), at
points where the call has not changed anything yet. A finalizer must not allocate (malloc
would wait on the lock its own thread holds).

``VRAM_NO_CACHING=1`` (or PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING, read when an allocator is
made) gives an ``UncachedAllocator`` (``_uncached``): the same allocator with ``no_caching``
set, whose requests are device allocations of their own, given back at free.
``_registry`` makes one allocator per device; ``_oom_report`` registers what words the
OutOfMemoryError and says why it happened (``register_oom_report``).

Note [The cached path]
A request served from the cache costs a handful of frames: ``malloc`` (rounding, the pool,
the split rule, the bookkeeping of the hand-out), ``Pool.take`` (best fit's search, the
removal and the split, with the pool's invariants asserted there; it says how
inactive_split changed) and ``DeviceStats.alloc``; a free, ``_free`` and ``Pool.give`` and
``DeviceStats.free``. ``_find_free_block`` decides what best fit's answer is worth (the
find hook, GC's count, expandable segments, the oversize rules); malloc lets ``take``
search itself only where none of them can change the answer (``_plain_fit``: no hook, no
GC, no max_split_size, and no expandable segment made yet, since one outlives the
setting), so the search is decided there. Everything else
(routes, expandable segments, record_use events, history, the uncached allocator, growing)
branches off from there and comes back, so no configuration has a path of its own that
could decide differently.
tests/memory/test_differential.py replays every bundled trace under every configuration
against a reference built from the pool's primitives.

Note [Hooks]
- ``set_recorder(recorder)``: ``recorder.record(allocator, action, addr, size, stream,
  context)`` for every alloc, free, segment and oom event (history, count_device_calls,
  the stream sanitizer hang on one ``_history.Recorder``); at ``_trace``.
- ``add_reserve_hook(hook)``: ``hook(pool, segment, start, nbytes, action)`` after memory
  is reserved (nbytes > 0) or given back (replay's segment sizes); at ``_account``.
- ``set_block_finder(finder)``: ``finder(pool, size, stream)``, a FREE block to hand out
  before best fit is asked, or None (the stream sanitizer's early reuse); at
  ``_find_free_block``, which every search of the cache goes through.
- ``set_drop_hook(hook)``: ``hook(ptr)`` when a finalizer drops ``ptr`` (no lock may be
  taken; the sanitizer notes the stack); at ``free_later``.
- Free-memory callbacks and OOM observers (PyTorch's), private pools and graph capture
  (``add_private_pool``, ``begin_allocate_to_pool``, ``end_allocate_to_pool``,
  ``release_pool``: PyTorch's names; the capture's half of the lifetime policy comes in
  as an argument), and ``register_oom_report`` (module-wide: the OOM message and report).

Note [free_later without a frame]
Every tensor's storage hands its pointer to ``free_later`` when it is dropped. Without a
drop hook that is all the method does, so an allocator's ``free_later`` is then its
deque's own ``append`` (a C call, no Python frame), an attribute of the instance set in
``__init__`` and by ``set_drop_hook``, the one place that changes whether a hook runs.
"""

from __future__ import annotations

import threading
import warnings
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._device import Device
from .._errors import OutOfMemoryError
from .._units import format_size
from ..driver import Driver
from ._allocation import FreesDropped
from ._config import SIZE_MAX, AllocatorConfig, default_config
from ._lifetimes import Lifetimes
from ._pool import (
    ALLOCATED,
    FREE,
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
    PrivatePool,
    Segment,
)
from ._sources import DeviceMalloc, Expandable
from ._stats import DeviceStats

__all__ = ["DeviceCachingAllocator", "register_oom_report"]

Route = tuple[Any, Callable[[int], bool]]  # (private pool, which streams' requests it takes)
# (allocator, size, stream) -> (the OutOfMemoryError, the OOM observers' arguments)
OomBuilder = Callable[[Any, int, int], tuple[OutOfMemoryError, tuple]]
OomAfter = Callable[[Any, BaseException], None]  # (allocator, error), without the lock


def _plain_oom(allocator: DeviceCachingAllocator, size: int, stream: int) -> tuple:
    """The OutOfMemoryError when no report is registered: PyTorch's first sentence."""
    alloc_size = allocator.allocation_size(allocator.round_size(size))
    free, total = allocator.driver.mem_get_info(allocator.index)
    error = OutOfMemoryError(
        f"{allocator.device.type.upper()} out of memory. Tried to allocate "
        f"{format_size(alloc_size)}."
    )
    limit = allocator.allowed_memory_maximum
    return error, (allocator.index, alloc_size, total if limit is None else limit, free)


_oom: list[Any] = [_plain_oom, None]  # [builder (under the lock), after (unlocked) or None]


def register_oom_report(build: OomBuilder, after: OomAfter | None = None) -> None:
    """Word every allocator's OutOfMemoryError with ``build(allocator, size, stream)``
    (called under the allocator's lock, after the OOM is counted and traced: it returns the
    error and the OOM observers' arguments), and call ``after(allocator, error)`` once the
    lock is let go (``_oom_report`` registers itself here, so this module needs none of it)."""
    _oom[:] = [build, after]


class DeviceCachingAllocator(FreesDropped):
    """The caching allocator of one device (cuda:N or sim:N)."""

    no_caching = False  # the UncachedAllocator's: every request a device allocation of its own

    def __init__(
        self, device: Device, config: AllocatorConfig | None = None, driver: Driver | None = None
    ) -> None:
        self.device = device
        self.index: int = device.index  # type: ignore[assignment]
        self.driver: Driver = driver or device.driver  # another driver: replays use their own
        self.config = config or default_config()
        self.no_caching: bool = type(self).no_caching  # (an instance attribute: read per free)
        self._lock = threading.Lock()
        self._dropped: deque[int] = deque()  # pointers freed by finalizers, freed next call
        self.free_later = self._dropped.append  # (Note [free_later without a frame])
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
        self.recorder: Any = None  # the event hook (Note [Hooks]), or None
        self._reserve_hooks: tuple[Callable[..., None], ...] = ()
        self._finder: Callable[[Pool, int, int], Block | None] | None = None
        self._drop_hook: Callable[[int], None] | None = None
        self.private_pools: dict[tuple[int, int], PrivatePool] = {}  # id -> private pool
        self.routes: list[Route] = []  # requests routed to private pools, latest first
        self._gc_on = False
        self._takes_back = False  # (Note [Taking a dropped block back]; _settings sets it)
        self._expandable_made = False  # an expandable segment was made (it outlives the setting)
        self._plain_fit = True  # best fit's answer is _find_free_block's: malloc asks it itself
        self._settings(self.config)
        if self.config.per_process_memory_fraction < 1.0:
            self._set_fraction(self.config.per_process_memory_fraction)

    # ====================================================================== public API
    def malloc(self, size: int, stream: int) -> int:
        """Return a device pointer to at least ``size`` bytes usable on ``stream``.

        The one place a request is decided (Note [The cached path]): the size, the pool, a
        free block or new memory, the split, and the bookkeeping of the hand-out.
        """
        lock = self._lock
        lock.acquire()  # (not ``with``: on the hot path that costs twice as much)
        try:
            # the size and the pool
            if self._divisions is None:  # the common rounding, without a call
                rounded = (size + MIN_BLOCK_SIZE - 1) & -MIN_BLOCK_SIZE or MIN_BLOCK_SIZE
            else:
                rounded = self.round_size(size)
            small = rounded <= SMALL_SIZE
            if self.routes:
                private = self._route(stream)
                if private is None:
                    pool = self.small if small else self.large
                else:
                    pool = private.small if small else private.large
            else:
                pool = self.small if small else self.large
            # what finalizers dropped first (Note [Taking a dropped block back])
            dropped = self._dropped
            lifetimes = self.lifetimes
            if dropped:
                if self._takes_back:
                    ptr = dropped[-1]  # (the last dropped: its free comes right before this)
                    block = self._allocated.get(ptr)  # (None for work ``later`` left)
                    if block is not None and block.size == rounded and block.mark != -1:
                        segment = block.segment
                        rest, before = block.next, block.prev
                        if (
                            segment.pool is pool
                            and segment.stream == stream
                            and (
                                len(dropped) == 1
                                or (  # (a neighbour free, or freed first: the general path)
                                    (rest is None or rest.state != FREE and rest.ptr not in dropped)
                                    and (
                                        before is None
                                        or before.state != FREE
                                        and before.ptr not in dropped
                                    )
                                )
                            )
                        ):
                            if len(dropped) > 1:
                                self._free_dropped(1)  # the others first, in their order
                            found = pool.index[stream]
                            left = -1  # (the general path, unless a rule below answers)
                            if lifetimes.waiting or len(dropped) != 1 or dropped[0] != ptr:
                                pass  # (frees wait for events, or the others' work dropped more)
                            elif rest is not None and rest.state == FREE:  # split off it
                                if found.version == block.mark:  # the index as take left it
                                    left, whole = rest.size, before is None and rest.next is None
                            elif before is None or before.state != FREE:  # no free neighbour:
                                heap = found.heaps.get(rounded)  # the lowest of its size
                                if heap is None or heap[0] > ptr:
                                    left, whole = 0, before is None and rest is None
                            if left >= 0:  # the take-back: the free and the malloc's answer
                                dropped.popleft()
                                self.stats.reuse(
                                    small, rounded, block.requested_size, size, left, whole
                                )
                                block.requested_size = size
                                return ptr
                    if len(dropped) == 2:  # (the last was not taken back: maybe the first)
                        ptr = self._take_back_pair(pool, stream, rounded, size, small)
                        if ptr:
                            return ptr
                self._free_dropped()
            if lifetimes.waiting:
                self._free_completed()
            # the split rule: the request takes the front of a block, and the rest stays
            # free when it leaves at least min_rest bytes
            if small or self._split_always:
                min_rest = MIN_BLOCK_SIZE
            elif rounded < self._max_split:
                min_rest = SMALL_SIZE + 1
            else:
                min_rest = _NEVER  # (an oversize request takes its block whole)
            # a free block, or new memory
            if self._plain_fit:  # best fit's answer is _find_free_block's (Note [The cached path])
                taken = pool.take(None, rounded, min_rest, stream)
            else:
                block = self._find_free_block(pool, rounded, stream)
                taken = None if block is None else pool.take(block, rounded, min_rest)
            grown = taken is None
            if grown:
                block = self._grow(pool, rounded, stream)
                if block is None:
                    self.stats.num_ooms += 1
                    if self.recorder is not None:
                        free = self.driver.mem_get_info(self.index)[0]
                        self._trace("oom", free, rounded, stream)
                    error, observed = _oom[0](self, size, stream)
                else:
                    taken = pool.take(block, rounded, min_rest)
            if taken is not None:
                block, split_blocks, split_bytes = taken
                keep = block.size
                if grown:  # (not best fit's answer: nothing to take back, see the Note)
                    block.mark = -1
                block.state = ALLOCATED
                block.requested_size = size
                ptr = block.ptr
                if block.use_events is not None:
                    block.mark = -1
                    try:
                        lifetimes.wait_uses(block, stream)
                    except BaseException:  # (the driver refused a wait: the block goes back)
                        pool.give(block)
                        raise
                self._allocated[ptr] = block
                self.stats.alloc(small, keep, size, split_blocks, split_bytes)
                if self._oversize_rules and keep >= self._max_split:
                    block.mark = -1
                    self._oversize.add(block)
                    self.stats.oversize_allocations.increase(1)
                if self.recorder is not None:
                    block.context = self._trace("alloc", ptr, size, stream)
                return ptr
        finally:
            lock.release()
        after = _oom[1]
        if after is not None:
            after(self, error)  # (VRAM_OOM_SNAPSHOT: _oom_report's, without the lock)
        for observer in list(self.oom_observers):  # without the lock, as PyTorch calls them
            try:
                observer(*observed)
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
            block.mark = -1  # (no take-back for it: Note [Taking a dropped block back])
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
            block.mark = -1
            peer = device is not None and device != self.index
            if stream == block.segment.stream and not peer:
                return
            if self.lifetimes.captures and not peer:
                self.lifetimes.note_stream_use(block, stream)
            else:
                self.lifetimes.note_use(block, stream, device if peer else None)

    def free_later(self, ptr: int) -> None:
        """Free ``ptr`` at the allocator's next call: for finalizers, which must not take
        the lock (the allocator may be inside a call on this very thread). An instance's
        ``free_later`` is the deque's own append while no drop hook is set (Note
        [free_later without a frame]); this is the one with the hook."""
        hook = self._drop_hook
        if hook is not None:
            hook(ptr)
        self._dropped.append(ptr)

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
            self._hooks_changed()

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
        with self.locked():
            return self._add_route(pool, takes)

    def remove_route(self, route: Route) -> None:
        with self.locked():
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

    # ===================================================== extension points (Note [Hooks])
    def set_recorder(self, recorder: Any) -> None:
        """The event hook: ``recorder.record(...)`` at every event, or None (no hook: the
        events cost one test each). Call under ``locked()``."""
        self.recorder = recorder
        self._hooks_changed()

    def add_reserve_hook(self, hook: Callable[..., None]) -> None:
        """Call ``hook(pool, segment, start, nbytes, action)`` after memory is reserved from
        the device (nbytes > 0) or given back (nbytes < 0)."""
        with self.locked():
            self._reserve_hooks = (*self._reserve_hooks, hook)

    def remove_reserve_hook(self, hook: Callable[..., None]) -> None:
        with self.locked():
            self._reserve_hooks = tuple(h for h in self._reserve_hooks if h is not hook)

    def set_block_finder(self, finder: Callable[[Pool, int, int], Block | None] | None) -> None:
        """Ask ``finder(pool, size, stream)`` for a FREE block of ``pool`` before best fit
        (a block it returns must fit: at least ``size`` bytes, of ``stream``, in the index);
        None: best fit alone. Call under ``locked()``."""
        self._finder = finder
        self._hooks_changed()

    def set_drop_hook(self, hook: Callable[[int], None] | None) -> None:
        """Call ``hook(ptr)`` when a finalizer drops ``ptr`` (it runs in the finalizer: it
        must not take a lock the allocator may hold). Call under ``locked()``."""
        self._drop_hook = hook
        if hook is None:  # (Note [free_later without a frame])
            self.free_later = self._dropped.append
        else:  # the class's method, which runs the hook
            vars(self).pop("free_later", None)

    def add_free_memory_callback(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` before the allocator grows (without the lock)."""
        with self.locked():
            self.free_memory_callbacks.append(callback)

    def remove_free_memory_callback(self, callback: Callable[[], object]) -> None:
        """Stop calling ``callback`` (ValueError if it was not added)."""
        with self.locked():
            if callback not in self.free_memory_callbacks:
                raise ValueError(f"callback: {callback!r} is not registered on {self.device}")
            self.free_memory_callbacks.remove(callback)

    def attach_oom_observer(self, observer: Callable[[int, int, int, int], None]) -> None:
        """Call ``observer(device, alloc_size, device_limit, device_free)`` before an OOM
        raises (without the lock)."""
        with self.locked():
            self.oom_observers.append(observer)

    def add_private_pool(self, private: PrivatePool) -> None:
        """Make ``private`` (a MemPool's) one of this allocator's private pools."""
        with self.locked():
            self.private_pools[private.id] = private

    def begin_allocate_to_pool(
        self,
        pool_id: tuple[int, int],
        takes: Callable[[int], bool],
        capture: Callable[[Driver], Any],
    ) -> Route:
        """PyTorch's beginAllocateToPool: requests on the streams ``takes(stream)`` accepts go
        to private pool ``pool_id`` (made, or shared: its use count grows), and the
        allocator keeps to capture's rules until ``end_allocate_to_pool``; ``capture(driver)``
        makes the capture's half of the lifetime policy (``_graph_pools.GraphCapture``)
        when none is made yet. Returns the route to end.

        Free blocks of the pool still waiting on record_use events are waited for now (a
        capturing stream cannot wait on an event recorded outside its capture). Synchronizes
        on those events only.
        """
        with self.locked():
            private = self.private_pools.get(pool_id)
            if private is not None and private.captures:
                raise RuntimeError(
                    f"pool {pool_id}: another capture is recording into this pool now; "
                    "captures that share a pool must run one after another"
                )
            if private is None:
                private = self.private_pools[pool_id] = PrivatePool(pool_id)
            elif private.freeable:  # every holder was gone: the pool lives again
                private.use_count, private.freeable = 1, False
            else:
                private.use_count += 1
            lifetimes = self.lifetimes
            for pool in (private.small, private.large):
                for block in pool.free_blocks():
                    if block.use_events:
                        lifetimes.wait_for_uses(block)
                        block.use_events = None
            private.captures += 1
            if lifetimes.capture is None:
                lifetimes.capture = capture(self.driver)
            lifetimes.capture.reuse = self.config.graph_capture_record_stream_reuse
            lifetimes.captures += 1
            return self._add_route(private, takes)

    def end_allocate_to_pool(self, route: Route) -> None:
        """PyTorch's endAllocateToPool: the capture's requests go where they went before."""
        with self.locked():
            self.routes.remove(route)
            route[0].captures -= 1
            lifetimes = self.lifetimes
            lifetimes.captures -= 1
            if lifetimes.captures == 0:
                lifetimes.capture.captures_ended(lifetimes.deferred)

    def release_pool(self, pool_id: tuple[int, int]) -> None:
        """PyTorch's releasePool: one holder of the pool is gone; with none left,
        empty_cache() may give its free segments back."""
        with self.locked():
            self._release_holder(pool_id)

    def release_pool_later(self, pool_id: tuple[int, int]) -> None:
        """``release_pool`` for finalizers: done at the next call (no lock here)."""
        self.later(lambda: self._release_holder(pool_id))

    def pool_use_count(self, pool_id: tuple[int, int]) -> int:
        """How many holders private pool ``pool_id`` has (0 when it is gone or freeable)."""
        with self.locked():
            private = self.private_pools.get(pool_id)
            return 0 if private is None or private.freeable else private.use_count

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

    def _release_holder(self, pool_id: tuple[int, int]) -> None:
        private = self.private_pools.get(pool_id)
        if private is not None and not private.freeable:
            private.release_one()

    def _route(self, stream: int) -> Any:
        for private, takes in self.routes:
            if takes(stream):
                return private
        return None

    def _add_route(self, pool: Any, takes: Callable[[int], bool]) -> Route:
        route = (pool, takes)
        self.routes.insert(0, route)
        if pool.id not in self.private_pools:
            self.private_pools[pool.id] = pool
        return route

    def _find_free_block(self, pool: Pool, size: int, stream: int) -> Block | None:
        """PyTorch's get_free_block: the block finder hook's choice, else best fit on
        ``stream`` with the oversize rules; the block stays in the index (malloc takes it).
        Every search of the cache comes here."""
        if self._gc_on:
            pool.get_free_blocks_call_count += 1
        finder = self._finder
        if finder is not None:
            block = finder(pool, size, stream)
            if block is not None:
                return block
        block = pool.best_fit(stream, size)
        if block is None:
            return None
        if block.segment.source.expandable:
            block = self._expandable_choice(pool, block, size, stream)
            if block is None:
                return None
        if not self._oversize_rules:  # (no max_split_size: no block is oversize)
            return block
        max_split = self._max_split
        if size < max_split:
            return None if block.size >= max_split else block  # no oversize block for it
        if block.size >= size + self._non_split:
            return None  # nor a far larger oversize block to an oversize request
        return block

    def _expandable_choice(self, pool: Pool, block: Block, size: int, stream: int) -> Block | None:
        """Among expandable candidates prefer the one that can grow least (PyTorch's rule);
        with expandable segments switched off since, only other blocks may serve."""
        candidates = pool.blocks_from(stream, size)
        if not self.config.expandable_segments:
            return next((b for b in candidates if not b.segment.source.expandable), None)

        def growable(b: Block) -> int:  # its size, plus the unmapped stretch after it
            after = b.next
            return b.size + (after.size if after is not None and after.state == UNMAPPED else 0)

        i = 0
        while (
            candidates[i].segment.source.expandable
            and i + 1 < len(candidates)
            and growable(candidates[i + 1]) < growable(candidates[i])
        ):
            i += 1
        return candidates[i]

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
                if candidate.segment.source.whole(candidate):
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
        expandable segments the cap is checked against the pages that would be mapped. A
        private pool that a graph captures into grows in the relaxed capture mode (PyTorch's
        cudaMallocMaybeCapturing): a capture may not forbid the allocator its own growth."""
        limit = self.allowed_memory_maximum
        if self._expandable_on and pool.owner is None:
            if not self._expandable_made:
                self._expandable_made = True
                self._hooks_changed()
            page = SMALL_BUFFER if pool.is_small else self.config.expandable_page_size
            budget = None if limit is None else limit - self.total_allocated_memory
            return self.expandable.grow(pool, stream, size, page, budget)
        if limit is not None and self.total_allocated_memory + alloc_size > limit:
            return None
        owner = pool.owner
        if owner is None or not owner.captures:
            return self.device_malloc.grow(pool, stream, alloc_size)
        driver = self.driver
        if driver.stream_capture_info(stream).status != "active":
            return self.device_malloc.grow(pool, stream, alloc_size)
        previous = driver.thread_exchange_capture_mode("relaxed")
        try:
            return self.device_malloc.grow(pool, stream, alloc_size)
        finally:
            driver.thread_exchange_capture_mode(previous)

    def _account(self, pool: Pool, segment: Segment, start: int, nbytes: int, action: str) -> None:
        """What the segment sources reserve (nbytes > 0) and give back (< 0); then the
        reserve hooks."""
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
        for hook in self._reserve_hooks:
            hook(pool, segment, start, nbytes, action)

    def _take_back_pair(self, pool: Pool, stream: int, rounded: int, size: int, small: bool) -> int:
        """Two blocks dropped and the last not taken back alone: one of the two is, when best
        fit answers it once both are free and no peak can tell the difference (Note [Taking a
        dropped block back]). 0: the general path decides (the last may be freed already:
        the order of the two frees cannot matter then either)."""
        dropped, lifetimes = self._dropped, self.lifetimes
        first, last = dropped
        block, other = self._allocated.get(first), self._allocated.get(last)
        if (
            block is None
            or other is None
            or lifetimes.waiting
            or lifetimes.stream_uses
            or block.segment.pool is not pool
            or block.segment.stream != stream
        ):
            return 0
        if block.next is other or other.next is block:  # (their frees merge them)
            return self._take_back_merged(pool, stream, rounded, size, small, block, other)
        rest, before = block.next, block.prev
        if (
            block.size != rounded
            or block.mark == -1
            or (rest is not None and rest.state == FREE)
            or (before is not None and before.state == FREE)
        ):
            return 0
        # the first, a hole: the last's free, run first, must not lower inactive_split (a
        # neighbour that stays allocated: no merge of three blocks, no whole segment; on an
        # expandable segment a free moves nothing there)
        after, ahead = other.next, other.prev
        if not (
            after is not None and after.state != FREE or ahead is not None and ahead.state != FREE
        ):
            return 0
        dropped.pop()
        self._free(last)
        found = pool.index.get(stream)
        heap = None if found is None else found.heaps.get(rounded)
        if heap is not None and heap[0] <= first:  # (best fit: a lower block of its size)
            return 0
        dropped.popleft()
        whole = before is None and rest is None
        self.stats.reuse(small, rounded, block.requested_size, size, 0, whole)
        block.requested_size = size
        return first

    def _take_back_merged(
        self, pool: Pool, stream: int, rounded: int, size: int, small: bool, block, other
    ) -> int:
        """``_take_back_pair`` of two blocks next to each other: their frees merge them, and
        best fit cuts the lower one's size off the front of that block, the higher one its
        free rest. The higher is freed (it keeps an allocated neighbour: the lower), then the
        lower taken back as a block split off its free rest (``DeviceStats.reuse``)."""
        low, high = (block, other) if block.next is other else (other, block)
        before, after = low.prev, high.next
        if (
            low.size != rounded
            or low.mark == -1
            or high.use_events is not None  # (the merged block's events: low would wait)
            or (before is not None and before.state == FREE)
            or (after is not None and after.state == FREE)
        ):
            return 0
        # (the merged block is never oversize: only a segment below max_split_size is ever
        # split, a larger one's block being oversize; the split rule keeps the higher one
        # apart: a small pool's blocks are all >= 512 B, a large one's all > 1 MiB, the
        # least rest each keeps; the lower one's mark says it is on no expandable segment)
        # best fit, once both are free: nothing of rounded bytes or more that is smaller
        # than the merged block, nor of its size at a lower address
        merged = rounded + high.size
        found = pool.index.get(stream)
        if found is not None:
            sizes = found.sizes
            i = bisect_left(sizes, rounded)
            if i < len(sizes):
                fits = sizes[i]
                if fits < merged or fits == merged and found.heaps[fits][0] <= low.ptr:
                    return 0
        dropped = self._dropped
        if high is block:  # (the first: freed first, as the general path frees it)
            dropped.popleft()
        else:  # (the last, freed before the first: the two frees change places)
            dropped.pop()
        self._free(high.ptr)
        dropped.clear()
        whole = before is None and after is None
        self.stats.reuse(small, rounded, low.requested_size, size, high.size, whole)
        low.requested_size = size
        return low.ptr

    # =================================================================== the steps of free
    def _free(self, ptr: int) -> None:
        """The one place a free is decided: the block waits for its record_stream uses
        (PENDING), or goes back to its pool, merged with its free neighbours (the uncached
        allocator: back to the device)."""
        block = self._allocated.pop(ptr, None)
        if block is None:
            raise ValueError(f"ptr: {ptr:#x} is not a live allocation of {self.device}")
        lifetimes = self.lifetimes
        pending = False
        if self._free_waits or lifetimes.stream_uses:
            try:
                if self.no_caching:
                    self._wait_before_giving_back(block)
                elif self._note_frees:
                    lifetimes.note_free(block, block.segment.stream)
                pending = bool(lifetimes.stream_uses) and lifetimes.free_waits(block)
            except BaseException:  # (a driver call failed: nothing has changed)
                self._allocated[ptr] = block
                raise
        if self._oversize and block in self._oversize:
            self._oversize.remove(block)
            self.stats.oversize_allocations.decrease(1)
        segment = block.segment
        if self.recorder is not None:
            self._trace("free_requested", ptr, block.requested_size, segment.stream)
            if not pending:
                self._trace("free_completed", ptr, block.requested_size, segment.stream)
                block.context = None
        size, pool = block.size, segment.pool
        if pending:
            block.state = PENDING
            self.stats.free_requested(pool.is_small, size, block.requested_size)
            return
        # back to its pool, merged with its free neighbours (counted with inactive_split's
        # net change, as PyTorch counts it)
        split_blocks, split_bytes = pool.give(block)
        self.stats.free(pool.is_small, size, block.requested_size, split_blocks, split_bytes)
        if self.no_caching:
            self._give_back(block)
        elif block.use_events:
            lifetimes.prune(block)

    def _free_block(self, block: Block) -> None:
        """Return a PENDING block whose record_stream events have completed to its pool,
        merged with its free neighbours, and count the completion (as ``_free`` counts a
        free)."""
        segment = block.segment
        if self.recorder is not None:
            self._trace("free_completed", block.ptr, block.requested_size, segment.stream)
            block.context = None
        size, pool = block.size, segment.pool
        split_blocks, split_bytes = pool.give(block)
        self.stats.free_completed(
            pool.is_small, size, block.requested_size, split_blocks, split_bytes
        )

    def _wait_before_giving_back(self, block: Block) -> None:
        """The uncached allocator's free: wait for the streams that used the block (as
        cudaFree would), and for its record_use events. Synchronizes."""
        lifetimes = self.lifetimes
        streams = {block.segment.stream, *lifetimes.stream_uses.pop(block, ())}
        for stream in sorted(streams):
            self.driver.stream_synchronize(stream)
        if block.use_events:
            lifetimes.wait_for_uses(block)

    def _free_completed(self) -> None:
        """Return the PENDING blocks whose record_stream events have completed."""
        for block in self.lifetimes.completed():
            self._free_block(block)

    def _live_block(self, ptr: int, what: str) -> Block:
        block = self._allocated.get(ptr)
        if block is None:
            raise ValueError(f"{what}: ptr {ptr:#x} is not a live allocation of {self.device}")
        return block

    # ======================================================= giving memory back to the device
    def _give_back(self, block: Block) -> None:
        """Give a FREE block's memory back to the device through its segment's source: a
        whole segment, or the whole free pages of an expandable one. Waits for the block's
        record_use events first. When the source's first driver call fails (cudaFree while
        a capture forbids it), the block stays FREE in its pool, as it was."""
        if block.use_events:
            self.lifetimes.wait_for_uses(block)
        pool, age = block.segment.pool, block.gc_age
        pool.remove(block)
        try:
            block.segment.source.release(block)
        except BaseException:
            pool.insert(block)
            block.gc_age = age
            raise

    def _release_pool(self, pool: Pool) -> None:
        """Release every whole free segment of the pool; unmap free expandable pages."""
        for block in pool.free_blocks():
            if block.segment.source.releasable(block):
                self._give_back(block)

    def _release_cached_blocks(self) -> None:
        """Wait for pending frees, then give every whole free segment back. Synchronizes."""
        if self.lifetimes.captures:
            return
        self.stats.num_sync_all_streams += 1
        for block in self.lifetimes.synchronize():
            self._free_block(block)
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
            if block.segment.source.whole(block):
                self._give_back(block)
                return True
        released = 0
        for block in reversed([b for b in blocks if b.size < want]):
            if released >= want or block.size < max_split:
                break
            if block.segment.source.whole(block):
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
        freeable = [b for b in pool.free_blocks() if b.segment.source.whole(b)]
        total_age = sum(calls - b.gc_age for b in freeable)
        count, reclaimed, freed_one = len(freeable), 0, True
        while reclaimed < target and freed_one and count > 0:
            threshold_age = total_age / count
            freed_one = False
            for block in pool.free_blocks():
                if block.segment.source.whole(block) and calls - block.gc_age >= threshold_age:
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
        """Take ``config``, and the few of its values the cached path reads on every call.
        Best fit's earlier answers may not be this config's: no block is taken back."""
        for block in self._allocated.values():
            block.mark = -1
        self.config = config
        self._divisions = _divisions(config)
        self._max_split = config.max_split_size
        self._non_split = config.max_non_split_rounding_size
        self._oversize_rules = config.max_split_size != SIZE_MAX
        self._split_always = config.expandable_segments  # rest >= 512 B splits, as small
        self._note_frees = config.cross_stream_reuse
        self._free_waits = self.no_caching or self._note_frees  # _free has work before give
        self._expandable_on = config.expandable_segments and not self.no_caching
        self._hooks_changed()

    def _hooks_changed(self) -> None:
        """Whether a dropped block may be taken back (Note [Taking a dropped block back]):
        not while a hook or a setting could decide otherwise than best fit."""
        self._takes_back = not (
            self.recorder is not None
            or self._finder is not None
            or self._gc_on
            or self._note_frees
            or self.no_caching
        )
        self._plain_fit = not (
            self._finder is not None or self._gc_on or self._oversize_rules or self._expandable_made
        )

    def _set_fraction(self, fraction: float) -> None:
        """PyTorch's setMemoryFraction: a share of the total that cudaMemGetInfo reports now."""
        total = self.driver.mem_get_info(self.index)[1]
        for block in self._allocated.values():
            block.mark = -1  # (garbage collection may start: no block is taken back)
        self.fraction = fraction
        self.allowed_memory_maximum = int(fraction * total)
        self._gc_on = bool(self.config.garbage_collection_threshold)
        self._hooks_changed()

    def _all_pools(self) -> list[Pool]:
        pools = [self.small, self.large]
        for private in self.private_pools.values():
            pools += [private.small, private.large]
        return pools


_NEVER = 1 << 62  # a split rule's least rest that no block leaves: no split


def _divisions(config: AllocatorConfig) -> tuple[int, ...] | None:
    """The roundup_power2_divisions table when it rounds anything, else None."""
    table = config.roundup_power2_divisions
    return table if any(d > 1 for d in table) else None


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
