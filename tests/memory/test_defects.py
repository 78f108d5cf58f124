"""Regression tests of the defects an independent fuzz found in the allocator (issue 8),
and of the memory API's argument checks: each failed before its fix."""

from __future__ import annotations

import gc
import threading
import warnings

import numpy as np
import pytest

import vram
from vram.memory import (
    _api,
    _config,
    _uncached,
    allocator_for,
    caching_allocator_alloc,
    caching_allocator_delete,
)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def fill(ptr: int, nbytes: int, value: int, stream: vram.Stream) -> None:
    vram.sim.driver().memset_d8(ptr, value, nbytes, stream.cuda_stream)


def read(ptr: int, nbytes: int) -> np.ndarray:
    return vram.sim.driver().view(ptr, nbytes).copy()


# ---- use-after-free: expandable segments + record_use ----------------------------------
def test_unmapping_a_free_page_waits_for_its_record_use_events(sim0):
    """The fuzz's repro: a page freed with a record_use event pending on another stream is
    not unmapped (and re-mapped, and overwritten) before the consumer's copy has run."""
    vram.memory.set_allocator_settings("expandable_segments:True")
    producer, consumer = vram.current_stream(), vram.Stream()
    with vram.sim.deferred():
        x = caching_allocator_alloc(2 * MiB)
        y = caching_allocator_alloc(2 * MiB, stream=consumer)
        fill(x, 2 * MiB, 7, producer)
        consumer.wait_stream(producer)
        vram.sim.driver().memcpy_dtod(y, x, 2 * MiB, consumer.cuda_stream)
        vram.memory.record_use(x, consumer)
        caching_allocator_delete(x)
        vram.memory.empty_cache()  # may unmap x's page: only after the copy has run
        z = caching_allocator_alloc(2 * MiB)  # re-maps a page, then producer writes 9
        fill(z, 2 * MiB, 9, producer)
        vram.sim.run()
    assert (read(y, 2 * MiB) == 7).all()


# ---- stream handles are checked on entry; a failing free changes nothing ----------------
@pytest.mark.parametrize("handle", [12345, -1])
def test_a_made_up_stream_handle_is_rejected(sim0, handle):
    with pytest.raises(ValueError, match=r"stream: .* is no stream known to sim:0"):
        caching_allocator_alloc(1024, stream=handle)
    ptr = caching_allocator_alloc(1024)
    with pytest.raises(ValueError, match=r"stream: .* is no stream known to sim:0"):
        vram.memory.record_stream(ptr, handle)
    caching_allocator_delete(ptr)
    assert vram.memory.memory_allocated() == 0


def test_record_stream_with_none_is_rejected(sim0):
    ptr = caching_allocator_alloc(1024)
    with pytest.raises(TypeError, match="record_stream: stream must be a vram.Stream"):
        vram.memory.record_stream(ptr, None)
    caching_allocator_delete(ptr)


def test_a_free_whose_event_record_fails_leaves_the_block_allocated(sim0, monkeypatch):
    ptr = caching_allocator_alloc(4 * KiB)
    vram.memory.record_stream(ptr, vram.Stream())
    sim = vram.sim.driver()

    def fail(event: int, stream: int) -> None:
        raise vram.CudaError("cuEventRecord", "CUDA_ERROR_INVALID_HANDLE")

    monkeypatch.setattr(sim, "event_record", fail)
    with pytest.raises(vram.CudaError):
        allocator_for(sim0).free(ptr)
    monkeypatch.undo()
    assert vram.memory.memory_allocated() == 4 * KiB  # nothing changed ...
    [segment] = vram.memory.memory_snapshot()
    assert [b["state"] for b in segment["blocks"]] == ["active_allocated", "inactive"]
    caching_allocator_delete(ptr)  # ... and it can still be freed
    vram.sim.run()
    vram.memory.empty_cache()
    assert vram.memory.memory_reserved() == 0 and vram.memory.memory_snapshot() == []


@pytest.mark.parametrize(
    ("ptr", "error", "message"),
    [
        ("a", TypeError, "ptr: expected an int device pointer, got 'a'"),
        (None, TypeError, "ptr: expected an int device pointer, got None"),
        (0x1234, ValueError, "ptr: 0x1234 was not allocated by caching_allocator_alloc"),
    ],
)
def test_caching_allocator_delete_names_a_bad_pointer(sim0, ptr, error, message):
    with pytest.raises(error, match=message):
        caching_allocator_delete(ptr)


