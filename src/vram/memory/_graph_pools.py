"""CUDA graphs' private pools in the caching allocator (PyTorch's Note [Interaction with CUDA
graph capture]).

Capture bakes device addresses into the graph, so the memory a capture uses must still be
the graph's when it replays. So, as in PyTorch:
- While a stream captures, its allocations come from the graph's private pool (a route of
  the allocator whose filter asks the driver whether a stream captures into this capture):
  a pool of its own, or one shared with other graphs (``graph_pool_handle()``,
  ``other_graph.pool()``) or a MemPool. Within the pool blocks are freed and reused as
  usual during capture, so the pool holds the capture's high-water mark, and graphs that
  share a pool need the memory of the largest, not the sum (captured in order, replayed in
  that order).
- Blocks freed during capture go back to the private pool only; the pool's memory returns
  to the device when no graph (or MemPool) holds it any more, its blocks are free, and
  empty_cache() runs.
- No event is queried, recorded or synchronized inside malloc or free while a stream
  captures (the lifetime policy defers record_stream's events until captures end, and
  record_use falls back to record_stream). Stream uses recorded during a capture on a
  stream that captures, and not before it, are dropped from a block freed during it when
  its events are finally recorded (PyTorch's remove_graph_stream_uses: that work was
  captured, it never ran). Unlike PyTorch, a use on a stream that does not capture, or one
  noted before the capture, is kept: its work runs, and may still be queued.
- ``graph_capture_record_stream_reuse:True``: a block freed during capture with record_stream
  uses, all of them captured, gets *free markers*, the capture's dependencies of every
  stream that used it, and is reused within the capture as soon as its stream's next work
  depends on all of them (a walk of the captured graph, no event).
- The pool grows with device mallocs made in the relaxed capture mode (PyTorch's
  cudaMallocMaybeCapturing; the allocator's own ladder does it): a capture may not forbid
  the allocator its own growth.

``begin_allocate_to_pool`` / ``end_allocate_to_pool`` / ``release_pool`` are PyTorch's
beginAllocateToPool / endAllocateToPool / releasePool, methods of the caching allocator;
vram.graphs calls them through the functions here, which give the allocator this module's
half of the lifetime policy (``GraphCapture``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._caching import DeviceCachingAllocator
from ._pools import MemPool, _ids

if TYPE_CHECKING:
    from ..driver import Driver
    from ._pool import Block

__all__ = [
    "GraphCapture",
    "graph_pool_handle",
    "new_graph_pool_id",
    "begin_allocate_to_pool",
    "end_allocate_to_pool",
    "release_pool",
    "release_pool_later",
    "pool_use_count",
    "as_pool_id",
]

_graph_ids = itertools.count(1)  # pools of graphs given none: (n, 0), as PyTorch numbers them


def graph_pool_handle() -> tuple[int, int]:
    """A new pool id for graphs to share (PyTorch's torch.cuda.graph_pool_handle): (0, n),
    from the counter MemPool ids come from. The pool is made by the first capture into it."""
    return (0, next(_ids))


def new_graph_pool_id() -> tuple[int, int]:
    """The id of a graph's own pool, when its capture is given none: (n, 0)."""
    return (next(_graph_ids), 0)


def as_pool_id(pool: object, argument: str = "pool") -> tuple[int, int]:
    """A pool id from what PyTorch's ``pool=`` takes: an id tuple (``graph_pool_handle()``,
    ``graph.pool()``, ``MemPool.id``) or a MemPool."""
    if isinstance(pool, MemPool):
        return pool.id
    if (
        isinstance(pool, tuple)
        and len(pool) == 2
        and all(type(v) is int and v >= 0 for v in pool)
        and any(pool)
        and not all(pool)
    ):
        return pool  # type: ignore[return-value]
    raise TypeError(
        f"{argument}: expected a pool id (from vram.graph_pool_handle(), a graph's pool() or "
        f"a MemPool's id) or a vram.MemPool, got {pool!r}"
    )


def _caching_allocator(allocator: Any) -> DeviceCachingAllocator:
    if not isinstance(allocator, DeviceCachingAllocator) or allocator.no_caching:
        raise RuntimeError(
            f"CUDA graphs need vram's caching allocator on {allocator.device}; the "
            f"{type(allocator).__name__} in use (VRAM_NO_CACHING or backend:cudaMallocAsync) "
            "does not have private pools"
        )
    return allocator


# ============================================================ the lifetime policy's half
class GraphCapture:
    """What the lifetime policy asks while graphs capture (``Lifetimes.capture``); one per
    allocator, made by its first capture. State guarded by the allocator's lock."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.reuse = False  # graph_capture_record_stream_reuse, read at each capture's begin
        self.graph_uses: dict[Block, set[int]] = {}  # streams record_stream noted in captures
        self.markers: dict[Block, tuple[int, ...]] = {}  # deferred block -> its free markers
        self.visited: dict[tuple[int, int], set[int]] = {}  # (capture, stream) -> ancestors

    def noted(self, block: Block, stream: int) -> None:
        """record_stream during a capture: ``stream`` used ``block`` in captured work, when
        it captures (work queued on a stream that does not capture runs: a use as any)."""
        if self.driver.stream_capture_info(stream).status == "none":
            return
        found = self.graph_uses.get(block)
        if found is None:
            self.graph_uses[block] = {stream}
        else:
            found.add(stream)

    def deferred(self, block: Block, streams: set[int]) -> None:
        """A block with record_stream uses freed during a capture: with the reuse option,
        its free markers (none, meaning wait for the capture's end, when a stream that used
        it does not capture)."""
        if not self.reuse:
            return
        captured = self.graph_uses.get(block, ())
        if any(stream not in captured for stream in streams):  # a use outside the capture
            self.markers[block] = ()
            return
        markers: set[int] = set()
        for stream in (block.segment.stream, *streams):
            info = self.driver.stream_capture_info(stream)
            if info.status != "active":
                self.markers[block] = ()
                return
            markers.update(info.dependencies)
        self.markers[block] = tuple(markers)

    def reusable(self, deferred: dict[Block, set[int]]) -> list[Block]:
        """Deferred blocks whose stream's next captured work follows all their free markers
        (graph_capture_record_stream_reuse): safe to hand out again, no event needed."""
        if not self.markers:
            return []
        infos: dict[int, Any] = {}
        done = []
        for block, markers in list(self.markers.items()):
            if block not in deferred or not markers:
                continue
            stream = block.segment.stream
            info = infos.get(stream)
            if info is None:
                info = infos[stream] = self.driver.stream_capture_info(stream)
            if info.status != "active":
                continue
            ancestors = self._ancestors(info.id, stream, info.dependencies)
            if all(marker in ancestors for marker in markers):
                del self.markers[block]
                done.append(block)
        return done

    def _ancestors(self, capture: int, stream: int, terminals: tuple[int, ...]) -> set[int]:
        """Every node the next work on ``stream`` will follow (kept per capture and stream,
        extended from the new terminals only, as PyTorch's update_visited)."""
        seen = self.visited.setdefault((capture, stream), set())
        todo = [node for node in terminals if node not in seen]
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            todo.extend(self.driver.graph_node_dependencies(node))
        return seen

    def outside_uses(self, block: Block, streams: set[int]) -> set[int]:
        """When captures have ended: the streams of a deferred block to record events on,
        without those noted during captures (PyTorch's remove_graph_stream_uses)."""
        self.markers.pop(block, None)
        captured = self.graph_uses.pop(block, None)
        return streams - captured if captured else streams

    def captures_ended(self, deferred: dict[Block, set[int]]) -> None:
        """No capture is underway any more: forget what only captures needed."""
        self.graph_uses = {b: s for b, s in self.graph_uses.items() if b in deferred}
        self.visited.clear()


# ============================================================== PyTorch's three calls
def begin_allocate_to_pool(
    allocator: Any, pool_id: tuple[int, int], takes: Callable[[int], bool]
) -> Any:
    """PyTorch's beginAllocateToPool: requests on streams ``takes(stream)`` accepts go to
    private pool ``pool_id`` (made, or shared: its use count grows), and the allocator
    keeps to capture's rules, with this module's ``GraphCapture`` as the lifetime policy's
    half, until ``end_allocate_to_pool``. Returns the route to end.

    Call it before the capture begins: free blocks of the pool still waiting on record_use
    events are waited for now. Synchronizes on those events only.
    """
    return _caching_allocator(allocator).begin_allocate_to_pool(pool_id, takes, GraphCapture)


def end_allocate_to_pool(allocator: Any, route: Any) -> None:
    """PyTorch's endAllocateToPool: the capture's requests go where they went before."""
    allocator.end_allocate_to_pool(route)


def release_pool(allocator: Any, pool_id: tuple[int, int]) -> None:
    """PyTorch's releasePool: one holder of the pool (a graph) is gone; with none left,
    empty_cache() may give its free segments back."""
    allocator.release_pool(pool_id)


def release_pool_later(allocator: Any, pool_id: tuple[int, int]) -> None:
    """``release_pool`` for finalizers: done at the allocator's next call (no lock here)."""
    allocator.release_pool_later(pool_id)


def pool_use_count(allocator: Any, pool_id: tuple[int, int]) -> int:
    """How many holders private pool ``pool_id`` has (0 when it is gone or freeable)."""
    return allocator.pool_use_count(pool_id)
