"""Private pools (CUDA graphs, MemPool) in ``vram replay``.

A trace's events carry no pool, but the final state's segments do (``segment_pool_id``):
a segment of a private pool that the trace created, or that existed before it, is known
by its address. So an allocation the trace made inside such a segment, while it lived,
was a request into that pool, and the replay routes it there:

- each private pool of the final state becomes a private pool of the replay allocator,
  held for the whole replay (as a graph holds its pool while it lives), so empty_cache()
  leaves it as PyTorch's left it;
- its requests are made on streams of their own (one per pool and recorded stream, above
  every recorded handle), and the pool's route takes exactly those streams: the default
  pool's requests are untouched, and within the pool best fit works per stream as it did.

A segment the trace created and freed again has no pool the trace can tell: its requests
replay in the default pool (said in the result's notes when the trace has private pools).
"""

from __future__ import annotations

import bisect
from typing import Any

from ..memory import PrivatePool

__all__ = ["find_private_pools", "add_pool_routes"]

_STREAM_BASE = 1 << 62  # the replay's streams for private pools' requests start here


def _pool_id(value: Any) -> tuple[int, int]:
    return tuple(value) if isinstance(value, (tuple, list)) else (0, 0)  # type: ignore[return-value]


def find_private_pools(trace: Any, snapshot: dict, device: int) -> None:
    """Route the trace's requests into the private pools they went to: rewrites the
    streams of ``trace.ops``, ``pre_allocs`` and ``pre_segments`` for those requests and
    fills ``trace.pools`` (pool id -> its replay streams)."""
    final = [
        (s["address"], s["total_size"], _pool_id(s.get("segment_pool_id")))
        for s in snapshot.get("segments") or []
        if s.get("device", device) == device and _pool_id(s.get("segment_pool_id")) != (0, 0)
    ]
    if not final:
        return
    entries = trace.entries
    made_last: dict[int, int] = {}  # segment address -> index of its last creation
    freed_after: set[int] = set()  # addresses freed after their last creation
    for i, e in enumerate(entries):
        if e["action"] in ("segment_alloc", "segment_map"):
            made_last[e["addr"]] = i
            freed_after.discard(e["addr"])
        elif e["action"] in ("segment_free", "segment_unmap"):
            freed_after.add(e["addr"])
    pools_at = {addr: (size, pool) for addr, size, pool in final}
    live: list[tuple[int, int, tuple[int, int]]] = sorted(  # private segments alive now
        (addr, addr + size, pool) for addr, size, pool in final if addr not in made_last
    )
    by_entry: dict[int, tuple[int, int]] = {}  # alloc entry -> its private pool
    for i, e in enumerate(entries):
        action, addr = e["action"], e["addr"]
        if action in ("segment_alloc", "segment_map"):
            found = pools_at.get(addr)
            if found is not None and made_last[addr] == i and addr not in freed_after:
                bisect.insort(live, (addr, addr + found[0], found[1]))
        elif action in ("segment_free", "segment_unmap"):
            live = [seg for seg in live if seg[0] != addr]
        elif action == "alloc":
            pool = _containing(live, addr)
            if pool is not None:
                by_entry[i] = pool
    streams: dict[tuple[tuple[int, int], int], int] = {}

    def routed(pool: tuple[int, int], stream: int) -> int:
        key = (pool, stream)
        if key not in streams:
            streams[key] = _STREAM_BASE + len(streams)
        return streams[key]

    trace.ops = [
        (op[0], op[1], op[2], routed(by_entry[op[4]], op[3]), op[4]) if op[4] in by_entry else op
        for op in trace.ops
    ]
    everything = sorted((addr, addr + size, pool) for addr, size, pool in final)
    pre = []
    for addr, size, stream in trace.pre_allocs:
        pool = _containing(everything, addr)
        pre.append((addr, size, stream if pool is None else routed(pool, stream)))
    trace.pre_allocs = pre
    trace.pre_segments = [
        (addr, size, routed(pools_at[addr][1], stream) if addr in pools_at else stream, small)
        for addr, size, stream, small in trace.pre_segments
    ]
    for pool in {pool for _, _, pool in final}:
        trace.pools.setdefault(pool, set())
    for (pool, _), stream in streams.items():
        trace.pools[pool].add(stream)
    trace.notes.append(
        f"{len(trace.pools)} private pools (CUDA graphs, MemPool) in the final state: "
        f"{len(by_entry)} allocations replayed in them"
    )


def _containing(segments: list[tuple[int, int, tuple[int, int]]], addr: int) -> Any:
    """The pool of the segment (sorted (start, end, pool)) holding ``addr``, or None."""
    i = bisect.bisect_right(segments, (addr, 1 << 64, (1 << 64, 0))) - 1
    if i >= 0 and addr < segments[i][1]:
        return segments[i][2]
    return None


def add_pool_routes(allocator: Any, pools: dict[tuple[int, int], set[int]]) -> None:
    """The replay allocator's private pools, each taking the requests of its streams."""
    for pool_id, streams in pools.items():
        private = PrivatePool(pool_id)
        allocator.add_route(private, streams.__contains__)