def test_memory_snapshot_rejects_a_bad_pool_id(sim0):
    with pytest.raises(TypeError, match="mempool_id: expected a pool id"):
        vram.memory.memory_snapshot(mempool_id="x")


# ---- callbacks and observers ------------------------------------------------------------
def test_callbacks_and_observers_must_be_callable(sim0):
    with pytest.raises(TypeError, match="callback: expected a callable, got None"):
        vram.memory.register_free_memory_callback(None)
    with pytest.raises(TypeError, match="observer: expected a callable, got 5"):
        vram.memory.attach_out_of_memory_observer(5)
    assert allocator_for(sim0).free_memory_callbacks == []
    assert allocator_for(sim0).oom_observers == []


def test_a_raising_callback_is_reported_not_fatal_and_can_be_unregistered(sim0, capacity):
    calls = []

    def broken() -> bool:
        calls.append(1)
        raise RuntimeError("boom")

    vram.memory.register_free_memory_callback(broken)
    with pytest.warns(RuntimeWarning, match="free-memory callback .* raised RuntimeError"):
        ptr = caching_allocator_alloc(2 * MiB)  # the slow path: the callback runs
    assert calls == [1] and ptr
    vram.memory.unregister_free_memory_callback(broken)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        caching_allocator_delete(caching_allocator_alloc(30 * MiB))
    assert calls == [1]
    with pytest.raises(ValueError, match="callback: .* is not registered"):
        vram.memory.unregister_free_memory_callback(broken)
    caching_allocator_delete(ptr)


def test_a_callback_may_free_memory_itself(sim0, capacity):
    """The lock is let go around callbacks: one that frees (not from a finalizer) works."""
    capacity(2 * MiB)
    held = [caching_allocator_alloc(MiB), caching_allocator_alloc(MiB)]

    def release() -> bool:
        if len(held) == 2:
            caching_allocator_delete(held.pop())
            return True
        return False

    vram.memory.register_free_memory_callback(release)
    again = caching_allocator_alloc(MiB)  # full: the callback frees one and it is reused
    assert again and len(held) == 1
    caching_allocator_delete(again)
    caching_allocator_delete(held.pop())


# ---- expandable segments: address space, and the memory-fraction cap ------------------------
def test_expandable_segments_on_many_streams_of_a_large_device(sim0):
    """Each (stream, pool) reserves 1.125 x the device: an 80 GiB device ran out of the sim's
    address space at the 6th stream."""
    vram.sim.set_capacity(0, 80 * GiB)
    vram.memory.set_allocator_settings("expandable_segments:True")
    streams = [vram.Stream(priority=-2) for _ in range(12)]
    ptrs = [caching_allocator_alloc(MiB, stream=s) for s in streams]
    assert len(set(ptrs)) == 12
    for ptr in ptrs:
        caching_allocator_delete(ptr)


def test_a_failed_reservation_is_out_of_memory_not_a_raw_error(sim0, monkeypatch):
    vram.memory.set_allocator_settings("expandable_segments:True")
    sim = vram.sim.driver()

    def no_room(device: int, size: int) -> int:
        raise vram.CudaError("cuMemAddressReserve", "CUDA_ERROR_OUT_OF_MEMORY")

    monkeypatch.setattr(sim, "vmm_reserve", no_room)
    with pytest.raises(vram.OutOfMemoryError, match="Tried to allocate"):
        caching_allocator_alloc(MiB)
    assert vram.memory.memory_stats()["num_alloc_retries"] == 1  # the whole ladder ran


def test_the_memory_fraction_cap_holds_for_expandable_pages(sim0):
    vram.sim.set_capacity(0, GiB)
    vram.memory.set_allocator_settings("expandable_segments:True")
    vram.memory.set_per_process_memory_fraction(0.03)  # 30.72 MiB
    cap = allocator_for(sim0).allowed_memory_maximum
    a = caching_allocator_alloc(10 * MiB)  # maps one 20 MiB page
    b = caching_allocator_alloc(10 * MiB)  # its other half
    with pytest.raises(vram.OutOfMemoryError):  # 20 + the request's 10 MiB fit the cap, but
        caching_allocator_alloc(10 * MiB)  # the page it needs is 20 MiB: 40 MiB > 30.72
    assert vram.memory.memory_reserved() == 20 * MiB <= cap
    caching_allocator_delete(a)
    caching_allocator_delete(b)


