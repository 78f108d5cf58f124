"""The simulated GPU's stream capture, called directly: what is recorded, how it replays,
forks and joins through events, and CUDA's errors for work that conflicts with a capture."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import vram
from vram.driver._sim import SimDriver

MiB = 1 << 20


@pytest.fixture
def sim():
    """A fresh one-device simulator (not the process-wide one)."""
    return SimDriver(device_count=1, capacity=1 << 30)


def error_name(call) -> str:
    with pytest.raises(vram.CudaError) as info:
        call()
    return info.value.name


def appender(log: list, value: object):
    return lambda: log.append(value)


def test_captured_work_does_not_run_and_replays_in_order(sim):
    s, other = sim.stream_create(0), sim.stream_create(0)
    log: list = []
    sim.stream_begin_capture(s, "global")
    for k in range(3):
        sim.enqueue(s, appender(log, k))
    assert log == [] and sim.pending(s) == 0
    info = sim.stream_capture_info(s)
    assert info.status == "active" and info.id > 0 and len(info.dependencies) == 1
    graph = sim.stream_end_capture(s)
    assert sim.stream_capture_info(s).status == "none"
    assert sim.graph_node_count(graph) == 3
    graph_exec = sim.graph_instantiate(graph)
    sim.graph_launch(graph_exec, other)  # any stream of the device
    sim.graph_launch(graph_exec, s)
    assert log == [0, 1, 2, 0, 1, 2]


def test_replay_queues_the_work_on_a_held_stream(sim):
    s = sim.stream_create(0)
    log: list = []
    sim.stream_begin_capture(s)
    sim.enqueue(s, appender(log, "a"))
    sim.enqueue(s, appender(log, "b"))
    graph_exec = sim.graph_instantiate(sim.stream_end_capture(s))
    sim.deferred_depth += 1
    try:
        sim.graph_launch(graph_exec, s)
        assert sim.pending(s) == 2 and log == []
    finally:
        sim.deferred_depth -= 1
    sim.stream_synchronize(s)
    assert log == ["a", "b"]


def test_copies_replay_with_the_same_pointers(sim):
    s = sim.stream_create(0)
    src, dst = sim.malloc(0, 64), sim.malloc(0, 64)
    sim.memcpy_htod(src, np.arange(16, dtype=np.float32), s)
    sim.stream_begin_capture(s)
    sim.memcpy_dtod(dst, src, 64, s)
    graph_exec = sim.graph_instantiate(sim.stream_end_capture(s))
    assert not sim.view(dst, 64).any()  # captured, not run
    sim.graph_launch(graph_exec, s)
    assert np.array_equal(sim.view(dst, 64).view(np.float32), np.arange(16, dtype=np.float32))
    sim.view(src, 64).view(np.float32)[:] = 7
    sim.graph_launch(graph_exec, s)
    assert (sim.view(dst, 64).view(np.float32) == 7).all()


def test_fork_and_join_through_captured_events(sim):
    main, side = sim.stream_create(0), sim.stream_create(0)
    fork, join = sim.event_create(0), sim.event_create(0)
    log: list = []
    sim.stream_begin_capture(main)
    sim.enqueue(main, appender(log, "first"))
    sim.event_record(fork, main)
    sim.stream_wait_event(side, fork)  # side joins the capture
    assert sim.stream_capture_info(side).id == sim.stream_capture_info(main).id
    sim.enqueue(side, appender(log, "side"))
    sim.event_record(join, side)
    sim.stream_wait_event(main, join)
    sim.enqueue(main, appender(log, "last"))
    graph = sim.stream_end_capture(main)
    assert sim.stream_capture_info(side).status == "none"
    nodes = sim.stream_capture_info(side)  # side left the capture with the origin
    assert nodes.status == "none"
    sim.graph_launch(sim.graph_instantiate(graph), main)
    assert log == ["first", "side", "last"]


def test_a_fork_not_joined_back_fails_the_capture(sim):
    main, side = sim.stream_create(0), sim.stream_create(0)
    fork = sim.event_create(0)
    sim.stream_begin_capture(main)
    sim.event_record(fork, main)
    sim.stream_wait_event(side, fork)
    sim.enqueue(side, lambda: None)
    assert error_name(lambda: sim.stream_end_capture(main)) == "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"
    assert sim.stream_capture_info(side).status == "none"


def test_ending_on_a_forked_stream_invalidates_the_capture(sim):
    main, side = sim.stream_create(0), sim.stream_create(0)
    fork = sim.event_create(0)
    sim.stream_begin_capture(main)
    sim.event_record(fork, main)
    sim.stream_wait_event(side, fork)
    assert error_name(lambda: sim.stream_end_capture(side)) == "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"
    assert error_name(lambda: sim.stream_end_capture(main)) == (
        "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    )
    assert sim.stream_capture_info(side).status == "none"


def test_synchronizing_a_capturing_stream_invalidates_the_capture(sim):
    s = sim.stream_create(0)
    sim.stream_begin_capture(s)
    assert error_name(lambda: sim.stream_synchronize(s)) == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
    assert sim.stream_capture_info(s).status == "invalidated"
    name = error_name(lambda: sim.enqueue(s, lambda: None))
    assert name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert error_name(lambda: sim.stream_end_capture(s)) == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert sim.stream_capture_info(s).status == "none"
    sim.stream_synchronize(s)  # usable again


@pytest.mark.parametrize(
    "call",
    [
        lambda sim, s: sim.stream_query(s),
        lambda sim, s: sim.device_synchronize(0),
    ],
    ids=["stream_query", "device_synchronize"],
)
def test_querying_the_stream_or_synchronizing_the_device_is_unsupported(sim, call):
    s = sim.stream_create(0)
    sim.stream_begin_capture(s, "relaxed")  # conflicts with any capture mode
    assert error_name(lambda: call(sim, s)) == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
    assert sim.stream_capture_info(s).status == "invalidated"
    with pytest.raises(vram.CudaError):
        sim.stream_end_capture(s)


def test_an_event_recorded_in_a_capture_cannot_be_queried(sim):
    s = sim.stream_create(0)
    event = sim.event_create(0)
    sim.stream_begin_capture(s, "relaxed")
    sim.event_record(event, s)
    assert error_name(lambda: sim.event_query(event)) == "CUDA_ERROR_CAPTURED_EVENT"
    assert sim.stream_capture_info(s).status == "invalidated"
    assert error_name(lambda: sim.event_synchronize(event)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.stream_end_capture(s)) == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert error_name(lambda: sim.event_query(event)) == "CUDA_ERROR_INVALID_VALUE"
    sim.event_record(event, s)  # recorded again, outside a capture
    assert sim.event_query(event)


def test_an_event_of_an_ended_capture_is_invalid_until_recorded_again(sim):
    s = sim.stream_create(0)
    event = sim.event_create(0)
    sim.stream_begin_capture(s)
    sim.enqueue(s, lambda: None)
    sim.event_record(event, s)
    sim.stream_end_capture(s)
    assert error_name(lambda: sim.event_synchronize(event)) == "CUDA_ERROR_INVALID_VALUE"
    assert error_name(lambda: sim.stream_wait_event(s, event)) == "CUDA_ERROR_INVALID_VALUE"


def test_waiting_on_an_event_from_outside_the_capture_is_an_isolation_error(sim):
    s, other = sim.stream_create(0), sim.stream_create(0)
    outside = sim.event_create(0)
    sim.event_record(outside, other)
    sim.stream_begin_capture(s)
    name = error_name(lambda: sim.stream_wait_event(s, outside))
    assert name == "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"
    with pytest.raises(vram.CudaError):
        sim.stream_end_capture(s)


def test_one_capture_cannot_wait_on_another_captures_event(sim):
    a, b = sim.stream_create(0), sim.stream_create(0)
    event = sim.event_create(0)
    sim.stream_begin_capture(a, "relaxed")
    sim.stream_begin_capture(b, "relaxed")
    sim.event_record(event, a)
    assert error_name(lambda: sim.stream_wait_event(b, event)) == "CUDA_ERROR_STREAM_CAPTURE_MERGE"
    sim.stream_end_capture(a)
    with pytest.raises(vram.CudaError):
        sim.stream_end_capture(b)


def test_a_device_malloc_is_forbidden_by_a_global_capture_unless_relaxed(sim):
    s = sim.stream_create(0)
    sim.stream_begin_capture(s, "global")
    assert error_name(lambda: sim.malloc(0, MiB)) == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
    assert sim.mem_get_info(0)[0] == 1 << 30  # nothing was allocated
    assert error_name(lambda: sim.stream_end_capture(s)) == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"

    sim.stream_begin_capture(s, "global")
    previous = sim.thread_exchange_capture_mode("relaxed")
    try:
        ptr = sim.malloc(0, MiB)  # PyTorch's cudaMallocMaybeCapturing
    finally:
        assert sim.thread_exchange_capture_mode(previous) == "relaxed"
    assert previous == "global"
    sim.stream_end_capture(s)
    sim.free(0, ptr)


@pytest.mark.parametrize(
    ("mode", "other_thread_may_malloc"),
    [("global", False), ("thread_local", True), ("relaxed", True)],
)
def test_which_threads_a_capture_forbids(sim, mode, other_thread_may_malloc):
    s = sim.stream_create(0)
    sim.stream_begin_capture(s, mode)
    outcome: list = []

    def other() -> None:
        try:
            sim.free(0, sim.malloc(0, MiB))
            outcome.append("ok")
        except vram.CudaError as exc:
            outcome.append(exc.name)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert outcome == ["ok" if other_thread_may_malloc else "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"]
    own = "ok"
    try:
        sim.free(0, sim.malloc(0, MiB))
    except vram.CudaError as exc:
        own = exc.name
    assert own == ("ok" if mode == "relaxed" else "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
    try:
        sim.stream_end_capture(s)
    except vram.CudaError as exc:
        assert exc.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"


def test_begin_and_end_in_the_wrong_places(sim):
    s = sim.stream_create(0)
    default = sim.default_stream(0)
    assert error_name(lambda: sim.stream_begin_capture(default)) == (
        "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
    )
    assert error_name(lambda: sim.stream_end_capture(s)) == "CUDA_ERROR_ILLEGAL_STATE"
    sim.stream_begin_capture(s)
    assert error_name(lambda: sim.stream_begin_capture(s)) == "CUDA_ERROR_ILLEGAL_STATE"
    ended: list = []
    thread = threading.Thread(
        target=lambda: ended.append(error_name(lambda: sim.stream_end_capture(s)))
    )
    thread.start()
    thread.join()
    assert ended == ["CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"]
    assert sim.stream_capture_info(s).status == "none"  # the capture is over, its graph lost
    assert error_name(lambda: sim.stream_end_capture(s)) == "CUDA_ERROR_ILLEGAL_STATE"
    with pytest.raises(ValueError, match="mode"):
        sim.stream_begin_capture(s, "local")


def test_node_dependencies_and_the_dot_dump(sim, tmp_path):
    s = sim.stream_create(0)
    sim.stream_begin_capture(s)
    sim.enqueue(s, lambda: None)
    first = sim.stream_capture_info(s).dependencies
    sim.enqueue(s, lambda: None)
    second = sim.stream_capture_info(s).dependencies
    assert sim.graph_node_dependencies(second[0]) == first
    assert sim.graph_node_dependencies(first[0]) == ()
    graph = sim.stream_end_capture(s)
    path = tmp_path / "graph.dot"
    sim.graph_debug_dot_print(graph, str(path))
    text = path.read_text()
    assert text.startswith("digraph") and f"n{first[0]} -> n{second[0]};" in text
    sim.graph_destroy(graph)
    assert error_name(lambda: sim.graph_instantiate(graph)) == "CUDA_ERROR_INVALID_VALUE"
