"""Streams and events on the simulator, with deferred-mode proofs of their ordering."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vram
from vram import _device, _streams
from vram._errors import DeferredCudaError

SIM0 = vram.Device("sim", 0)
SIM1 = vram.Device("sim", 1)


@pytest.fixture(autouse=True)
def _fresh_current(sim0):
    """sim:0 current, and no current stream set by an earlier test (or left by this one);
    the kept handles (Note [The current handle, kept]) are asked again after."""
    saved = dict(_streams._local.current)
    _streams._local.current.clear()
    _streams._local.handles.clear()
    yield
    _streams._local.current.clear()
    _streams._local.handles.clear()
    _streams._local.current.update(saved)


@pytest.fixture
def log():
    return []


def queue(stream: vram.Stream, log: list, item: object) -> None:
    """Queue a host function on ``stream`` that appends ``item`` to ``log`` when it runs."""
    vram.sim.driver().enqueue(stream.cuda_stream, lambda: log.append(item))


# ---- streams --------------------------------------------------------------------------


def test_stream_on_the_current_device_by_default():
    s = vram.Stream()
    assert s.device == SIM0
    assert s.priority == 0
    assert s != vram.default_stream()
    with vram.device("sim:1"):
        assert vram.Stream().device == SIM1
    assert vram.Stream("sim:1").device == SIM1
    assert vram.Stream(1).device == SIM1


@pytest.mark.parametrize(
    ("asked", "got"), [(0, 0), (-1, -1), (-3, -3), (-5, -3), (-100, -3), (7, 0)]
)
def test_stream_priority_is_clamped_to_the_pooled_levels(asked, got):
    """As PyTorch: four pooled priority levels (0 to -3) where the device offers more."""
    assert vram.Stream(priority=asked).priority == got


def test_streams_are_pooled_32_per_priority_level():
    """As PyTorch's stream pool: the 33rd stream of a level is the first again, so a loop
    that makes streams makes no new driver streams after the first 32."""
    device = vram.device("sim:1")
    first = vram.Stream(device, priority=-2)
    others = [vram.Stream(device, priority=-2) for _ in range(31)]
    assert len({s.cuda_stream for s in [first, *others]}) == 32
    assert vram.Stream(device, priority=-2) == first
    before = len(vram.sim.driver()._streams)
    for _ in range(10_000):
        vram.Stream(device)
    assert len(vram.sim.driver()._streams) - before <= 32


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"priority": 1.5}, TypeError, r"^priority must be an int, got 1.5"),
        ({"priority": True}, TypeError, r"^priority must be an int, got True"),
        ({"priority": None}, TypeError, r"^priority must be an int, got None"),
        ({"device": "cpu"}, ValueError, r"^device: streams live on cuda or sim devices"),
        ({"device": "sim:4"}, ValueError, r"^device: sim:4 does not exist"),
        ({"device": "gpu:0"}, ValueError, r"^device: unknown device 'gpu:0'"),
        ({"device": 1.5}, TypeError, r"^device: expected a device"),
    ],
)
def test_stream_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        vram.Stream(**kwargs)


def test_stream_query_and_synchronize(log):
    s = vram.Stream()
    queue(s, log, 1)  # eager: runs as it is queued
    assert log == [1]
    assert s.query()
    with vram.sim.deferred():
        queue(s, log, 2)
        assert not s.query()
        assert vram.sim.pending(s) == 1
        s.synchronize()
        assert log == [1, 2]
        assert s.query()
        assert vram.sim.pending(s) == 0


def test_record_event_returns_a_new_or_the_given_event():
    s = vram.Stream()
    e = s.record_event()
    assert isinstance(e, vram.Event)
    assert e.device == SIM0
    mine = vram.Event()
    assert s.record_event(mine) is mine
    assert mine.query()


def test_stream_equality_and_hash():
    s, t = vram.Stream(), vram.Stream()
    same = _streams.Stream._wrap(SIM0, s.cuda_stream)
    assert same == s and hash(same) == hash(s)
    assert s != t
    assert s != s.cuda_stream
    assert len({s, same, t}) == 2
    assert vram.default_stream() == _streams.Stream._wrap(SIM0, s.device.driver.default_stream(0))
    assert vram.default_stream("sim:0") != vram.default_stream("sim:1")
    assert repr(s) == f"<vram.Stream device=sim:0 cuda_stream={s.cuda_stream:#x}>"


@pytest.mark.parametrize("bad", [None, 3, "stream"])
def test_stream_methods_reject_non_streams_and_non_events(bad):
    s = vram.Stream()
    with pytest.raises(TypeError, match=r"^event must be a vram.Event"):
        s.wait_event(bad)
    with pytest.raises(TypeError, match=r"^stream: expected a vram.Stream"):
        s.wait_stream(bad)
    with pytest.raises(TypeError, match=r"^stream: expected a vram.Stream"):
        vram.set_stream(bad)
    if bad is not None:  # None is the current stream there
        with pytest.raises(TypeError, match=r"^stream: expected a vram.Stream"):
            vram.Event().record(bad)
        with pytest.raises(TypeError, match=r"^stream: expected a vram.Stream"):
            vram.Event().wait(bad)


# ---- current and default streams ------------------------------------------------------


def test_current_stream_is_the_default_stream_until_set():
    assert vram.current_stream() == vram.default_stream()
    assert vram.default_stream() is vram.default_stream(0)  # one object a device
    assert vram.current_stream("sim:1") == vram.default_stream("sim:1")
    assert vram.default_stream("sim:1").device == SIM1


def test_set_stream_makes_the_stream_and_its_device_current():
    s = vram.Stream()
    vram.set_stream(s)
    assert vram.current_stream() == s
    assert vram.current_stream("sim:1") == vram.default_stream("sim:1")
    t = vram.Stream("sim:1")
    vram.set_stream(t)  # as torch.cuda.set_stream: the stream's device becomes current
    assert vram.current_device() == 1
    assert vram.current_stream() == t
    assert vram.current_stream("sim:0") == s


def test_default_and_current_stream_reject_cpu_and_bad_devices():
    for call in (vram.default_stream, vram.current_stream):
        with pytest.raises(ValueError, match=r"^device: the cpu device has no streams"):
            call("cpu")
        with pytest.raises(ValueError, match=r"^device: sim:2 does not exist"):
            call(2)


def test_with_stream_sets_device_and_stream_and_restores_both():
    s0, s1 = vram.Stream("sim:0"), vram.Stream("sim:1")
    vram.set_stream(s0)
    with vram.stream(s1) as got:
        assert got is s1
        assert vram.current_device() == 1
        assert vram.current_stream() == s1
        assert vram.current_stream("sim:0") == s0
        inner = vram.Stream("sim:1")
        with vram.stream(inner):
            assert vram.current_stream() == inner
        assert vram.current_stream() == s1
    assert vram.current_device() == 0
    assert vram.current_stream() == s0
    assert vram.current_stream("sim:1") == vram.default_stream("sim:1")


def test_with_stream_restores_on_error():
    s1 = vram.Stream("sim:1")
    with pytest.raises(KeyError):
        with s1:  # a Stream is its own context manager too
            assert vram.current_stream() == s1
            raise KeyError("x")
    assert vram.current_device() == 0
    assert vram.current_stream() == vram.default_stream()
    assert _streams._local.stack == []


def test_with_stream_none_does_nothing():
    s = vram.Stream()
    vram.set_stream(s)
    with vram.stream(None) as got:
        assert got is None
        assert vram.current_stream() == s
        assert vram.current_device() == 0
    assert vram.current_stream() == s


def test_with_stream_rejects_non_streams():
    with pytest.raises(TypeError, match=r"^stream: expected a vram.Stream, got int"):
        with vram.stream(3):
            pass


def test_current_stream_is_per_thread():
    s = vram.Stream()
    vram.set_stream(s)
    seen = {}
    other = vram.Stream()

    def worker():
        seen["before"] = vram.current_stream(SIM0)
        vram.set_stream(other)
        seen["after"] = vram.current_stream(SIM0)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == {"before": vram.default_stream(SIM0), "after": other}
    assert vram.current_stream() == s


def test_current_place_is_current_streams_device_and_handle_wherever_they_are_set():
    def place() -> tuple[vram.Device, int]:
        s = vram.current_stream()
        return s.device, s.cuda_stream

    seen = [_streams.current_place() == place()]
    s0, s1 = vram.Stream("sim:0"), vram.Stream("sim:1")
    vram.set_device("sim:1")  # its default stream
    seen.append(_streams.current_place() == (SIM1, vram.default_stream(SIM1).cuda_stream))
    vram.set_stream(s0)
    seen.append(_streams.current_place() == (SIM0, s0.cuda_stream))
    with vram.stream(s1):
        seen.append(_streams.current_place() == (SIM1, s1.cuda_stream))
    seen.append(_streams.current_place() == (SIM0, s0.cuda_stream))
    other = {}
    thread = threading.Thread(target=lambda: other.update(place=_streams.current_place()))
    thread.start()
    thread.join()  # a new thread: no device set, so the default device and its default stream
    default = vram.default_device()
    assert other["place"] == (default, vram.default_stream(default).cuda_stream)
    assert seen == [True] * 5


def _handles_agree() -> None:
    """The kept handles are the simple path's answers, on every device and the cpu."""
    for device in (SIM0, SIM1):
        assert _streams.this_thread.handles[device] == vram.current_stream(device).cuda_stream
        assert _streams.this_thread.handles[device] == _streams.current_handle(device)
    assert _streams.this_thread.handles[vram.device("cpu")] == 0


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["set", "with", "raise", "thread"]), st.integers(0, 3))))
def test_the_kept_handles_follow_the_current_stream(steps):
    """Differential: after any mix of set_stream, ``with stream`` (left normally or by an
    error) and other threads' set_stream, ``this_thread.handles`` (what ops launch on) is
    ``current_stream(device).cuda_stream`` (Note [The current handle, kept])."""
    streams = [vram.Stream(SIM0), vram.Stream(SIM1), vram.default_stream(SIM0), vram.Stream(SIM0)]
    _handles_agree()
    for action, which in steps:
        s = streams[which]
        if action == "set":
            vram.set_stream(s)
        elif action == "with":
            with vram.stream(s):
                _handles_agree()
        elif action == "raise":
            with pytest.raises(KeyError), s:
                _handles_agree()
                raise KeyError(which)
        else:
            seen: list = []

            def other_thread(s=s, seen=seen):
                _handles_agree()
                vram.set_stream(s)
                seen.append(_handles_agree())

            thread = threading.Thread(target=other_thread)
            thread.start()
            thread.join()
            assert seen == [None]
        _handles_agree()
    vram.set_stream(vram.default_stream(SIM0))
    vram.set_stream(vram.default_stream(SIM1))


