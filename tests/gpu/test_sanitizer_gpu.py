"""The stream sanitizer on a real GPU: a block freed without record_stream is poisoned at
once on its stream, so a side stream's late read sees the poison (0xFF: NaN in floats), not
stale data that happens to look right; record_stream and record_use keep the data intact."""

from __future__ import annotations

import numpy as np
import pytest

import vram
from vram.driver import cuda_usable
from vram.memory import DeviceCachingAllocator, parse_config
from vram.memory._sanitizer import POISON, sanitizer_of, sync_sanitizer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""
SPIN_CYCLES = 200_000_000  # about 0.1 s on an H100
N = 1 << 20  # bytes


@pytest.fixture
def cuda0():
    device = vram.device("cuda:0")
    with device:
        yield device


@pytest.fixture
def sanitized(cuda0):
    allocator = DeviceCachingAllocator(cuda0, parse_config("stream_sanitizer:True"))
    sync_sanitizer(allocator)
    assert sanitizer_of(allocator) is not None
    return allocator


def _late_read(allocator, lifetime: str | None) -> tuple[np.ndarray, int, int]:
    """Fill a block with 7 on the main stream; a side stream reads it after a 0.1 s kernel;
    the block is freed on the main stream at once (with record_stream / record_use or
    neither). What the side stream read, the block's address, and the main stream."""
    device = allocator.device
    main, side = vram.current_stream(device), vram.Stream(device)
    driver = device.driver
    buf = allocator.malloc(N, main.cuda_stream)
    seen = allocator.malloc(N, side.cuda_stream)
    driver.memset_d8(buf, 7, N, main.cuda_stream)
    side.wait_stream(main)
    kernel = driver.compile(device.index, SPIN, "spin")
    driver.launch(kernel, (1, 1, 1), (1, 1, 1), (np.int64(SPIN_CYCLES),), side.cuda_stream)
    driver.memcpy_dtod(seen, buf, N, side.cuda_stream)  # the late read
    if lifetime == "record_stream":
        allocator.record_stream(buf, side.cuda_stream)
    elif lifetime == "record_use":
        allocator.record_use(buf, side.cuda_stream)
    allocator.free(buf)  # poisoned on the main stream (after record_use's event)
    vram.synchronize()
    out = np.empty(N, np.uint8)
    driver.memcpy_dtoh(out, seen, side.cuda_stream)
    side.synchronize()
    allocator.free(seen)
    return out, buf, main.cuda_stream


def _bytes_at(allocator, ptr: int, stream: int) -> np.ndarray:
    out = np.empty(N, np.uint8)
    allocator.driver.memcpy_dtoh(out, ptr, stream)
    vram.synchronize()
    return out


def test_a_missing_record_stream_reads_the_poison(sanitized):
    seen, buf, main = _late_read(sanitized, None)
    assert (seen == POISON).all()  # the race is visible: every byte is the poison
    as_float = seen.view(np.float32)
    assert np.isnan(as_float).all()
    again = sanitized.malloc(N, main)
    assert again == buf  # reused at once, and still poisoned for its new owner
    assert (_bytes_at(sanitized, again, main) == POISON).all()
    sanitized.free(again)


@pytest.mark.parametrize("lifetime", ["record_stream", "record_use"])
def test_record_stream_and_record_use_keep_the_data(sanitized, lifetime):
    seen, buf, main = _late_read(sanitized, lifetime)
    assert (seen == 7).all()
    again = sanitized.malloc(N, main)
    assert again == buf  # record_use: at once; record_stream: once its event completed
    assert (_bytes_at(sanitized, again, main) == POISON).all()  # poisoned after the read
    sanitized.free(again)
