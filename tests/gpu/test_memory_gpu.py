"""The caching allocator, record_stream, record_use, expandable segments and streams on a
real GPU: the behaviours the sim tests prove, with real kernels in flight."""

from __future__ import annotations

import random

import numpy as np
import pytest

import vram
from vram.driver import cuda_usable
from vram.memory import DeviceCachingAllocator, parse_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""
SPIN_CYCLES = 200_000_000  # about 0.1 s on an H100


@pytest.fixture
def cuda0():
    device = vram.device("cuda:0")
    with device:
        yield device


def _fresh(cuda0, text: str = "") -> DeviceCachingAllocator:
    """An allocator of its own, so that exact stats do not depend on other tests."""
    return DeviceCachingAllocator(cuda0, parse_config(text))


def _spin(stream: vram.Stream, cycles: int = SPIN_CYCLES) -> None:
    driver = stream.device.driver
    kernel = driver.compile(stream.device.index, SPIN, "spin")
    driver.launch(kernel, (1, 1, 1), (1, 1, 1), (np.int64(cycles),), stream.cuda_stream)


def _read(ptr: int, n: int, stream: vram.Stream) -> np.ndarray:
    out = np.empty(n, np.uint8)
    stream.device.driver.memcpy_dtoh(out, ptr, stream.cuda_stream)
    stream.synchronize()
    return out


def _fill(ptr: int, n: int, value: int, stream: vram.Stream) -> None:
    stream.device.driver.memset_d8(ptr, value, n, stream.cuda_stream)


def test_segments_split_merge_and_stats(cuda0):
    allocator = _fresh(cuda0)
    stream = vram.current_stream().cuda_stream
    a = allocator.malloc(1000, stream)
    b = allocator.malloc(3 << 20, stream)
    c = allocator.malloc(64 << 20, stream)
    stats = allocator.memory_stats()
    assert stats["segment.small_pool.current"] == 1
    assert stats["reserved_bytes.small_pool.current"] == 2 << 20
    assert stats["segment.large_pool.current"] == 2
    assert stats["reserved_bytes.large_pool.current"] == (20 << 20) + (64 << 20)
    assert stats["allocated_bytes.all.current"] == 1024 + (3 << 20) + (64 << 20)
    for ptr in (a, b, c):
        allocator.free(ptr)
    allocator.empty_cache()
    stats = allocator.memory_stats()
    assert stats["reserved_bytes.all.current"] == 0
    assert stats["num_device_alloc"] == 3 and stats["num_device_free"] == 3


def test_best_fit_reuses_the_same_block(cuda0):
    allocator = _fresh(cuda0)
    stream = vram.current_stream().cuda_stream
    a = allocator.malloc(4 << 20, stream)
    allocator.free(a)
    assert allocator.malloc(4 << 20, stream) == a
    assert allocator.memory_stats()["num_device_alloc"] == 1


def test_out_of_memory_message_and_fraction(cuda0):
    allocator = _fresh(cuda0)
    allocator.set_memory_fraction(0.01)
    stream = vram.current_stream().cuda_stream
    with pytest.raises(vram.OutOfMemoryError) as info:
        allocator.malloc(4 << 30, stream)
    message = str(info.value)
    assert "Tried to allocate 4.00 GiB" in message and "expandable_segments" in message
    assert allocator.memory_stats()["num_ooms"] == 1


def test_record_stream_keeps_the_block_while_the_side_stream_runs(cuda0):
    allocator = _fresh(cuda0)
    main, side = vram.current_stream(), vram.Stream()
    a = allocator.malloc(1 << 20, main.cuda_stream)
    _spin(side)
    allocator.record_stream(a, side.cuda_stream)
    allocator.free(a)
    b = allocator.malloc(1 << 20, main.cuda_stream)
    assert b != a  # the side stream's kernel is still running
    assert allocator.memory_stats()["active.all.current"] == 2
    side.synchronize()
    allocator.free(b)
    c = allocator.malloc(1 << 20, main.cuda_stream)
    assert c == a  # events processed at the next malloc: the first block is back


def test_record_use_new_owner_waits_for_the_consumer(cuda0):
    """The freed block is handed out at once; the new owner's write lands after the
    consumer's read, which a 0.1 s kernel holds back."""
    allocator = _fresh(cuda0)
    producer, consumer = vram.current_stream(), vram.Stream()
    n = 1 << 20
    buf = allocator.malloc(n, producer.cuda_stream)
    seen = allocator.malloc(n, consumer.cuda_stream)
    _fill(buf, n, 7, producer)
    consumer.wait_stream(producer)
    _spin(consumer)  # the consumer's read is late ...
    cuda0.driver.memcpy_dtod(seen, buf, n, consumer.cuda_stream)  # ... and then reads buf
    allocator.record_use(buf, consumer.cuda_stream)
    allocator.free(buf)
    again = allocator.malloc(n, producer.cuda_stream)
    assert again == buf  # handed out again at once
    _fill(again, n, 9, producer)  # the new owner writes: must wait for the consumer's read
    vram.synchronize()
    assert (_read(seen, n, consumer) == 7).all()
    assert (_read(again, n, producer) == 9).all()


