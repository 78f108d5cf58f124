"""The simulated GPU's driver, called directly: memory, capacity, faults, VMM, copies."""

from __future__ import annotations

import re

import numpy as np
import pytest

import vram
from vram._units import parse_bytes
from vram.driver._sim import MAX_CAPACITY, SimDriver

MiB = 1 << 20
GiB = 1 << 30
PAGE = 2 * MiB  # the sim's VMM granularity
TIB = MAX_CAPACITY >> 40  # the most memory a sim device may have, in TiB


@pytest.fixture
def sim():
    """A fresh one-device simulator of 1 GiB (not the process-wide one)."""
    return SimDriver(device_count=1, capacity=GiB)


def error_name(call) -> str:
    with pytest.raises(vram.CudaError) as info:
        call()
    return info.value.name


# ---- device memory --------------------------------------------------------------------


def test_malloc_and_free_are_counted_in_mem_get_info(sim):
    assert sim.mem_get_info(0) == (GiB, GiB)
    a = sim.malloc(0, 3 * MiB)
    b = sim.malloc(0, 1000)
    assert sim.mem_get_info(0) == (GiB - 3 * MiB - 1000, GiB)
    assert a % 512 == 0 and b % 512 == 0
    assert b >= a + 3 * MiB  # no overlap
    sim.free(0, a)
    assert sim.mem_get_info(0) == (GiB - 1000, GiB)
    sim.free(0, b)
    assert sim.mem_get_info(0) == (GiB, GiB)


def test_freed_address_space_is_reused(sim):
    a = sim.malloc(0, 4096)
    sim.free(0, a)
    assert sim.malloc(0, 4096) == a


def test_malloc_beyond_capacity_is_out_of_memory(sim):
    sim.malloc(0, GiB - MiB)
    with pytest.raises(vram.CudaError) as info:
        sim.malloc(0, 2 * MiB)
    assert info.value.is_out_of_memory
    assert info.value.call == "cuMemAlloc"
    assert sim.mem_get_info(0) == (MiB, GiB)  # the failure charged nothing
    sim.malloc(0, MiB)
    assert sim.mem_get_info(0) == (0, GiB)


def test_a_malloc_larger_than_host_memory_succeeds_as_address_space():
    sim = SimDriver(device_count=1, capacity=1 << 40)
    ptr = sim.malloc(0, 512 * GiB)  # never written, so never backed
    sim.view(ptr + 300 * GiB, 4)[:] = 7
    assert sim.view(ptr + 300 * GiB, 4).tolist() == [7] * 4
    sim.free(0, ptr)
    assert sim.mem_get_info(0) == (1 << 40, 1 << 40)


def test_running_out_of_address_space_charges_nothing(monkeypatch):
    monkeypatch.setattr(vram.driver._sim, "_VA_SPAN", 64 << 20)  # a device of 64 MiB of addresses
    sim = SimDriver(device_count=1, capacity=GiB)
    with pytest.raises(vram.CudaError) as info:
        sim.malloc(0, 128 << 20)  # fits the capacity, not the addresses
    assert info.value.is_out_of_memory
    assert sim.mem_get_info(0) == (GiB, GiB)


def test_free_and_malloc_bad_arguments(sim):
    assert error_name(lambda: sim.malloc(0, 0)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.malloc(0, -5)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.malloc(1, 512)) == "CUDA_ERROR_INVALID_DEVICE"
    ptr = sim.malloc(0, 512)
    assert error_name(lambda: sim.free(0, ptr + 512)) == "CUDA_ERROR_INVALID_VALUE"
    sim.free(0, ptr)
    assert error_name(lambda: sim.free(0, ptr)) == "CUDA_ERROR_INVALID_VALUE"  # double free


def test_devices_have_disjoint_address_ranges():
    sim = SimDriver(device_count=2, capacity=GiB)
    a, b = sim.malloc(0, 512), sim.malloc(1, 512)
    assert abs(a - b) >= 1 << 40
    assert error_name(lambda: sim.free(0, b)) == "CUDA_ERROR_INVALID_VALUE"
    assert sim.mem_get_info(1) == (GiB - 512, GiB)


def test_free_synchronizes_the_device(sim):
    ptr = sim.malloc(0, 512)
    ran = []
    sim.deferred_depth = 1
    sim.enqueue(sim.stream_create(0), lambda: ran.append(1))
    sim.free(0, ptr)
    assert ran == [1]


