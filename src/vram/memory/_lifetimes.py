"""When a freed block may be handed out again: the lifetime policy beside the pool.

A block is used on the stream it was allocated on, in stream order, so on that stream it
may be reused as soon as it is freed. Uses on other streams need events:

- record_stream (PyTorch's): the streams are noted on the allocated block; at free, an event
  is recorded on each and the block is PENDING until all have completed. Completion is
  checked (never waited for) at the start of each malloc; the OOM path and empty_cache wait.
- record_use (pytorch#181191): the event is recorded at the call, right after the last use.
  The block goes back to its pool at free at once, carrying its events; the next owner's
  stream waits on them (a stream wait, no host wait) when it takes the block.
- cross_stream_reuse (vram's): an event of the free itself rides on the block the same way,
  so another stream can take a whole free segment after a stream wait.
- Capture's rule: while any stream captures a CUDA graph, events must not be queried or
  synchronized. Completions are not checked then, and blocks freed with record_stream uses
  wait (PENDING, no events yet) until captures end; their events are recorded then.

Memory given back to the device (cudaFree, or unmapping expandable pages) must not be in
use anywhere: ``wait_for_uses`` waits on the host for a block's record_use events first.

A block keeps at most one use event per stream, the newest (the next owner's wait on it
covers every earlier use there), and none that the host has seen complete (``prune``, at
free): a loop of allocate, use on a side stream, record_use, free leaves one event on the
free block, not one per iteration.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..driver import Driver
    from ._pool import Block

__all__ = ["Lifetimes", "UseEvent"]

_records = itertools.count()  # orders use events (next() is atomic)


class UseEvent:
    """An event recorded on ``stream`` of ``device`` (record_use, or a free for cross-stream
    reuse); ``seq`` orders the records (a later one on the same stream completes after).

    Blocks that are split or merged share it; when the last holder drops it, the event goes
    back to the spare list (an atomic append: no lock from a finalizer).
    """

    __slots__ = ("handle", "stream", "device", "seq", "_spare")

    def __init__(self, handle: int, stream: int, device: int, seq: int, spare: list[int]) -> None:
        self.handle = handle
        self.stream = stream
        self.device = device
        self.seq = seq
        self._spare = spare

    def __del__(self) -> None:
        try:
            self._spare.append(self.handle)
        except Exception:  # finalizers never raise
            pass


class Lifetimes:
    """The events of one device allocator (state guarded by the allocator's lock)."""

    def __init__(self, driver: Driver, device: int) -> None:
        self.driver = driver
        self.device = device
        self.spare_events: list[int] = []  # created events not in use, for reuse
        self.peer_spares: dict[int, list[int]] = {}  # the same, of peer devices (record_use)
        self.stream_uses: dict[Block, set[int]] = {}  # record_stream: allocated block -> streams
        self.pending: dict[int, deque] = {}  # stream -> (event, block) recorded at frees
        self.waiting = 0  # PENDING blocks (with events, or deferred until captures end)
        self.event_counts: dict[Block, int] = {}  # PENDING block -> events not yet completed
        self.deferred: dict[Block, set[int]] = {}  # PENDING blocks freed during a capture
        #                                            -> their streams; events recorded after
        self.captures = 0  # streams capturing a graph now; > 0: no event query or sync
        self.capture: Any = None  # vram's graph captures' half of the policy (_graph_pools)

    # ---- record_stream --------------------------------------------------------------------
    def note_stream_use(self, block: Block, stream: int) -> None:
        """record_stream: ``block`` (allocated) is used on ``stream`` too. A use noted
        before stays a use outside captures (its work may still be queued)."""
        found = self.stream_uses.get(block)
        if found is None:
            self.stream_uses[block] = {stream}
        elif stream in found:
            return
        else:
            found.add(stream)
        if self.captures and self.capture is not None:
            self.capture.noted(block, stream)

    def free_waits(self, block: Block) -> bool:
        """At free: True when ``block`` must stay PENDING until its stream uses are done.

        Records an event on each stream that used the block (or defers that until no stream
        captures). Driver failures raise before anything is changed.
        """
        streams = self.stream_uses.get(block)
        if not streams:
            return False
        if self.captures:
            self.deferred[block] = streams
            if self.capture is not None:
                self.capture.deferred(block, streams)
        else:
            self._record_free_events(block, streams)
        del self.stream_uses[block]
        self.waiting += 1
        return True

    def _record_free_events(self, block: Block, streams: set[int]) -> None:
        recorded = []
        try:
            for stream in sorted(streams):
                event = self.new_event()
                recorded.append(event)
                self.driver.event_record(event, stream)
        except BaseException:
            self.spare_events += recorded
            raise
        for stream, event in zip(sorted(streams), recorded, strict=True):
            self.pending.setdefault(stream, deque()).append((event, block))
        self.event_counts[block] = len(recorded)

    def completed(self) -> list[Block]:
        """PENDING blocks whose events have all completed now (no waiting). Not while a
        stream captures a graph (events must not be queried then)."""
        if self.captures:
            return self._reusable_in_capture()
        done = self._record_deferred()
        query = self.driver.event_query
        for stream in sorted(self.pending):
            queue = self.pending[stream]
            while queue:
                event, block = queue[0]
                if not query(event):
                    break
                queue.popleft()
                done += self._one_done(event, block)
            if not queue:
                del self.pending[stream]
        return done

    def synchronize(self) -> list[Block]:
        """Wait for every pending free's events; the blocks they held. Synchronizes."""
        if self.captures:
            return []
        done = self._record_deferred()
        for stream in sorted(self.pending):
            for event, block in self.pending[stream]:
                self.driver.event_synchronize(event)
                done += self._one_done(event, block)
        self.pending.clear()
        return done

    def _one_done(self, event: int, block: Block) -> list[Block]:
        self.spare_events.append(event)
        left = self.event_counts[block] - 1
        if left:
            self.event_counts[block] = left
            return []
        del self.event_counts[block]
        self.waiting -= 1
        return [block]

    def _record_deferred(self) -> list[Block]:
        """Record the events of frees made during captures (now that none is underway), on
        the streams that used the block outside them; the blocks no stream used so."""
        done = []
        while self.deferred:
            block, streams = next(iter(self.deferred.items()))
            if self.capture is not None:
                streams = self.capture.outside_uses(block, streams)
            if streams:
                self._record_free_events(block, streams)
            else:
                self.waiting -= 1
                done.append(block)
            del self.deferred[block]
        return done

    def _reusable_in_capture(self) -> list[Block]:
        """Deferred frees that the captured graph already orders before their stream's
        next work (graph_capture_record_stream_reuse; see _graph_pools)."""
        if self.capture is None or not self.deferred:
            return []
        done = self.capture.reusable(self.deferred)
        for block in done:
            del self.deferred[block]
            self.waiting -= 1
        return done

    # ---- record_use and cross-stream reuse ----------------------------------------------
    def new_event(self, device: int | None = None) -> int:
        """A spare event of ``device`` (this allocator's if None), or a new one."""
        spare = self._spare(device)
        if spare:
            return spare.pop()
        return self.driver.event_create(self.device if device is None else device, False)

    def _spare(self, device: int | None) -> list[int]:
        if device is None or device == self.device:
            return self.spare_events
        return self.peer_spares.setdefault(device, [])

    def use_event(self, stream: int, device: int | None = None) -> UseEvent:
        """An event recorded on ``stream`` now (a stream of ``device``: this allocator's if
        None, or a peer's), to be waited on by a later owner."""
        event = self.new_event(device)
        spare = self._spare(device)
        try:
            self.driver.event_record(event, stream)
        except BaseException:
            spare.append(event)
            raise
        owner = self.device if device is None else device
        return UseEvent(event, stream, owner, next(_records), spare)

    def note_use(self, block: Block, stream: int, device: int | None = None) -> None:
        """record_use: the last use of ``block`` on ``stream`` (of ``device``, when another
        device reads the memory through peer access) is queued now; it replaces an earlier
        use event of that stream."""
        event = self.use_event(stream, device)
        events = block.use_events
        if events is None:
            block.use_events = [event]
        else:
            key = (event.device, stream)
            block.use_events = [e for e in events if (e.device, e.stream) != key]
            block.use_events.append(event)

    def prune(self, block: Block) -> None:
        """Drop the use events of ``block`` that have completed (at free; not while a stream
        captures a graph: events must not be queried then)."""
        if self.captures:
            return
        query = self.driver.event_query
        kept = [event for event in block.use_events or () if not query(event.handle)]
        block.use_events = kept or None

    def note_free(self, block: Block, stream: int) -> None:
        """cross_stream_reuse: another stream taking ``block`` waits for this free. Not
        during a capture (the event would be a captured one): a stream that takes the block
        then records one itself."""
        if not self.captures:
            self.note_use(block, stream)

    def wait_uses(self, block: Block, stream: int) -> None:
        """The new owner's ``stream`` waits for every use event on ``block`` (no host wait)."""
        wait = self.driver.stream_wait_event
        for event in block.use_events:  # type: ignore[union-attr]
            if event.stream != stream:
                wait(stream, event.handle)
        block.use_events = None

    def wait_for_uses(self, block: Block) -> None:
        """Wait on the host until every use event on ``block`` has completed (before its
        memory goes back to the device). Synchronizes."""
        for event in block.use_events or ():
            self.driver.event_synchronize(event.handle)
