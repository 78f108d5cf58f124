"""Replaying a call's queued work as a CUDA graph, when the same call comes again.

The blocked LU of one large matrix (or a few) queues a few hundred small launches: at 4096
x 4096, 128 steps of a panel, two swaps and two GEMMs, with events between two streams.
Queued one by one from Python they cost the host about as long as the GPU takes to run
them, so the GPU waits for the host. ``replayed(stream, key, queue)`` queues ``queue()``'s
work on ``stream``:

- the first time this thread meets ``key``: directly, and remembers the key;
- the second time: captured into a CUDA graph (thread-local capture mode), which is then
  launched, and kept under the key;
- after that: the graph launched, one call for all of it.

The key must name everything the work depends on: every device address it reads or writes
(the call's tensors and library workspaces), the shapes, the stream and whatever chose the
steps. A graph replays exactly the launches it captured, so a call that matches a key runs
the same work on the same memory, which is what it would have queued. The work must not
allocate memory, and everything it launches must be loaded before the first capture
(the first, direct, call does both). A stream that is capturing already (a user's graph)
gets the work directly: it becomes part of that graph.

A thread keeps at most ``MAX_GRAPHS`` graphs (the least recently used goes first: a graph
still running when it is dropped is freed by the driver when it is done) and remembers at
most ``MAX_KEYS`` keys seen once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from .._streams import Stream

__all__ = ["replayed", "replay_stats", "MAX_GRAPHS", "MAX_KEYS"]

MAX_GRAPHS = 8
MAX_KEYS = 64


class _Graph:
    """An instantiated graph and its launcher (its template is destroyed once instantiated)."""

    def __init__(self, driver: Any, graph_exec: int) -> None:
        self.driver = driver
        self.graph_exec = graph_exec
        self.launch = driver.graph_launcher(graph_exec)

    def destroy(self) -> None:
        self.driver.graph_exec_destroy(self.graph_exec)


class _Cache(threading.local):
    def __init__(self) -> None:
        self.graphs: OrderedDict[Hashable, _Graph] = OrderedDict()
        self.seen: OrderedDict[Hashable, None] = OrderedDict()  # keys met once
        self.captured = 0
        self.replayed = 0


_cache = _Cache()


def replay_stats() -> dict[str, int]:
    """This thread's counts: graphs "captured", "replayed" launches, graphs "kept"."""
    return {
        "captured": _cache.captured,
        "replayed": _cache.replayed,
        "kept": len(_cache.graphs),
    }


def replayed(stream: Stream, key: Hashable, queue: Callable[[], None]) -> None:
    """Queue ``queue()``'s work on ``stream``: directly, or by a graph of it (see the module
    docstring)."""
    cache = _cache
    found = cache.graphs.get(key)
    if found is not None:
        cache.graphs.move_to_end(key)
        cache.replayed += 1
        found.launch(stream.cuda_stream)
        return
    driver = stream.device.driver
    if driver.stream_capture_info(stream.cuda_stream).status != "none":
        queue()  # a graph of the caller's is being captured: the work goes into it
        return
    if key not in cache.seen:
        cache.seen[key] = None
        if len(cache.seen) > MAX_KEYS:
            cache.seen.popitem(last=False)
        queue()
        return
    del cache.seen[key]
    driver.stream_begin_capture(stream.cuda_stream, "thread_local")
    try:
        queue()
    except BaseException:
        _abandon(driver, stream)
        raise
    graph = driver.stream_end_capture(stream.cuda_stream)
    try:
        made = _Graph(driver, driver.graph_instantiate(graph))
    finally:
        driver.graph_destroy(graph)
    cache.graphs[key] = made
    cache.captured += 1
    if len(cache.graphs) > MAX_GRAPHS:
        cache.graphs.popitem(last=False)[1].destroy()
    cache.replayed += 1
    made.launch(stream.cuda_stream)


def _abandon(driver: Any, stream: Stream) -> None:
    """End a capture that failed, dropping what it captured (its own error, if any, is
    the lesser one: the caller raises the first)."""
    try:
        driver.graph_destroy(driver.stream_end_capture(stream.cuda_stream))
    except Exception:
        pass