# ---- events ---------------------------------------------------------------------------


def test_event_before_its_first_record():
    e = vram.Event(enable_timing=True)
    assert e.enable_timing
    assert e.device is None and e.cuda_event is None
    assert repr(e) == "<vram.Event unrecorded>"
    assert not vram.Event().enable_timing


def test_event_record_on_the_current_stream(log):
    s = vram.Stream()
    e = vram.Event()
    with vram.sim.deferred():
        with vram.stream(s):
            queue(s, log, "work")
            e.record()
        assert e.device == SIM0
        assert repr(e) == "<vram.Event on sim:0>"
        assert vram.sim.pending(s) == 2  # the work and the record
        assert not e.query()
        e.synchronize()
        assert log == ["work"]
        assert e.query()


def test_event_wait_on_the_current_stream(log):
    a, b = vram.Stream(), vram.Stream()
    with vram.sim.deferred():
        queue(a, log, "a")
        e = a.record_event()
        with vram.stream(b):
            e.wait()
        queue(b, log, "b")
        assert vram.sim.pending(b) == 2  # the wait and the work
        b.synchronize()
        assert log == ["a", "b"]


def test_elapsed_time_measures_the_work_between_records():
    start, end = vram.Event(enable_timing=True), vram.Event(enable_timing=True)
    s = vram.Stream()
    start.record(s)
    vram.sim.driver().enqueue(s.cuda_stream, lambda: time.sleep(0.02))
    end.record(s)
    end.synchronize()
    assert 20.0 <= start.elapsed_time(end) < 2000.0
    assert end.elapsed_time(start) < 0


