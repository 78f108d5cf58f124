"""backend:cudaMallocAsync on sim: the driver's stream-ordered pool behind PyTorch's
CUDAMallocAsyncAllocator policy: raw allocations and tensors, stream-ordered reuse,
record_stream / record_use, empty_cache, memory_stats as PyTorch fills them, the memory
fraction, OutOfMemoryError, and the backend fixed when an allocator is made."""

from __future__ import annotations

import warnings

import pytest

import vram
from vram.memory import (
    AsyncAllocator,
    DeviceCachingAllocator,
    allocator_for,
    get_allocator_backend,
    set_allocator_settings,
)
from vram.memory._config import config_from_env

KiB = 1 << 10
MiB = 1 << 20
CHUNK = 2 * MiB  # what the sim's pool reserves at least
FILLED = {  # the keys PyTorch fills for this backend; every other one is 0
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "active_bytes.all.current",
    "active_bytes.all.peak",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
}


@pytest.fixture
def pool(monkeypatch, sim0) -> AsyncAllocator:
    """sim:0's allocator under backend:cudaMallocAsync, its pool's watermarks reset."""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync")
    allocator = allocator_for(sim0)
    assert isinstance(allocator, AsyncAllocator)
    allocator.reset_peak()
    return allocator


@pytest.fixture
def side(sim0) -> vram.Stream:
    return vram.Stream(sim0)


def hold(stream: vram.Stream, ran: list, tag: str) -> None:
    """Queue work on ``stream`` (held while deferred) that appends ``tag`` to ``ran``."""
    vram.sim.driver().enqueue(stream.cuda_stream, lambda: ran.append(tag))


def filled(stats: dict) -> dict:
    return {key: stats[key] for key in FILLED}


# ------------------------------------------------------------------ choosing the backend
def test_the_backend_is_read_when_an_allocator_is_made(monkeypatch, sim0):
    assert get_allocator_backend() == "native"
    native = allocator_for(sim0)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync")
    assert get_allocator_backend() == "cudaMallocAsync"
    assert type(allocator_for("sim:1")) is AsyncAllocator
    assert allocator_for(sim0) is native and type(native) is DeviceCachingAllocator
    monkeypatch.setenv("VRAM_ALLOC_CONF", "backend:native")  # VRAM_ALLOC_CONF wins
    assert get_allocator_backend() == "native"


def test_the_backend_cannot_be_switched_at_run_time(monkeypatch, pool):
    set_allocator_settings("backend:cudaMallocAsync")  # the same one: fine
    with pytest.raises(
        ValueError,
        match=r"backend: Allocator backend parsed at runtime != allocator backend parsed at "
        r"load time, native != cudaMallocAsync",
    ):
        set_allocator_settings("backend:native")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    vram.memory._config.set_default_config(None)
    with pytest.raises(ValueError, match="cudaMallocAsync != native"):
        set_allocator_settings("backend:cudaMallocAsync")


