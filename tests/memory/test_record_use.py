"""record_use (pytorch#181191) on sim with deferred streams: reuse at once, the data proves
that the next owner's writes land after the consumers' reads."""

from __future__ import annotations

import threading

import pytest

import vram
from vram.memory import caching_allocator_alloc, caching_allocator_delete

MiB = 1 << 20
N = 4096  # bytes of each test allocation (a small-pool block)


@pytest.fixture
def drv():
    return vram.sim.driver()


def fill(ptr: int, value: int, nbytes: int, stream: vram.Stream) -> None:
    """Queue a write of ``value`` over ``nbytes`` at ``ptr`` on ``stream`` (a kernel)."""
    vram.sim.driver().memset_d8(ptr, value, nbytes, stream.cuda_stream)


def read_later(ptr: int, nbytes: int, stream: vram.Stream, seen: list) -> None:
    """Queue a consumer kernel on ``stream`` that copies the bytes at ``ptr`` into ``seen``."""
    drv = vram.sim.driver()
    drv.enqueue(stream.cuda_stream, lambda: seen.append(bytes(drv.view(ptr, nbytes))))


def consume(ptr: int, nbytes: int, producer: vram.Stream, consumer: vram.Stream, seen: list):
    """The pipeline's hand-off: the consumer waits for the producer, then reads ``ptr``."""
    consumer.wait_stream(producer)
    read_later(ptr, nbytes, consumer, seen)


@pytest.fixture
def waits(monkeypatch, drv):
    """Every (stream, event) the allocator makes a stream wait on, in order."""
    calls: list[tuple[int, int]] = []
    real = drv.stream_wait_event

    def spy(stream: int, event: int) -> None:
        calls.append((stream, event))
        real(stream, event)

    monkeypatch.setattr(drv, "stream_wait_event", spy)
    return calls


def test_freed_block_is_handed_out_again_at_once_and_old_reads_see_old_data(sim0):
    producer, side = vram.current_stream(), vram.Stream()
    seen: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(N, stream=producer)
        fill(ptr, 1, N, producer)
        consume(ptr, N, producer, side, seen)
        vram.memory.record_use(ptr, side)
        caching_allocator_delete(ptr)
        again = caching_allocator_alloc(N, stream=producer)
        fill(again, 2, N, producer)
        assert again == ptr
        assert seen == []  # the consumer is still in flight
    assert seen == [b"\x01" * N]
    assert bytes(vram.sim.driver().view(ptr, N)) == b"\x02" * N
    caching_allocator_delete(again)


def test_without_record_use_the_new_owner_overwrites_data_still_being_read(sim0):
    """The hazard record_use exists for: the same sequence, minus the call."""
    producer, side = vram.current_stream(), vram.Stream()
    seen: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(N, stream=producer)
        fill(ptr, 1, N, producer)
        consume(ptr, N, producer, side, seen)
        caching_allocator_delete(ptr)
        again = caching_allocator_alloc(N, stream=producer)
        fill(again, 2, N, producer)
    assert again == ptr
    assert seen == [b"\x02" * N]
    caching_allocator_delete(again)


def test_reuse_waits_on_the_event_only_not_on_later_work_of_the_consumer(sim0, drv):
    producer, side = vram.current_stream(), vram.Stream()
    seen: list[bytes] = []
    unrelated: list[int] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(N, stream=producer)
        fill(ptr, 1, N, producer)
        consume(ptr, N, producer, side, seen)
        vram.memory.record_use(ptr, side)
        drv.enqueue(side.cuda_stream, lambda: unrelated.append(1))  # e.g. four matmuls
        caching_allocator_delete(ptr)
        again = caching_allocator_alloc(N, stream=producer)
        fill(again, 2, N, producer)
        producer.synchronize()
        assert seen == [b"\x01" * N]
        assert unrelated == []  # the new owner did not wait for the side stream's later work
        assert vram.sim.pending(side) == 1
    assert unrelated == [1]
    caching_allocator_delete(again)


def test_two_consumers_on_two_streams_are_both_waited_on(sim0):
    producer, side1, side2 = vram.current_stream(), vram.Stream(), vram.Stream()
    seen1: list[bytes] = []
    seen2: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(N, stream=producer)
        fill(ptr, 1, N, producer)
        consume(ptr, N, producer, side1, seen1)
        vram.memory.record_use(ptr, side1)
        consume(ptr, N, producer, side2, seen2)
        vram.memory.record_use(ptr, side2)
        caching_allocator_delete(ptr)
        again = caching_allocator_alloc(N, stream=producer)
        fill(again, 2, N, producer)
        assert again == ptr
    assert seen1 == [b"\x01" * N]
    assert seen2 == [b"\x01" * N]
    caching_allocator_delete(again)


