"""CUDA graphs on the simulated GPU: stream capture, instantiation, replay, and the errors
CUDA gives for work that conflicts with a capture. Mixed into SimDriver (state guarded by
its lock).

Capture
- ``stream_begin_capture(s, mode)`` begins a capture sequence on ``s``, its *origin*. Work
  queued on a capturing stream becomes a node of the sequence's graph instead of running:
  it depends on the stream's *dependencies* (the nodes queued before it on that stream),
  then becomes them.
- An event recorded on a capturing stream is a *captured event*: it stands for that
  stream's dependencies, and no node. A stream that waits on it joins the capture (a fork)
  or, when it captures already, adds them to its own (a join). Every fork must be joined
  back into the origin before the capture ends.
- ``stream_end_capture(origin)`` returns the graph; every stream of the sequence stops
  capturing.

Replay: ``graph_instantiate`` fixes the nodes in the order they were captured (an order
every dependency respects); ``graph_launch`` queues them on a stream, in that order, as the
work they were: the same functions over the same device pointers.

Errors, with CUDA's names. An illegal call invalidates the capture it conflicts with: from
then on work queued on its streams and ``stream_end_capture`` fail with
CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (the end still ends it).
- Synchronizing or querying a capturing stream, or synchronizing a device one of whose
  streams captures: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
- A potentially unsafe call (device malloc and free, VMM reserve / create / map / unmap,
  pinned host memory, any synchronize or query) from a thread a capture forbids it:
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED. Which threads a capture forbids, by the mode it
  was begun with: "global", its own thread and every thread whose own interaction mode is
  global; "thread_local", its own thread; "relaxed", none. A thread whose own mode
  (``thread_exchange_capture_mode``) is "relaxed" is never forbidden.
- Querying, synchronizing or timing an event whose last record was made in a capture that
  is still active: CUDA_ERROR_CAPTURED_EVENT, and the capture is invalidated; once that
  capture is invalidated or ended, the event is invalid until recorded again:
  CUDA_ERROR_INVALID_VALUE.
- A capturing stream waiting on an event recorded outside its capture:
  CUDA_ERROR_STREAM_CAPTURE_ISOLATION; on another capture's event:
  CUDA_ERROR_STREAM_CAPTURE_MERGE.
- Beginning a capture on a default stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; on a
  stream that captures already: CUDA_ERROR_ILLEGAL_STATE.
- Ending one on a stream that is not capturing: CUDA_ERROR_ILLEGAL_STATE; on a stream that
  joined but did not begin it: CUDA_ERROR_STREAM_CAPTURE_UNMATCHED (and the capture is
  invalidated); from another thread (not relaxed): CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
  (and the capture ends, its graph lost); with a fork not joined back:
  CUDA_ERROR_STREAM_CAPTURE_UNJOINED (the capture ends, its graph is lost).

An H100 gave these answers to the same sequence of calls (tests/gpu/test_graphs_gpu.py
compares them step by step).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import CudaError
from ._base import CAPTURE_MODES, CaptureInfo

if TYPE_CHECKING:
    from ._sim import _Event, _Stream

__all__ = ["SimGraphs"]

_UNSUPPORTED = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
_INVALIDATED = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"


class _Node:
    """One piece of captured work: a function over device memory, and what it waits for."""

    __slots__ = ("handle", "fn", "deps")

    def __init__(self, handle: int, fn: Callable[[], None], deps: tuple[_Node, ...]) -> None:
        self.handle = handle
        self.fn = fn
        self.deps = deps


class _Graph:
    __slots__ = ("handle", "device", "nodes")

    def __init__(self, handle: int, device: int) -> None:
        self.handle = handle
        self.device = device
        self.nodes: list[_Node] = []  # in capture order: every node after its dependencies


class _Capture:
    """One capture sequence: its graph, origin, mode and the streams that joined it."""

    __slots__ = ("id", "graph", "origin", "mode", "thread", "status", "deps")

    def __init__(self, capture_id: int, graph: _Graph, origin: _Stream, mode: str) -> None:
        self.id = capture_id
        self.graph = graph
        self.origin = origin
        self.mode = mode
        self.thread = threading.get_ident()
        self.status = "active"  # "invalidated" after an illegal call; "ended"
        self.deps: dict[_Stream, list[_Node]] = {origin: []}  # joined stream -> dependencies


class _Exec:
    __slots__ = ("handle", "device", "work")

    def __init__(self, handle: int, device: int, work: tuple[Callable[[], None], ...]) -> None:
        self.handle = handle
        self.device = device
        self.work = work


class _Modes(threading.local):
    mode = "global"  # this thread's capture interaction mode


def _check_mode(mode: str) -> None:
    if mode not in CAPTURE_MODES:
        raise ValueError(f"mode: expected one of {', '.join(CAPTURE_MODES)}, got {mode!r}")


def _describe(fn: Callable[[], None]) -> str:
    """A label for a node: the kernel a queued closure calls, else the closure's name."""
    for cell in getattr(fn, "__closure__", None) or ():
        inner = cell.cell_contents
        if callable(inner) and hasattr(inner, "__qualname__"):
            return inner.__qualname__
    return getattr(fn, "__qualname__", type(fn).__name__)


