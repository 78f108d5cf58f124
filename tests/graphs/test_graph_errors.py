"""Illegal work during capture on sim: each raises an error naming it, the capture ends in
CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and the allocator is consistent and usable after."""

from __future__ import annotations

import threading

import pytest

import vram
from vram.memory import allocator_for
from vram.memory._pool import ALLOCATED, FREE, PENDING

MiB = 1 << 20


def assert_consistent(allocator) -> None:
    """No capture left behind; stats recomputed from the blocks; the index holds exactly
    the free blocks; segments tiled."""
    assert allocator.routes == [] and allocator.lifetimes.captures == 0
    blocks = allocator.all_blocks()
    allocated = [b for b in blocks if b.state == ALLOCATED]
    stats = allocator.memory_stats()
    assert stats["allocated_bytes.all.current"] == sum(b.size for b in allocated)
    assert stats["allocation.all.current"] == len(allocated)
    assert stats["reserved_bytes.all.current"] == sum(b.size for b in blocks)
    active = [b for b in blocks if b.state in (ALLOCATED, PENDING)]
    assert stats["active_bytes.all.current"] == sum(b.size for b in active)
    free = sorted(id(b) for b in blocks if b.state == FREE)
    assert free == sorted(id(b) for pool in allocator._all_pools() for b in pool.free_blocks())
    for b in blocks:
        if b.next is not None:
            assert b.next.prev is b and b.next.ptr == b.ptr + b.size


def capture_failing(body, mode: str = "global") -> vram.CudaError:
    """Run ``body`` inside a capture; the error of ending it."""
    g = vram.CUDAGraph()
    side = vram.Stream()
    with vram.stream(side):
        g.capture_begin(capture_error_mode=mode)
        body()
        with pytest.raises(vram.CudaError) as ended:
            g.capture_end()
    return ended.value


def test_synchronize_during_capture(sim0):
    x = vram.ones(1024, device=sim0)

    def body() -> None:
        x.add_(1.0)
        with pytest.raises(vram.CudaError, match="cuCtxSynchronize") as info:
            vram.synchronize()
        assert info.value.name == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"

    assert capture_failing(body).name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert_consistent(allocator_for(sim0))
    vram.synchronize()
    assert x.numpy()[0] == 1.0  # nothing captured ran


def test_synchronizing_the_capturing_stream_or_reading_a_tensor(sim0):
    x = vram.ones(16, device=sim0)

    def body() -> None:
        y = x * 2.0
        with pytest.raises(vram.CudaError, match="cuStreamSynchronize") as info:
            y.numpy()  # a copy to the host, then a wait: illegal in a capture
        assert info.value.name == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"

    assert capture_failing(body).name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert_consistent(allocator_for(sim0))


def test_querying_an_event_recorded_in_the_capture(sim0):
    def body() -> None:
        vram.ones(16)
        event = vram.current_stream().record_event()
        with pytest.raises(vram.CudaError) as info:
            event.query()
        assert info.value.name == "CUDA_ERROR_CAPTURED_EVENT"

    ended = capture_failing(body, mode="relaxed")  # the capture is invalidated even so
    assert ended.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert_consistent(allocator_for(sim0))


def test_empty_cache_during_capture_is_refused_and_harmless(sim0):
    x = vram.ones(1024, device=sim0)
    g = vram.CUDAGraph()
    with vram.graph(g):
        y = x + 1.0
        with pytest.raises(RuntimeError, match="empty_cache: a CUDA graph is being captured"):
            vram.empty_cache()
    g.replay()  # the capture was not disturbed
    assert y.numpy()[0] == 2.0
    assert_consistent(allocator_for(sim0))


