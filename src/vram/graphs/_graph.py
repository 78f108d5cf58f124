"""CUDA graphs (torch.cuda.graphs): capture a sequence of device work once, replay it with
one launch.

- ``CUDAGraph.capture_begin`` (on a non-default stream, current) starts recording: work
  queued on that stream, and on streams that join it through events, is recorded instead
  of run; allocations on those streams come from the graph's private pool (see
  vram/memory/_graph_pools.py), so every address the graph uses stays the graph's.
- ``capture_end`` instantiates the graph; ``replay`` launches it on the current stream:
  the same work over the same addresses (inputs are changed by writing into the tensors
  used during capture, outputs read from the tensors made during capture).
- ``with vram.graph(g):`` does what PyTorch's does: synchronizes the device, empties the
  cache, makes a side stream current and captures on it.
- Random numbers: a generator registered with the graph (``register_generator_state``; the
  default generator of the capture's device always is, as PyTorch's) draws from a device
  state that each replay sets and advances, so replays draw new numbers (vram.ops._random,
  Note [Graph-safe generators]). Registered generators take part through three calls:
  ``capture_prologue()`` before the capture begins, ``capture_epilogue()`` when it ends
  (how far one replay advances the generator, and the graph's device state for it, which
  the graph keeps), ``replay_prologue(state, increment, stream)`` before each replay.

Illegal work during capture (synchronizing, querying an event recorded in it, a device
malloc or empty_cache from a thread the capture forbids it, ...) raises an error naming
it and invalidates the capture; ending the capture then raises CUDA's
CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and the allocator is back to its normal rules
either way.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from .._device import Device, current_device_obj, synchronize
from .._errors import CudaError
from .._streams import Stream, _defaults, current_stream, default_stream
from .._streams import _local as _current
from .._streams import stream as stream_context
from ..driver._base import CAPTURE_MODES
from ..memory import _graph_pools
from ..memory._api import empty_cache
from ..memory._graph_pools import graph_pool_handle
from ..memory._registry import allocator_for

__all__ = [
    "CUDAGraph",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "register_default_generator",
]

_debug = False  # enable_debug_mode(): graphs are kept after instantiation for debug_dump

# Each gives the default generator of a device, which every capture on that device registers
# (vram's random numbers add theirs when imported, through register_default_generator).
_default_generators: list[Callable[[Device], Any]] = []


def register_default_generator(get: Callable[[Device], Any]) -> None:
    """Have every capture register ``get(device)``, the capture device's default generator."""
    _default_generators.append(get)


def is_current_stream_capturing() -> bool:
    """True when the current stream of the current device is capturing a CUDA graph
    (torch.cuda.is_current_stream_capturing); also while an invalidated capture awaits
    its end."""
    stream = current_stream()
    status = stream.device.driver.stream_capture_info(stream.cuda_stream).status
    return status != "none"