def test_elapsed_time_bad_input():
    timed, plain = vram.Event(enable_timing=True), vram.Event()
    timed.record()
    plain.record()
    with pytest.raises(RuntimeError, match=r"^self: event was created without enable_timing"):
        plain.elapsed_time(timed)
    with pytest.raises(RuntimeError, match=r"^end_event: event was created without enable_timing"):
        timed.elapsed_time(plain)
    with pytest.raises(RuntimeError, match=r"^end_event: event was never recorded"):
        timed.elapsed_time(vram.Event(enable_timing=True))
    with pytest.raises(TypeError, match=r"^end_event must be a vram.Event"):
        timed.elapsed_time(None)
    other = vram.Event(enable_timing=True)
    other.record(vram.Stream("sim:1"))
    with pytest.raises(ValueError, match=r"^end_event: events are on different devices"):
        timed.elapsed_time(other)


def test_elapsed_time_before_the_end_has_run_is_not_ready():
    start, end = vram.Event(enable_timing=True), vram.Event(enable_timing=True)
    start.record()
    with vram.sim.deferred():
        end.record()
        with pytest.raises(vram.CudaError, match="CUDA_ERROR_NOT_READY") as info:
            start.elapsed_time(end)
        assert info.value.name == "CUDA_ERROR_NOT_READY"
        end.synchronize()
        assert start.elapsed_time(end) >= 0.0


