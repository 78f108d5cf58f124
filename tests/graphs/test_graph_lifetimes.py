"""Cross-stream lifetimes during capture on sim: record_stream's events deferred until the
capture ends (without the streams that used the block only in captured work),
graph_capture_record_stream_reuse's reuse inside the capture, record_use's fallback."""

from __future__ import annotations

import pytest

import vram
from vram.memory import allocator_for

N = 256 * 1024  # float32 elements: 1 MiB, a small-pool block


def side_stream(device: vram.Device) -> vram.Stream:
    """A pooled stream other than the graphs' capture stream: the pool hands its 32
    streams out in turn, so after enough earlier tests the next could be that one."""
    capture = vram.graph(vram.CUDAGraph()).capture_stream
    side = vram.Stream(device)
    while side == capture:
        side = vram.Stream(device)
    return side


def use_on(main: vram.Stream, side: vram.Stream, t: vram.Tensor, record: str) -> None:
    """``side`` joins the capture, reads ``t`` and records the use (``record``: the Tensor
    method), and is joined back into ``main``."""
    side.wait_stream(main)
    with vram.stream(side):
        t * 2.0
    getattr(t, record)(side)
    main.wait_stream(side)


def settle(allocator) -> None:
    """Let the allocator free what finalizers dropped (its next call does)."""
    allocator.memory_allocated()


def test_a_block_used_only_by_captured_work_is_freed_when_the_capture_ends(sim0):
    allocator = allocator_for(sim0)
    side = side_stream(sim0)
    g = vram.CUDAGraph()
    with vram.graph(g):
        main = vram.current_stream()
        y = vram.ones(N)
        use_on(main, side, y, "record_stream")
        ptr = y.data_ptr()
        del y
        settle(allocator)
        assert allocator.lifetimes.waiting == 1  # deferred: no event while capturing
        assert allocator.lifetimes.pending == {}
    vram.ones(1)  # the allocator's next call: captured uses need no event
    assert allocator.lifetimes.waiting == 0 and allocator.lifetimes.pending == {}
    with vram.stream(g._capture_stream):
        again = vram.ones(N)  # from the default pool; the graph's block stays the graph's
    assert again.data_ptr() != ptr


def test_uses_from_before_the_capture_still_get_their_events(sim0):
    allocator = allocator_for(sim0)
    side = side_stream(sim0)
    g = vram.CUDAGraph()
    x = vram.ones(N)
    with vram.sim.deferred():
        with vram.stream(side):
            x * 2.0  # held: side has work queued that uses x
        x.record_stream(side)
        with vram.graph(g, capture_error_mode="relaxed"):
            vram.ones(1)
            del x  # freed during the capture: deferred
            settle(allocator)
            assert allocator.lifetimes.waiting == 1
        vram.ones(1)  # the capture is over: an event on side, still pending
        assert list(allocator.lifetimes.pending) == [side.cuda_stream]
        assert allocator.lifetimes.waiting == 1
    vram.ones(1)  # side ran: the block is free
    assert allocator.lifetimes.waiting == 0


@pytest.mark.parametrize("reuse", [True, False])
def test_graph_capture_record_stream_reuse(sim0, reuse):
    vram.memory.set_allocator_settings(f"graph_capture_record_stream_reuse:{reuse}")
    side = side_stream(sim0)
    g = vram.CUDAGraph()
    with vram.graph(g):
        main = vram.current_stream()
        y = vram.ones(N)
        use_on(main, side, y, "record_stream")
        ptr = y.data_ptr()
        del y  # its uses on side were joined back into main
        z = vram.ones(N)
        assert (z.data_ptr() == ptr) is reuse


def test_no_reuse_before_the_using_stream_is_joined_back(sim0):
    vram.memory.set_allocator_settings("graph_capture_record_stream_reuse:True")
    side = side_stream(sim0)
    g = vram.CUDAGraph()
    with vram.graph(g):
        main = vram.current_stream()
        y = vram.ones(N)
        side.wait_stream(main)
        with vram.stream(side):
            y * 2.0
        y.record_stream(side)
        ptr = y.data_ptr()
        del y
        early = vram.ones(N)  # side's use is not ordered before main's next work yet
        assert early.data_ptr() != ptr
        main.wait_stream(side)
        late = vram.ones(N)
        assert late.data_ptr() == ptr
    g.replay()
    vram.synchronize()


def test_record_use_during_capture_falls_back_to_record_stream(sim0):
    allocator = allocator_for(sim0)
    side = side_stream(sim0)
    g = vram.CUDAGraph()
    with vram.graph(g):
        main = vram.current_stream()
        y = vram.ones(N)
        use_on(main, side, y, "record_use")
        block = allocator._allocated[y.data_ptr()]
        assert block.use_events is None  # no event: a stream use instead
        assert allocator.lifetimes.stream_uses[block] == {side.cuda_stream}
        del y
        settle(allocator)
        assert allocator.lifetimes.waiting == 1
    vram.ones(1)
    assert allocator.lifetimes.waiting == 0