def test_a_device_malloc_outside_the_pool_during_a_global_capture(sim0):
    """Another stream's allocation needs a new segment: a device malloc, which a global
    capture forbids. Nothing changes; the capture is invalidated."""
    allocator = allocator_for(sim0)
    other = vram.Stream(sim0)
    before = allocator.memory_stats()["reserved_bytes.all.current"]

    def body() -> None:
        vram.ones(16)  # from the graph's pool: allowed (relaxed growth)
        with pytest.raises(vram.CudaError, match="cuMemAlloc") as info:
            vram.memory.caching_allocator_alloc(4 * MiB, sim0, other)
        assert info.value.name == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"

    assert capture_failing(body).name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert_consistent(allocator)
    ptr = vram.memory.caching_allocator_alloc(4 * MiB, sim0, other)  # fine after
    vram.memory.caching_allocator_delete(ptr)
    vram.empty_cache()
    assert allocator.memory_stats()["reserved_bytes.all.current"] == before


def test_relaxed_and_thread_local_captures_let_others_allocate(sim0):
    other = vram.Stream(sim0)
    for mode in ("relaxed", "thread_local"):
        g = vram.CUDAGraph()
        results: list = []
        with vram.graph(g, capture_error_mode=mode):
            vram.ones(16)

            def elsewhere(results: list = results) -> None:
                with vram.device(sim0):
                    ptr = vram.memory.caching_allocator_alloc(4 * MiB, sim0, other)
                    vram.memory.caching_allocator_delete(ptr)
                    results.append("ok")

            thread = threading.Thread(target=elsewhere)
            thread.start()
            thread.join()
        assert results == ["ok"]
    assert_consistent(allocator_for(sim0))


def test_a_global_capture_forbids_other_threads_device_mallocs(sim0):
    other = vram.Stream(sim0)
    errors: list = []

    def elsewhere() -> None:
        with vram.device(sim0):
            try:
                vram.memory.caching_allocator_alloc(4 * MiB, sim0, other)
            except vram.CudaError as exc:
                errors.append(exc.name)

    def body() -> None:
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()

    assert capture_failing(body).name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert errors == ["CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"]
    assert_consistent(allocator_for(sim0))


def test_an_exception_in_the_body_abandons_the_capture(sim0):
    x = vram.ones(16, device=sim0)
    g = vram.CUDAGraph()
    with pytest.raises(KeyError, match="user error"), vram.graph(g):
        x.add_(1.0)
        raise KeyError("user error")
    assert not vram.is_current_stream_capturing()
    assert_consistent(allocator_for(sim0))
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    h = vram.CUDAGraph()
    with vram.graph(h):  # capture works again
        x.add_(1.0)
    h.replay()
    assert x.numpy()[0] == 2.0


def test_a_failed_capture_leaves_no_pool_holder(sim0):
    handle = vram.graph_pool_handle()
    allocator = allocator_for(sim0)
    with pytest.raises(vram.CudaError), vram.graph(vram.CUDAGraph(), pool=handle):
        vram.ones(16)
        vram.synchronize()
    assert allocator.private_pools[handle].freeable  # its only holder is gone
    vram.empty_cache()
    assert handle not in allocator.private_pools
    assert_consistent(allocator)


def test_ending_on_another_stream(sim0):
    g = vram.CUDAGraph()
    side = vram.Stream(sim0)
    with vram.stream(side):
        g.capture_begin()
        vram.ones(16)
    with pytest.raises(RuntimeError, match="same stream it began on"):
        g.capture_end()
    with vram.stream(side):
        g.capture_end()
    assert_consistent(allocator_for(sim0))


def test_two_captures_cannot_record_into_one_pool_at_once(sim0):
    handle = vram.graph_pool_handle()
    g = vram.CUDAGraph()
    with vram.graph(g, pool=handle, capture_error_mode="relaxed"):
        vram.ones(16)
        other = vram.CUDAGraph()
        with vram.stream(vram.Stream(sim0)), pytest.raises(RuntimeError, match="share a pool"):
            other.capture_begin(pool=handle)
    assert_consistent(allocator_for(sim0))