def test_properties_of_a_fresh_simulator(sim):
    props = sim.properties(0)
    assert (props.total_memory, props.driver, props.uuid) == (GiB, "sim", "SIM-00000000")
    assert sim.device_count() == 1
    assert error_name(lambda: sim.properties(1)) == "CUDA_ERROR_INVALID_DEVICE"


# ---- capacity -------------------------------------------------------------------------


def test_set_capacity_keeps_what_is_held(sim):
    sim.malloc(0, 10 * MiB)
    sim.set_capacity(0, 8 * MiB)
    assert sim.mem_get_info(0) == (0, 8 * MiB)
    assert error_name(lambda: sim.malloc(0, 512)) == "CUDA_ERROR_OUT_OF_MEMORY"
    with pytest.raises(ValueError, match=rf"^capacity: expected 1 byte to {TIB} TiB, got 0 bytes"):
        sim.set_capacity(0, 0)
    assert error_name(lambda: sim.set_capacity(3, GiB)) == "CUDA_ERROR_INVALID_DEVICE"


def test_vram_sim_set_capacity_changes_the_process_simulator():
    vram.sim.set_capacity(1, 5 * GiB)
    assert vram.mem_get_info("sim:1")[1] == 5 * GiB
    assert vram.get_device_properties("sim:1").total_memory == 5 * GiB
    vram.sim.set_capacity("sim:1", 6 * GiB)
    vram.sim.set_capacity(vram.device("sim:0"), 7 * GiB)
    assert vram.mem_get_info("sim:1")[1] == 6 * GiB and vram.mem_get_info("sim:0")[1] == 7 * GiB


@pytest.mark.parametrize(
    ("device", "capacity", "error", "message"),
    [
        ("sim:0", "x", TypeError, "capacity: expected an int number of bytes, got 'x'"),
        ("sim:0", float("nan"), TypeError, "capacity: expected an int number of bytes, got nan"),
        ("sim:0", 1.5, TypeError, "capacity: expected an int number of bytes, got 1.5"),
        ("sim:0", True, TypeError, "capacity: expected an int number of bytes, got True"),
        ("sim:0", -1, ValueError, f"capacity: expected 1 byte to {TIB} TiB, got -1 bytes"),
        ("sim:0", MAX_CAPACITY + 1, ValueError, f"capacity: expected 1 byte to {TIB} TiB, got"),
        (None, GiB, TypeError, "device: expected a sim device or its index, got None"),
        ("sim:9", GiB, ValueError, "device: sim:9 does not exist"),
        ("cpu", GiB, ValueError, "device: set_capacity is for sim devices, got cpu"),
    ],
)
def test_vram_sim_set_capacity_names_a_bad_argument(device, capacity, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}"):
        vram.sim.set_capacity(device, capacity)
    assert vram.mem_get_info("sim:0")[1] == 16 * GiB  # unchanged


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1073741824", GiB),
        ("16GiB", 16 * GiB),
        ("16 GiB", 16 * GiB),
        ("16gb", 16 * GiB),
        ("16G", 16 * GiB),
        ("512MB", 512 * MiB),
        ("512MiB", 512 * MiB),
        ("1.5GiB", 3 * GiB // 2),
        ("64KiB", 64 << 10),
        ("2TiB", 2 << 40),
        ("100B", 100),
        (" 8 MiB ", 8 * MiB),
    ],
)
def test_parse_bytes(text, size):
    assert parse_bytes(text, "VRAM_SIM_MEMORY") == size


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "cannot read"),
        ("lots", "cannot read"),
        ("16XB", "cannot read"),
        ("16i", "cannot read"),
        ("16iB", "cannot read"),
        ("-1GiB", "cannot read"),
        ("1e9", "cannot read"),
        ("GiB", "cannot read"),
        ("0", "size must be positive"),
        ("0.1", "size must be positive"),
    ],
)
def test_parse_bytes_bad_values_name_the_variable(text, message):
    with pytest.raises(ValueError, match=rf"^VRAM_SIM_MEMORY: {message}"):
        parse_bytes(text, "VRAM_SIM_MEMORY")
    with pytest.raises(ValueError, match=r"^--memory: "):
        parse_bytes(text, "--memory")