class CUDAGraph:
    """A CUDA graph (torch.cuda.CUDAGraph): ``capture_begin`` / ``capture_end`` record the
    work queued on the current stream between them; ``replay`` runs it again.

    ``keep_graph=True`` keeps the captured graph after ``capture_end`` (``instantiate`` is
    then explicit, or done by the first ``replay``), as PyTorch's.
    """

    def __init__(self, keep_graph: bool = False) -> None:
        self._keep_graph = bool(keep_graph)
        self._device: Device | None = None
        self._capture_stream: Stream | None = None
        self._capture_id = [0]  # read by the allocator's route while capturing
        self._pool_id: tuple[int, int] | None = None
        self._route: Any = None  # the allocator's route while capturing
        self._graph: int | None = None  # the captured graph, while kept
        self._exec: int | None = None  # the instantiated graph
        self._launch: Any = None  # graph_launch bound to the exec: replay's one call
        self._capture_ended = False
        self._generators: list[Any] = []  # registered generators
        self._replays: tuple[tuple[Any, Any, int], ...] = ()  # (generator, state, increment)

    def register_generator_state(self, generator: Any) -> None:
        """Make ``generator`` (a vram.Generator) draw new numbers at each replay of what it
        draws during this graph's capture (torch's CUDAGraph.register_generator_state);
        before ``capture_begin``. The current device's default generator needs no call."""
        for method in ("capture_prologue", "capture_epilogue", "replay_prologue"):
            if not callable(getattr(generator, method, None)):
                raise TypeError(
                    f"generator: expected a vram.Generator, got {type(generator).__name__}"
                )
        if self._route is not None:
            raise RuntimeError("Cannot register the state during capturing stage.")
        if all(g is not generator for g in self._generators):
            self._generators.append(generator)

    # ---- capture ---------------------------------------------------------------------
    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        """Begin capturing the work queued on the current stream (not a default stream).

        ``pool``: share a private pool (``vram.graph_pool_handle()``, another graph's
        ``pool()``, a MemPool or its id); a pool of the graph's own if None.
        ``capture_error_mode``: "global", "thread_local" or "relaxed" (CUDA's stream
        capture modes: which calls of this and other threads the capture forbids).
        """
        if self._exec is not None or self._route is not None:
            raise RuntimeError(
                "This CUDAGraph instance already owns a captured graph. To capture a new "
                "graph, create a new instance."
            )
        if capture_error_mode not in CAPTURE_MODES:
            raise ValueError(
                f"capture_error_mode: expected one of {', '.join(CAPTURE_MODES)}, got "
                f"{capture_error_mode!r}"
            )
        stream = current_stream()
        device = stream.device
        if stream == default_stream(device):
            raise RuntimeError(
                "CUDA graphs must be captured on a non-default stream. (However, after "
                "capture, it's ok to replay them on the default stream.)"
            )
        pool_id = (
            _graph_pools.new_graph_pool_id()
            if pool is None
            else _graph_pools.as_pool_id(pool, "pool")
        )
        allocator = allocator_for(device)
        driver = device.driver
        capture_id = self._capture_id
        capture_id[0] = 0

        def captures_here(handle: int) -> bool:  # PyTorch's allocate filter
            return capture_id[0] != 0 and driver.stream_capture_info(handle).id == capture_id[0]

        route = _graph_pools.begin_allocate_to_pool(allocator, pool_id, captures_here)
        for get in _default_generators:
            default = get(device)
            if all(g is not default for g in self._generators):
                self._generators.append(default)
        started = []
        try:
            for generator in self._generators:  # before the capture: may allocate their state
                generator.capture_prologue()
                started.append(generator)
            driver.stream_begin_capture(stream.cuda_stream, capture_error_mode)
        except BaseException:
            _graph_pools.end_allocate_to_pool(allocator, route)
            _graph_pools.release_pool(allocator, pool_id)
            for generator in started:
                generator.capture_epilogue()
            raise
        capture_id[0] = driver.stream_capture_info(stream.cuda_stream).id
        self._device, self._capture_stream = device, stream
        self._pool_id, self._route = pool_id, route

    def capture_end(self) -> None:
        """End the capture (on the stream it began on, current) and instantiate the graph.

        Raises the driver's error if the capture failed (CUDA_ERROR_STREAM_CAPTURE_
        INVALIDATED after illegal work); the allocator's rules are back to normal and the
        graph's pool is released either way."""
        if self._route is None:
            raise RuntimeError("capture_end() called before capture_begin().")
        device, stream = self._device, self._capture_stream
        assert device is not None and stream is not None
        if current_stream(device) != stream:
            raise RuntimeError("Capture must end on the same stream it began on.")
        graph = self._end_capture()
        self._capture_ended = True
        self._graph = graph
        driver = device.driver
        if driver.graph_node_count(graph) == 0:
            warnings.warn(
                "The CUDA Graph is empty. This usually means that the graph was attempted to "
                "be captured on wrong device or stream.",
                UserWarning,
                stacklevel=2,
            )
        if not self._keep_graph:
            self.instantiate()
            if not _debug:
                driver.graph_destroy(graph)
                self._graph = None

    def _end_capture(self) -> int:
        """End the driver's capture and the allocator's routing; the graph. On failure the
        pool is released and the instance may capture again."""
        device, stream, route = self._device, self._capture_stream, self._route
        allocator = allocator_for(device)
        try:
            graph = device.driver.stream_end_capture(stream.cuda_stream)  # type: ignore[union-attr]
        except BaseException:
            _graph_pools.end_allocate_to_pool(allocator, route)
            _graph_pools.release_pool(allocator, self._pool_id)  # type: ignore[arg-type]
            self._route, self._capture_id[0] = None, 0
            self._end_generators()
            self._replays = ()
            raise
        _graph_pools.end_allocate_to_pool(allocator, route)
        self._route, self._capture_id[0] = None, 0
        self._end_generators()
        return graph

    def _end_generators(self) -> None:
        """The capture is over: the registered generators leave capture mode; those that
        drew give their device state and how far one replay advances them."""
        replays = []
        for generator in self._generators:
            increment, state = generator.capture_epilogue()
            if increment:
                replays.append((generator, state, increment))
        self._replays = tuple(replays)

    def _abandon_capture(self) -> None:
        """End a capture whose recording raised: the driver's capture, the allocator's
        routing and the pool's hold, ignoring what the driver says (the first error is
        the one to report)."""
        if self._route is None:
            return
        try:
            graph = self._end_capture()
        except CudaError:
            return
        self._capture_ended = True
        self._graph = graph
        self.reset()

    # ---- the graph ---------------------------------------------------------------------
    def instantiate(self) -> None:
        """Make the captured graph launchable (capture_end does it unless keep_graph)."""
        if not self._capture_ended:
            raise RuntimeError("capture_end() must have been called before calling instantiate")
        driver = self._device.driver  # type: ignore[union-attr]
        if self._exec is not None:
            if not self._keep_graph:
                raise RuntimeError(
                    "instantiate() is intended to be called by the user only when keep_graph=true"
                )
            driver.graph_exec_destroy(self._exec)
            self._exec = self._launch = None
        if self._graph is None:
            raise RuntimeError("instantiate(): the captured graph was destroyed already")
        self._exec = driver.graph_instantiate(self._graph)
        self._launch = driver.graph_launcher(self._exec)

    def replay(self) -> None:
        """Launch the graph on the current stream of its device (one graph launch; does not
        synchronize)."""
        launch = self._launch
        if launch is None:
            if not self._capture_ended:
                raise RuntimeError(
                    "Called CUDAGraph::replay without a preceding successful capture."
                )
            self.instantiate()
            launch = self._launch
        device = self._device
        # current_stream(device), without its argument checks: a replay is host time
        stream = _current.current.get(device) or _defaults.get(device) or default_stream(device)
        for generator, state, increment in self._replays:
            generator.replay_prologue(state, increment, stream.cuda_stream)
        launch(stream.cuda_stream)

    def reset(self) -> None:
        """Delete the graph and let its pool go (its memory returns at empty_cache() once no
        graph uses the pool and its blocks are free)."""
        device = self._device
        if device is None:
            return
        driver = device.driver
        self._replays = ()  # the generators' states in the pool go first
        if self._capture_ended:
            _graph_pools.release_pool(allocator_for(device), self._pool_id)  # type: ignore[arg-type]
            self._capture_ended = False
        previous = driver.thread_exchange_capture_mode("relaxed")
        try:
            if self._graph is not None:
                graph, self._graph = self._graph, None
                driver.graph_destroy(graph)
            if self._exec is not None:
                graph_exec, self._exec, self._launch = self._exec, None, None
                driver.graph_exec_destroy(graph_exec)
        finally:
            driver.thread_exchange_capture_mode(previous)

    def pool(self) -> tuple[int, int]:
        """The id of the graph's memory pool, for other captures to share (``pool=``)."""
        if not self._capture_ended:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._pool_id  # type: ignore[return-value]

    def enable_debug_mode(self) -> None:
        """Keep captured graphs after instantiation (for every graph of the process), so
        that ``debug_dump`` can write them."""
        global _debug
        _debug = True

    def debug_dump(self, debug_path: str) -> None:
        """Write the captured graph to ``debug_path`` in Graphviz's DOT language (needs
        ``enable_debug_mode()`` before capture, or keep_graph=True)."""
        if not (_debug or self._keep_graph):
            warnings.warn(
                "CUDA Graphs debug not enabled, set with [graph].enable_debug_mode()",
                UserWarning,
                stacklevel=2,
            )
            return
        if self._graph is None:
            return
        driver = self._device.driver  # type: ignore[union-attr]
        driver.graph_debug_dot_print(self._graph, str(debug_path))
        if not self._keep_graph:
            driver.graph_destroy(self._graph)
            self._graph = None

    def __del__(self) -> None:
        device = self._device
        if device is None:
            return
        try:  # no lock in a finalizer: the allocator releases the pool at its next call
            if self._capture_ended:
                _graph_pools.release_pool_later(allocator_for(device), self._pool_id)  # type: ignore[arg-type]
                self._capture_ended = False
            driver = device.driver
            if self._exec is not None:
                driver.graph_exec_destroy(self._exec)
            if self._graph is not None:
                driver.graph_destroy(self._graph)
        except Exception as exc:  # finalizers never raise
            warnings.warn(f"CUDAGraph: releasing the graph failed: {exc!r}", stacklevel=1)

    def __repr__(self) -> str:
        state = "replayable" if self._exec is not None else "capturing" if self._route else "empty"
        return f"<vram.CUDAGraph {state} on {self._device} pool={self._pool_id}>"


