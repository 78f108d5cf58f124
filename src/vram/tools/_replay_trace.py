"""A snapshot's device trace read for ``vram replay``: the program's requests, compiled once.

A trace is the ``device_traces`` of a snapshot, PyTorch's or vram's. Its alloc,
free_requested and free_completed events are the program's requests; its segment_* events
are the decisions the recording allocator made (the sizes it allocated, in order, which a
replay under the recorded settings must make again).

- A run of segment_free (or segment_unmap) events is one release of cached memory: the
  trace cannot tell the program's empty_cache() from PyTorch's release-and-retry when the
  recorded GPU was full (that GPU's capacity is not in the trace), and both released every
  cached segment; the replay calls empty_cache() there.
- A trace that began late (Note [Trace begins late] in ``vram.tools.viz``): allocations
  freed in it but never allocated in it, and active blocks of the final state that it never
  allocated, were live when it began; segments of the final state it never created existed
  too. Both are made before the first request, and said in ``notes``.
- Requests are compiled once, for every configuration, into (code, addr, size, stream,
  entry index) tuples: a free_requested whose free_completed follows at once is one
  ``FREE``; one whose completion comes later is ``FREE_PENDING`` and its completion
  ``COMPLETE`` (the block waited on record_stream events); each release is one ``CLEAR``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._units import MiB
from ._replay_pools import find_private_pools

__all__ = [
    "Trace",
    "read_trace",
    "live_peak",
    "ALLOC",
    "FREE",
    "FREE_PENDING",
    "COMPLETE",
    "CLEAR",
]

ALLOC, FREE, FREE_PENDING, COMPLETE, CLEAR = range(5)  # the codes of compiled requests
_RELEASES = ("segment_free", "segment_unmap")  # a run of these: cached memory given back


@dataclass
class Trace:
    """The requests of one device's trace, and what was live before it began."""

    entries: list[dict]
    recorded_segments: list[tuple[int, int]]  # (addr, size) of segment_alloc, in order
    recorded_sizes: list[int]  # sizes of segment_alloc and segment_map, in order
    settings: dict
    pre_allocs: list[tuple[int, int, int]] = field(default_factory=list)  # addr, size, stream
    pre_segments: list[tuple[int, int, int, bool]] = field(default_factory=list)
    cache_clears: set[int] = field(default_factory=set)  # entry index of empty_cache calls
    ops: list[tuple[int, int, int, int, int]] = field(default_factory=list)  # the requests
    pools: dict = field(default_factory=dict)  # private pool id -> its streams (_replay_pools)
    notes: list[str] = field(default_factory=list)

    @property
    def streams(self) -> list[int]:
        """Every stream the requests use (the recorded ones and the private pools'), sorted."""
        found = {op[3] for op in self.ops if op[0] == ALLOC}
        found |= {stream for _, _, stream in self.pre_allocs}
        found |= {stream for _, _, stream, _ in self.pre_segments}
        for streams in self.pools.values():
            found |= streams
        return sorted(found | {0})


def read_trace(snapshot: dict, device: int | None) -> Trace:
    """The trace of ``device`` (the first device with one if None), compiled."""
    traces = snapshot.get("device_traces") or []
    if device is None:
        device = next((i for i, t in enumerate(traces) if t), None)
        if device is None:
            raise ValueError(
                "the snapshot has no device trace: record it with "
                "_record_memory_history(enabled='all') before taking the snapshot"
            )
    if not 0 <= device < len(traces) or not traces[device]:
        raise ValueError(f"device: the snapshot has no trace for device {device}")
    entries = traces[device]
    trace = Trace(
        entries=entries,
        recorded_segments=[
            (e["addr"], e["size"]) for e in entries if e["action"] == "segment_alloc"
        ],
        recorded_sizes=[
            e["size"] for e in entries if e["action"] in ("segment_alloc", "segment_map")
        ],
        settings=snapshot.get("allocator_settings") or {},
    )
    _find_cache_clears(trace)
    _find_pre_state(trace, snapshot, device)
    trace.ops = _compile(trace)
    find_private_pools(trace, snapshot, device)
    return trace


