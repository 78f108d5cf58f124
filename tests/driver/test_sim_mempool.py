"""The simulated GPU's stream-ordered pool (cudaMallocAsync), called on the driver directly:
stream-ordered reuse, event and internal dependencies, attributes, trimming, capacity."""

from __future__ import annotations

import pytest

import vram
from vram.driver._base import MEMPOOL_ATTRIBUTES
from vram.driver._sim import SimDriver

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
CHUNK = 2 * MiB  # what the sim's pool reserves at least


@pytest.fixture
def sim():
    """A fresh one-device simulator of 1 GiB, work held until driven (deferred)."""
    driver = SimDriver(device_count=1, capacity=GiB)
    driver.deferred_depth = 1
    return driver


def attrs(sim) -> dict[str, int]:
    return {name: sim.mempool_attribute(0, name) for name in MEMPOOL_ATTRIBUTES}


def error_name(call) -> str:
    with pytest.raises(vram.CudaError) as info:
        call()
    return info.value.name


def test_allocations_come_from_chunks_and_count_in_the_attributes(sim):
    s = sim.default_stream(0)
    a = sim.malloc_async(0, 1000, s)
    b = sim.malloc_async(0, 3 * MiB + 1, s)
    assert a % 512 == 0 and b % 512 == 0
    assert attrs(sim) == {
        "reuse_follow_event_dependencies": 1,
        "reuse_allow_opportunistic": 1,
        "reuse_allow_internal_dependencies": 1,
        "release_threshold": 0,
        "reserved_mem_current": CHUNK + 4 * MiB,  # a 2 MiB chunk, and 3 MiB + 1 in 2 MiB steps
        "reserved_mem_high": CHUNK + 4 * MiB,
        "used_mem_current": 1024 + 3 * MiB + 512,  # 512-byte rounding
        "used_mem_high": 1024 + 3 * MiB + 512,
    }
    assert sim.mem_get_info(0) == (GiB - 6 * MiB, GiB)  # the chunks, not the blocks
    sim.view(a, 1000)[:] = 7  # the memory is there
    assert int(sim.view(a, 1000).sum()) == 7000


def test_a_free_is_reused_at_once_on_its_stream_and_elsewhere_once_it_has_run(sim):
    main, side = sim.default_stream(0), sim.stream_create(0)
    first = sim.malloc_async(0, 4 * KiB, main)
    keep = sim.malloc_async(0, 4 * KiB, main)  # so ``first``'s block cannot merge forward
    sim.enqueue(main, lambda: None)  # work still queued before the free
    sim.free_async(0, first, main)
    assert sim.mempool_attribute(0, "used_mem_current") == 4 * KiB  # counted at the call
    other = sim.malloc_async(0, 4 * KiB, side)
    assert other not in (first, keep)  # the free has not run: another stream waits
    again = sim.malloc_async(0, 4 * KiB, main)
    assert again == first  # after the free in stream order: reused at once
    sim.free_async(0, again, main)
    sim.run()
    assert sim.malloc_async(0, 4 * KiB, side) == first  # the free ran: any stream


def test_a_stream_that_waits_for_the_free_reuses_it(sim):
    main, side = sim.default_stream(0), sim.stream_create(0)
    first = sim.malloc_async(0, 4 * KiB, main)
    sim.malloc_async(0, 4 * KiB, main)
    sim.enqueue(main, lambda: None)
    sim.free_async(0, first, main)
    event = sim.event_create(0)
    sim.event_record(event, main)  # after the free
    sim.stream_wait_event(side, event)
    assert sim.malloc_async(0, 4 * KiB, side) == first  # event dependency


def test_a_full_pool_makes_the_stream_wait_for_another_streams_free(sim):
    sim.set_capacity(0, CHUNK)
    main, side = sim.default_stream(0), sim.stream_create(0)
    whole = sim.malloc_async(0, CHUNK, main)
    ran: list[str] = []
    sim.enqueue(main, lambda: ran.append("main"))
    sim.free_async(0, whole, main)
    assert sim.malloc_async(0, CHUNK, side) == whole  # no room to grow: internal dependency
    sim.enqueue(side, lambda: ran.append("side"))
    sim.stream_synchronize(side)
    assert ran == ["main", "side"]  # the side stream waited for the free