# ---- oversize counters under a changing max_split_size --------------------------------------
def test_oversize_counters_use_the_setting_the_block_was_made_under(sim0):
    vram.memory.set_allocator_settings("max_split_size_mb:40")
    ptr = caching_allocator_alloc(50 * MiB)
    vram.memory.set_allocator_settings("max_split_size_mb:100")  # it is not oversize now
    caching_allocator_delete(ptr)
    vram.memory.empty_cache()
    stats = vram.memory.memory_stats()
    assert stats["oversize_allocations.current"] == 0
    assert stats["oversize_allocations.freed"] == 1
    assert stats["oversize_segments.current"] == 0


# ---- VRAM_NO_CACHING's spellings --------------------------------------------------------------
@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_no_caching_takes_pytorchs_spellings(monkeypatch, value):
    monkeypatch.setenv("VRAM_NO_CACHING", value)
    assert _uncached.no_caching_requested()


def test_no_caching_falls_back_to_pytorchs_variable(monkeypatch):
    monkeypatch.delenv("VRAM_NO_CACHING", raising=False)
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    assert _uncached.no_caching_requested()


def test_a_bad_no_caching_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("VRAM_NO_CACHING", "maybe")
    with pytest.raises(ValueError, match="VRAM_NO_CACHING: expected 1 or 0"):
        _uncached.no_caching_requested()


def test_raw_owner_is_empty_after_the_tests_frees():
    assert all(a.device.type != "sim" or p for p, a in _api._raw_owner.items())


# ---- snapshots speak PyTorch's stream numbers -------------------------------------------------
def test_the_default_stream_is_written_as_pytorchs_0(sim0):
    vram.memory._record_memory_history("all")
    try:
        ptr = caching_allocator_alloc(KiB)
        side = vram.Stream()
        other = caching_allocator_alloc(KiB, stream=side)
        snapshot = vram.memory._snapshot()
    finally:
        vram.memory._record_memory_history(None)
    streams = {s["stream"] for s in snapshot["segments"]}
    assert streams == {0, side.cuda_stream}
    allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert [e["stream"] for e in allocs] == [0, side.cuda_stream]
    caching_allocator_delete(ptr)
    caching_allocator_delete(other)


# ---- issue 32: a caught OOM, record_use events, workspaces under empty_cache -----------------
@pytest.fixture(params=["native", "no caching", "cudaMallocAsync"])
def each_backend(request, monkeypatch, sim0):
    """sim:0's allocator made under each backend the README lists."""
    if request.param == "no caching":
        monkeypatch.setenv("VRAM_NO_CACHING", "1")
    elif request.param == "cudaMallocAsync":
        monkeypatch.setenv("VRAM_ALLOC_CONF", "backend:cudaMallocAsync")
    _config.set_default_config(None)
    return allocator_for(sim0)


def test_a_caught_oom_gives_the_failed_attempts_memory_back_at_once(each_backend, capacity):
    """Catch the OOM, halve the batch, retry: the failed attempt's tensors are gone when
    the except clause ends, without the cyclic garbage collector (malloc's frame kept the
    error, whose traceback kept the frames that held them)."""
    capacity(64 * MiB)

    def attempt() -> None:
        held = [vram.empty(8 * MiB, dtype=vram.uint8) for _ in range(4)]
        vram.empty(64 * MiB, dtype=vram.uint8)  # out of memory
        del held

    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            attempt()
        except vram.OutOfMemoryError:
            pass
        assert vram.memory.memory_allocated() == 0
    finally:
        if collecting:
            gc.enable()


def _events_on_free_blocks(allocator) -> int:
    with allocator.locked():
        return sum(len(b.use_events or ()) for b in allocator.all_blocks())