def _find_cache_clears(trace: Trace) -> None:
    """Each run of segment_free / segment_unmap events is one release of cached memory."""
    previous = None
    for i, e in enumerate(trace.entries):
        action = e["action"]
        if action in _RELEASES and previous not in _RELEASES:
            trace.cache_clears.add(i)
        if action != "free_completed":  # a release completes pending frees first
            previous = action
    if trace.cache_clears:
        trace.notes.append(
            f"{len(trace.cache_clears)} releases of cached memory (empty_cache, or an "
            "out-of-memory retry on the recorded device) replayed as empty_cache()"
        )


def _find_pre_state(trace: Trace, snapshot: dict, device: int) -> None:
    """What was live before the trace began (see the module docstring)."""
    live: dict[int, int] = {}
    pre: dict[int, tuple[int, int, int]] = {}
    requested: set[int] = set()  # frees requested and not completed yet
    made_segments: set[int] = set()
    freed_before_made: dict[int, tuple[int, int, int, bool]] = {}
    for e in trace.entries:
        action, addr = e["action"], e["addr"]
        if action == "alloc":
            live[addr] = e["size"]
        elif action == "free_requested":
            if live.pop(addr, None) is None and addr not in pre:
                pre[addr] = (addr, e["size"], e["stream"])
            requested.add(addr)
        elif action == "free_completed":
            if addr not in requested and addr not in pre:  # its free began before the trace
                pre[addr] = (addr, e["size"], e["stream"])
            requested.discard(addr)
        elif action == "segment_alloc":
            made_segments.add(addr)
        elif action == "segment_free" and addr not in made_segments:
            small = e["size"] == 2 * MiB
            freed_before_made.setdefault(addr, (addr, e["size"], e["stream"], small))
    for seg in snapshot.get("segments") or []:
        if seg.get("device", device) != device:
            continue
        for block in seg.get("blocks", ()):
            addr = block["address"]
            known = addr in live or addr in pre or addr in requested
            if block["state"] != "inactive" and not known:
                size = block.get("requested_size") or block["size"]
                pre[addr] = (addr, size, seg["stream"])
        if seg["address"] not in made_segments and not seg.get("is_expandable"):
            small = seg.get("segment_type") == "small"
            freed_before_made.setdefault(
                seg["address"], (seg["address"], seg["total_size"], seg["stream"], small)
            )
    trace.pre_allocs = sorted(pre.values())
    trace.pre_segments = sorted(freed_before_made.values())
    if trace.pre_allocs:
        trace.notes.append(
            f"{len(trace.pre_allocs)} allocations were live before the trace began; "
            "allocated first, in address order"
        )
    if trace.pre_segments:
        trace.notes.append(
            f"{len(trace.pre_segments)} segments existed before the trace began; created first"
        )


def _compile(trace: Trace) -> list[tuple[int, int, int, int, int]]:
    """The trace's requests as (code, addr, size, stream, entry index) tuples."""
    entries = trace.entries
    clears = trace.cache_clears
    ops: list[tuple[int, int, int, int, int]] = []
    append = ops.append
    skip = -1
    last = len(entries) - 1
    for i, e in enumerate(entries):
        if i == skip:
            continue
        action = e["action"]
        if action == "alloc":
            append((ALLOC, e["addr"], e["size"], e.get("stream", 0), i))
        elif action == "free_requested":
            addr = e["addr"]
            nxt = entries[i + 1] if i < last else None
            if nxt is not None and nxt["action"] == "free_completed" and nxt["addr"] == addr:
                append((FREE, addr, 0, 0, i))
                skip = i + 1
            else:
                append((FREE_PENDING, addr, 0, 0, i))
        elif action == "free_completed":
            append((COMPLETE, e["addr"], 0, 0, i))
        elif i in clears:
            append((CLEAR, 0, 0, 0, i))
    return ops


def live_peak(trace: Trace) -> int:
    """The lower bound of any setting's peak reserved: the peak of the bytes the program
    holds (from alloc to free_requested, each request rounded up to 512 B), what was live
    before the trace included."""
    live = {addr: -(-max(size, 1) // 512) * 512 for addr, size, _ in trace.pre_allocs}
    now = peak = sum(live.values())
    for code, addr, size, _, _ in trace.ops:
        if code == ALLOC:
            block = -(-max(size, 1) // 512) * 512
            old = live.get(addr)
            if old is not None:
                now -= old
            live[addr] = block
            now += block
            if now > peak:
                peak = now
        elif code == FREE or code == FREE_PENDING or code == COMPLETE:
            old = live.pop(addr, None)
            if old is not None:
                now -= old
    return peak