def test_calls_on_one_stream_keep_the_newest_event(sim0, waits, drv):
    """A later use on the same stream completes after the earlier ones: the next owner waits
    on the last record_use's event only."""
    producer, side = vram.current_stream(), vram.Stream()
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(N, stream=producer)
        block = vram.memory.allocator_for(sim0)._allocated[ptr]
        for _ in range(3):
            drv.enqueue(side.cuda_stream, lambda: None)
            vram.memory.record_use(ptr, side)
        [newest] = block.use_events
        caching_allocator_delete(ptr)
        again = caching_allocator_alloc(N, stream=producer)
    assert again == ptr
    assert waits == [(producer.cuda_stream, newest.handle)]
    caching_allocator_delete(again)


def test_coexists_with_record_stream_both_gate_reuse(sim0, drv):
    producer, side1, side2 = vram.current_stream(), vram.Stream(), vram.Stream()
    seen1: list[bytes] = []
    seen2: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(N, stream=producer)
        fill(ptr, 1, N, producer)
        consume(ptr, N, producer, side1, seen1)
        vram.memory.record_stream(ptr, side1)
        consume(ptr, N, producer, side2, seen2)
        vram.memory.record_use(ptr, side2)
        caching_allocator_delete(ptr)
        other = caching_allocator_alloc(N, stream=producer)
        assert other != ptr  # record_stream: not back in the pool while side1 may read it
        side1.synchronize()  # runs the producer's fill and side1's read, not side2's
        assert seen1 == [b"\x01" * N]
        assert seen2 == []
        again = caching_allocator_alloc(N, stream=producer)
        assert again == ptr  # record_stream's event completed: back in the pool
        fill(again, 2, N, producer)
    assert seen2 == [b"\x01" * N]  # record_use still made the new owner wait
    caching_allocator_delete(other)
    caching_allocator_delete(again)


def test_reuse_from_a_third_stream_waits_too(sim0):
    vram.memory.set_allocator_settings("cross_stream_reuse:True")
    first, consumer, third = vram.Stream(), vram.Stream(), vram.Stream()
    seen_first: list[bytes] = []
    seen_consumer: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(2 * MiB, stream=first)  # a whole small segment
        fill(ptr, 1, 2 * MiB, first)
        read_later(ptr, 2 * MiB, first, seen_first)
        consume(ptr, 2 * MiB, first, consumer, seen_consumer)
        vram.memory.record_use(ptr, consumer)
        caching_allocator_delete(ptr)
        again = caching_allocator_alloc(2 * MiB, stream=third)
        fill(again, 2, 2 * MiB, third)
        assert again == ptr
        third.synchronize()
        assert seen_first == [b"\x01" * 2 * MiB]
        assert seen_consumer == [b"\x01" * 2 * MiB]
    caching_allocator_delete(again)


def test_no_op_on_the_allocation_stream(sim0):
    producer = vram.current_stream()
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(N, stream=producer)
        queued = vram.sim.pending(producer)
        vram.memory.record_use(ptr, producer)
        caching_allocator_delete(ptr)
        again = caching_allocator_alloc(N, stream=producer)
        assert again == ptr
        assert vram.sim.pending(producer) == queued  # no event, no wait
    caching_allocator_delete(again)


def test_null_pointer_is_ignored_with_a_warning(sim0):
    with pytest.warns(RuntimeWarning, match="null pointer"):
        vram.memory.record_use(0, vram.current_stream())


def test_a_peer_devices_stream_is_waited_on_by_the_next_owner(sim0, waits, drv):
    producer = vram.current_stream()
    elsewhere = vram.Stream("sim:1")
    with vram.sim.deferred():
        drv.enqueue(elsewhere.cuda_stream, lambda: None)  # sim:1's read, still queued
        ptr = caching_allocator_alloc(N, stream=producer)
        vram.memory.record_use(ptr, elsewhere)  # sim:1 read it through peer access
        caching_allocator_delete(ptr)
        again = caching_allocator_alloc(N, stream=producer)
    assert [stream for stream, _ in waits] == [producer.cuda_stream]
    caching_allocator_delete(again)


def test_allocation_record_use_takes_a_stream_and_waits(sim0):
    producer, side = vram.current_stream(), vram.Stream()
    seen: list[bytes] = []
    with vram.sim.deferred():
        allocation = vram.memory.allocate(N, sim0, producer)
        ptr = allocation.ptr
        fill(ptr, 1, N, producer)
        consume(ptr, N, producer, side, seen)
        allocation.record_use(side)
        del allocation
        again = vram.memory.allocate(N, sim0, producer)
        fill(again.ptr, 2, N, producer)
        assert again.ptr == ptr
    assert seen == [b"\x01" * N]


