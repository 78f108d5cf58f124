"""The pinned host allocator (PyTorch's CachingHostAllocator) on sim: power-of-two buckets,
reuse gated by events of the copies that used a block, PyTorch's host_memory_stats."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import vram
from vram.memory import _host
from vram.memory._host import CachingHostAllocator

# PyTorch 2.11's torch.cuda.host_memory_stats() keys
PYTORCH_KEYS = (
    {
        f"{stat}.{field}"
        for stat in ("allocations", "allocated_bytes", "active_requests", "active_bytes")
        for field in ("current", "peak", "allocated", "freed")
    }
    | {
        f"{stat}.{field}"
        for stat in ("host_alloc_time", "host_free_time")
        for field in ("total", "max", "min", "count", "avg")
    }
    | {"num_host_alloc", "num_host_free"}
)


@pytest.fixture
def host(monkeypatch):
    """A fresh process host allocator over the sim's host memory; what the test left
    allocated is freed and the cache emptied afterwards (the leak check counts the rest)."""
    allocator = CachingHostAllocator(vram.sim.driver())
    monkeypatch.setattr(_host, "_allocator", allocator)
    yield allocator
    gc.collect()  # pinned allocations the test dropped come back to it first
    vram.sim.run()
    allocator.empty_cache()  # (frees what finalizers dropped)
    for ptr, block in list(allocator._blocks.items()):
        if block.allocated:
            allocator.free(ptr)
    allocator.empty_cache()
    for events in allocator._spare_events.values():
        for event in events:
            vram.sim.driver().event_destroy(event)


def h2d_later(device_ptr: int, pinned: int, nbytes: int, stream: vram.Stream) -> None:
    """Queue a copy of ``nbytes`` of pinned memory to the device (a non_blocking copy)."""
    drv = vram.sim.driver()
    drv.memcpy_htod(device_ptr, drv.host_view(pinned, nbytes), stream.cuda_stream)


def test_requests_are_rounded_to_powers_of_two(host):
    host.allocate(1000)
    assert host.stats()["allocated_bytes.current"] == 1024
    host.allocate(1025)
    assert host.stats()["allocated_bytes.current"] == 1024 + 2048
    host.allocate(4096)
    assert host.stats()["allocated_bytes.current"] == 1024 + 2048 + 4096
    assert host.stats()["num_host_alloc"] == 3


def test_a_freed_block_is_reused_in_its_bucket_only(host):
    a = host.allocate(3000)
    host.free(a)
    assert host.allocate(2049) == a  # same 4 KiB bucket
    b = host.allocate(5000)  # 8 KiB bucket: a new block
    assert b != a
    assert host.stats()["num_host_alloc"] == 2


def test_zero_bytes_is_the_null_pointer(host):
    assert host.allocate(0) == 0
    host.free(0)
    assert host.stats()["num_host_alloc"] == 0


def test_a_block_used_by_a_copy_in_flight_is_not_reused(host, sim0):
    stream = vram.Stream()
    device_ptr = vram.memory.caching_allocator_alloc(4096)
    with vram.sim.deferred():
        pinned = host.allocate(4096)
        vram.sim.driver().host_view(pinned, 4096)[:] = 1
        h2d_later(device_ptr, pinned, 4096, stream)
        assert host.record_event(pinned, stream)
        host.free(pinned)
        other = host.allocate(4096)
        assert other != pinned  # the copy has not run: the block waits
        vram.sim.driver().host_view(other, 4096)[:] = 2
        assert vram.sim.pending(stream) > 0  # allocating never waited on the host
    assert bytes(vram.sim.driver().view(device_ptr, 4096)) == b"\x01" * 4096
    host.free(other)
    assert host.allocate(4096) in (pinned, other)
    vram.memory.caching_allocator_delete(device_ptr)


def test_without_record_event_the_block_is_reused_under_the_copy(host, sim0):
    """The hazard record_event exists for."""
    stream = vram.Stream()
    device_ptr = vram.memory.caching_allocator_alloc(4096)
    with vram.sim.deferred():
        pinned = host.allocate(4096)
        vram.sim.driver().host_view(pinned, 4096)[:] = 1
        h2d_later(device_ptr, pinned, 4096, stream)
        host.free(pinned)
        other = host.allocate(4096)
        assert other == pinned
        vram.sim.driver().host_view(other, 4096)[:] = 2
    assert bytes(vram.sim.driver().view(device_ptr, 4096)) == b"\x02" * 4096
    vram.memory.caching_allocator_delete(device_ptr)


def test_the_block_comes_back_once_its_event_completed(host, sim0):
    stream = vram.Stream()
    with vram.sim.deferred():
        pinned = host.allocate(4096)
        vram.sim.driver().enqueue(stream.cuda_stream, lambda: None)  # the copy
        host.record_event(pinned, stream)
        host.free(pinned)
        assert host.stats()["active_requests.current"] == 1  # not reusable yet
        stream.synchronize()
        assert host.allocate(4096) == pinned
    assert host.stats()["num_host_alloc"] == 1


def test_the_event_is_recorded_at_the_copy_not_at_free(host, sim0):
    """Later work on the copy's stream does not hold the block (PyTorch waits for it)."""
    stream = vram.Stream()
    with vram.sim.deferred():
        pinned = host.allocate(4096)
        vram.sim.driver().enqueue(stream.cuda_stream, lambda: None)  # the copy
        host.record_event(pinned, stream)
        copy_done = vram.Event()
        copy_done.record(stream)
        vram.sim.driver().enqueue(stream.cuda_stream, lambda: None)  # unrelated work
        host.free(pinned)
        copy_done.synchronize()
        assert vram.sim.pending(stream) == 1
        assert host.allocate(4096) == pinned