class SimGraphs:
    """The graph calls of the simulated driver (see the module docstring)."""

    # provided by SimDriver
    _lock: Any
    _handles: Any
    _default: list[int]
    _stream: Callable[[int, str], _Stream]
    _event: Callable[[int, str], _Event]
    _enqueue: Callable[[_Stream, tuple], None]

    def _init_graphs(self) -> None:
        self._capturing = 0  # capture sequences begun and not ended: the hooks' fast check
        self._captures: dict[int, _Capture] = {}  # id -> capture not ended yet
        self._graphs: dict[int, _Graph] = {}
        self._nodes: dict[int, _Node] = {}
        self._execs: dict[int, _Exec] = {}
        self._capture_ids = itertools.count(1)
        self._modes = _Modes()

    # ---- capture ---------------------------------------------------------------------
    def stream_begin_capture(self, stream: int, mode: str = "global") -> None:
        _check_mode(mode)
        call = "cuStreamBeginCapture"
        with self._lock:
            s = self._stream(stream, call)
            if stream in self._default:
                raise CudaError(call, _UNSUPPORTED, "a default stream cannot be captured")
            if s.capture is not None:
                raise CudaError(call, "CUDA_ERROR_ILLEGAL_STATE", "the stream captures already")
            graph = _Graph(next(self._handles), s.device)
            capture = _Capture(next(self._capture_ids), graph, s, mode)
            self._graphs[graph.handle] = graph
            self._captures[capture.id] = capture
            self._capturing += 1
            s.capture = capture

    def stream_end_capture(self, stream: int) -> int:
        call = "cuStreamEndCapture"
        with self._lock:
            s = self._stream(stream, call)
            capture = s.capture
            if capture is None:
                raise CudaError(call, "CUDA_ERROR_ILLEGAL_STATE", "the stream is not capturing")
            if capture.origin is not s:
                self._invalidate(capture)
                raise CudaError(
                    call, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "it began on another stream"
                )
            if capture.mode != "relaxed" and capture.thread != threading.get_ident():
                self._finish(capture)
                self._drop_graph(capture.graph)
                raise CudaError(
                    call,
                    "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
                    f"a {capture.mode} capture must end on the thread that began it",
                )
            status = capture.status
            unjoined = status == "active" and self._unjoined(capture)
            self._finish(capture)
            if status != "active" or unjoined:
                self._drop_graph(capture.graph)
            if status != "active":
                raise CudaError(call, _INVALIDATED, "an illegal call invalidated the capture")
            if unjoined:
                raise CudaError(
                    call,
                    "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
                    "a stream forked from the capture was not joined back into its origin",
                )
            return capture.graph.handle

    def _finish(self, capture: _Capture) -> None:
        """The capture is over: its streams stop capturing."""
        for joined in capture.deps:
            joined.capture = None
        capture.status = "ended"
        del self._captures[capture.id]
        self._capturing -= 1

    def stream_capture_info(self, stream: int) -> CaptureInfo:
        with self._lock:
            s = self._stream(stream, "cuStreamGetCaptureInfo")
            capture = s.capture
            if capture is None:
                return CaptureInfo("none")
            if capture.status != "active":
                return CaptureInfo("invalidated")
            deps = tuple(node.handle for node in capture.deps[s])
            return CaptureInfo("active", capture.id, capture.graph.handle, deps)

    def thread_exchange_capture_mode(self, mode: str) -> str:
        _check_mode(mode)
        previous = self._modes.mode
        self._modes.mode = mode
        return previous

    def _unjoined(self, capture: _Capture) -> bool:
        """True when a stream of the capture has work the origin does not depend on."""
        seen: set[_Node] = set()
        todo = list(capture.deps[capture.origin])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(node.deps)
        return any(
            node not in seen
            for joined, deps in capture.deps.items()
            if joined is not capture.origin
            for node in deps
        )

    # ---- hooks SimDriver calls -------------------------------------------------------
    def _capture_work(self, s: _Stream, item: tuple) -> None:
        """Work queued on a capturing stream: a node of the capture's graph."""
        capture = s.capture
        kind, payload = item
        if capture.status != "active":
            raise CudaError("cuLaunchKernel", _INVALIDATED, "an illegal call invalidated it")
        if kind != "run":  # the stream-ordered pool's marks and waits
            self._invalidate(capture)
            raise CudaError(
                "cuMemAllocAsync", _UNSUPPORTED, "the sim does not capture stream-ordered memory"
            )
        node = _Node(next(self._handles), payload, tuple(capture.deps[s]))
        capture.graph.nodes.append(node)
        self._nodes[node.handle] = node
        capture.deps[s] = [node]

    def _capture_record(self, e: _Event, s: _Stream) -> None:
        """cuEventRecord on a capturing stream: the event stands for the stream's work."""
        capture = s.capture
        if capture.status != "active":
            raise CudaError("cuEventRecord", _INVALIDATED, "an illegal call invalidated it")
        e.captured = (capture, tuple(capture.deps[s]))
        e.last = None

    def _capture_wait(self, s: _Stream, e: _Event) -> None:
        """cuStreamWaitEvent where the stream captures or the event was captured."""
        call = "cuStreamWaitEvent"
        if e.captured is None:  # a capturing stream, an event recorded outside it
            if e.last is None:
                return  # never recorded: nothing to wait for
            self._invalidate(s.capture)
            raise CudaError(
                call,
                "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
                "a capturing stream cannot wait on an event recorded outside its capture",
            )
        capture, nodes = e.captured
        if capture.status == "ended":
            raise CudaError(
                call, "CUDA_ERROR_INVALID_VALUE", "the event was recorded in a capture that ended"
            )
        if capture.status != "active":
            raise CudaError(call, _INVALIDATED, "an illegal call invalidated the capture")
        if s.capture is None:  # a fork: the stream joins the capture
            s.capture = capture
            capture.deps[s] = list(nodes)
        elif s.capture is capture:  # a join
            deps = capture.deps[s]
            deps.extend(node for node in nodes if node not in deps)
        else:
            self._invalidate(s.capture)
            raise CudaError(
                call, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "the event belongs to another capture"
            )

    def _forbid_unsafe(self, call: str) -> None:
        """Raise when a capture forbids this thread a potentially unsafe call (invalidating
        the captures that forbid it)."""
        mode = self._modes.mode
        if mode == "relaxed":
            return
        me = threading.get_ident()
        found = [
            c
            for c in self._captures.values()
            if c.mode != "relaxed" and (c.thread == me or (mode == "global" and c.mode == "global"))
        ]
        if found:
            for capture in found:
                self._invalidate(capture)
            raise CudaError(
                call,
                _UNSUPPORTED,
                f"{call} is not permitted while a stream captures a graph in "
                f"{found[0].mode} mode; the capture is invalidated",
            )

    def _forbid_stream(self, s: _Stream, call: str) -> None:
        """Synchronizing or querying ``s``: never while it captures; else as unsafe calls."""
        if s.capture is not None:
            self._invalidate(s.capture)
            raise CudaError(
                call, _UNSUPPORTED, f"{call} on a capturing stream; the capture is invalidated"
            )
        self._forbid_unsafe(call)

    def _forbid_device(self, device: int, call: str) -> None:
        """Synchronizing a device: never while one of its streams captures."""
        found = [c for c in self._captures.values() if c.graph.device == device]
        if found:
            for capture in found:
                self._invalidate(capture)
            raise CudaError(
                call,
                _UNSUPPORTED,
                f"{call} while a stream of the device captures; the capture is invalidated",
            )
        self._forbid_unsafe(call)

    def _forbid_event(self, e: _Event, call: str) -> None:
        """Querying, synchronizing or timing an event: never one recorded in a capture."""
        if e.captured is not None:
            capture = e.captured[0]
            if capture.status != "active":
                raise CudaError(
                    call,
                    "CUDA_ERROR_INVALID_VALUE",
                    "the event was last recorded in a capture that is no longer active",
                )
            self._invalidate(capture)
            raise CudaError(
                call,
                "CUDA_ERROR_CAPTURED_EVENT",
                "the event was last recorded in a capture; the capture is invalidated",
            )
        self._forbid_unsafe(call)

    @staticmethod
    def _invalidate(capture: _Capture) -> None:
        if capture.status == "active":
            capture.status = "invalidated"

    # ---- graphs and executable graphs ----------------------------------------------------
    def _graph(self, graph: int, call: str) -> _Graph:
        found = self._graphs.get(graph)
        if found is None:
            raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"graph {graph}")
        return found

    def _drop_graph(self, graph: _Graph) -> None:
        self._graphs.pop(graph.handle, None)
        for node in graph.nodes:
            self._nodes.pop(node.handle, None)

    def graph_node_count(self, graph: int) -> int:
        with self._lock:
            return len(self._graph(graph, "cuGraphGetNodes").nodes)

    def graph_node_dependencies(self, node: int) -> tuple[int, ...]:
        with self._lock:
            found = self._nodes.get(node)
            if found is None:
                raise CudaError("cuGraphNodeGetDependencies", "CUDA_ERROR_INVALID_VALUE")
            return tuple(dep.handle for dep in found.deps)

    def graph_instantiate(self, graph: int) -> int:
        with self._lock:
            g = self._graph(graph, "cuGraphInstantiate")
            handle = next(self._handles)
            self._execs[handle] = _Exec(handle, g.device, tuple(n.fn for n in g.nodes))
            return handle

    def graph_launch(self, graph_exec: int, stream: int) -> None:
        call = "cuGraphLaunch"
        with self._lock:
            found = self._execs.get(graph_exec)
            if found is None:
                raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"graph exec {graph_exec}")
            s = self._stream(stream, call)
            if s.device != found.device:
                raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", "a stream of another device")
            enqueue = self._enqueue
            for work in found.work:
                enqueue(s, ("run", work))

    def graph_exec_destroy(self, graph_exec: int) -> None:
        with self._lock:
            if self._execs.pop(graph_exec, None) is None:
                raise CudaError("cuGraphExecDestroy", "CUDA_ERROR_INVALID_VALUE")

    def graph_destroy(self, graph: int) -> None:
        with self._lock:
            self._drop_graph(self._graph(graph, "cuGraphDestroy"))

    def graph_debug_dot_print(self, graph: int, path: str) -> None:
        with self._lock:
            g = self._graph(graph, "cuGraphDebugDotPrint")
            lines = [
                f"digraph sim_graph_{g.handle} {{",
                f'  label="sim:{g.device} graph {g.handle}: {len(g.nodes)} nodes";',
            ]
            for i, node in enumerate(g.nodes):
                label = f"{i}: {_describe(node.fn)}".replace('"', "'")
                lines.append(f'  n{node.handle} [shape=box, label="{label}"];')
                lines += [f"  n{dep.handle} -> n{node.handle};" for dep in node.deps]
            lines.append("}")
        try:
            with open(path, "w") as out:
                out.write("\n".join(lines) + "\n")
        except OSError as exc:
            error = "CUDA_ERROR_OPERATING_SYSTEM"
            raise CudaError("cuGraphDebugDotPrint", error, str(exc)) from exc
