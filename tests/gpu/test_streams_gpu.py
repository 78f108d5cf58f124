"""Streams and events on a real GPU, with a spinning kernel that keeps work in flight."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import vram
from vram import _streams
from vram.driver import cuda_usable, get_driver

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

CUDA0 = vram.Device("cuda", 0)
SPIN_CYCLES = 200_000_000  # about 0.1 s of one thread's clock on an H100

SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long s = clock64();
    while (clock64() - s < cycles) {}
}
"""


@pytest.fixture(autouse=True)
def cuda0():
    """cuda:0 current, no current stream left set, and nothing left running afterwards."""
    saved = dict(_streams._local.current)
    _streams._local.current.clear()
    _streams._local.handles.clear()  # (kept handles: asked again, Note [The current handle, kept])
    with vram.device("cuda:0") as device:
        yield device
        vram.synchronize()
    _streams._local.current.clear()
    _streams._local.handles.clear()
    _streams._local.current.update(saved)


def spin(stream: vram.Stream, cycles: int = SPIN_CYCLES) -> None:
    """Queue a one-thread kernel that spins for ``cycles`` clock cycles on ``stream``."""
    driver = get_driver("cuda")
    kernel = driver.compile(0, SPIN, "spin")
    driver.launch(kernel, (1, 1, 1), (1, 1, 1), (np.int64(cycles),), stream.cuda_stream)


def test_stream_and_event_query_are_false_while_a_kernel_runs():
    s = vram.Stream()
    assert s.device == CUDA0
    assert s.query()
    spin(s)
    e = s.record_event()
    assert not s.query()
    assert not e.query()
    s.synchronize()
    assert s.query()
    assert e.query()


def test_event_synchronize_waits_for_the_work_before_the_record():
    s = vram.Stream()
    spin(s)
    e = vram.Event()
    e.record(s)
    started = time.perf_counter()
    e.synchronize()
    assert e.query() and s.query()
    assert time.perf_counter() - started > 0.01


def test_work_after_wait_event_does_not_complete_before_the_event():
    a, b, c = vram.Stream(), vram.Stream(), vram.Stream()
    spin(a)
    done = a.record_event()
    b.wait_event(done)
    marker = b.record_event()  # held behind the spinning kernel
    free = c.record_event()  # an unrelated stream is not held
    free.synchronize()
    assert not done.query()
    assert not marker.query()
    marker.synchronize()
    assert done.query()


def test_wait_stream_waits_for_everything_queued_so_far():
    a, b = vram.Stream(), vram.Stream()
    spin(a)
    b.wait_stream(a)
    marker = b.record_event()
    assert not marker.query()
    assert not a.query()
    b.synchronize()
    assert a.query()


def test_elapsed_time_measures_the_kernel():
    s = vram.Stream()
    start, end = vram.Event(enable_timing=True), vram.Event(enable_timing=True)
    start.record(s)
    spin(s)
    end.record(s)
    with pytest.raises(vram.CudaError) as info:
        start.elapsed_time(end)  # not finished yet
    assert info.value.name == "CUDA_ERROR_NOT_READY"
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert 10.0 < elapsed < 10_000.0


def test_elapsed_time_bad_input():
    timed, plain = vram.Event(enable_timing=True), vram.Event()
    timed.record()
    plain.record()
    with pytest.raises(RuntimeError, match=r"^end_event: event was created without enable_timing"):
        timed.elapsed_time(plain)
    with pytest.raises(RuntimeError, match=r"^end_event: event was never recorded"):
        timed.elapsed_time(vram.Event(enable_timing=True))


def test_never_recorded_event():
    e = vram.Event()
    assert e.query()
    e.synchronize()
    s = vram.Stream()
    spin(s, SPIN_CYCLES // 10)
    e.wait(s)  # a no-op
    s.wait_event(e)
    s.synchronize()


def test_priority_is_clamped_to_the_pooled_levels():
    """PyTorch's stream pool: priority 0 down to -3 at most (the H100 offers 0 to -5)."""
    least, greatest = get_driver("cuda").stream_priority_range(0)
    assert greatest < least
    highest = max(greatest, least - 3)
    assert vram.Stream(priority=-100).priority == highest
    assert vram.Stream(priority=100).priority == least
    assert vram.Stream(priority=-1).priority == -1


def test_current_default_and_set_stream():
    assert vram.current_stream() == vram.default_stream()
    assert vram.default_stream().device == CUDA0
    s = vram.Stream()
    vram.set_stream(s)
    assert vram.current_stream() == s
    assert vram.current_stream("cuda:0") == s
    same = _streams.Stream._wrap(CUDA0, s.cuda_stream)
    assert same == s and hash(same) == hash(s)
    assert s != vram.Stream()


def test_with_stream_sets_and_restores():
    s = vram.Stream()
    with vram.stream(s):
        assert vram.current_stream() == s
        assert vram.current_device() == 0
        spin(vram.current_stream(), SPIN_CYCLES // 10)
        e = vram.Event()
        e.record()  # on the current stream: s
    assert vram.current_stream() == vram.default_stream()
    e.synchronize()
    assert s.query()
    with vram.stream(None):
        assert vram.current_stream() == vram.default_stream()


def test_with_stream_switches_between_cuda_and_sim_devices():
    sim_stream = vram.Stream("sim:0")
    with vram.stream(sim_stream):
        assert vram.current_device() == 0
        assert vram.current_stream() == sim_stream
        assert vram.current_stream("cuda:0") == vram.default_stream("cuda:0")
    assert vram.current_stream() == vram.default_stream(CUDA0)


def test_current_stream_is_per_thread():
    s = vram.Stream()
    vram.set_stream(s)
    seen = []

    def worker():
        seen.append(vram.current_stream(CUDA0))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [vram.default_stream(CUDA0)]
    assert vram.current_stream() == s


def test_vram_synchronize_waits_for_every_stream():
    streams = [vram.Stream(), vram.Stream(priority=-1)]
    for s in streams:
        spin(s)
    assert not any(s.query() for s in streams)
    vram.synchronize()
    assert all(s.query() for s in streams)


def test_an_event_of_the_gpu_cannot_be_waited_on_by_a_sim_stream():
    e = vram.Stream().record_event()
    sim_stream = vram.Stream("sim:0")
    with pytest.raises(ValueError, match=r"^stream: a stream of sim:0 cannot wait on an event"):
        sim_stream.wait_event(e)
    with pytest.raises(ValueError, match=r"^stream: the event was created on cuda:0"):
        e.record(sim_stream)
