"""The caching allocator under random sequences (hypothesis), invariants checked each step.

Steps: alloc (small, large and oversize sizes on three streams), free, record_stream,
record_use, work held on deferred streams, stream waits, synchronize, sim.run(), empty_cache
(the allocator's and vram.memory's), memory fraction changes, injected device-malloc
failures; CUDA graphs: a capture on a side stream (vram.CUDAGraph, or vram.graph; into its
own pool, a MemPool or another graph's pool; in each capture mode), streams forked into it
and joined back, calls a capture forbids (they raise and invalidate it), its end, replay,
and the graph's release (reset, or dropped); MemPools made, routed to with use_mem_pool
and dropped; library workspaces taken and launched on this thread and on a second one.
Each example runs under one allocator configuration of the README's list (native backend).
After every step:
- live blocks never overlap, and no pointer is live twice;
- a block freed with record_stream work pending is not handed out again before that work
  has run (the test records its own event on each stream that used it outside a capture,
  just before the free; on a stream that captures now, when the capture ends);
- segments are tiled by their blocks, and no two free neighbours are left unmerged;
- every current memory_stats value (private pools' blocks counted, as in PyTorch) equals
  the one recomputed from the blocks, workspace_bytes equals the workspaces held, and the
  simulated device holds exactly what the allocator says it reserves;
- every live block lies in the pool its request was routed to (the capture's private pool,
  a MemPool in use, or the allocator's own), the routes are the ones open, and each private
  pool has the holders the test counts (graphs, MemPools, uses, captures);
- a private pool that something holds never gives memory back to the device (except to
  serve its own request); once nothing holds it, empty_cache returns every whole segment;
- empty_cache frees the workspaces of this thread on idle streams and keeps the others (a
  busy stream's, and those another thread was handed and has not launched yet).

VRAM_STATEFUL_EXAMPLES scales the run (CI: 240 examples of up to 60 steps, over 10,000 in all).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import vram
from vram.memory import _config, _registry, _workspace, get_workspace, parse_config
from vram.memory._config import SIZE_MAX
from vram.memory._pool import ALLOCATED, FREE, PENDING
from vram.memory._stats import POOL_NAMES, STAT_NAMES

KiB = 1 << 10
MiB = 1 << 20
CAPACITY = 512 * MiB  # the device's memory on top of what other tests hold
EXAMPLES = int(os.environ.get("VRAM_STATEFUL_EXAMPLES", "240"))
STEPS = 60
MIN_STEPS = 10_000 * EXAMPLES // 240

# Every configuration of the README's list that the native backend has (the cudaMallocAsync
# backend and VRAM_NO_CACHING have no pools to check; stream_sanitizer poisons freed blocks
# on their streams, over the test's own patterns).
CONFIGS = [
    "",
    "max_split_size_mb:40",
    "max_split_size_mb:40,max_non_split_rounding_mb:30",
    "roundup_power2_divisions:[1:2,64:8,>:4]",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.6",
    "garbage_collection_threshold:0.6,max_split_size_mb:40",
    "per_process_memory_fraction:0.5,garbage_collection_threshold:0.8",
    "expandable_segments:True",
    "expandable_segments:True,expandable_page_mb:4,max_split_size_mb:40",
    "cross_stream_reuse:True",
    "graph_capture_record_stream_reuse:True",
    "graph_capture_record_stream_reuse:True,max_split_size_mb:40,release_lock_on_cudamalloc:True",
]

SIZES = st.one_of(
    st.integers(1, 4 * KiB),
    st.integers(4 * KiB, MiB),
    st.integers(MiB + 1, 12 * MiB),
    st.integers(12 * MiB, 72 * MiB),
)
LIBRARIES = ("cublas", "cusolver")
WORKSPACE_SIZES = st.sampled_from([KiB, 48 * KiB, MiB, 3 * MiB])
CAPTURE_MODES = ("global", "thread_local", "relaxed")
SCRATCH = 0  # what a library writes into its workspace (the test's patterns are 1..251)

_streams: list[vram.Stream] = []


def streams() -> list[vram.Stream]:
    """Three streams of sim:0 (made once: sim streams are never destroyed)."""
    if not _streams:
        device = vram.device("sim:0")
        _streams.extend([vram.default_stream(device), vram.Stream(device), vram.Stream(device)])
    return _streams


CURRENT = [f"{n}.{p}.current" for n in STAT_NAMES for p in POOL_NAMES]


def expected_stats(allocator, blocks: list | None = None) -> dict[str, int]:
    """The current value of every memory_stats counter, recomputed from the blocks (of
    every pool: private pools count as PyTorch counts them); ``blocks``: all_blocks()."""
    out = dict.fromkeys(CURRENT, 0)
    max_split = allocator.config.max_split_size
    oversize_allocations = oversize_segments = 0

    def add(name: str, pool: str, amount: int) -> None:
        out[f"{name}.all.current"] += amount
        out[f"{name}.{pool}.current"] += amount

    for b in allocator.all_blocks() if blocks is None else blocks:
        pool = "small_pool" if b.segment.pool.is_small else "large_pool"
        add("reserved_bytes", pool, b.size)
        if b.state == ALLOCATED:
            add("allocation", pool, 1)
            add("allocated_bytes", pool, b.size)
            oversize_allocations += b.size >= max_split
        if b.state in (ALLOCATED, PENDING):
            add("active", pool, 1)
            add("active_bytes", pool, b.size)
            add("requested_bytes", pool, b.requested_size)
        if b.segment.expandable:
            continue
        if b.prev is None:
            add("segment", pool, 1)
            size, nxt = 0, b
            while nxt is not None:
                size, nxt = size + nxt.size, nxt.next
            oversize_segments += size >= max_split
        if b.state == FREE and b.is_split():
            add("inactive_split", pool, 1)
            add("inactive_split_bytes", pool, b.size)
    out["oversize_allocations.current"] = oversize_allocations
    out["oversize_segments.current"] = oversize_segments
    return out


@dataclass
class Capture:
    """A capture under way: its graph, the stream it began on, the pool it allocates into,
    the vram.graph block it runs in (if any), and the guards it holds back: (start, end,
    streams) of blocks freed during it after uses on a stream that captures now."""

    graph: vram.CUDAGraph
    origin: int
    pool: tuple[int, int]
    context: vram.graph | None
    deferred: list[tuple[int, int, list[int]]] = field(default_factory=list)


class AllocatorMachine(RuleBasedStateMachine):
    """Random allocator traffic on sim:0 with work held on deferred streams."""

    steps = 0  # over all examples of a run
    seen: Counter = Counter()  # what the run exercised (captures ended, pools dropped, ...)

    def __init__(self) -> None:
        super().__init__()
        self.device = vram.device("sim:0")
        self.sim = vram.sim.driver()
        self.streams = streams()
        self.exit = ExitStack()
        self.exit.enter_context(self.device)
        self.exit.enter_context(vram.sim.deferred())
        free, total = self.sim.mem_get_info(0)
        self.held_before = total - free  # by allocators of earlier tests
        self.old_capacity = total
        vram.sim.set_capacity(0, self.held_before + CAPACITY)
        _registry._allocators.pop(self.device, None)
        self.allocator = None
        self.live: dict[int, tuple[int, int]] = {}  # ptr -> (bytes written, pattern)
        self.stream_of: dict[int, int] = {}  # ptr -> the stream it was allocated on
        self.uses: dict[int, set[int]] = {}  # ptr -> streams that used it outside captures
        self.owner: dict[int, tuple[int, int] | None] = {}  # ptr -> its private pool, or None
        self.guards: list[tuple[int, int, list[int]]] = []  # (start, end, events) of frees
        self.patterns = 0
        self.capture: Capture | None = None
        self.graphs: list[tuple[vram.CUDAGraph, tuple[int, int]]] = []  # captured, held
        self.pools: list[vram.MemPool] = []  # MemPools alive
        self.pool_uses: list[tuple[vram.MemPool, object]] = []  # open use_mem_pool blocks
        self.routes: list[tuple[str, tuple[int, int]]] = []  # open routes, latest first
        self.holders: dict[tuple[int, int], int] = {}  # private pool -> holders counted
        self.reserved: dict[tuple[int, int], int] = {}  # private pool -> bytes, last step
        self.routed_to: tuple[int, int] | None = None  # the pool this step's request went to
        # (library, stream index, on the worker thread) -> (ptr, bytes asked)
        self.workspaces: dict[tuple[str, int, bool], tuple[int, int]] = {}
        self.unlaunched: set[tuple[str, int, bool]] = set()  # the worker's, not launched yet
        self.worker: ThreadPoolExecutor | None = None
        self.blocks: tuple[int, list] = (-1, [])  # (steps, all_blocks()) for the invariants
        self.peaks: tuple[int, list] = (-1, [])  # memory_stats' (current, peak) key pairs

    # ------------------------------------------------------------------ helpers
    def _blocks(self) -> list:
        """all_blocks() once per step: the invariants read it and change nothing."""
        if self.blocks[0] != AllocatorMachine.steps:
            self.blocks = (AllocatorMachine.steps, self.allocator.all_blocks())
        return self.blocks[1]

    def _done(self, event: int) -> bool:
        """Whether the work before ``event`` has run (the sim's own record: querying an
        event is a call a capture may forbid)."""
        last = self.sim._events[event].last
        return last is None or last.done

    def _check_and_forget_guards(self) -> None:
        """Drop guards whose work has run; fail if a live block overlaps one that has not."""
        pending = []
        for start, end, events in self.guards:
            if all(self._done(e) for e in events):
                for e in events:
                    self.sim.event_destroy(e)
            else:
                pending.append((start, end, events))
        self.guards = pending
        if self.capture is not None:
            pending = pending + self.capture.deferred
        for ptr, block in self.allocator._allocated.items():
            for start, end, _ in pending:
                assert not (ptr < end and start < ptr + block.size), (
                    f"block at {ptr:#x} handed out while record_stream work on it is held"
                )

    def _guard_events(self, handles: list[int]) -> list[int]:
        events = []
        for handle in handles:
            event = self.sim.event_create(0, False)
            self.sim.event_record(event, handle)
            events.append(event)
        return events

    def _status(self, which: int) -> str:
        return self.sim.stream_capture_info(self.streams[which].cuda_stream).status

    def _capturing(self, handle: int) -> bool:
        return self.sim.stream_capture_info(handle).status != "none"

    def _route(self, handle: int, this_thread: bool = True) -> tuple[int, int] | None:
        """The pool a request on ``handle`` must come from: the latest open route that takes
        it (a capture takes its streams' requests, a use_mem_pool this thread's)."""
        for kind, pool in self.routes:
            if kind == "graph" and self.sim.stream_capture_info(handle).status == "active":
                return pool
            if kind == "pool" and this_thread:
                return pool
        return None

    def _pool_of(self, ptr: int) -> tuple[int, int] | None:
        owner = self.allocator._allocated[ptr].segment.pool.owner
        return None if owner is None else owner.id

    def _capture_error(self, error: vram.CudaError) -> None:
        """A call a capture forbids raised: there is a capture, and it is invalidated."""
        assert self.capture is not None, f"{error} outside a capture"
        assert self._status(self.capture.origin) == "invalidated", error
        AllocatorMachine.seen["calls a capture forbids"] += 1

    def _hold(self, handle: int) -> None:
        self.sim.enqueue(handle, lambda: None)

    def _scratch(self, ptr: int, nbytes: int) -> None:
        """A library call's writes into its workspace (queued: the host writes at once)."""
        assert ptr in self.allocator._allocated and ptr not in self.live, (
            f"workspace at {ptr:#x} was freed before the library launched on it"
        )
        written = min(nbytes, 256)
        view = self.sim.view(ptr, nbytes)
        view[:written] = SCRATCH
        view[nbytes - written :] = SCRATCH

    def _on_worker(self, work):
        if self.worker is None:
            self.worker = ThreadPoolExecutor(1)
        return self.worker.submit(work).result()

    def _pool_choices(self) -> list[object]:
        return [None, *self.pools, *(graph.pool() for graph, _ in self.graphs)]

    def _emptied_by_api(self, busy: set[int]) -> None:
        """vram.memory.empty_cache ran (no capture under way): this thread's workspaces on
        idle streams are freed, the others kept (Note [Who frees a workspace])."""
        for key, (ptr, _) in list(self.workspaces.items()):
            _, which, on_worker = key
            handle = self.streams[which].cuda_stream
            if on_worker or handle in busy:
                assert ptr in self.allocator._allocated, f"empty_cache freed workspace {key}"
                AllocatorMachine.seen["workspaces kept by empty_cache"] += 1
            elif ptr in self.allocator._allocated:  # only when freeing one before it queued
                # an event on its stream (cross_stream_reuse), which is then not idle
                assert self.allocator.config.cross_stream_reuse and self.sim.pending(handle), (
                    f"empty_cache kept idle workspace {key}"
                )
            else:
                del self.workspaces[key]
                del self.owner[ptr]
        self._emptied()

    def _emptied(self) -> None:
        """empty_cache ran with no capture under way: nothing waits, and no whole free
        segment is left but in a private pool something still holds."""
        allocator = self.allocator
        assert not allocator.lifetimes.waiting
        with allocator.locked():
            for b in allocator.all_blocks():
                if b.state == FREE and b.prev is None and b.next is None:
                    if b.segment.expandable:
                        continue
                    owner = b.segment.pool.owner
                    assert owner is not None and not owner.freeable, (
                        f"{b} of {owner} is a whole free segment after empty_cache"
                    )
            for private in allocator.private_pools.values():
                assert not private.freeable or private.segment_count > 0

    def _end_capture(self, join: bool) -> None:
        """End the capture (joining the streams forked from it first, if ``join``); record
        the guards it held back."""
        capture = self.capture
        assert capture is not None
        origin = self.streams[capture.origin]
        forked = [s for s in self.streams[1:] if s is not origin and self._capturing(s.cuda_stream)]
        if join and self._status(capture.origin) == "active":
            for stream in forked:
                origin.wait_stream(stream)
        valid = self._status(capture.origin) == "active"
        try:
            if capture.context is not None:
                capture.context.__exit__(None, None, None)
            else:
                with vram.stream(origin):
                    capture.graph.capture_end()
            ended = True
        except vram.CudaError:
            ended = False
        assert ended or not valid or (forked and not join), "a valid capture failed to end"
        assert valid or not ended, "an invalidated capture ended"
        assert all(not self._capturing(s.cuda_stream) for s in self.streams)
        self.capture = None
        self.routes.remove(("graph", capture.pool))
        for start, end, handles in capture.deferred:
            self.guards.append((start, end, self._guard_events(handles)))
        if ended:
            self.graphs.append((capture.graph, capture.pool))
            AllocatorMachine.seen["captures ended"] += 1
        else:
            self.holders[capture.pool] -= 1
            AllocatorMachine.seen["captures failed"] += 1

    # -------------------------------------------------------------------- rules
    @initialize(text=st.sampled_from(CONFIGS))
    def configure(self, text: str) -> None:
        _config.set_default_config(parse_config(text))  # as VRAM_ALLOC_CONF, read when made
        self.allocator = _registry.allocator_for(self.device)

    @rule(size=SIZES, which=st.integers(0, 2))
    def alloc(self, size: int, which: int) -> None:
        AllocatorMachine.steps += 1
        handle = self.streams[which].cuda_stream
        expected = self.routed_to = self._route(handle)
        try:
            ptr = self.allocator.malloc(size, handle)
        except vram.OutOfMemoryError:
            return
        except vram.CudaError as error:  # a device malloc or free a capture forbids
            self._capture_error(error)
            return
        assert ptr not in self.live, f"{ptr:#x} handed out twice"
        assert self._pool_of(ptr) == expected, f"{ptr:#x} not from pool {expected}"
        self.patterns += 1
        pattern = self.patterns % 251 + 1
        written = min(size, 256)
        view = self.sim.view(ptr, size)
        view[:written] = pattern
        view[size - written :] = pattern
        self.live[ptr] = (size, pattern)
        self.stream_of[ptr] = handle
        self.owner[ptr] = expected
        self._check_and_forget_guards()

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data) -> None:
        AllocatorMachine.steps += 1
        ptr = data.draw(st.sampled_from(sorted(self.live)))
        size, pattern = self.live.pop(ptr)
        view = self.sim.view(ptr, size)
        written = min(size, 256)
        assert (view[:written] == pattern).all() and (view[size - written :] == pattern).all()
        block = self.allocator._allocated[ptr]
        start, end = block.ptr, block.ptr + block.size
        uses = sorted(self.uses.pop(ptr, ()))
        del self.stream_of[ptr], self.owner[ptr]
        now = [h for h in uses if not self._capturing(h)]
        # before the allocator's own events: ours complete first
        events = self._guard_events(now)
        self.allocator.free(ptr)
        if events:
            self.guards.append((start, end, events))
        if len(now) < len(uses):
            self.capture.deferred.append((start, end, [h for h in uses if h not in now]))

    def _note_use(self, ptr: int, handle: int) -> None:
        """A use of ``ptr`` on ``handle`` the allocator keeps as a stream use: real work
        unless the stream captures (then the work is only recorded in the graph)."""
        if handle != self.stream_of[ptr] and not self._capturing(handle):
            self.uses.setdefault(ptr, set()).add(handle)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), which=st.integers(0, 2))
    def record_stream(self, data, which: int) -> None:
        AllocatorMachine.steps += 1
        ptr = data.draw(st.sampled_from(sorted(self.live)))
        handle = self.streams[which].cuda_stream
        self.allocator.record_stream(ptr, handle)
        self._note_use(ptr, handle)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), which=st.integers(0, 2))
    def record_use(self, data, which: int) -> None:
        AllocatorMachine.steps += 1
        ptr = data.draw(st.sampled_from(sorted(self.live)))
        handle = self.streams[which].cuda_stream
        self.allocator.record_use(ptr, handle)
        if self.capture is not None:  # while a stream captures it falls back to record_stream
            self._note_use(ptr, handle)

    @rule(which=st.integers(0, 2))
    def hold_work(self, which: int) -> None:
        AllocatorMachine.steps += 1
        try:
            self._hold(self.streams[which].cuda_stream)
        except vram.CudaError as error:  # a launch into an invalidated capture
            self._capture_error(error)

    @rule(waiter=st.integers(0, 2), waited=st.integers(0, 2))
    def wait_stream(self, waiter: int, waited: int) -> None:
        AllocatorMachine.steps += 1
        if waiter == 0 and self._capturing(self.streams[waited].cuda_stream):
            return  # (the default stream never joins a capture)
        try:
            self.streams[waiter].wait_stream(self.streams[waited])
        except vram.CudaError as error:  # a capturing stream waited on work outside it
            self._capture_error(error)

    @rule(which=st.integers(0, 2))
    def synchronize(self, which: int) -> None:
        AllocatorMachine.steps += 1
        try:
            self.streams[which].synchronize()
        except vram.CudaError as error:
            self._capture_error(error)

    @rule()
    def run_all(self) -> None:
        AllocatorMachine.steps += 1
        vram.sim.run()

    @rule(api=st.booleans())
    def empty_cache(self, api: bool) -> None:
        AllocatorMachine.steps += 1
        if self.capture is not None:  # nothing may go back while a stream captures
            before = self.allocator.total_allocated_memory
            try:
                if api:
                    vram.memory.empty_cache(self.device)
                else:
                    self.allocator.empty_cache()
            except RuntimeError as error:
                assert api and "captured" in str(error), error
            else:
                assert not api, "vram.memory.empty_cache ran during a capture"
            assert self.allocator.total_allocated_memory == before
            return
        if api:
            busy = {s.cuda_stream for s in self.streams if self.sim.pending(s.cuda_stream)}
            vram.memory.empty_cache(self.device)
            self._emptied_by_api(busy)
        else:
            self.allocator.empty_cache()
            self._emptied()

    @rule(fraction=st.sampled_from([0.2, 0.35, 0.5, 0.8, 1.0]))
    def set_fraction(self, fraction: float) -> None:
        AllocatorMachine.steps += 1
        self.allocator.set_memory_fraction(fraction)

    @rule(nth=st.integers(1, 3))
    def fail_nth_malloc(self, nth: int) -> None:
        AllocatorMachine.steps += 1
        vram.sim.inject_malloc_failure(nth=nth)

    @rule(limit=st.sampled_from([2 * MiB, 20 * MiB, 40 * MiB]))
    def fail_mallocs_above(self, limit: int) -> None:
        AllocatorMachine.steps += 1
        vram.sim.inject_malloc_failure(above_bytes=limit)

    @rule()
    def clear_faults(self) -> None:
        AllocatorMachine.steps += 1
        vram.sim.clear_faults()

    # ------------------------------------------------------------- graph capture
    # (Few rules, each with its choices inside: every rule hypothesis has to choose among
    # costs each step choices of its buffer, and a full buffer ends the example.)
    @precondition(lambda self: self.capture is not None or len(self.graphs) < 3)
    @rule(
        data=st.data(),
        which=st.integers(1, 2),
        mode=st.sampled_from(CAPTURE_MODES),
        context=st.booleans(),
        join=st.booleans(),
    )
    def graph_capture(self, data, which: int, mode: str, context: bool, join: bool) -> None:
        """Begin a capture on stream ``which`` (none under way), or end the one under way
        (joining the streams forked from it first, if ``join``)."""
        AllocatorMachine.steps += 1
        if self.capture is not None:
            self._end_capture(join)
            return
        choices = self._pool_choices()
        pool = choices[data.draw(st.integers(0, len(choices) - 1))]
        stream = self.streams[which]
        graph = vram.CUDAGraph()
        if context:  # synchronizes the device and empties the cache first
            if isinstance(pool, vram.MemPool):
                pool = pool.id  # (the block would keep the MemPool alive; PyTorch's takes ids)
            block = vram.graph(graph, pool=pool, stream=stream, capture_error_mode=mode)
            block.__enter__()
        else:
            block = None
            with vram.stream(stream):
                graph.capture_begin(pool=pool, capture_error_mode=mode)
        private = self.allocator.routes[0][0].id
        self.capture = Capture(graph, which, private, block)
        self.holders[private] = self.holders.get(private, 0) + 1
        self.routes.insert(0, ("graph", private))
        if pool is not None:
            assert private == (pool.id if isinstance(pool, vram.MemPool) else pool)
        if context:
            self._emptied_by_api(set())
        self._hold(stream.cuda_stream)  # the captured work

    @precondition(lambda self: self.graphs)
    @rule(data=st.data(), action=st.sampled_from(["replay", "reset", "drop"]))
    def captured_graph(self, data, action: str) -> None:
        """Replay a captured graph (on the default stream: it never captures), or let it
        go: reset(), or dropped (its finalizer lets the pool go at the allocator's next
        call). A replay allocates nothing."""
        AllocatorMachine.steps += 1
        i = data.draw(st.integers(0, len(self.graphs) - 1))
        if action == "replay":
            held = dict(self.allocator._allocated), self.allocator.total_allocated_memory
            with vram.stream(self.streams[0]):
                self.graphs[i][0].replay()
            assert (self.allocator._allocated, self.allocator.total_allocated_memory) == held
            AllocatorMachine.seen["replays"] += 1
            return
        graph, pool = self.graphs.pop(i)
        if action == "reset":
            graph.reset()
        del graph
        self.holders[pool] -= 1

    # -------------------------------------------------------------------- MemPools
    @rule(data=st.data())
    def mem_pool(self, data) -> None:
        """Make a MemPool, open a use_mem_pool block on one, leave the latest block, or
        drop a MemPool no block uses (its finalizer lets the pool go at the allocator's
        next call; its live blocks stay where they are)."""
        AllocatorMachine.steps += 1
        idle = [p for p in self.pools if all(p is not u for u, _ in self.pool_uses)]
        actions = [
            name
            for name, possible in [
                ("make", len(self.pools) < 2),
                ("use", self.pools and len(self.pool_uses) < 2),
                ("leave", self.pool_uses),
                ("drop", idle),
            ]
            if possible
        ]
        action = data.draw(st.sampled_from(actions))
        if action == "make":
            pool = vram.MemPool(self.device)
            self.holders[pool.id] = 1
            self.pools.append(pool)
        elif action == "use":
            pool = self.pools[data.draw(st.integers(0, len(self.pools) - 1))]
            block = vram.use_mem_pool(pool)
            block.__enter__()
            self.pool_uses.append((pool, block))
            self.holders[pool.id] += 1
            self.routes.insert(0, ("pool", pool.id))
        elif action == "leave":
            self._leave_pool()
        else:
            pool = idle[data.draw(st.integers(0, len(idle) - 1))]
            self.pools.remove(pool)
            self.holders[pool.id] -= 1
            AllocatorMachine.seen["MemPools dropped"] += 1
        del idle

    def _leave_pool(self) -> None:
        pool, block = self.pool_uses.pop()
        block.__exit__(None, None, None)
        self.holders[pool.id] -= 1
        self.routes.remove(("pool", pool.id))

    # ------------------------------------------------------------------ workspaces
    @rule(
        data=st.data(),
        library=st.sampled_from(LIBRARIES),
        which=st.integers(0, 2),
        nbytes=WORKSPACE_SIZES,
        on_worker=st.booleans(),
    )
    def workspace(self, data, library: str, which: int, nbytes: int, on_worker: bool) -> None:
        """A library call asks for its workspace and (on this thread) launches on it at
        once; on the second thread it launches later: when one it was handed waits, this
        step may be that launch instead."""
        AllocatorMachine.steps += 1
        if self.unlaunched and data.draw(st.booleans()):
            key = data.draw(st.sampled_from(sorted(self.unlaunched)))
            self.unlaunched.discard(key)
            self._launch(key)
            return
        stream = self.streams[which]
        key = (library, which, on_worker)
        old = self.workspaces.get(key)
        expected = self.routed_to = self._route(stream.cuda_stream, not on_worker)

        def ask() -> int:
            return get_workspace(nbytes, library=library, stream=stream)

        try:
            ptr = self._on_worker(ask) if on_worker else ask()
        except (vram.OutOfMemoryError, vram.CudaError) as error:
            if isinstance(error, vram.CudaError):
                self._capture_error(error)
            assert old is None or old[1] < nbytes
            if old is not None:  # the old one was freed to make room
                self.workspaces.pop(key)
                self.unlaunched.discard(key)
                del self.owner[old[0]]
            return
        if old is not None and old[1] >= nbytes:
            assert ptr == old[0]
        else:
            if old is not None:
                assert old[0] not in self.allocator._allocated or old[0] == ptr
                del self.owner[old[0]]
            assert self._pool_of(ptr) == expected, f"workspace {ptr:#x} not from {expected}"
            self.workspaces[key] = (ptr, nbytes)
            self.owner[ptr] = expected
        if on_worker:
            self.unlaunched.add(key)
        else:
            self._launch(key)

    def _launch(self, key: tuple[str, int, bool]) -> None:
        """The library's work on its workspace: its scratch writes, and the stream busy."""
        ptr, nbytes = self.workspaces[key]
        self._scratch(ptr, nbytes)
        try:
            self._hold(self.streams[key[1]].cuda_stream)
        except vram.CudaError as error:
            self._capture_error(error)

    # --------------------------------------------------------------- invariants
    @invariant()
    def live_blocks_do_not_overlap(self) -> None:
        allocated = self.allocator._allocated
        workspaces = {ptr for ptr, _ in self.workspaces.values()}
        assert set(allocated) == set(self.live) | workspaces
        assert not workspaces & set(self.live)
        assert set(self.owner) == set(allocated)
        end = 0
        for ptr in sorted(allocated):
            block = allocated[ptr]
            assert block.ptr == ptr and block.state == ALLOCATED
            assert ptr >= end, f"{ptr:#x} overlaps the block before it"
            end = ptr + block.size
            owner = block.segment.pool.owner
            assert (None if owner is None else owner.id) == self.owner[ptr]
            if ptr in self.live:
                assert block.size >= self.live[ptr][0]

    @invariant()
    def no_reuse_while_recorded_work_is_held(self) -> None:
        self._check_and_forget_guards()

    @invariant()
    def segments_are_tiled_and_merged(self) -> None:
        for b in self._blocks():
            nxt = b.next
            if nxt is not None:
                assert nxt.prev is b and nxt.ptr == b.ptr + b.size
                assert nxt.segment is b.segment
                assert not (b.state == FREE and nxt.state == FREE), (
                    f"free neighbours {b} and {nxt} were not merged"
                )

    @invariant()
    def the_index_holds_exactly_the_free_blocks(self) -> None:
        allocator = self.allocator
        free = [b for b in self._blocks() if b.state == FREE]
        indexed = [b for pool in allocator._all_pools() for b in pool.free_blocks()]
        assert sorted(map(id, free)) == sorted(map(id, indexed))
        for pool in allocator._all_pools():
            for stream, found in pool.index.items():
                assert found.sizes == sorted(found.heaps)
                entries = sum(len(h) for h in found.heaps.values())
                assert found.stale == entries - len(found.blocks) >= 0
                for ptr, block in found.blocks.items():
                    assert block.ptr == ptr and block.segment.stream == stream
                    assert ptr in found.heaps[block.size]

    @invariant()
    def stats_equal_the_blocks(self) -> None:
        stats = self.allocator.memory_stats()
        expected = expected_stats(self.allocator, self._blocks())
        wrong = {k: (stats[k], v) for k, v in expected.items() if stats[k] != v}
        assert not wrong, f"memory_stats (key: (value, from the blocks)): {wrong}"
        if self.peaks[0] != len(stats):  # (memory_stats' keys: found once an example)
            ends = [k for k in stats if k.endswith(".current")]
            self.peaks = (len(stats), [(k, k[: -len("current")] + "peak") for k in ends])
        for key, peak in self.peaks[1]:
            assert stats[peak] >= stats[key] >= 0, key
        max_split = self.allocator.config.max_split_size
        assert stats["max_split_size"] == (-1 if max_split == SIZE_MAX else max_split)
        reserved = stats["reserved_bytes.all.current"]
        assert self.allocator.total_allocated_memory == reserved
        free, total = self.sim.mem_get_info(0)
        assert total - free == self.held_before + reserved
        workspace = _workspace.workspace_stats(self.device)["workspace_bytes.all.current"]
        assert workspace == sum(nbytes for _, nbytes in self.workspaces.values())

    @invariant()
    def private_pools_keep_their_holders_and_memory(self) -> None:
        allocator = self.allocator
        routed_to, self.routed_to = self.routed_to, None
        if not (self.holders or self.routes or allocator.private_pools or allocator.routes):
            self.reserved = {}
            return  # (no private pool was made, or every one has gone)
        with allocator.locked():  # (runs the releases finalizers left first)
            routes = [pool.id for pool, _ in allocator.routes]
            pools = dict(allocator.private_pools)
            reserved: dict[tuple[int, int], int] = {}
            if pools:
                for b in self._blocks():
                    owner = b.segment.pool.owner
                    if owner is not None:
                        reserved[owner.id] = reserved.get(owner.id, 0) + b.size
        assert routes == [pool for _, pool in self.routes]
        assert set(pools) <= set(self.holders)
        for pool, holders in list(self.holders.items()):
            private = pools.get(pool)
            if holders:
                assert private is not None and not private.freeable
                assert private.use_count == holders, (pool, private.use_count, holders)
            elif private is None:
                del self.holders[pool]
            else:
                assert private.freeable
        for pool, before in self.reserved.items():
            if self.holders.get(pool) and pool != routed_to:
                assert reserved.get(pool, 0) >= before, f"held pool {pool} gave memory back"
        self.reserved = reserved

    def teardown(self) -> None:
        vram.sim.clear_faults()
        self.blocks = (-1, [])  # (their record_use events go back to the allocator's spares)
        allocator = self.allocator
        if allocator is None:  # (no example ran)
            self.exit.close()
            return
        if self.capture is not None:
            self._end_capture(join=True)
        while self.pool_uses:
            self._leave_pool()
        for graph, _ in self.graphs:
            graph.reset()
        self.graphs.clear()
        self.pools.clear()
        if self.worker is not None:
            self.worker.shutdown(wait=True)  # its workspaces are freed once it has ended
        self.exit.close()  # leaves deferred mode: everything held runs
        for ptr in list(self.live):
            allocator.free(ptr)
        vram.memory.empty_cache(self.device)
        left = [key for key in _workspace._workspaces if key[1] is allocator]
        for ptr in list(allocator._allocated):  # (what a failed step left behind)
            allocator.free(ptr)
        for key in left:
            del _workspace._workspaces[key]
        _workspace._stats.pop(allocator, None)
        allocator.empty_cache()
        for _, _, events in self.guards:
            for event in events:
                self.sim.event_destroy(event)
        lifetimes = allocator.lifetimes  # the events it kept for reuse go with it
        for event in lifetimes.spare_events + [
            e for s in lifetimes.peer_spares.values() for e in s
        ]:
            self.sim.event_destroy(event)
        pools = list(allocator.private_pools)
        _registry._allocators.pop(self.device, None)
        _config.set_default_config(None)
        vram.sim.set_capacity(0, self.old_capacity)
        assert not left, f"workspaces of an ended thread left after empty_cache: {left}"
        assert not pools, f"private pools left after every holder went: {pools}"