def test_record_use_on_a_peer_devices_stream_holds_the_next_owner(sim0):
    """sim:1 reads sim:0's buffer (a peer copy queued on a sim:1 stream) and records its use
    there: the block goes back at once, and its next owner on sim:0 waits for that read."""
    sim = vram.sim.driver()
    peer = vram.Stream("sim:1")
    producer = vram.current_stream()
    out = vram.memory.allocate(N, vram.device("sim:1"), peer)
    with vram.sim.deferred():
        x = vram.memory.allocate(N, sim0, producer)
        fill(x.ptr, 1, N, producer)
        peer.wait_stream(producer)
        sim.memcpy_peer(out.ptr, 1, x.ptr, 0, N, peer.cuda_stream)
        x.record_use(peer)
        ptr = x.ptr
        del x
        again = vram.memory.allocate(N, sim0, producer)
        assert again.ptr == ptr  # reused at once ...
        fill(again.ptr, 2, N, producer)  # ... but this waits for sim:1's read
    assert bytes(sim.view(out.ptr, N)) == b"\x01" * N


def test_allocation_record_use_warns_for_a_freed_allocation(sim0):
    allocation = vram.memory.allocate(N, sim0)
    allocation.free()
    with pytest.warns(RuntimeWarning, match="null pointer"):
        allocation.record_use(vram.Stream())


def test_allocation_record_stream_rejects_a_stream_of_another_device(sim0):
    allocation = vram.memory.allocate(N, sim0)
    with pytest.raises(ValueError, match="stream"):
        allocation.record_stream(vram.Stream("sim:1"))
    with pytest.raises(TypeError, match="stream"):
        allocation.record_stream(0)


def test_allocation_record_stream_takes_a_stream(sim0):
    side = vram.Stream()
    with vram.sim.deferred():
        allocation = vram.memory.allocate(N, sim0)
        ptr = allocation.ptr
        vram.sim.driver().enqueue(side.cuda_stream, lambda: None)  # keeps side busy
        allocation.record_stream(side)
        allocation.free()
        other = vram.memory.allocate(N, sim0)
        assert other.ptr != ptr  # held until side's work is done
        side.synchronize()
        again = vram.memory.allocate(N, sim0)
        assert again.ptr == ptr


def test_split_remainder_keeps_the_waits(sim0, waits):
    producer, side = vram.current_stream(), vram.Stream()
    seen: list[bytes] = []
    with vram.sim.deferred():
        ptr = caching_allocator_alloc(8 * MiB, stream=producer)  # the front of a 20 MiB segment
        fill(ptr, 1, 8 * MiB, producer)
        consume(ptr, 8 * MiB, producer, side, seen)
        vram.memory.record_use(ptr, side)
        caching_allocator_delete(ptr)  # merges back: one free 20 MiB block with the event
        front = caching_allocator_alloc(4 * MiB, stream=producer)  # split: front + remainder
        assert front == ptr
        mine = [w for w in waits if w[0] == producer.cuda_stream]
        assert len(mine) == 1
        back = caching_allocator_alloc(4 * MiB, stream=producer)  # from the remainder
        assert back == ptr + 4 * MiB
        mine = [w for w in waits if w[0] == producer.cuda_stream]
        assert mine == [mine[0], mine[0]]  # the remainder kept the consumer's event
        fill(back, 2, 4 * MiB, producer)
    assert seen == [b"\x01" * 8 * MiB]
    caching_allocator_delete(front)
    caching_allocator_delete(back)


def test_merge_carries_the_waits_of_both_blocks(sim0):
    producer, side1, side2 = vram.current_stream(), vram.Stream(), vram.Stream()
    seen1: list[bytes] = []
    seen2: list[bytes] = []
    with vram.sim.deferred():
        a = caching_allocator_alloc(4 * MiB, stream=producer)
        b = caching_allocator_alloc(4 * MiB, stream=producer)
        assert b == a + 4 * MiB  # neighbours in one 20 MiB segment
        fill(a, 1, 8 * MiB, producer)
        consume(a, 4 * MiB, producer, side1, seen1)
        vram.memory.record_use(a, side1)
        consume(b, 4 * MiB, producer, side2, seen2)
        vram.memory.record_use(b, side2)
        caching_allocator_delete(a)
        caching_allocator_delete(b)  # merges with a and the rest: one free 20 MiB block
        both = caching_allocator_alloc(8 * MiB, stream=producer)
        assert both == a
        fill(both, 2, 8 * MiB, producer)
    assert seen1 == [b"\x01" * 4 * MiB]
    assert seen2 == [b"\x01" * 4 * MiB]
    caching_allocator_delete(both)