def test_environment_sets_capacity_and_device_count(monkeypatch):
    monkeypatch.setenv("VRAM_SIM_MEMORY", "3GiB")
    monkeypatch.setenv("VRAM_SIM_DEVICES", "3")
    sim = SimDriver()
    assert sim.device_count() == 3
    assert sim.mem_get_info(2) == (3 * GiB, 3 * GiB)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("VRAM_SIM_MEMORY", "huge", r"^VRAM_SIM_MEMORY: cannot read 'huge'"),
        ("VRAM_SIM_DEVICES", "two", r"^VRAM_SIM_DEVICES: expected a number of devices"),
        ("VRAM_SIM_DEVICES", "0", r"^VRAM_SIM_DEVICES: expected 1 to 64 devices, got 0$"),
        ("VRAM_SIM_DEVICES", "100000000", r"^VRAM_SIM_DEVICES: expected 1 to 64 devices, got 1"),
        ("VRAM_SIM_DEVICES", "nan", r"^VRAM_SIM_DEVICES: expected a number of devices, got 'n"),
        ("VRAM_SIM_MEMORY", "nan", r"^VRAM_SIM_MEMORY: cannot read 'nan'"),
        ("VRAM_SIM_MEMORY", "inf", r"^VRAM_SIM_MEMORY: cannot read 'inf'"),
        ("VRAM_SIM_MEMORY", f"{TIB + 1}TiB", rf"^VRAM_SIM_MEMORY: expected 1 byte to {TIB} TiB"),
    ],
)
def test_bad_environment(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        SimDriver()


# ---- fault injection ------------------------------------------------------------------


def test_inject_nth_fails_exactly_that_malloc_once():
    sim = vram.sim.driver()
    before = sim.mem_get_info(0)
    vram.sim.inject_malloc_failure(nth=2)
    first = sim.malloc(0, 512)
    with pytest.raises(vram.CudaError) as info:
        sim.malloc(0, 512)
    assert info.value.is_out_of_memory
    assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert "injected failure (nth)" in str(info.value)
    third, fourth = sim.malloc(0, 512), sim.malloc(0, 512)
    for ptr in (first, third, fourth):
        sim.free(0, ptr)
    assert sim.mem_get_info(0) == before


def test_inject_nth_counts_vmm_create_too():
    sim = vram.sim.driver()
    vram.sim.inject_malloc_failure(nth=1)
    with pytest.raises(vram.CudaError, match="cuMemCreate failed: CUDA_ERROR_OUT_OF_MEMORY"):
        sim.vmm_create(0, PAGE)
    handle = sim.vmm_create(0, PAGE)
    sim.vmm_release_handle(0, handle)


def test_inject_above_bytes_fails_until_cleared():
    sim = vram.sim.driver()
    vram.sim.inject_malloc_failure(above_bytes=MiB)
    small = sim.malloc(0, MiB)
    for _ in range(2):
        with pytest.raises(vram.CudaError, match=r"injected failure \(above_bytes\)") as info:
            sim.malloc(0, MiB + 1)
        assert info.value.is_out_of_memory
    vram.sim.clear_faults()
    big = sim.malloc(0, MiB + 1)
    sim.free(0, small)
    sim.free(0, big)


def test_injected_failures_reach_the_allocator_as_out_of_memory(sim0):
    vram.sim.inject_malloc_failure(above_bytes=0)
    with pytest.raises(vram.OutOfMemoryError):
        vram.memory.caching_allocator_alloc(512, sim0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"^inject_malloc_failure: give nth= or above_bytes="),
        ({"nth": 0}, r"^nth must be a positive int, got 0"),
        ({"nth": -1}, r"^nth must be a positive int"),
        ({"nth": 1.5}, r"^nth must be a positive int, got 1.5"),
        ({"nth": True}, r"^nth must be a positive int, got True"),
        ({"above_bytes": -1}, r"^above_bytes must be a non-negative int, got -1"),
        ({"above_bytes": "1GiB"}, r"^above_bytes must be a non-negative int"),
    ],
)
def test_inject_malloc_failure_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        vram.sim.inject_malloc_failure(**kwargs)
    ptr = vram.sim.driver().malloc(0, 512)  # nothing was armed
    vram.sim.driver().free(0, ptr)


# ---- VMM ------------------------------------------------------------------------------