def test_allocator_state_machine():
    AllocatorMachine.steps = 0
    AllocatorMachine.seen = Counter()
    run_state_machine_as_test(
        AllocatorMachine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    assert AllocatorMachine.steps >= MIN_STEPS
    if EXAMPLES >= 240:  # the mix reached what it is for
        for what in ("captures ended", "captures failed", "replays", "MemPools dropped"):
            assert AllocatorMachine.seen[what], what
        assert AllocatorMachine.seen["workspaces kept by empty_cache"]


# ------------------------------------------------------------------- data integrity
def test_data_integrity_over_random_operations(sim0):
    """Every live block keeps the pattern written into all of its bytes until it is freed."""
    rng = random.Random(1234)
    drv = vram.sim.driver()
    allocator = _registry.allocator_for(sim0)
    side = streams()[1:]
    live: dict[int, tuple[int, int]] = {}
    with vram.sim.deferred():
        for step in range(3000):
            action = rng.random()
            if not live or (action < 0.5 and len(live) < 200):
                size = rng.choice([rng.randint(1, 8 * KiB), rng.randint(1, 3 * MiB)])
                stream = rng.choice(streams()).cuda_stream
                ptr = allocator.malloc(size, stream)
                assert ptr not in live
                pattern = step % 251 + 1
                drv.view(ptr, size)[:] = pattern
                live[ptr] = (size, pattern)
            elif action < 0.6:
                allocator.record_stream(rng.choice(sorted(live)), rng.choice(side).cuda_stream)
            elif action < 0.7:
                drv.enqueue(rng.choice(side).cuda_stream, lambda: None)
            elif action < 0.72:
                vram.sim.run()
            elif action < 0.73:
                allocator.empty_cache()
            else:
                ptr = rng.choice(sorted(live))
                size, pattern = live.pop(ptr)
                assert (drv.view(ptr, size) == pattern).all(), f"block at {ptr:#x} overwritten"
                allocator.free(ptr)
    for ptr, (size, pattern) in live.items():
        assert (drv.view(ptr, size) == pattern).all()
