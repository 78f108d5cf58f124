"""The caching allocator under random sequences (hypothesis), invariants checked each step.

Steps: alloc (small, large and oversize sizes on three streams), free, record_stream, work
held on deferred streams, stream synchronize, sim.run(), empty_cache, memory fraction
changes, injected device-malloc failures. After every step:
- live blocks never overlap, and no pointer is live twice;
- a block freed with record_stream work pending is not handed out again before that work
  has run (the test records its own event on the stream just before the free);
- segments are tiled by their blocks, and no two free neighbours are left unmerged;
- every current memory_stats value equals the one recomputed from the blocks, and the
  simulated device holds exactly what the allocator says it reserves.

VRAM_STATEFUL_EXAMPLES scales the run (CI: 240 examples of up to 60 steps, over 10,000 in all).
"""

from __future__ import annotations

import os
import random
from contextlib import ExitStack

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
from vram.memory import _registry, parse_config
from vram.memory._config import SIZE_MAX
from vram.memory._pool import ALLOCATED, FREE, PENDING
from vram.memory._stats import POOL_NAMES, STAT_NAMES

KiB = 1 << 10
MiB = 1 << 20
CAPACITY = 512 * MiB  # the device's memory on top of what other tests hold
EXAMPLES = int(os.environ.get("VRAM_STATEFUL_EXAMPLES", "240"))
STEPS = 60
MIN_STEPS = 10_000 * EXAMPLES // 240

CONFIGS = [
    "",
    "max_split_size_mb:40",
    "max_split_size_mb:40,max_non_split_rounding_mb:30",
    "roundup_power2_divisions:[1:2,64:8,>:4]",
    "garbage_collection_threshold:0.6",
    "expandable_segments:True",
    "cross_stream_reuse:True",
]

SIZES = st.one_of(
    st.integers(1, 4 * KiB),
    st.integers(4 * KiB, MiB),
    st.integers(MiB + 1, 12 * MiB),
    st.integers(12 * MiB, 72 * MiB),
)

_streams: list[vram.Stream] = []


def streams() -> list[vram.Stream]:
    """Three streams of sim:0 (made once: sim streams are never destroyed)."""
    if not _streams:
        device = vram.device("sim:0")
        _streams.extend([vram.default_stream(device), vram.Stream(device), vram.Stream(device)])
    return _streams


def expected_stats(allocator) -> dict[str, int]:
    """The current value of every memory_stats counter, recomputed from the blocks."""
    out = {f"{n}.{p}.current": 0 for n in STAT_NAMES for p in POOL_NAMES}
    max_split = allocator.config.max_split_size
    oversize_allocations = oversize_segments = 0

    def add(name: str, pool: str, amount: int) -> None:
        out[f"{name}.all.current"] += amount
        out[f"{name}.{pool}.current"] += amount

    for b in allocator.all_blocks():
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


