"""cross_stream_reuse: a free block of another stream is taken before the pool grows, and
the new stream waits on an event recorded at its free (never a host wait)."""

from __future__ import annotations

import pytest

import vram
from vram.memory import caching_allocator_alloc, caching_allocator_delete

MiB = 1 << 20
BIG = 64 * MiB  # a large request: a segment of its own


@pytest.fixture
def cross(sim0):
    vram.memory.set_allocator_settings("cross_stream_reuse:True")
    return sim0


def fill(ptr: int, value: int, nbytes: int, stream: vram.Stream) -> None:
    vram.sim.driver().memset_d8(ptr, value, nbytes, stream.cuda_stream)


def read_later(ptr: int, nbytes: int, stream: vram.Stream, seen: list) -> None:
    drv = vram.sim.driver()
    drv.enqueue(stream.cuda_stream, lambda: seen.append(bytes(drv.view(ptr, nbytes))))


def stats() -> dict[str, int]:
    return vram.memory.memory_stats()


def test_off_by_default_another_streams_free_block_is_not_taken(sim0):
    a, b = vram.Stream(), vram.Stream()
    assert vram.memory.get_allocator_settings()["cross_stream_reuse"] is False
    ptr = caching_allocator_alloc(BIG, stream=a)
    caching_allocator_delete(ptr)
    other = caching_allocator_alloc(BIG, stream=b)
    assert other != ptr
    assert stats()["num_device_alloc"] == 2
    assert vram.memory.memory_reserved() == 2 * BIG
    caching_allocator_delete(other)


def test_on_another_streams_free_block_is_taken_before_growing(cross):
    a, b = vram.Stream(), vram.Stream()
    ptr = caching_allocator_alloc(BIG, stream=a)
    caching_allocator_delete(ptr)
    other = caching_allocator_alloc(BIG, stream=b)
    assert other == ptr
    assert stats()["num_device_alloc"] == 1
    assert vram.memory.memory_reserved() == BIG
    caching_allocator_delete(other)
    again = caching_allocator_alloc(BIG, stream=b)  # now it is b's own block
    assert again == ptr
    caching_allocator_delete(again)


def test_on_the_new_stream_waits_for_the_old_streams_work(cross):
    a, b = vram.Stream(), vram.Stream()
    seen: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(BIG, stream=a)
        fill(ptr, 1, BIG, a)
        read_later(ptr, BIG, a, seen)  # a kernel on a still reads the block at its free
        caching_allocator_delete(ptr)
        other = caching_allocator_alloc(BIG, stream=b)
        assert other == ptr
        fill(other, 2, BIG, b)
        assert seen == []
    assert seen == [b"\x01" * BIG]
    caching_allocator_delete(other)


def test_on_the_wait_is_on_the_free_not_on_later_work_of_the_old_stream(cross):
    a, b = vram.Stream(), vram.Stream()
    unrelated: list[int] = []
    seen: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(BIG, stream=a)
        fill(ptr, 1, BIG, a)
        read_later(ptr, BIG, a, seen)
        caching_allocator_delete(ptr)
        vram.sim.driver().enqueue(a.cuda_stream, lambda: unrelated.append(1))
        other = caching_allocator_alloc(BIG, stream=b)
        fill(other, 2, BIG, b)
        b.synchronize()
        assert seen == [b"\x01" * BIG]
        assert unrelated == []  # b did not wait for work queued on a after the free
        assert vram.sim.pending(a) == 1
    caching_allocator_delete(other)


def test_on_the_own_streams_free_block_comes_first(cross):
    a, b = vram.Stream(), vram.Stream()
    on_a = caching_allocator_alloc(BIG, stream=a)
    on_b = caching_allocator_alloc(BIG, stream=b)
    caching_allocator_delete(on_a)
    caching_allocator_delete(on_b)
    assert caching_allocator_alloc(BIG, stream=b) == on_b
    assert caching_allocator_alloc(BIG, stream=a) == on_a


def test_on_a_split_segment_is_never_moved(cross):
    """Only whole free segments change stream: a segment's blocks keep one stream."""
    a, b = vram.Stream(), vram.Stream()
    front = caching_allocator_alloc(4 * MiB, stream=a)  # front of a 20 MiB segment
    caching_allocator_alloc(4 * MiB, stream=a)  # keeps the segment split
    caching_allocator_delete(front)
    other = caching_allocator_alloc(4 * MiB, stream=b)
    assert not front <= other < front + 20 * MiB
    assert vram.memory.memory_reserved() == 40 * MiB


def test_on_a_taken_segment_merges_and_is_released_whole(cross):
    a, b = vram.Stream(), vram.Stream()
    first = caching_allocator_alloc(4 * MiB, stream=a)
    caching_allocator_delete(first)  # a whole free 20 MiB segment on a
    taken = caching_allocator_alloc(4 * MiB, stream=b)
    assert taken == first
    caching_allocator_delete(taken)
    vram.memory.empty_cache()
    assert vram.memory.memory_reserved() == 0


def test_on_a_block_freed_by_record_stream_waits_for_its_own_stream(cross):
    a, b, user = vram.Stream(), vram.Stream(), vram.Stream()
    seen: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(BIG, stream=a)
        fill(ptr, 1, BIG, a)
        read_later(ptr, BIG, a, seen)
        vram.memory.record_stream(ptr, user)
        caching_allocator_delete(ptr)
        user.synchronize()  # record_stream's event completes; a's read is still queued
        assert vram.sim.pending(a) > 0
        other = caching_allocator_alloc(BIG, stream=b)
        assert other == ptr
        fill(other, 2, BIG, b)
    assert seen == [b"\x01" * BIG]
    caching_allocator_delete(other)


def test_on_a_block_freed_before_the_option_was_on_still_waits(sim0):
    a, b = vram.Stream(), vram.Stream()
    seen: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(BIG, stream=a)
        fill(ptr, 1, BIG, a)
        read_later(ptr, BIG, a, seen)
        caching_allocator_delete(ptr)
        vram.memory.set_allocator_settings("cross_stream_reuse:True")
        other = caching_allocator_alloc(BIG, stream=b)
        assert other == ptr
        fill(other, 2, BIG, b)
    assert seen == [b"\x01" * BIG]
    caching_allocator_delete(other)


def test_on_record_use_events_travel_with_the_taken_block(cross):
    a, b, consumer = vram.Stream(), vram.Stream(), vram.Stream()
    seen: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(BIG, stream=a)
        fill(ptr, 1, BIG, a)
        consumer.wait_stream(a)
        read_later(ptr, BIG, consumer, seen)
        vram.memory.record_use(ptr, consumer)
        caching_allocator_delete(ptr)
        other = caching_allocator_alloc(BIG, stream=b)
        assert other == ptr
        fill(other, 2, BIG, b)
    assert seen == [b"\x01" * BIG]
    caching_allocator_delete(other)


def test_on_oversize_blocks_do_not_serve_small_requests(sim0):
    vram.memory.set_allocator_settings("cross_stream_reuse:True,max_split_size_mb:40")
    a, b = vram.Stream(), vram.Stream()
    ptr = caching_allocator_alloc(BIG, stream=a)
    caching_allocator_delete(ptr)
    other = caching_allocator_alloc(4 * MiB, stream=b)
    assert not ptr <= other < ptr + BIG
