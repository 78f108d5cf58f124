"""record_stream on sim with deferred streams: a block used on another stream is not handed
out again while work queued there before its free has not run, and is once it has."""

from __future__ import annotations

import pytest

import vram

KiB = 1 << 10
MiB = 1 << 20


@pytest.fixture
def side(sim0):
    return vram.Stream(sim0)


def hold(stream: vram.Stream, ran: list | None = None, tag: str = "work") -> None:
    """Queue work on ``stream`` (held while deferred); it appends ``tag`` to ``ran`` when run."""
    vram.sim.driver().enqueue(stream.cuda_stream, lambda: ran is not None and ran.append(tag))


def test_block_is_not_reused_while_the_recorded_stream_holds_work(alloc, free, stats, side):
    with vram.sim.deferred():
        ptr = alloc(12 * MiB)  # a whole segment of its own
        hold(side)
        vram.memory.record_stream(ptr, side)
        free(ptr)
        other = alloc(12 * MiB)
        assert other != ptr
        s = stats()
        assert s["segment.all.current"] == 2
        assert s["num_device_alloc"] == 2


def test_small_block_is_not_reused_while_pending(alloc, free, stats, side):
    with vram.sim.deferred():
        ptr = alloc(4 * KiB)
        hold(side)
        vram.memory.record_stream(ptr, side)
        free(ptr)
        assert alloc(4 * KiB) == ptr + 4 * KiB  # the rest of the segment, not ptr
        assert stats("segment.all.current") == 1


def test_pending_block_is_active_but_not_allocated(alloc, free, stats, side):
    with vram.sim.deferred():
        ptr = alloc(12 * MiB - 100)
        hold(side)
        vram.memory.record_stream(ptr, side)
        free(ptr)
        s = stats()
        assert (s["allocation.all.current"], s["allocated_bytes.all.current"]) == (0, 0)
        assert (s["active.all.current"], s["active_bytes.all.current"]) == (1, 12 * MiB)
        assert s["active.large_pool.current"] == 1
        assert s["requested_bytes.all.current"] == 12 * MiB - 100
        assert s["inactive_split.all.current"] == 0
        side.synchronize()  # done on the device; the allocator learns at the next malloc
        assert stats("active.all.current") == 1
        alloc(512)
        s = stats()
        assert (s["active.large_pool.current"], s["active_bytes.large_pool.current"]) == (0, 0)
        assert s["requested_bytes.large_pool.current"] == 0


def test_reused_after_the_recorded_stream_synchronizes(alloc, free, stats, side):
    ran: list[str] = []
    with vram.sim.deferred():
        ptr = alloc(12 * MiB)
        hold(side, ran)
        vram.memory.record_stream(ptr, side)
        free(ptr)
        side.synchronize()
        assert ran == ["work"]
        assert alloc(12 * MiB) == ptr
        assert stats("segment.all.current") == 1


def test_reused_after_sim_run(alloc, free, side):
    with vram.sim.deferred():
        ptr = alloc(4 * KiB)
        hold(side)
        vram.memory.record_stream(ptr, side)
        free(ptr)
        vram.sim.run()
        assert alloc(4 * KiB) == ptr


def test_work_queued_after_the_free_does_not_hold_the_block(alloc, free, side):
    ran: list[str] = []
    with vram.sim.deferred():
        ptr = alloc(4 * KiB)
        hold(side, ran, "before")
        vram.memory.record_stream(ptr, side)
        free(ptr)
        hold(side, ran, "after")
        for event, _ in allocator_pending():  # run side up to the allocator's event only
            vram.sim.driver().event_synchronize(event)
        assert ran == ["before"]
        assert alloc(4 * KiB) == ptr


def allocator_pending() -> list:
    """The (event, block) pairs the allocator of sim:0 waits on."""
    allocator = vram.memory.allocator_for("sim:0")
    return [pair for queue in allocator.lifetimes.pending.values() for pair in queue]


def test_every_recorded_stream_must_finish(sim0, alloc, free, side):
    other = vram.Stream(sim0)
    with vram.sim.deferred():
        ptr = alloc(12 * MiB)
        hold(side)
        hold(other)
        vram.memory.record_stream(ptr, side)
        vram.memory.record_stream(ptr, other)
        free(ptr)
        side.synchronize()
        assert alloc(12 * MiB) != ptr
        other.synchronize()
        assert alloc(12 * MiB) == ptr


def test_record_stream_on_the_allocation_stream_is_ignored(sim0, alloc, free, stats):
    current = vram.current_stream(sim0)
    with vram.sim.deferred():
        ptr = alloc(4 * KiB)
        hold(current)
        vram.memory.record_stream(ptr, current)
        free(ptr)
        assert stats("active.all.current") == 0
        assert alloc(4 * KiB) == ptr  # later work on the same stream runs after


def test_pending_blocks_merge_when_they_return(alloc, free, stats, side):
    with vram.sim.deferred():
        a, b = alloc(4 * KiB), alloc(4 * KiB)
        hold(side)
        vram.memory.record_stream(a, side)
        free(a, b)  # b is free at once; a waits
        s = stats()
        assert (s["inactive_split.all.current"], s["active.all.current"]) == (1, 1)
        assert s["inactive_split_bytes.all.current"] == 2 * MiB - 4 * KiB
        vram.sim.run()
        alloc(2 * MiB)  # a 2 MiB block: from the large pool; processes the events first
        s = stats()
        assert s["inactive_split.small_pool.current"] == 0  # one whole free small segment
        assert s["active.small_pool.current"] == 0
        vram.memory.empty_cache("sim:0")
        assert stats("segment.small_pool.current") == 0


def test_empty_cache_synchronizes_pending_frees(alloc, free, stats, side):
    ran: list[str] = []
    with vram.sim.deferred():
        ptr = alloc(12 * MiB)
        hold(side, ran)
        vram.memory.record_stream(ptr, side)
        free(ptr)
        vram.memory.empty_cache("sim:0")
        assert ran == ["work"]  # the allocator waited for it
        s = stats()
        assert s["num_sync_all_streams"] == 1
        assert s["segment.all.current"] == 0
        assert s["active.all.current"] == 0
        assert s["reserved_bytes.all.current"] == 0


def test_out_of_memory_path_synchronizes_pending_frees(capacity, alloc, free, stats, side):
    capacity(16 * MiB)
    with vram.sim.deferred():
        ptr = alloc(12 * MiB)
        hold(side)
        vram.memory.record_stream(ptr, side)
        free(ptr)
        again = alloc(14 * MiB)  # no room: release_cached_blocks waits, frees ptr, retries
        s = stats()
        assert (s["num_sync_all_streams"], s["num_alloc_retries"]) == (1, 1)
        assert s["reserved_bytes.all.current"] == 14 * MiB
        assert again is not None


def test_record_stream_through_an_allocation(sim0, stats, side):
    with vram.sim.deferred():
        allocation = vram.memory.allocate(4 * KiB, sim0)
        hold(side)
        allocation.record_stream(side)
        ptr = allocation.ptr
        allocation.free()
        assert stats("active.all.current") == 1
        assert vram.memory.allocate(4 * KiB, sim0).ptr != ptr
        side.synchronize()
        assert vram.memory.allocate(4 * KiB, sim0).ptr == ptr