def test_record_use_two_consumers(cuda0):
    allocator = _fresh(cuda0)
    producer, c1, c2 = vram.current_stream(), vram.Stream(), vram.Stream()
    n = 1 << 16
    buf = allocator.malloc(n, producer.cuda_stream)
    out1 = allocator.malloc(n, c1.cuda_stream)
    out2 = allocator.malloc(n, c2.cuda_stream)
    _fill(buf, n, 3, producer)
    for stream, out, cycles in ((c1, out1, SPIN_CYCLES // 2), (c2, out2, SPIN_CYCLES)):
        stream.wait_stream(producer)
        _spin(stream, cycles)
        cuda0.driver.memcpy_dtod(out, buf, n, stream.cuda_stream)
        allocator.record_use(buf, stream.cuda_stream)
    allocator.free(buf)
    again = allocator.malloc(n, producer.cuda_stream)
    assert again == buf
    _fill(again, n, 5, producer)
    vram.synchronize()
    assert (_read(out1, n, c1) == 3).all() and (_read(out2, n, c2) == 3).all()


def test_cross_stream_reuse_waits_for_the_old_stream(cuda0):
    allocator = _fresh(cuda0, "cross_stream_reuse:True")
    s1, s2 = vram.Stream(), vram.Stream()
    n = 12 << 20  # a whole segment of its own: only unsplit segments change stream
    a = allocator.malloc(n, s1.cuda_stream)
    seen = allocator.malloc(n, s1.cuda_stream)
    _fill(a, n, 1, s1)
    _spin(s1)
    cuda0.driver.memcpy_dtod(seen, a, n, s1.cuda_stream)  # the old owner's late read
    allocator.free(a)
    b = allocator.malloc(n, s2.cuda_stream)
    assert b == a  # taken from the other stream instead of growing
    _fill(b, n, 2, s2)
    vram.synchronize()
    assert (_read(seen, n, s1) == 1).all()


def test_expandable_segments_map_pages_and_keep_data(cuda0):
    allocator = _fresh(cuda0, "expandable_segments:True")
    stream = vram.current_stream()
    sizes = [30 << 20, 50 << 20, 7 << 20]
    ptrs = [allocator.malloc(size, stream.cuda_stream) for size in sizes]
    assert ptrs[1] == ptrs[0] + (30 << 20)  # one range: the next block follows directly
    for i, (ptr, size) in enumerate(zip(ptrs, sizes, strict=True)):
        _fill(ptr, size, 10 + i, stream)
    for i, (ptr, size) in enumerate(zip(ptrs, sizes, strict=True)):
        assert (_read(ptr, size, stream) == 10 + i).all()
    stats = allocator.memory_stats()
    assert stats["reserved_bytes.large_pool.current"] == 100 << 20  # five 20 MiB pages
    for ptr in ptrs:
        allocator.free(ptr)
    allocator.empty_cache()
    assert allocator.memory_stats()["reserved_bytes.all.current"] == 0


def test_data_integrity_fuzz(cuda0):
    """10,000 random operations; every live block holds its own pattern until it is freed."""
    allocator = _fresh(cuda0)
    streams = [vram.current_stream(), vram.Stream(), vram.Stream()]
    rng = random.Random(1234)
    live: dict[int, tuple[int, int, vram.Stream]] = {}
    pattern = 0
    for _ in range(10_000):
        if live and (rng.random() < 0.45 or len(live) > 200):
            ptr = rng.choice(list(live))
            size, value, stream = live.pop(ptr)
            head = _read(ptr, min(size, 4096), stream)
            tail = _read(ptr + size - min(size, 4096), min(size, 4096), stream)
            assert (head == value).all() and (tail == value).all(), f"block {ptr:#x} corrupted"
            allocator.free(ptr)
        else:
            size = rng.choice([rng.randint(1, 4096), rng.randint(4096, 2 << 20)])
            if rng.random() < 0.05:
                size = rng.randint(10 << 20, 40 << 20)
            stream = rng.choice(streams)
            ptr = allocator.malloc(size, stream.cuda_stream)
            for other, (osize, _, _) in live.items():
                assert ptr + size <= other or other + osize <= ptr, "overlapping blocks"
            pattern = pattern % 250 + 1
            _fill(ptr, size, pattern, stream)
            live[ptr] = (size, pattern, stream)
    for ptr in list(live):
        allocator.free(ptr)
    allocator.empty_cache()


def test_events_and_stream_ordering(cuda0):
    side = vram.Stream()
    start, end = vram.Event(enable_timing=True), vram.Event(enable_timing=True)
    start.record(side)
    _spin(side)
    end.record(side)
    assert not end.query()
    waiter = vram.Stream()
    waiter.wait_event(end)
    marker = vram.Event()
    marker.record(waiter)
    assert not marker.query()  # the waiter is held behind the spinning stream
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) > 10.0  # milliseconds
    marker.synchronize()


def test_tensors_and_pinned_non_blocking_copies(cuda0):
    host = vram.arange(1 << 20, dtype=vram.float32, device="cpu").pin_memory()
    dev = host.to("cuda:0", non_blocking=True)
    back = vram.empty(1 << 20, dtype=vram.float32, device="cpu", pin_memory=True)
    back.copy_(dev * 2, non_blocking=True)
    vram.current_stream().synchronize()
    np.testing.assert_array_equal(back.numpy(), np.arange(1 << 20, dtype=np.float32) * 2)
    assert vram.memory.host_memory_stats()["num_host_alloc"] >= 2