def test_events_on_two_streams_both_gate_reuse(host, sim0):
    s1, s2 = vram.Stream(), vram.Stream()
    with vram.sim.deferred():
        pinned = host.allocate(4096)
        for s in (s1, s2):
            vram.sim.driver().enqueue(s.cuda_stream, lambda: None)
            host.record_event(pinned, s)
        host.free(pinned)
        s1.synchronize()
        other = host.allocate(4096)
        assert other != pinned
        s2.synchronize()
        host.free(other)
        assert host.allocate(4096) in (pinned, other)
        assert host.allocate(4096) in (pinned, other)
    assert host.stats()["num_host_alloc"] == 2


def test_record_event_on_memory_it_does_not_own_is_false(host, sim0):
    array = np.zeros(16, dtype=np.uint8)
    assert host.record_event(array.ctypes.data, vram.Stream()) is False
    pinned = host.allocate(64)
    host.free(pinned)
    assert host.record_event(pinned, vram.Stream()) is False  # freed


def test_record_event_accepts_an_interior_pointer(host, sim0):
    stream = vram.Stream()
    with vram.sim.deferred():
        pinned = host.allocate(4096)
        vram.sim.driver().enqueue(stream.cuda_stream, lambda: None)
        assert host.record_event(pinned + 100, stream)
        host.free(pinned)
        assert host.allocate(4096) != pinned


def test_freeing_twice_or_a_foreign_pointer_raises(host):
    pinned = host.allocate(64)
    host.free(pinned)
    with pytest.raises(ValueError, match="ptr"):
        host.free(pinned)
    with pytest.raises(ValueError, match="ptr"):
        host.free(12345)


def test_stats_have_pytorchs_keys_and_values(host, sim0):
    stats = host.stats()
    assert set(stats) == PYTORCH_KEYS
    assert list(stats) == sorted(stats)
    assert all(v == 0 for v in stats.values())
    a = host.allocate(1000)
    b = host.allocate(3000)
    host.free(a)
    stats = host.stats()
    assert stats["allocations.current"] == 2
    assert stats["allocated_bytes.current"] == 1024 + 4096
    assert stats["active_requests.current"] == 1
    assert stats["active_requests.peak"] == 2
    assert stats["active_bytes.current"] == 4096
    assert stats["active_bytes.peak"] == 1024 + 4096
    assert stats["num_host_alloc"] == 2
    assert stats["host_alloc_time.count"] == 2
    assert stats["num_host_free"] == 0
    host.free(b)
    host.empty_cache()
    stats = host.stats()
    assert stats["allocations.current"] == 0
    assert stats["allocated_bytes.current"] == 0
    assert stats["allocated_bytes.peak"] == 1024 + 4096
    assert stats["allocated_bytes.freed"] == 1024 + 4096
    assert stats["num_host_free"] == 2
    assert stats["host_free_time.count"] == 2