def test_never_recorded_event():
    e = vram.Event(enable_timing=True)
    s = vram.Stream()
    assert e.query()
    e.synchronize()  # returns at once
    with vram.sim.deferred():
        e.wait(s)
        s.wait_event(e)
        assert vram.sim.pending(s) == 0  # nothing to wait for
    done = vram.Event(enable_timing=True)
    done.record()
    with pytest.raises(RuntimeError, match=r"^self: event was never recorded"):
        e.elapsed_time(done)
    with pytest.raises(RuntimeError, match=r"^end_event: event was never recorded"):
        done.elapsed_time(e)


def test_a_stream_of_another_device_waits_on_an_event_as_cudas_do():
    """cudaStreamWaitEvent takes another device's event: work queued on sim:1 after the
    wait runs only once sim:0's work before the record has run."""
    s0, s1 = vram.Stream("sim:0"), vram.Stream("sim:1")
    ran: list[str] = []
    with vram.sim.deferred():
        vram.sim.driver().enqueue(s0.cuda_stream, lambda: ran.append("sim:0"))
        s1.wait_stream(s0)
        vram.sim.driver().enqueue(s1.cuda_stream, lambda: ran.append("sim:1"))
        s1.synchronize()  # drives sim:0 up to its record, then sim:1
        assert ran == ["sim:0", "sim:1"]


def test_an_event_records_only_on_its_first_device():
    e = vram.Event()
    e.record(vram.Stream("sim:0"))
    with pytest.raises(ValueError, match=r"^stream: the event was created on sim:0"):
        e.record(vram.Stream("sim:1"))
    assert e.device == SIM0
    e.record(vram.Stream("sim:0"))  # its own device still works


# ---- deferred mode: ordering ----------------------------------------------------------


def test_work_after_wait_event_does_not_run_before_the_event(log):
    a, b = vram.Stream(), vram.Stream()
    with vram.sim.deferred():
        queue(a, log, "a1")
        e = a.record_event()
        queue(a, log, "a2")
        b.wait_event(e)
        vram.sim.driver().enqueue(b.cuda_stream, lambda: log.append(("b1", e.query())))
        assert log == []
        assert not e.query()
        b.synchronize()
        # b1 ran after a1, with the event complete; a2 (after the record) still held
        assert log == ["a1", ("b1", True)]
        assert vram.sim.pending(a) == 1
        assert not a.query()
    assert log == ["a1", ("b1", True), "a2"]


def test_wait_event_waits_for_the_record_made_before_it(log):
    a, b = vram.Stream(), vram.Stream()
    e = vram.Event()
    with vram.sim.deferred():
        queue(a, log, "a1")
        e.record(a)
        b.wait_event(e)
        queue(a, log, "a2")
        e.record(a)  # a later record does not move b's wait
        queue(b, log, "b1")
        b.synchronize()
        assert log == ["a1", "b1"]
        assert not e.query()
        e.synchronize()
        assert log == ["a1", "b1", "a2"]