class AllocatorMachine(RuleBasedStateMachine):
    """Random allocator traffic on sim:0 with work held on deferred streams."""

    steps = 0  # over all examples of a run

    def __init__(self) -> None:
        super().__init__()
        self.device = vram.device("sim:0")
        self.sim = vram.sim.driver()
        self.streams = streams()
        self.exit = ExitStack()
        self.exit.enter_context(vram.sim.deferred())
        free, total = self.sim.mem_get_info(0)
        self.held_before = total - free  # by allocators of earlier tests
        self.old_capacity = total
        vram.sim.set_capacity(0, self.held_before + CAPACITY)
        _registry._allocators.pop(self.device, None)
        self.allocator = _registry.allocator_for(self.device)
        self.live: dict[int, tuple[int, int]] = {}  # ptr -> (bytes written, pattern)
        self.guards: list[tuple[int, int, list[int]]] = []  # (start, end, events) of frees
        self.patterns = 0

    # ------------------------------------------------------------------ helpers
    def _check_and_forget_guards(self) -> None:
        """Drop guards whose work has run; fail if a live block overlaps one that has not."""
        query = self.sim.event_query
        pending = []
        for start, end, events in self.guards:
            if all(query(e) for e in events):
                for e in events:
                    self.sim.event_destroy(e)
            else:
                pending.append((start, end, events))
        self.guards = pending
        for ptr, block in self.allocator._allocated.items():
            for start, end, _ in pending:
                assert not (ptr < end and start < ptr + block.size), (
                    f"block at {ptr:#x} handed out while record_stream work on it is held"
                )

    # -------------------------------------------------------------------- rules
    @initialize(text=st.sampled_from(CONFIGS))
    def configure(self, text: str) -> None:
        self.allocator.set_config(parse_config(text))

    @rule(size=SIZES, which=st.integers(0, 2))
    def alloc(self, size: int, which: int) -> None:
        AllocatorMachine.steps += 1
        try:
            ptr = self.allocator.malloc(size, self.streams[which].cuda_stream)
        except vram.OutOfMemoryError:
            return
        assert ptr not in self.live, f"{ptr:#x} handed out twice"
        self.patterns += 1
        pattern = self.patterns % 251 + 1
        written = min(size, 256)
        view = self.sim.view(ptr, size)
        view[:written] = pattern
        view[size - written :] = pattern
        self.live[ptr] = (size, pattern)
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
        uses = sorted(self.allocator.lifetimes.stream_uses.get(block, set()))
        events = []
        for stream in uses:  # before the allocator's own events: ours complete first
            event = self.sim.event_create(0, False)
            self.sim.event_record(event, stream)
            events.append(event)
        start, end = block.ptr, block.ptr + block.size
        self.allocator.free(ptr)
        if events:
            self.guards.append((start, end, events))

    @precondition(lambda self: self.live)
    @rule(data=st.data(), which=st.integers(0, 2))
    def record_stream(self, data, which: int) -> None:
        AllocatorMachine.steps += 1
        ptr = data.draw(st.sampled_from(sorted(self.live)))
        self.allocator.record_stream(ptr, self.streams[which].cuda_stream)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), which=st.integers(0, 2))
    def record_use(self, data, which: int) -> None:
        AllocatorMachine.steps += 1
        ptr = data.draw(st.sampled_from(sorted(self.live)))
        self.allocator.record_use(ptr, self.streams[which].cuda_stream)

    @rule(which=st.integers(0, 2))
    def hold_work(self, which: int) -> None:
        AllocatorMachine.steps += 1
        self.sim.enqueue(self.streams[which].cuda_stream, lambda: None)

    @rule(waiter=st.integers(0, 2), waited=st.integers(0, 2))
    def wait_stream(self, waiter: int, waited: int) -> None:
        AllocatorMachine.steps += 1
        self.streams[waiter].wait_stream(self.streams[waited])

    @rule(which=st.integers(0, 2))
    def synchronize(self, which: int) -> None:
        AllocatorMachine.steps += 1
        self.streams[which].synchronize()

    @rule()
    def run_all(self) -> None:
        AllocatorMachine.steps += 1
        vram.sim.run()

    @rule()
    def empty_cache(self) -> None:
        AllocatorMachine.steps += 1
        self.allocator.empty_cache()
        assert not self.allocator.lifetimes.waiting

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

    # --------------------------------------------------------------- invariants
    @invariant()
    def live_blocks_do_not_overlap(self) -> None:
        allocated = self.allocator._allocated
        assert set(allocated) == set(self.live)
        end = 0
        for ptr in sorted(allocated):
            block = allocated[ptr]
            assert block.ptr == ptr and block.state == ALLOCATED
            assert ptr >= end, f"{ptr:#x} overlaps the block before it"
            end = ptr + block.size
            assert block.size >= self.live[ptr][0]

    @invariant()
    def no_reuse_while_recorded_work_is_held(self) -> None:
        self._check_and_forget_guards()

    @invariant()
    def segments_are_tiled_and_merged(self) -> None:
        for b in self.allocator.all_blocks():
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
        free = [b for b in allocator.all_blocks() if b.state == FREE]
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
        expected = expected_stats(self.allocator)
        actual = {key: stats[key] for key in expected}
        assert actual == expected
        for key, value in stats.items():
            if key.endswith(".current"):
                assert stats[key[: -len("current")] + "peak"] >= value >= 0, key
        max_split = self.allocator.config.max_split_size
        assert stats["max_split_size"] == (-1 if max_split == SIZE_MAX else max_split)
        reserved = stats["reserved_bytes.all.current"]
        assert self.allocator.total_allocated_memory == reserved
        free, total = self.sim.mem_get_info(0)
        assert total - free == self.held_before + reserved

    def teardown(self) -> None:
        vram.sim.clear_faults()
        self.exit.close()  # leaves deferred mode: everything held runs
        for ptr in list(self.allocator._allocated):
            self.allocator.free(ptr)
        self.allocator.empty_cache()
        for _, _, events in self.guards:
            for event in events:
                self.sim.event_destroy(event)
        lifetimes = self.allocator.lifetimes  # the events it kept for reuse go with it
        for event in lifetimes.spare_events + [
            e for s in lifetimes.peer_spares.values() for e in s
        ]:
            self.sim.event_destroy(event)
        _registry._allocators.pop(self.device, None)
        vram.sim.set_capacity(0, self.old_capacity)


def test_allocator_state_machine():
    AllocatorMachine.steps = 0
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