def test_reuse_in_eager_mode_needs_no_wait(sim0, waits):
    producer, side = vram.current_stream(), vram.Stream()
    ptr = caching_allocator_alloc(N, stream=producer)
    vram.memory.record_use(ptr, side)  # eager: the event completes at once
    caching_allocator_delete(ptr)
    again = caching_allocator_alloc(N, stream=producer)
    assert again == ptr
    assert waits == []  # the event had completed at the free: dropped, nothing to wait for
    assert vram.sim.pending(producer) == 0
    caching_allocator_delete(again)


def test_record_use_is_thread_safe(sim0, waits):
    producer = vram.current_stream()
    streams = [vram.Stream() for _ in range(4)]
    ptr = caching_allocator_alloc(N, stream=producer)
    errors: list[BaseException] = []

    def worker(stream: vram.Stream) -> None:
        try:
            for _ in range(50):
                vram.memory.record_use(ptr, stream)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with vram.sim.deferred():
        threads = [threading.Thread(target=worker, args=(s,)) for s in streams]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        caching_allocator_delete(ptr)
        again = caching_allocator_alloc(N, stream=producer)
    assert errors == []
    assert sorted(stream for stream, _ in waits) == [producer.cuda_stream] * 4  # one a stream
    assert len({event for _, event in waits}) == 4
    caching_allocator_delete(again)


def test_record_use_on_a_pointer_that_is_not_allocated_raises(sim0):
    ptr = caching_allocator_alloc(N)
    caching_allocator_delete(ptr)
    with pytest.raises(ValueError, match="record_use"):
        vram.memory.record_use(ptr, vram.Stream())


def test_blocks_dropped_together_pass_a_use_on_to_the_next_owner_of_either(sim0, waits):
    """Two tensors dropped together, the second used on a side stream (record_use): the
    first one's free merges with the second's, so the next owner of the first one's bytes
    waits on that use, as in PyTorch. (A take-back of a block whose free merges with
    others', Note [Taking a dropped block back], must keep this wait.)"""
    producer, side = vram.current_stream(), vram.Stream()
    seen: list[bytes] = []
    with vram.sim.deferred():
        vram.empty(N // 4)  # (dropped at once: the segment is made, a and b are best fit's)
        a = vram.empty(N // 4)
        b = vram.empty(N // 4)  # (right after a, in the same segment)
        pa, pb = a.data_ptr(), b.data_ptr()
        fill(pb, 1, N, producer)
        consume(pb, N, producer, side, seen)
        b.record_use(side)
        del b, a  # b is dropped first, a last: a's free merges with b's
        before = len(waits)
        again = vram.empty(N // 4)
        assert again.data_ptr() == pa
        assert [stream for stream, _ in waits[before:]] == [producer.cuda_stream]
    assert seen == [b"\x01" * N]


@pytest.mark.parametrize("order", ["higher first", "lower first"])
def test_a_pair_dropped_together_passes_the_higher_ones_use_to_the_lower_ones_next_owner(
    sim0, waits, order
):
    """Two tensors next to each other dropped together, the higher one used on a side stream:
    their frees merge, and best fit cuts the lower one's bytes off the merged block, which
    carries the use, so its next owner waits on it (the take-back of a merged pair, Note
    [Taking a dropped block back], must not answer the lower block without that wait)."""
    producer, side = vram.current_stream(), vram.Stream()
    seen: list[bytes] = []
    with vram.sim.deferred():
        held = vram.empty(N // 4)  # (made with the segment; a and b are best fit's, marked)
        a = vram.empty(N // 4)
        b = vram.empty(N // 4)  # (right after a, in the same segment)
        after = vram.empty(N // 4)  # (held: b's free does not merge with the free rest)
        pa, pb = a.data_ptr(), b.data_ptr()
        assert pb == pa + N == after.data_ptr() - N
        fill(pb, 1, N, producer)
        consume(pb, N, producer, side, seen)
        b.record_use(side)
        if order == "higher first":
            del b, a
        else:
            del a, b
        before = len(waits)
        again = vram.empty(N // 4)
        assert again.data_ptr() == pa
        assert [stream for stream, _ in waits[before:]] == [producer.cuda_stream]
        del held, after
    assert seen == [b"\x01" * N]