_capture_streams: dict[Device, Stream] = {}  # each device's default capture stream


class graph(AbstractContextManager):  # noqa: N801 - PyTorch's name
    """``with vram.graph(g):`` captures the work inside into CUDAGraph ``g``
    (torch.cuda.graph).

    On entry it synchronizes the device, empties the cache and makes ``stream`` (a side
    stream shared by every capture on the device when None) current, then begins the
    capture; on exit it ends it and restores the current stream. If the body raises, the
    capture is abandoned and the body's exception propagates.

    ``pool``: share a memory pool with other graphs (see ``CUDAGraph.capture_begin``);
    ``capture_error_mode``: "global", "thread_local" or "relaxed".
    """

    def __init__(
        self,
        cuda_graph: CUDAGraph,
        pool: Any = None,
        stream: Stream | None = None,
        capture_error_mode: str = "global",
    ) -> None:
        if not isinstance(cuda_graph, CUDAGraph):
            raise TypeError(f"cuda_graph: expected a vram.CUDAGraph, got {cuda_graph!r}")
        if stream is None:
            device = current_device_obj()
            stream = _capture_streams.get(device)
            if stream is None:
                stream = _capture_streams.setdefault(device, Stream(device))
        elif not isinstance(stream, Stream):
            raise TypeError(f"stream: expected a vram.Stream, got {type(stream).__name__}")
        self.cuda_graph = cuda_graph
        self.pool = () if pool is None else (pool,)
        self.capture_stream = stream
        self.capture_error_mode = capture_error_mode
        self._stream_ctx: Any = None

    def __enter__(self) -> None:
        device = self.capture_stream.device
        synchronize(device)
        empty_cache(device)
        self._stream_ctx = stream_context(self.capture_stream)
        self._stream_ctx.__enter__()
        try:
            self.cuda_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self._stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.cuda_graph.capture_end()
            else:
                self.cuda_graph._abandon_capture()
        finally:
            self._stream_ctx.__exit__(None, None, None)