def test_out_of_memory_when_nothing_can_serve(sim):
    sim.set_capacity(0, CHUNK)
    s = sim.default_stream(0)
    sim.malloc_async(0, MiB, s)
    with pytest.raises(vram.CudaError) as info:
        sim.malloc_async(0, 2 * MiB, s)
    assert info.value.is_out_of_memory and info.value.call == "cuMemAllocAsync"
    assert sim.mem_get_info(0) == (0, CHUNK)  # the failure charged nothing
    assert sim.malloc_async(0, MiB, s)  # the rest of the chunk still serves


def test_injected_faults_apply_to_the_pools_growth(sim):
    s = sim.default_stream(0)
    sim.faults.nth = 1
    assert error_name(lambda: sim.malloc_async(0, 1000, s)) == "CUDA_ERROR_OUT_OF_MEMORY"
    sim.malloc_async(0, 1000, s)
    sim.faults.above_bytes = 4 * MiB
    assert sim.malloc_async(0, 1000, s)  # served from the chunk: no device malloc
    assert error_name(lambda: sim.malloc_async(0, 5 * MiB, s)) == "CUDA_ERROR_OUT_OF_MEMORY"


def test_trim_keeps_pending_frees_and_at_least_what_it_is_asked(sim):
    s = sim.default_stream(0)
    sim.mempool_set_attribute(0, "release_threshold", (1 << 64) - 1)
    a = sim.malloc_async(0, CHUNK, s)
    b = sim.malloc_async(0, CHUNK, s)
    sim.enqueue(s, lambda: None)
    sim.free_async(0, a, s)
    sim.free_async(0, b, s)
    sim.mempool_trim_to(0, 0)
    assert sim.mempool_attribute(0, "reserved_mem_current") == 2 * CHUNK  # frees not run yet
    sim.run()
    sim.mempool_trim_to(0, CHUNK)
    assert sim.mempool_attribute(0, "reserved_mem_current") == CHUNK
    sim.mempool_trim_to(0, 0)
    assert sim.mempool_attribute(0, "reserved_mem_current") == 0
    assert sim.mem_get_info(0) == (GiB, GiB)


def test_a_synchronize_releases_what_is_above_the_release_threshold(sim):
    s = sim.default_stream(0)
    ptrs = [sim.malloc_async(0, CHUNK, s) for _ in range(3)]
    for ptr in ptrs:
        sim.free_async(0, ptr, s)
    sim.mempool_set_attribute(0, "release_threshold", CHUNK)
    sim.run()  # running work is no synchronize
    assert sim.mempool_attribute(0, "reserved_mem_current") == 3 * CHUNK
    sim.stream_synchronize(s)
    assert sim.mempool_attribute(0, "reserved_mem_current") == CHUNK


def test_high_watermarks_reset_to_the_current_value(sim):
    s = sim.default_stream(0)
    a = sim.malloc_async(0, 3 * MiB, s)
    sim.free_async(0, a, s)
    sim.run()
    sim.malloc_async(0, MiB, s)
    assert sim.mempool_attribute(0, "used_mem_high") == 3 * MiB
    sim.mempool_set_attribute(0, "used_mem_high", 0)
    sim.mempool_set_attribute(0, "reserved_mem_high", 0)
    assert sim.mempool_attribute(0, "used_mem_high") == MiB
    assert sim.mempool_attribute(0, "reserved_mem_high") == 4 * MiB


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("used_mem_high", 5, "CUDA_ERROR_INVALID_VALUE"),
        ("reserved_mem_current", 0, "CUDA_ERROR_INVALID_VALUE"),
        ("release_threshold", 1 << 64, "CUDA_ERROR_INVALID_VALUE"),
        ("reuse_allow_opportunistic", 0, "CUDA_ERROR_NOT_SUPPORTED"),
        ("max_pool_size", 0, "CUDA_ERROR_INVALID_VALUE"),
    ],
)
def test_bad_attributes_are_refused(sim, name, value, error):
    assert error_name(lambda: sim.mempool_set_attribute(0, name, value)) == error


def test_bad_pointers_sizes_and_streams(sim):
    s = sim.default_stream(0)
    ptr = sim.malloc_async(0, 1000, s)
    sim.free_async(0, ptr, s)
    assert error_name(lambda: sim.free_async(0, ptr, s)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.free(0, sim.malloc_async(0, 8, s))) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.malloc_async(0, 0, s)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.malloc_async(0, 8, 12345)) == "CUDA_ERROR_INVALID_HANDLE"
