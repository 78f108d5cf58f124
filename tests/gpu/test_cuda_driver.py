"""The CUDA driver on a real GPU: memory, VMM, streams, events, copies, kernels."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from vram._errors import CudaError
from vram.driver import cuda_usable, get_driver

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

DEV = 0
MiB = 1 << 20
TiB = 1 << 40
SPIN_NS = 50_000_000  # how long the spin kernel holds its stream: 50 ms

SPIN = r"""
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""

AXPY = r"""
extern "C" __global__ void axpy(float a, const float* x, float b, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
"""

FILL_HALF = r"""
#include <cuda_fp16.h>
template <typename T>
__global__ void fill(T* out, T value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
"""


@pytest.fixture(scope="module")
def drv():
    return get_driver("cuda")


@pytest.fixture
def stream(drv):
    handle = drv.stream_create(DEV)
    yield handle
    drv.stream_destroy(handle)


@pytest.fixture
def buffer(drv):
    ptr = drv.malloc(DEV, 4 * MiB)
    yield ptr
    drv.free(DEV, ptr)


def spin(drv, stream: int, ns: int = SPIN_NS) -> None:
    kernel = drv.compile(DEV, SPIN, "spin")
    drv.launch(kernel, (1, 1, 1), (1, 1, 1), (np.uint64(ns),), stream)


def download(drv, ptr: int, nbytes: int, stream: int) -> np.ndarray:
    out = np.empty(nbytes, dtype=np.uint8)
    drv.memcpy_dtoh(out, ptr, stream)
    drv.stream_synchronize(stream)
    return out


def test_properties_and_mem_get_info(drv):
    assert drv.kind == "cuda"
    assert drv.device_count() >= 1
    props = drv.properties(DEV)
    assert props.driver == "cuda"
    assert props.name
    assert props.major >= 7
    assert props.warp_size == 32
    assert props.max_threads_per_block == 1024
    assert props.multi_processor_count > 0
    assert props.L2_cache_size == props.l2_cache_size > 0
    assert len(props.uuid) == 36 and props.uuid.count("-") == 4
    free, total = drv.mem_get_info(DEV)
    assert 0 < free <= total <= props.total_memory


def test_malloc_free_and_out_of_memory(drv):
    ptr = drv.malloc(DEV, 3 * MiB + 1)
    assert ptr % 512 == 0
    drv.free(DEV, ptr)
    with pytest.raises(CudaError) as info:
        drv.malloc(DEV, 10 * TiB)
    assert info.value.call == "cuMemAlloc"
    assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert info.value.is_out_of_memory


def test_vmm_reserve_create_map_write_read_unmap(drv, stream):
    page = drv.vmm_granularity(DEV)
    assert page >= 64 * 1024 and page & (page - 1) == 0
    va = drv.vmm_reserve(DEV, 2 * page)
    handles = [drv.vmm_create(DEV, page) for _ in range(2)]
    for i, handle in enumerate(handles):
        drv.vmm_map(DEV, va + i * page, page, handle)
    data = np.random.default_rng(1).integers(0, 256, 2 * page, dtype=np.uint8)
    drv.memcpy_htod(va, data, stream)  # one copy across both physical pages
    np.testing.assert_array_equal(download(drv, va, 2 * page, stream), data)
    for i, handle in enumerate(handles):
        drv.vmm_unmap(DEV, va + i * page, page)
        drv.vmm_release_handle(DEV, handle)
    drv.vmm_release(DEV, va, 2 * page)


def test_stream_priority_range(drv):
    least, greatest = drv.stream_priority_range(DEV)
    assert greatest <= least
    handle = drv.stream_create(DEV, priority=greatest)
    assert handle != drv.default_stream(DEV) == 0
    drv.stream_destroy(handle)