def test_reset_peak_and_accumulated(host):
    a = host.allocate(1024)
    host.free(a)
    host.reset_peak()
    stats = host.stats()
    assert stats["active_requests.peak"] == 0
    assert stats["allocations.peak"] == 1
    host.reset_accumulated()
    stats = host.stats()
    assert stats["num_host_alloc"] == 0
    assert stats["host_alloc_time.count"] == 0
    assert stats["allocations.current"] == 1


def test_empty_cache_keeps_blocks_in_use_and_blocks_still_waiting(host, sim0):
    stream = vram.Stream()
    with vram.sim.deferred():
        in_use = host.allocate(1024)
        waiting = host.allocate(2048)
        idle = host.allocate(4096)
        vram.sim.driver().enqueue(stream.cuda_stream, lambda: None)
        host.record_event(waiting, stream)
        host.free(waiting)
        host.free(idle)
        host.empty_cache()
        stats = host.stats()
        assert stats["allocated_bytes.current"] == 1024 + 2048
        assert stats["num_host_free"] == 1
        assert vram.sim.pending(stream) == 2  # no wait on the host
    host.empty_cache()
    assert host.stats()["allocated_bytes.current"] == 1024
    assert host.is_pinned(in_use)


def test_allocate_pinned_gives_a_view_and_frees_to_the_cache_when_dropped(host):
    pinned = vram.memory._host.allocate_pinned(1000)
    view = pinned.numpy()
    assert view.dtype == np.uint8 and view.shape == (1000,)
    view[:] = 7
    assert vram.sim.driver().host_view(pinned.ptr, 1000).sum() == 7000
    ptr = pinned.ptr
    assert _host.is_pinned(ptr + 999)
    del view, pinned
    gc.collect()
    stats = _host.host_memory_stats()
    assert stats["active_requests.current"] == 0
    assert stats["allocations.current"] == 1  # cached
    assert _host.allocate_pinned(600).ptr == ptr
    _host.host_empty_cache()
    assert _host.host_memory_stats()["allocations.current"] == 0
    assert not _host.is_pinned(ptr)


def test_pinned_allocation_record_event_gates_reuse(host, sim0):
    stream = vram.Stream()
    with vram.sim.deferred():
        pinned = _host.allocate_pinned(4096)
        ptr = pinned.ptr
        vram.sim.driver().enqueue(stream.cuda_stream, lambda: None)
        pinned.record_event(stream)
        pinned.free()
        pinned.free()  # idempotent
        assert _host.allocate_pinned(4096).ptr != ptr


def test_host_record_event_is_pytorchs_free_function(host, sim0):
    stream = vram.Stream()
    with vram.sim.deferred():
        pinned = _host.allocate_pinned(64)
        vram.sim.driver().enqueue(stream.cuda_stream, lambda: None)
        assert _host.host_record_event(pinned.ptr, stream)
        assert not _host.host_record_event(np.zeros(4).ctypes.data, stream)


def test_a_zero_byte_pinned_allocation(host):
    pinned = _host.allocate_pinned(0)
    assert pinned.ptr == 0
    assert pinned.numpy().shape == (0,)


def test_the_process_allocator_uses_the_sim_without_a_gpu(monkeypatch):
    monkeypatch.setattr(_host, "_allocator", None)
    monkeypatch.setattr(_host, "cuda_usable", lambda: False)
    assert _host.host_allocator().driver is vram.sim.driver()


def test_threads_allocate_and_free_concurrently(host):
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                ptr = host.allocate(int(rng.integers(1, 1 << 16)))
                host.free(ptr)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stats = host.stats()
    assert stats["active_requests.current"] == 0
    assert stats["allocations.current"] == stats["num_host_alloc"] <= 4 * 17


def test_a_free_from_a_finalizer_is_done_at_the_next_call(host):
    """A dropped PinnedAllocation never takes the lock: it is freed at the next call."""
    ptr = host.allocate(64)
    pinned = _host.PinnedAllocation(ptr, 64, host)
    with host._lock:  # as if the garbage collector ran inside a call of the allocator
        del pinned
        assert host.active_requests.current == 1
    assert host.stats()["active_requests.current"] == 0