def test_wait_stream_waits_for_everything_queued_so_far(log):
    a, b = vram.Stream(), vram.Stream()
    with vram.sim.deferred():
        queue(a, log, "a1")
        queue(a, log, "a2")
        b.wait_stream(a)
        queue(a, log, "a3")
        queue(b, log, "b1")
        b.synchronize()
        assert log == ["a1", "a2", "b1"]
        assert vram.sim.pending(a) == 1


def test_event_query_is_false_while_its_work_is_held(log):
    s = vram.Stream()
    with vram.sim.deferred():
        queue(s, log, "work")
        e = s.record_event()
        assert not e.query()
        assert not s.query()
        e.synchronize()
        assert e.query()
        assert log == ["work"]


def test_synchronize_runs_only_the_work_it_depends_on(log):
    a, b, c = vram.Stream(), vram.Stream(), vram.Stream()
    with vram.sim.deferred():
        queue(a, log, "a1")
        b.wait_event(a.record_event())
        queue(b, log, "b1")
        queue(c, log, "c1")
        queue(vram.default_stream(), log, "d1")
        assert [vram.sim.pending(x) for x in (a, b, c)] == [2, 2, 1]
        b.synchronize()
        assert log == ["a1", "b1"]
        assert [vram.sim.pending(x) for x in (a, b, c)] == [0, 0, 1]
        assert vram.sim.pending(vram.default_stream()) == 1
        c.synchronize()
        assert log == ["a1", "b1", "c1"]
        assert vram.sim.pending(vram.default_stream()) == 1


def test_sim_run_drives_every_stream(log):
    a, b = vram.Stream(), vram.Stream("sim:1")
    with vram.sim.deferred():
        queue(a, log, "a")
        queue(b, log, "b")
        vram.sim.run()
        assert sorted(log) == ["a", "b"]
        assert vram.sim.pending(a) == vram.sim.pending(b) == 0


def test_leaving_the_deferred_block_runs_what_is_left(log):
    s = vram.Stream()
    with vram.sim.deferred():
        with vram.sim.deferred():
            queue(s, log, "inner")
        assert log == []  # the outer block still holds it
        assert vram.sim.pending(s) == 1
    assert log == ["inner"]
    assert s.query()


def test_pending_rejects_what_is_not_a_stream():
    with pytest.raises(TypeError, match=r"^stream: expected a vram.Stream of a sim device"):
        vram.sim.pending("s")


# ---- failures in queued work ----------------------------------------------------------


def test_an_exception_in_queued_work_surfaces_at_the_next_synchronize(log):
    s = vram.Stream()
    with vram.sim.deferred():
        vram.sim.driver().enqueue(s.cuda_stream, lambda: 1 // 0)
        queue(s, log, "after")
        with pytest.raises(DeferredCudaError, match="CUDA_ERROR_LAUNCH_FAILED") as info:
            s.synchronize()
    assert isinstance(info.value, vram.CudaError)
    assert info.value.call == "queued kernel"
    assert "ZeroDivisionError" in info.value.detail
    assert log == ["after"]  # the stream went on, as a GPU's does
    s.synchronize()  # reported once


def test_a_cuda_error_in_queued_work_keeps_its_name():
    s = vram.Stream()
    sim = vram.sim.driver()
    sim.enqueue(s.cuda_stream, lambda: sim.view(0x10, 4))  # eager: runs now, fails
    with pytest.raises(DeferredCudaError) as info:
        vram.synchronize()
    assert (info.value.call, info.value.name) == ("memory access", "CUDA_ERROR_ILLEGAL_ADDRESS")


def test_an_exception_in_queued_work_surfaces_at_event_synchronize():
    s = vram.Stream()
    with vram.sim.deferred():
        vram.sim.driver().enqueue(s.cuda_stream, lambda: [][1])
        e = s.record_event()
        with pytest.raises(DeferredCudaError, match="IndexError"):
            e.synchronize()
    assert e.query()


def test_device_of_the_current_stream_follows_with_device():
    with vram.device("sim:1"):
        assert vram.current_stream().device == SIM1
        assert _device.current_device_obj() == SIM1