def test_events_follow_a_running_kernel(drv, stream):
    start, end = drv.event_create(DEV, timing=True), drv.event_create(DEV, timing=True)
    assert drv.event_query(end)  # never recorded: complete, as in CUDA
    drv.event_record(start, stream)
    spin(drv, stream)
    drv.event_record(end, stream)
    assert not drv.event_query(end)
    assert not drv.stream_query(stream)
    drv.event_synchronize(end)
    assert drv.event_query(end)
    assert drv.stream_query(stream)
    assert drv.event_elapsed_ms(start, end) >= 0.9 * SPIN_NS / 1e6
    drv.event_destroy(start)
    drv.event_destroy(end)


def test_stream_wait_event_orders_work_across_streams(drv, stream, buffer):
    other = drv.stream_create(DEV)
    done, copied = drv.event_create(DEV), drv.event_create(DEV)
    target = buffer + 2 * MiB
    drv.memset_d8(buffer, 0, 2 * MiB, other)
    drv.stream_synchronize(other)
    spin(drv, stream)
    drv.memset_d8(buffer, 7, MiB, stream)
    drv.event_record(done, stream)
    drv.stream_wait_event(other, done)
    drv.memcpy_dtod(target, buffer, MiB, other)  # runs only after the spin and the memset
    drv.event_record(copied, other)
    assert not drv.event_query(copied)
    drv.stream_synchronize(other)
    assert drv.event_query(done)
    assert (download(drv, target, MiB, other) == 7).all()
    drv.event_destroy(done)
    drv.event_destroy(copied)
    drv.stream_destroy(other)