def test_record_use_events_do_not_pile_up_on_the_free_remainder(sim0):
    """The README's pattern in a loop (allocate, use on a side stream, record_use, free):
    the free rest of the segment keeps one event per stream, not one per iteration."""
    side, sim, allocator = vram.Stream(), vram.sim.driver(), allocator_for(sim0)
    with vram.sim.deferred():
        sim.enqueue(side.cuda_stream, lambda: None)  # the side stream is busy throughout
        events = len(sim._events)
        for _ in range(300):
            x = vram.empty(256, device=sim0)
            sim.enqueue(side.cuda_stream, lambda: None)  # the side stream's read of x
            x.record_use(side)
            del x
        assert _events_on_free_blocks(allocator) == 1  # the newest of the side stream
        assert len(sim._events) - events <= 2
    vram.sim.run()
    x = vram.empty(256, device=sim0)  # the side stream's events have completed: dropped
    x.record_use(side)
    del x
    assert _events_on_free_blocks(allocator) == 0


def test_an_empty_cache_on_another_thread_leaves_a_handed_out_workspace_alone(sim0):
    """get_workspace promises the buffer until this thread's next call: an empty_cache() on
    another thread between the hand-out and the library's launch must not free it, or the
    next allocation on the stream (a freshly zeroed tensor) gets the library's scratch."""
    stream = vram.current_stream()
    neighbour = vram.empty(4 * MiB, dtype=vram.uint8)  # keeps the segment from going back
    handed_out, emptied = threading.Event(), threading.Event()
    zeroed: list = []

    def library_call() -> None:
        vram.set_device(sim0)
        ptr = vram.memory.get_workspace(4 * MiB, library="cublas", stream=stream)
        handed_out.set()
        emptied.wait()
        fill(ptr, 4 * MiB, 0xAB, stream)  # the launch: scratch writes over the workspace

    def other_thread() -> None:
        vram.set_device(sim0)
        handed_out.wait()
        vram.memory.empty_cache()
        zeroed.append(vram.zeros(MiB, dtype=vram.float32, device=sim0))  # 4 MiB
        emptied.set()

    threads = [threading.Thread(target=library_call), threading.Thread(target=other_thread)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    vram.sim.run()
    assert (zeroed[0].numpy() == 0).all()
    del neighbour


# ---- issue 34: what the stateful test found with graph capture in its mix ----------------
def _capture(stream: vram.Stream, mode: str = "global") -> vram.CUDAGraph:
    graph = vram.CUDAGraph()
    with vram.stream(stream):
        graph.capture_begin(capture_error_mode=mode)
    vram.sim.driver().enqueue(stream.cuda_stream, lambda: None)  # the captured work
    return graph


def _end(graph: vram.CUDAGraph, stream: vram.Stream) -> None:
    with vram.stream(stream):
        graph.capture_end()


def test_a_use_on_a_stream_that_does_not_capture_outlives_the_capture(sim0):
    """record_stream during a capture, of a stream that does not capture: its work runs
    (it is not captured), so the block freed during the capture waits for it afterwards."""
    allocator, sim = allocator_for(sim0), vram.sim.driver()
    main, origin, side = vram.current_stream(), vram.Stream(), vram.Stream()
    with vram.sim.deferred():
        ptr = allocator.malloc(KiB, main.cuda_stream)
        graph = _capture(origin)
        sim.enqueue(side.cuda_stream, lambda: None)  # side's kernel reads the block
        allocator.record_stream(ptr, side.cuda_stream)
        allocator.free(ptr)
        _end(graph, origin)
        again = allocator.malloc(KiB, main.cuda_stream)
        assert again != ptr  # side's kernel is still queued
        allocator.free(again)
    assert allocator.malloc(KiB, main.cuda_stream) == ptr  # side ran
    graph.reset()


def test_a_use_from_before_the_capture_outlives_the_capture(sim0):
    """A stream used the block before the capture and again in captured work: the work
    queued before the capture still holds the block when the capture ends."""
    allocator, sim = allocator_for(sim0), vram.sim.driver()
    main, origin = vram.current_stream(), vram.Stream()
    with vram.sim.deferred():
        ptr = allocator.malloc(KiB, main.cuda_stream)
        sim.enqueue(origin.cuda_stream, lambda: None)  # origin reads the block, eagerly
        allocator.record_stream(ptr, origin.cuda_stream)
        graph = _capture(origin)
        allocator.record_stream(ptr, origin.cuda_stream)  # and in the captured work
        allocator.free(ptr)
        _end(graph, origin)
        again = allocator.malloc(KiB, main.cuda_stream)
        assert again != ptr  # the eager read is still queued
        allocator.free(again)
    graph.reset()


def test_capture_reuse_waits_for_a_use_from_before_the_capture(sim0):
    """graph_capture_record_stream_reuse reuses a block inside the capture once its captured
    uses are joined back; a use from before the capture is not in the graph: the block
    waits for it as without the option."""
    vram.memory.set_allocator_settings("graph_capture_record_stream_reuse:True")
    allocator, sim = allocator_for(sim0), vram.sim.driver()
    origin, side = vram.Stream(), vram.Stream()
    with vram.sim.deferred():
        ptr = allocator.malloc(KiB, origin.cuda_stream)
        sim.enqueue(side.cuda_stream, lambda: None)  # side reads the block, eagerly
        allocator.record_stream(ptr, side.cuda_stream)
        graph = _capture(origin)
        side.wait_stream(origin)  # side joins the capture...
        allocator.record_stream(ptr, side.cuda_stream)
        allocator.free(ptr)
        origin.wait_stream(side)  # ... and is joined back
        inside = allocator.malloc(KiB, origin.cuda_stream)  # from the graph's pool
        _end(graph, origin)
        after = allocator.malloc(KiB, origin.cuda_stream)
        assert after != ptr  # side's eager read is still queued
        for p in (inside, after):
            allocator.free(p)
    graph.reset()


@pytest.mark.parametrize("conf", ["max_split_size_mb:40", "garbage_collection_threshold:0.4"])
def test_a_release_a_capture_forbids_leaves_the_block_in_its_pool(sim0, capacity, conf):
    """Releasing cached memory to grow (an oversize block, or garbage collection) calls
    cudaFree, which a global capture forbids: the call raises and invalidates the capture,
    and the block stays free in its pool, given back at the next empty_cache."""
    vram.memory.set_allocator_settings(conf)
    capacity(100 * MiB)
    allocator = allocator_for(sim0)
    vram.memory.set_per_process_memory_fraction(1.0)
    main, origin = vram.current_stream(), vram.Stream()
    ptr = allocator.malloc(50 * MiB, main.cuda_stream)
    allocator.free(ptr)  # a whole free 50 MiB segment in the default pool
    graph = _capture(origin)
    with pytest.raises(vram.CudaError, match="STREAM_CAPTURE_UNSUPPORTED"):
        allocator.malloc(60 * MiB, main.cuda_stream)  # no room without releasing it
    with allocator.locked():
        assert [(b.ptr, b.size) for b in allocator.all_blocks()] == [(ptr, 50 * MiB)]
    with pytest.raises(vram.CudaError, match="INVALIDATED"):
        _end(graph, origin)
    graph.reset()
    allocator.empty_cache()
    assert allocator.total_allocated_memory == 0


def test_a_stream_wait_the_driver_refuses_leaves_the_block_in_its_pool(sim0):
    """malloc splits a block off a free one that carries record_use events and makes the
    request's stream wait on them; when the driver refuses the wait (a stream of an
    invalidated capture, whose requests are the default pool's again), the block goes
    back into its pool as it was, events and all."""
    allocator, sim = allocator_for(sim0), vram.sim.driver()
    main, origin = vram.current_stream(), vram.Stream()
    with vram.sim.deferred():
        ptr = allocator.malloc(8 * MiB, origin.cuda_stream)
        sim.enqueue(main.cuda_stream, lambda: None)  # main reads the block
        allocator.record_use(ptr, main.cuda_stream)
        allocator.free(ptr)  # a free 20 MiB segment of origin, with main's event
        graph = _capture(origin)
        with pytest.raises(vram.CudaError, match="STREAM_CAPTURE_UNSUPPORTED"):
            allocator.malloc(KiB, main.cuda_stream)  # a cudaMalloc: invalidates the capture
        with pytest.raises(vram.CudaError, match="ISOLATION"):
            allocator.malloc(3 * MiB, origin.cuda_stream)
        with allocator.locked():
            blocks = allocator.all_blocks()
            assert [(b.ptr, b.size) for b in blocks] == [(ptr, 20 * MiB)]
            assert [e.stream for e in blocks[0].use_events] == [main.cuda_stream]
        stats = allocator.memory_stats()
        assert (stats["allocated_bytes.all.current"], stats["segment.all.current"]) == (0, 1)
        with pytest.raises(vram.CudaError, match="INVALIDATED"):
            _end(graph, origin)
    graph.reset()
    allocator.empty_cache()
    assert allocator.total_allocated_memory == 0