def test_vmm_reserve_create_map_unmap_release(sim):
    assert sim.vmm_granularity(0) == PAGE
    va = sim.vmm_reserve(0, 4 * PAGE)
    assert va % PAGE == 0
    assert sim.mem_get_info(0) == (GiB, GiB)  # address space is free
    h1, h2 = sim.vmm_create(0, PAGE), sim.vmm_create(0, 2 * PAGE)
    assert sim.mem_get_info(0) == (GiB - 3 * PAGE, GiB)  # physical memory counts
    sim.vmm_map(0, va, PAGE, h1)
    sim.vmm_map(0, va + PAGE, 2 * PAGE, h2)
    sim.view(va, 3 * PAGE)[:] = 9
    assert int(sim.view(va, 3 * PAGE).sum()) == 9 * 3 * PAGE
    sim.vmm_unmap(0, va, PAGE)
    sim.vmm_unmap(0, va + PAGE, 2 * PAGE)
    sim.vmm_release_handle(0, h1)
    sim.vmm_release_handle(0, h2)
    sim.vmm_release(0, va, 4 * PAGE)
    assert sim.mem_get_info(0) == (GiB, GiB)


@pytest.mark.parametrize("size", [0, -PAGE, PAGE // 2, PAGE + 512])
def test_vmm_sizes_must_be_granular(sim, size):
    assert error_name(lambda: sim.vmm_reserve(0, size)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.vmm_create(0, size)) == "CUDA_ERROR_INVALID_VALUE"
    assert sim.mem_get_info(0) == (GiB, GiB)


def test_vmm_map_errors(sim):
    va = sim.vmm_reserve(0, 4 * PAGE)
    h, other = sim.vmm_create(0, PAGE), sim.vmm_create(0, PAGE)
    sim.vmm_map(0, va, PAGE, h)
    assert error_name(lambda: sim.vmm_map(0, va, PAGE, other)) == "CUDA_ERROR_ALREADY_MAPPED"
    # the handle's whole size, inside the reservation, at a granular address
    assert error_name(lambda: sim.vmm_map(0, va + PAGE, 2 * PAGE, other)) == (
        "CUDA_ERROR_INVALID_VALUE"
    )
    assert error_name(lambda: sim.vmm_map(0, va + 4 * PAGE, PAGE, other)) == (
        "CUDA_ERROR_INVALID_VALUE"
    )
    assert error_name(lambda: sim.vmm_map(0, va + PAGE + 512, PAGE, other)) == (
        "CUDA_ERROR_INVALID_VALUE"
    )
    assert error_name(lambda: sim.vmm_map(0, va + PAGE, PAGE, 999)) == "CUDA_ERROR_INVALID_VALUE"
    # a reservation with something mapped cannot be released; a handle twice neither
    assert error_name(lambda: sim.vmm_release(0, va, 4 * PAGE)) == "CUDA_ERROR_INVALID_VALUE"
    sim.vmm_release_handle(0, other)
    assert error_name(lambda: sim.vmm_release_handle(0, other)) == "CUDA_ERROR_INVALID_VALUE"
    # unmapping where nothing is mapped
    assert error_name(lambda: sim.vmm_unmap(0, va + PAGE, PAGE)) == "CUDA_ERROR_INVALID_VALUE"


def test_vmm_unmap_never_takes_part_of_a_mapping(sim):
    va = sim.vmm_reserve(0, 4 * PAGE)
    h1, h2 = sim.vmm_create(0, PAGE), sim.vmm_create(0, 2 * PAGE)
    sim.vmm_map(0, va, PAGE, h1)
    sim.vmm_map(0, va + PAGE, 2 * PAGE, h2)
    sim.view(va, 3 * PAGE)[:] = 5
    for start, size in ((va, 2 * PAGE), (va + PAGE, PAGE)):
        assert error_name(lambda s=start, n=size: sim.vmm_unmap(0, s, n)) == (
            "CUDA_ERROR_INVALID_VALUE"
        )
    assert int(sim.view(va, 3 * PAGE).min()) == 5  # nothing was unmapped or zeroed
    sim.vmm_unmap(0, va, 3 * PAGE)  # whole mappings, two at once
    assert error_name(lambda: sim.view(va, 1)) == "CUDA_ERROR_ILLEGAL_ADDRESS"


def test_unmapped_memory_is_an_illegal_address_and_remaps_as_zeros(sim):
    va = sim.vmm_reserve(0, 2 * PAGE)
    assert error_name(lambda: sim.view(va, 1)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    h = sim.vmm_create(0, PAGE)
    sim.vmm_map(0, va, PAGE, h)
    sim.view(va, PAGE)[:] = 0xAB
    assert error_name(lambda: sim.view(va, PAGE + 1)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name(lambda: sim.view(va + PAGE, 1)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    sim.vmm_unmap(0, va, PAGE)
    assert error_name(lambda: sim.view(va, 1)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    sim.vmm_map(0, va, PAGE, h)
    assert not sim.view(va, PAGE).any()


def test_vmm_release_needs_the_reserved_size(sim):
    va = sim.vmm_reserve(0, 2 * PAGE)
    assert error_name(lambda: sim.vmm_release(0, va, PAGE)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.vmm_release(0, va + PAGE, PAGE)) == "CUDA_ERROR_INVALID_VALUE"
    sim.vmm_release(0, va, 2 * PAGE)
    assert sim.vmm_reserve(0, 2 * PAGE) == va  # the address space came back


def test_vmm_create_is_limited_by_capacity(sim):
    handles = [sim.vmm_create(0, 256 * MiB) for _ in range(4)]
    assert error_name(lambda: sim.vmm_create(0, PAGE)) == "CUDA_ERROR_OUT_OF_MEMORY"
    sim.vmm_release_handle(0, handles[0])
    sim.vmm_release_handle(0, sim.vmm_create(0, PAGE))


# ---- memory access and copies ---------------------------------------------------------


def test_view_bounds(sim):
    ptr = sim.malloc(0, 1000)
    assert sim.view(ptr, 1000).shape == (1000,)
    assert sim.view(ptr + 999, 1).shape == (1,)
    assert error_name(lambda: sim.view(ptr, 1001)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name(lambda: sim.view(ptr + 1000, 1)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name(lambda: sim.view(ptr - 1, 1)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name(lambda: sim.view(0, 1)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    sim.free(0, ptr)
    assert error_name(lambda: sim.view(ptr, 1)) == "CUDA_ERROR_ILLEGAL_ADDRESS"


def test_memcpy_and_memset_round_trip(sim):
    stream = sim.stream_create(0)
    src = np.arange(256, dtype=np.float32).reshape(16, 16)
    a, b = sim.malloc(0, src.nbytes), sim.malloc(0, src.nbytes)
    sim.memcpy_htod(a, src, stream)
    sim.memcpy_dtod(b, a, src.nbytes, stream)
    out = np.empty_like(src)
    sim.memcpy_dtoh(out, b, stream)
    sim.stream_synchronize(stream)
    np.testing.assert_array_equal(out, src)
    sim.memset_d8(b + 4, 0x1FF, 8, stream)  # only the low byte counts
    sim.memcpy_dtoh(out, b, stream)
    raw = src.view(np.uint8).reshape(-1)
    want = np.concatenate([raw[:4], np.full(8, 0xFF, np.uint8), raw[12:]])
    np.testing.assert_array_equal(out.view(np.uint8).reshape(-1), want)
    sim.memcpy_dtod(b, a, 0, stream)  # zero bytes: nothing to do
    sim.memset_d8(b, 0, 0, stream)


def test_memcpy_from_a_non_contiguous_host_array(sim):
    stream = sim.stream_create(0)
    src = np.arange(32, dtype=np.int64).reshape(4, 8)[:, ::2]
    ptr = sim.malloc(0, src.nbytes)
    sim.memcpy_htod(ptr, src, stream)
    out = np.empty(src.shape, np.int64)
    sim.memcpy_dtoh(out, ptr, stream)
    np.testing.assert_array_equal(out, src)
    with pytest.raises(ValueError, match=r"^memcpy_dtoh: dst must be C-contiguous"):
        sim.memcpy_dtoh(np.empty((4, 8), np.int64)[:, ::2], ptr, stream)


def test_copies_are_asynchronous_and_check_addresses_at_the_call(sim):
    stream = sim.stream_create(0)
    ptr = sim.malloc(0, 64)
    out = np.zeros(16, np.int32)
    sim.deferred_depth = 1
    sim.memcpy_htod(ptr, np.full(16, 3, np.int32), stream)
    sim.memcpy_dtoh(out, ptr, stream)
    assert not out.any() and not sim.stream_query(stream)
    sim.stream_synchronize(stream)
    assert out.tolist() == [3] * 16
    bad = ptr + 64
    assert error_name(lambda: sim.memcpy_htod(bad, out, stream)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name(lambda: sim.memcpy_dtoh(out, bad, stream)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name(lambda: sim.memcpy_dtod(bad, ptr, 4, stream)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name(lambda: sim.memcpy_dtod(ptr, bad, 4, stream)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name(lambda: sim.memset_d8(bad, 0, 4, stream)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert sim.pending(stream) == 0
    assert error_name(lambda: sim.memset_d8(ptr, 0, 4, 12345)) == "CUDA_ERROR_INVALID_HANDLE"


# ---- pinned host memory ---------------------------------------------------------------


def test_host_alloc_view_free(sim):
    ptr = sim.host_alloc(1000)
    view = sim.host_view(ptr, 1000)
    assert view.ctypes.data == ptr
    view[:] = np.arange(1000) % 251
    assert sim.host_view(ptr + 10, 5).tolist() == [10, 11, 12, 13, 14]
    assert error_name(lambda: sim.host_view(ptr, 1001)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.host_view(ptr + 1000, 1)) == "CUDA_ERROR_INVALID_VALUE"
    sim.host_free(ptr)
    assert error_name(lambda: sim.host_view(ptr, 1)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.host_free(ptr)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.host_alloc(0)) == "CUDA_ERROR_INVALID_VALUE"


def test_pinned_memory_round_trips_through_the_device(sim):
    stream = sim.stream_create(0)
    host = sim.host_alloc(64)
    sim.host_view(host, 64)[:] = np.arange(64, dtype=np.uint8)
    dev = sim.malloc(0, 64)
    sim.memcpy_htod(dev, sim.host_view(host, 64), stream)
    back = sim.host_alloc(64)
    sim.memcpy_dtoh(sim.host_view(back, 64), dev, stream)
    sim.stream_synchronize(stream)
    assert sim.host_view(back, 64).tolist() == list(range(64))


# ---- streams and events at the driver -------------------------------------------------


def test_driver_streams_and_events_bad_handles(sim):
    for call in (sim.stream_query, sim.stream_synchronize, sim.pending):
        assert error_name(lambda c=call: c(12345)) == "CUDA_ERROR_INVALID_HANDLE"
    for call in (sim.event_query, sim.event_synchronize):
        assert error_name(lambda c=call: c(12345)) == "CUDA_ERROR_INVALID_HANDLE"
    stream, event = sim.stream_create(0), sim.event_create(0)
    assert error_name(lambda: sim.event_record(event, 12345)) == "CUDA_ERROR_INVALID_HANDLE"
    assert error_name(lambda: sim.stream_wait_event(stream, 12345)) == "CUDA_ERROR_INVALID_HANDLE"
    assert error_name(lambda: sim.enqueue(12345, lambda: None)) == "CUDA_ERROR_INVALID_HANDLE"
    assert error_name(lambda: sim.stream_create(1)) == "CUDA_ERROR_INVALID_DEVICE"
    assert error_name(lambda: sim.event_create(1)) == "CUDA_ERROR_INVALID_DEVICE"


def test_driver_stream_priority_and_destroy(sim):
    assert sim.stream_priority_range(0) == (0, -5)
    stream = sim.stream_create(0, priority=-9)
    ran = []
    sim.deferred_depth = 1
    sim.enqueue(stream, lambda: ran.append(1))
    sim.stream_destroy(stream)  # as CUDA: queued work still completes
    assert ran == [1]
    assert error_name(lambda: sim.stream_query(stream)) == "CUDA_ERROR_INVALID_HANDLE"
    default = sim.default_stream(0)
    sim.stream_destroy(default)  # the default stream is never destroyed
    assert sim.stream_query(default)


def test_driver_event_elapsed_time_needs_timing_and_records(sim):
    stream = sim.stream_create(0)
    timed, plain, unrecorded = (
        sim.event_create(0, True),
        sim.event_create(0),
        sim.event_create(0, True),
    )
    sim.event_record(timed, stream)
    sim.event_record(plain, stream)
    assert error_name(lambda: sim.event_elapsed_ms(timed, plain)) == "CUDA_ERROR_INVALID_HANDLE"
    assert error_name(lambda: sim.event_elapsed_ms(timed, unrecorded)) == (
        "CUDA_ERROR_INVALID_HANDLE"
    )
    assert sim.event_elapsed_ms(timed, timed) == 0.0
    sim.event_destroy(timed)
    assert error_name(lambda: sim.event_query(timed)) == "CUDA_ERROR_INVALID_HANDLE"