def test_device_synchronize_waits_for_every_stream(drv, stream):
    event = drv.event_create(DEV)
    spin(drv, stream, SPIN_NS // 5)
    drv.event_record(event, stream)
    drv.device_synchronize(DEV)
    assert drv.event_query(event)
    drv.event_destroy(event)


def test_memcpy_and_memset_round_trip(drv, stream, buffer):
    data = np.random.default_rng(2).integers(0, 256, 4096, dtype=np.uint8)
    second = drv.malloc(DEV, 4096)
    drv.memcpy_htod(buffer, data, stream)
    drv.memset_d8(buffer + 100, 0xAB, 300, stream)
    drv.memcpy_dtod(second, buffer, 4096, stream)
    expected = data.copy()
    expected[100:400] = 0xAB
    np.testing.assert_array_equal(download(drv, second, 4096, stream), expected)
    drv.free(DEV, second)


@pytest.mark.parametrize("nbytes", [1, 4096, 64 * 1024, 64 * 1024 + 1, 3 * MiB])
def test_download_waits_for_the_stream_and_gives_the_bytes(drv, stream, buffer, nbytes):
    """Small downloads go through the thread's pinned staging buffer, larger ones straight
    to the array; both after the work queued before them (here a spin, then a copy)."""
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    kernel = drv.compile(DEV, SPIN, "spin")
    drv.launch(kernel, (1,), (1,), (np.uint64(SPIN_NS // 10),), stream)
    drv.memcpy_htod(buffer, data, stream)
    out = np.zeros(nbytes, np.uint8)
    drv.download(out, buffer, stream)
    np.testing.assert_array_equal(out, data)


def test_downloads_from_several_threads(drv, buffer):
    """Each thread stages its own small downloads."""
    data = np.arange(8 * 1024, dtype=np.int32)
    drv.memcpy_htod(buffer, data, 0)
    drv.stream_synchronize(0)

    def read(i: int) -> bool:
        drv.set_device(DEV)
        out = np.zeros(1024, np.int32)
        drv.download(out, buffer + 4096 * i, 0)
        return bool((out == data[1024 * i : 1024 * (i + 1)]).all())

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(read, range(8)))


def test_default_stream_copies(drv, buffer):
    legacy = drv.default_stream(DEV)
    data = np.arange(1000, dtype=np.float32)
    drv.memcpy_htod(buffer, data, legacy)
    out = np.zeros_like(data)
    drv.memcpy_dtoh(out, buffer, legacy)
    drv.stream_synchronize(legacy)
    np.testing.assert_array_equal(out, data)


def test_host_arrays_must_be_contiguous(drv, stream, buffer):
    strided = np.zeros(64, dtype=np.float32)[::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        drv.memcpy_htod(buffer, strided, stream)


def test_pinned_host_memory(drv, stream, buffer):
    expected = (np.arange(8192) % 251).astype(np.uint8)
    ptr = drv.host_alloc(8192)
    view = drv.host_view(ptr, 8192)
    assert view.dtype == np.uint8 and view.shape == (8192,)
    view[:] = expected
    np.testing.assert_array_equal(drv.host_view(ptr, 8192), expected)
    drv.memcpy_htod(buffer, view, stream)
    drv.stream_synchronize(stream)
    view[:] = 0
    drv.memcpy_dtoh(view, buffer, stream)
    drv.stream_synchronize(stream)
    np.testing.assert_array_equal(view, expected)
    drv.host_free(ptr)


def test_compile_and_launch_axpy(drv, stream):
    n = 1_000_003
    rng = np.random.default_rng(3)
    x = rng.standard_normal(n, dtype=np.float32)
    a, b = np.float32(2.5), np.float32(-0.75)
    px, py = drv.malloc(DEV, x.nbytes), drv.malloc(DEV, x.nbytes)
    kernel = drv.compile(DEV, AXPY, "axpy")
    assert drv.compile(DEV, AXPY, "axpy") is kernel
    drv.memcpy_htod(px, x, stream)
    drv.launch(kernel, ((n + 255) // 256, 1, 1), (256, 1, 1), (a, px, b, py, np.int64(n)), stream)
    y = np.empty_like(x)
    drv.memcpy_dtoh(y, py, stream)
    drv.stream_synchronize(stream)
    np.testing.assert_allclose(y, a * x + b, rtol=1e-6, atol=1e-6)
    drv.free(DEV, px)
    drv.free(DEV, py)


def test_template_half_kernel_on_the_default_stream(drv, buffer):
    kernel = drv.compile(DEV, FILL_HALF, "fill<__half>")
    n = 1000
    drv.launch(kernel, (4,), (256,), (buffer, np.float16(1.5), np.int32(n)), 0)
    out = np.empty(n, dtype=np.float16)
    drv.memcpy_dtoh(out, buffer, 0)
    drv.stream_synchronize(0)
    assert (out == np.float16(1.5)).all()


def test_bad_kernel_arguments_are_refused(drv, stream):
    kernel = drv.compile(DEV, SPIN, "spin")
    with pytest.raises(TypeError, match="NumPy scalar"):
        drv.launch(kernel, (1,), (1,), (1.0,), stream)


def test_a_prepared_launch_keeps_its_parameters_alive():
    """A prepared launcher's array of parameter pointers lives as long as the launcher: its
    maker's locals are gone and the memory they held is handed out again before it runs
    (kept by address alone, the driver read freed memory: a segfault or a wrong pointer)."""
    import ctypes
    import gc

    from vram.driver._work import Arg, Kernel, Launch

    driver = get_driver("cuda")
    n = 1000
    x = driver.malloc(DEV, 4 * n)
    y = driver.malloc(DEV, 4 * n)
    try:
        driver.memcpy_htod(x, np.arange(n, dtype=np.float32), 0)
        kernel = Kernel("axpy", AXPY, lambda *args: None)
        params = (Arg("f"), Arg("P"), Arg("f"), Arg("P"), Arg("q"))
        run = driver.prepare(DEV, Launch(kernel, "axpy", (4, 1, 1), (256, 1, 1), params))
        gc.collect()
        churn = [(ctypes.c_uint64 * 8)(*([0xDEAD] * 8)) for _ in range(10_000)]
        run(0, 2.0, x, 1.0, y, n)
        out = np.empty(n, np.float32)
        driver.memcpy_dtoh(out, y, 0)
        driver.stream_synchronize(0)
        del churn
        np.testing.assert_array_equal(out, 2 * np.arange(n, dtype=np.float32) + 1)
    finally:
        driver.free(DEV, x)
        driver.free(DEV, y)