def test_an_unknown_backend_names_the_variable(monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:hipMallocAsync")
    with pytest.raises(
        ValueError, match="PYTORCH_CUDA_ALLOC_CONF=.*unknown allocator backend 'hipMallocAsync'"
    ):
        config_from_env()


def test_the_native_settings_are_ignored_with_a_warning(monkeypatch, sim0):
    conf = "backend:cudaMallocAsync,max_split_size_mb:64,expandable_segments:True"
    monkeypatch.setenv("VRAM_ALLOC_CONF", conf)
    with pytest.warns(UserWarning, match="ignores max_split_size_mb, expandable_segments"):
        allocator = allocator_for(sim0)
    with pytest.warns(UserWarning, match="ignores garbage_collection_threshold"):
        set_allocator_settings("garbage_collection_threshold:0.5")
    assert allocator.config.garbage_collection_threshold == 0.5  # kept, and ignored
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        set_allocator_settings("pinned_use_cuda_host_register:True")  # the host allocator's


# ------------------------------------------------------------ allocations and the pool
def test_raw_allocations_come_from_the_pool_and_stay_until_empty_cache(pool, sim0, alloc, free):
    device_free = vram.mem_get_info(sim0)[0]
    a, b = alloc(1000), alloc(3 * MiB)
    s = vram.memory.memory_stats(sim0)
    assert filled(s) == {
        "allocated_bytes.all.current": 1024 + 3 * MiB,  # the pool's used bytes (512 rounding)
        "allocated_bytes.all.peak": 1024 + 3 * MiB,
        "active_bytes.all.current": 1024 + 3 * MiB,
        "active_bytes.all.peak": 1024 + 3 * MiB,
        "reserved_bytes.all.current": CHUNK + 4 * MiB,  # its chunks
        "reserved_bytes.all.peak": CHUNK + 4 * MiB,
    }
    assert pool.used_bytes == 1000 + 3 * MiB  # what the memory fraction caps: bytes asked for
    free(a, b)
    vram.synchronize(sim0)  # the release threshold is the maximum: a sync gives nothing back
    assert vram.memory.memory_allocated(sim0) == 0
    assert vram.memory.memory_reserved(sim0) == CHUNK + 4 * MiB
    assert vram.memory.max_memory_allocated(sim0) == 1024 + 3 * MiB
    assert vram.sim.driver().mempool_attribute(0, "release_threshold") == (1 << 64) - 1
    vram.memory.empty_cache(sim0)
    assert vram.memory.memory_reserved(sim0) == 0
    assert vram.mem_get_info(sim0)[0] == device_free


def test_tensors_live_in_the_pool(pool, sim0):
    a = vram.ones(1000, device=sim0)
    b = a + a
    assert b.numpy().tolist() == [2.0] * 1000
    assert vram.memory.memory_allocated(sim0) == 2 * 4096
    del a, b
    assert vram.memory.memory_allocated(sim0) == 0  # freed at the allocator's next call


def test_memory_stats_has_the_native_keys_and_fills_six(pool, sim0, alloc, free):
    native_keys = set(vram.memory._stats.DeviceStats().as_dict(0)) | {
        "workspace_bytes.all.current",
        "workspace_bytes.all.peak",
        "workspace_bytes.all.allocated",
        "workspace_bytes.all.freed",
    }
    fresh = vram.memory.memory_stats(sim0)
    assert set(fresh) == native_keys
    assert set(fresh.values()) == {0}  # before the first use: all 0, as PyTorch
    ptr = alloc(5 * MiB)
    free(alloc(MiB))
    s = vram.memory.memory_stats(sim0)
    assert {key for key, value in s.items() if value} == FILLED
    assert s["max_split_size"] == 0 and s["allocation.all.current"] == 0
    assert (s["allocated_bytes.all.current"], s["allocated_bytes.all.peak"]) == (5 * MiB, 6 * MiB)
    vram.memory.reset_peak_memory_stats(sim0)
    assert vram.memory.max_memory_allocated(sim0) == 5 * MiB
    with pytest.warns(UserWarning, match="resetAccumulatedStats has no effect"):
        vram.memory.reset_accumulated_memory_stats(sim0)
    assert "Allocated memory" in vram.memory.memory_summary(sim0)
    free(ptr)


# ------------------------------------------------------------------ stream order
def test_a_free_is_reused_on_its_stream_at_once_and_elsewhere_once_it_ran(pool, alloc, free, side):
    with vram.sim.deferred():
        first, _ = alloc(4 * KiB), alloc(4 * KiB)  # the second keeps ``first`` from merging
        free(first)  # queued on the current stream, held
        other = alloc(4 * KiB, side)
        assert other != first  # another stream: not before the free has run
        assert alloc(4 * KiB) == first  # the same stream: after the free in stream order
        free(first)
        vram.sim.run()
        assert alloc(4 * KiB, side) == first  # the free ran: any stream


def test_record_stream_holds_the_free_until_the_recorded_stream_ran(pool, sim0, alloc, free, side):
    ran: list[str] = []
    with vram.sim.deferred():
        ptr, _ = alloc(4 * KiB), alloc(4 * KiB)
        hold(side, ran, "side work")
        vram.memory.record_stream(ptr, side)
        free(ptr)  # queued on the side stream of frees, behind both streams
        assert alloc(4 * KiB) != ptr  # even on the allocation's own stream
        side.synchronize()
        assert alloc(4 * KiB) != ptr  # the side work ran, the free not yet
        vram.sim.run()
        assert ran == ["side work"]
        assert alloc(4 * KiB) == ptr


def test_record_use_waits_for_the_last_use_only(pool, sim0, alloc, free, side):
    ran: list[str] = []
    with vram.sim.deferred():
        ptr, _ = alloc(4 * KiB), alloc(4 * KiB)
        hold(side, ran, "last use")
        vram.memory.record_use(ptr, side)
        hold(side, ran, "later work")
        free(ptr)
        vram.sim.driver().stream_synchronize(pool._unifier)  # the free, and what it waits for
        assert ran == ["last use"] and vram.sim.pending(side) == 1
        assert alloc(4 * KiB) == ptr  # reused while the later work is still queued


def test_record_use_on_a_peer_devices_stream(pool, sim0, alloc, free):
    peer = vram.Stream("sim:1")
    ran: list[str] = []
    with vram.sim.deferred():
        ptr, _ = alloc(4 * KiB), alloc(4 * KiB)
        hold(peer, ran, "peer use")
        vram.memory.record_use(ptr, peer)
        free(ptr)
        assert alloc(4 * KiB) != ptr
        vram.sim.driver().stream_synchronize(pool._unifier)
        assert ran == ["peer use"]
        assert alloc(4 * KiB) == ptr


def test_record_stream_on_the_allocation_stream_warns(pool, sim0, alloc):
    ptr = alloc(4 * KiB)
    with pytest.warns(UserWarning, match="unnecessary and has no effect"):
        vram.memory.record_stream(ptr, vram.current_stream(sim0))


# ---------------------------------------------------------------- out of memory
def test_out_of_memory_raises_pytorchs_error(pool, sim0, alloc, capacity):
    capacity(4 * MiB)
    held = alloc(3 * MiB)
    with pytest.raises(vram.OutOfMemoryError) as info:
        alloc(2 * MiB)
    assert str(info.value).startswith(
        "Allocation on device sim:0 would exceed allowed memory. (out of memory)\n"
        "Currently allocated     : 3.00 MiB\nRequested               : 2.00 MiB\n"
    )
    assert alloc(MiB) != held  # the allocator goes on


def test_the_memory_fraction_caps_the_bytes_asked_for(pool, sim0, alloc, capacity):
    total = capacity(64 * MiB)
    vram.memory.set_per_process_memory_fraction(0.25, sim0)
    assert vram.memory.get_per_process_memory_fraction(sim0) == 0.25
    cap = int(0.25 * total)
    alloc(cap - 1000)
    with pytest.raises(vram.OutOfMemoryError, match=r"memory fraction\)\n *: "):
        alloc(1001)
    alloc(1000)  # exactly at the cap


def test_free_memory_callbacks_run_before_it_raises(pool, sim0, alloc, free, capacity):
    capacity(CHUNK)
    held = alloc(CHUNK)
    vram.memory.register_free_memory_callback(lambda: free(held) or True, sim0)
    assert alloc(CHUNK) == held


def test_a_request_of_an_exabyte_is_refused_before_the_driver(pool, alloc):
    with pytest.raises(vram.OutOfMemoryError, match="Tried to allocate more than 1EB memory"):
        alloc(1 << 60)


# ------------------------------------------------------- what this backend does not do
def test_snapshots_history_and_oom_observers_raise_as_in_pytorch(pool, sim0, alloc):
    alloc(4 * KiB)
    with pytest.raises(RuntimeError, match="snapshot with backend:cudaMallocAsync"):
        vram.memory.memory_snapshot(device=sim0)
    with pytest.raises(RuntimeError, match="does not yet support recordHistory"):
        vram.memory._record_memory_history(device=sim0)
    with pytest.raises(RuntimeError, match="does not yet support attach_out_of_memory"):
        vram.memory.attach_out_of_memory_observer(lambda *args: None, sim0)


def test_mem_pools_route_nothing_and_calls_are_counted(pool, sim0, alloc, free):
    with vram.memory.count_device_calls(sim0) as calls:
        with vram.use_mem_pool(vram.MemPool(sim0)):
            free(alloc(MiB))
        vram.memory.empty_cache(sim0)
    assert (calls.alloc, calls.free, calls.device_malloc, calls.sync) == (1, 1, 0, 1)
    assert vram.memory.max_memory_allocated(sim0) == MiB  # it came from the device's pool
