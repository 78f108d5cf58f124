"""Replay a memory trace through vram's allocator under other settings: ``vram replay``.

    vram replay snapshot.pickle --config expandable_segments:True --capacity 40GiB

A trace is the ``device_traces`` of a snapshot, PyTorch's or vram's. Its alloc,
free_requested and free_completed events are the program's requests; they are replayed in
order, per stream, through a fresh DeviceCachingAllocator on a simulated device, once per
configuration. Its segment_* events are the decisions PyTorch's allocator made: under the
settings the trace was recorded with, the replay makes the same ones (the same segment
allocations, of the same sizes, in order), which the result reports as
``matches_recorded``.

Rules of the replay:
- Settings: the trace's ``allocator_settings`` are turned back into a VRAM_ALLOC_CONF
  string; each configuration is applied on top of them ("" is the recorded settings).
  ``record_use:True`` in a configuration replays pending frees with record_use, and
  ``memory_limit:SIZE`` sets a memory fraction allowing SIZE bytes before the run.
- Addresses: the replay device hands out the addresses the trace recorded for segments of
  the same size, in order, so that best fit breaks ties between equal free blocks as it did.
  Other segments get addresses below the recorded ones, each lower than the last, as
  CUDA's driver places new allocations (Note [Replay addresses]). Memory is counted, never
  backed: the replay touches no data.
- A free whose free_completed comes later (the block waited on record_stream events) is
  held on a stream of its own until the trace completes it; with record_use it returns to
  the pool at once and the next owner's stream waits instead.
- A run of segment_free (or segment_unmap) events is replayed as one empty_cache() call.
  The trace cannot tell the program's empty_cache() from PyTorch's release-and-retry when
  the recorded GPU was full (that GPU's capacity is not in the trace), and both released
  every cached segment; so under the recorded settings the replay frees what PyTorch freed.
- A trace that began late (Note [Trace begins late]): allocations freed in it but never
  allocated in it, and active blocks of the final state that it never allocated, were live
  when it began; they are allocated first, in address order. Segments of the final state it
  never created existed too; they are created up front. Both are reported in ``notes``.

Per configuration the result says: device mallocs (segment allocations plus mapped pages),
the segment sizes in order, peak reserved, peak allocated and ``peak_ratio`` (peak reserved
over peak allocated); at the allocated peak (the moment allocated memory reached its
maximum) the reserved bytes, the largest free block and ``fragmentation_at_peak`` (1 - the
largest free block over the reserved bytes not allocated there: 0 when the free memory is one
block); and whether the replay ran out of memory at ``capacity`` (without one, the device is
80 GiB or four times what the trace reserved, whichever is more).

``vram replay TRACE --suggest`` searches the settings for the trace (``vram.tools.suggest``).
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._device import Device
from .._errors import CudaError, OutOfMemoryError
from .._units import format_bytes, parse_bytes
from ..driver._sim import SimDriver
from ..memory._caching import DeviceCachingAllocator
from ..memory._config import AllocatorConfig, parse_config
from ._output import check_output_path, console, describe_error, fitted, progress
from ._replay_pools import add_pool_routes, find_private_pools
from ._snapshot_file import load_snapshot

__all__ = [
    "replay",
    "load_snapshot",
    "settings_to_config",
    "write_html",
    "ReplayDriver",
    "main_replay",
]

_MB = 1 << 20
_DEFAULT_CAPACITY = 80 << 30  # bytes; at least this without --capacity (an H100's memory)
_SYNTHETIC_GAP = 1 << 40  # bytes between the recorded addresses and the replay's own
_SYNTHETIC_FLOOR = 1 << 32  # the replay's own addresses stay above this (never near 0)
_MAX_RESERVE = 1 << 46  # bytes: room below the first address when nothing was recorded
_ALIGN = 2 << 20  # bytes; alignment of addresses the replay makes up
_REQUESTS = ("alloc", "free_requested", "free_completed", "segment_free", "segment_unmap")
_RELEASES = ("segment_free", "segment_unmap")  # a run of these: cached memory given back
_PROGRESS_STEP = 4096  # entries replayed between progress updates


# ============================================================================ loading
def settings_to_config(settings: dict | None) -> str:
    """A VRAM_ALLOC_CONF string that rebuilds a snapshot's ``allocator_settings`` dict."""
    if not settings:
        return ""
    parts = []
    split = settings.get("max_split_size", -1)
    if split not in (-1, None) and split < (1 << 63):
        parts.append(f"max_split_size_mb:{split // _MB}")
    rounding = settings.get("max_non_split_rounding_size")
    if rounding and rounding != 20 * _MB:
        parts.append(f"max_non_split_rounding_mb:{rounding // _MB}")
    threshold = settings.get("garbage_collection_threshold") or 0.0
    if threshold:
        parts.append(f"garbage_collection_threshold:{threshold}")
    divisions = settings.get("roundup_power2_divisions") or {}
    table = [divisions[k] for k in sorted(divisions, key=int)] if divisions else []
    if any(table):
        if len(set(table)) == 1:
            parts.append(f"roundup_power2_divisions:{table[0]}")
        else:
            items = ",".join(f"{k}:{divisions[k]}" for k in sorted(divisions, key=int))
            parts.append(f"roundup_power2_divisions:[{items}]")
    for key in ("expandable_segments", "cross_stream_reuse"):
        if settings.get(key):
            parts.append(f"{key}:True")
    return ",".join(parts)


# ===================================================================== the replay device
class ReplayDriver(SimDriver):
    """A simulated device that counts memory without backing it.

    ``malloc`` hands out the recorded segment addresses of the same size, in order, while
    their range is free; other sizes get addresses below the recorded ones, going down
    (above them when the recorded addresses are too low to leave room). Events complete at
    once except those recorded on held streams, which complete when the replay releases
    the stream (the trace's free_completed).

    Note [Replay addresses]
    Best fit breaks ties between free blocks of one size by address, so where new segments
    land decides which of them a request splits. On an H100 CUDA hands each new allocation
    a lower address than the one before (the traces in tests/data/traces show it), so the
    newest segment's block wins a tie. Placing the replay's own segments below the recorded
    ones, each lower than the last, reproduces that: a replay of a workload's default trace
    under each other setting then makes exactly the decisions PyTorch made under it
    (bench/predictions.py); addresses growing upward do not (gpt_train under
    max_split_size_mb:64 reserved 1.4% less).
    """

    def __init__(self, capacity: int, recorded: list[tuple[int, int]]) -> None:
        super().__init__(device_count=1, capacity=capacity)
        self.capacity = capacity
        self.used = 0  # bytes of malloc and vmm_create live
        self._recorded: dict[int, deque[int]] = {}  # size -> recorded addresses, in order
        top, low = 0, None
        for addr, size in recorded:
            self._recorded.setdefault(size, deque()).append(addr)
            top = max(top, addr + size)
            low = addr if low is None else min(low, addr)
        start = _SYNTHETIC_GAP + 2 * _MAX_RESERVE if low is None else low - _SYNTHETIC_GAP
        self._down = start // _ALIGN * _ALIGN  # the next address the replay's own take, down
        self._up = -(-(top + _SYNTHETIC_GAP) // _ALIGN) * _ALIGN  # when below is used up
        self._starts: list[int] = []  # sorted starts of live mallocs
        self._sizes: dict[int, int] = {}  # live malloc start -> size
        self._vmm: dict[int, int] = {}  # physical handle -> size
        self._held: dict[int, list[int]] = {}  # held stream -> events recorded on it
        self._incomplete: set[int] = set()
        self._event_ids = iter(range(1, 1 << 62))

    # ---- memory
    def mem_get_info(self, device: int) -> tuple[int, int]:
        return max(self.capacity - self.used, 0), self.capacity

    def _charge(self, size: int, call: str) -> None:  # type: ignore[override]
        if self.used + size > self.capacity:
            raise CudaError(call, "CUDA_ERROR_OUT_OF_MEMORY")
        self.used += size

    def _overlaps(self, addr: int, size: int) -> bool:
        i = bisect.bisect_left(self._starts, addr)
        if i < len(self._starts) and self._starts[i] < addr + size:
            return True
        return i > 0 and self._starts[i - 1] + self._sizes[self._starts[i - 1]] > addr

    def is_live(self, addr: int) -> bool:
        """True when a live malloc starts at ``addr``."""
        return addr in self._sizes

    def _take_va(self, size: int) -> int:
        """Address space for the replay's own segment (Note [Replay addresses])."""
        step = -(-size // _ALIGN) * _ALIGN
        if self._down - step >= _SYNTHETIC_FLOOR:
            self._down -= step
            return self._down
        addr = self._up
        self._up += step
        return addr

    def malloc(self, device: int, size: int) -> int:
        self._charge(size, "cuMemAlloc")
        ptr = None
        queue = self._recorded.get(size)
        if queue:
            for i, addr in enumerate(queue):
                if not self._overlaps(addr, size):
                    del queue[i]
                    ptr = addr
                    break
        if ptr is None:
            ptr = self._take_va(size)
        bisect.insort(self._starts, ptr)
        self._sizes[ptr] = size
        return ptr

    def free(self, device: int, ptr: int) -> None:
        size = self._sizes.pop(ptr)
        del self._starts[bisect.bisect_left(self._starts, ptr)]
        self.used -= size

    def vmm_reserve(self, device: int, size: int) -> int:
        return self._take_va(size)

    def vmm_release(self, device: int, va: int, size: int) -> None:
        pass

    def vmm_create(self, device: int, size: int) -> int:
        self._charge(size, "cuMemCreate")
        handle = next(self._event_ids)
        self._vmm[handle] = size
        return handle

    def vmm_release_handle(self, device: int, handle: int) -> None:
        self.used -= self._vmm.pop(handle)

    def vmm_map(self, device: int, va: int, size: int, handle: int) -> None:
        pass

    def vmm_unmap(self, device: int, va: int, size: int) -> None:
        pass

    # ---- streams and events: nothing runs; held streams keep their events pending
    def hold(self, stream: int) -> None:
        self._held[stream] = []

    def release(self, stream: int) -> None:
        for event in self._held.pop(stream, ()):
            self._incomplete.discard(event)

    def event_create(self, device: int, timing: bool = False) -> int:
        return next(self._event_ids)

    def event_destroy(self, event: int) -> None:
        self._incomplete.discard(event)

    def event_record(self, event: int, stream: int) -> None:
        held = self._held.get(stream)
        if held is None:
            self._incomplete.discard(event)
        else:
            held.append(event)
            self._incomplete.add(event)

    def event_query(self, event: int) -> bool:
        return event not in self._incomplete

    def event_synchronize(self, event: int) -> None:
        self._incomplete.discard(event)

    def stream_wait_event(self, stream: int, event: int) -> None:
        pass

    def stream_synchronize(self, stream: int) -> None:
        self.release(stream)

    def device_synchronize(self, device: int) -> None:
        for stream in list(self._held):
            self.release(stream)


# ===================================================================== reading a trace
@dataclass
class _Trace:
    """The requests of one device's trace, and what was live before it began."""

    entries: list[dict]
    recorded_segments: list[tuple[int, int]]  # (addr, size) of segment_alloc, in order
    recorded_sizes: list[int]  # sizes of segment_alloc and segment_map, in order
    settings: dict
    pre_allocs: list[tuple[int, int, int]] = field(default_factory=list)  # addr, size, stream
    pre_segments: list[tuple[int, int, int, bool]] = field(default_factory=list)
    cache_clears: set[int] = field(default_factory=set)  # entry index of empty_cache calls
    ops: list[tuple[int, int, int, int, int]] = field(default_factory=list)  # _compile's
    pools: dict = field(default_factory=dict)  # private pool id -> its streams (_replay_pools)
    notes: list[str] = field(default_factory=list)


def _read_trace(snapshot: dict, device: int | None) -> _Trace:
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
    trace = _Trace(
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


def _find_cache_clears(trace: _Trace) -> None:
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


def _find_pre_state(trace: _Trace, snapshot: dict, device: int) -> None:
    """What was live before the trace began (Note [Trace begins late] in the module doc)."""
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
            small = e["size"] == 2 * _MB
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


# ========================================================================== replaying
class _SegmentSizes:
    """The allocator's reserve hook: notes the segment sizes it allocates or maps, in order
    (the replay keeps no recorder: the allocator's history branches stay untaken)."""

    __slots__ = ("sizes",)

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def __call__(self, pool: Any, segment: Any, start: int, nbytes: int, action: str) -> None:
        if nbytes > 0:
            self.sizes.append(nbytes)


@dataclass
class _Run:
    row: dict
    reserved: list[int]  # after each request (only when a timeline was asked for)
    allocated: list[int]


def _split_config(text: str) -> tuple[str, bool, int | None]:
    """Take vram replay's own keys out of a config string: ``record_use:True`` (pending
    frees replayed with record_use) and ``memory_limit:SIZE`` (a memory fraction that allows
    SIZE bytes, e.g. 6GiB, set on the replay device before the run as a program would call
    set_per_process_memory_fraction: garbage collection needs one). Returns (allocator
    settings, record_use, the limit in bytes or None)."""
    kept, record_use, limit = [], False, None
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition(":")
        key, value = key.strip(), value.strip()
        if key == "record_use":
            if value not in ("True", "False"):
                raise ValueError(f"record_use: expected True or False, got {value!r}")
            record_use = value == "True"
        elif key == "memory_limit":
            limit = parse_bytes(value, "memory_limit")
            if limit <= 0:
                raise ValueError(f"memory_limit: must be positive, got {value!r}")
        else:
            kept.append(part)
    return ",".join(kept), record_use, limit


def _largest_free(allocator: DeviceCachingAllocator) -> int:
    """The largest free mapped block of any pool."""
    pools = [allocator.small, allocator.large]
    for private in allocator.private_pools.values():
        pools += [private.small, private.large]
    return max(pool.largest_free() for pool in pools)


def _allocated_reader(allocator: DeviceCachingAllocator) -> Callable[[], int]:
    """A function returning the allocator's allocated bytes now, as cheaply as it can: the
    stats' own O(1) reader where they have one."""
    stats = allocator.stats
    reader = getattr(stats, "allocated_bytes", None)
    if callable(reader):
        return reader
    return lambda: stats.current("allocated_bytes")


class Pruned(Exception):
    """A replay stopped early: it reserved more than its bound (``vram replay --suggest``)."""

    def __init__(self, reserved: int, at: int) -> None:
        super().__init__(f"reserved {reserved} bytes at request {at}, above the bound")
        self.reserved = reserved
        self.at = at


class _Replayer:
    """One replay of one trace under one configuration."""

    def __init__(
        self,
        trace: _Trace,
        config: AllocatorConfig,
        capacity: int,
        record_use: bool,
        limit: int | None = None,
    ):
        self.trace = trace
        self.record_use = record_use
        pre = [(addr, size) for addr, size, _, _ in trace.pre_segments]
        self.driver = ReplayDriver(capacity, pre + trace.recorded_segments)
        allocator = DeviceCachingAllocator(Device("sim", 0), config, driver=self.driver)
        add_pool_routes(allocator, trace.pools)
        if limit is not None:
            allocator.set_memory_fraction(min(limit / capacity, 1.0))
        self.segments = _SegmentSizes()
        allocator.add_reserve_hook(self.segments)
        self.allocator = allocator
        self.ptrs: dict[int, int] = {}  # recorded address -> replay pointer, live allocations
        self.held: dict[int, int] = {}  # recorded address -> held stream of a pending free
        self._next_held = -1
        self.peak_allocated = self.reserved_at_peak = self.largest_free_at_peak = 0
        self.reserved: list[int] = []
        self.allocated: list[int] = []

    def setup(self) -> None:
        """Make what was live before the trace began."""
        trace, allocator = self.trace, self.allocator
        for addr, size, stream in trace.pre_allocs:
            self.ptrs[addr] = allocator.malloc(max(size, 1), stream)
        fills = []
        for addr, size, stream, small in trace.pre_segments:
            if self.driver.is_live(addr):
                continue  # a live allocation made it already
            if small:
                fills += [allocator.malloc(_MB, stream), allocator.malloc(_MB, stream)]
            else:
                fills.append(allocator.malloc(size, stream))
        for ptr in fills:
            allocator.free(ptr)
        allocator.reset_peak()  # the fills were never the program's: peaks start here
        self._note_peak(_allocated_reader(allocator)())

    def _note_peak(self, allocated: int) -> None:
        """The state at the allocated peak: reserved and the largest free block there."""
        if allocated > self.peak_allocated:
            self.peak_allocated = allocated
            self.reserved_at_peak = self.allocator.total_allocated_memory
            self.largest_free_at_peak = _largest_free(self.allocator)

    def run(
        self,
        progress: Callable[[int], None] | None = None,
        timeline: bool = False,
        bound: int | None = None,
    ) -> tuple[bool, int | None]:
        """Replay every request; (ran out of memory, at which trace entry).

        ``progress(n)`` is told of the trace entries replayed, every ``_PROGRESS_STEP``
        requests; ``timeline``
        keeps reserved and allocated bytes after each request; ``bound`` stops the replay
        with ``Pruned`` as soon as it reserves more bytes than that.

        Note [The replay loop]: the trace was compiled once into (code, addr, size, stream,
        entry) tuples (``_compile``); this loop is all the replay adds to the allocator's
        own work per request, so it binds what it calls to locals, reads reserved bytes from
        the allocator's plain counter, and looks at the state of the allocated peak only
        when a peak ends (the first request after a run of allocations that set one), not
        at every allocation.
        """
        allocator, driver = self.allocator, self.driver
        malloc, free, ptrs, held = allocator.malloc, allocator.free, self.ptrs, self.held
        allocated_now = _allocated_reader(allocator)
        reserved_out, allocated_out = self.reserved, self.allocated
        limit = (1 << 127) if bound is None else bound
        peak = self.peak_allocated
        rising = False  # allocations since the last request set a new allocated peak
        ops = self.trace.ops
        step = _PROGRESS_STEP
        i = reported = 0
        try:
            for start in range(0, len(ops), step):
                for op in ops[start : start + step]:
                    code = op[0]
                    if code == _ALLOC:
                        ptrs[op[1]] = malloc(op[2] or 1, op[3])
                        rising = True
                    else:
                        if rising:
                            rising = False
                            allocated = allocated_now()
                            if allocated > peak:
                                self._note_peak(allocated)
                                peak = allocated
                        if code == _FREE:
                            ptr = ptrs.pop(op[1], None)
                            if ptr is not None:
                                free(ptr)
                        elif code == _FREE_PENDING:
                            self._free_pending(op[1])
                        elif code == _COMPLETE:
                            stream = held.pop(op[1], None)
                            if stream is not None:
                                driver.release(stream)
                                del ptrs[op[1]]
                            elif op[1] in ptrs:  # its free was requested before the trace
                                free(ptrs.pop(op[1]))
                        else:
                            allocator.empty_cache()
                    if allocator.total_allocated_memory > limit:
                        raise Pruned(allocator.total_allocated_memory, op[4])
                    if timeline:
                        reserved_out.append(allocator.total_allocated_memory)
                        allocated_out.append(allocated_now())
                    i += 1
                if progress is not None and start + step < len(ops):
                    upto = ops[start + step][4]  # the trace entries replayed so far
                    progress(upto - reported)
                    reported = upto
        except OutOfMemoryError:
            if rising:
                self._note_peak(allocated_now())
            return True, ops[i][4]
        if rising:
            self._note_peak(allocated_now())
        return False, None

    def _free_pending(self, addr: int) -> None:
        """A free whose free_completed comes later: held on a stream of its own until then
        (record_stream), or returned at once with a use recorded there (record_use)."""
        ptr = self.ptrs.get(addr)
        if ptr is None:
            return
        stream = self._next_held
        self._next_held -= 1
        if self.record_use:
            self.allocator.record_use(ptr, stream)
            del self.ptrs[addr]
        else:
            self.driver.hold(stream)
            self.allocator.record_stream(ptr, stream)
            self.held[addr] = stream
        self.allocator.free(ptr)


# the codes of compiled requests (_compile)
_ALLOC, _FREE, _FREE_PENDING, _COMPLETE, _CLEAR = range(5)


def _compile(trace: _Trace) -> list[tuple[int, int, int, int, int]]:
    """The trace's requests as (code, addr, size, stream, entry index) tuples, once for
    every configuration: a free_requested whose free_completed follows at once is one
    ``_FREE``; one whose completion comes later is ``_FREE_PENDING`` and its completion
    ``_COMPLETE``; each run of segment_free / segment_unmap is one ``_CLEAR``."""
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
            append((_ALLOC, e["addr"], e["size"], e.get("stream", 0), i))
        elif action == "free_requested":
            addr = e["addr"]
            nxt = entries[i + 1] if i < last else None
            if nxt is not None and nxt["action"] == "free_completed" and nxt["addr"] == addr:
                append((_FREE, addr, 0, 0, i))
                skip = i + 1
            else:
                append((_FREE_PENDING, addr, 0, 0, i))
        elif action == "free_completed":
            append((_COMPLETE, e["addr"], 0, 0, i))
        elif i in clears:
            append((_CLEAR, 0, 0, 0, i))
    return ops


def live_peak(trace: _Trace) -> int:
    """The lower bound of any setting's peak reserved: the peak of the bytes the program
    holds (from alloc to free_requested, each request rounded up to 512 B), what was live
    before the trace included."""
    live = {addr: -(-max(size, 1) // 512) * 512 for addr, size, _ in trace.pre_allocs}
    now = peak = sum(live.values())
    for code, addr, size, _, _ in trace.ops:
        if code == _ALLOC:
            block = -(-max(size, 1) // 512) * 512
            old = live.get(addr)
            if old is not None:
                now -= old
            live[addr] = block
            now += block
            if now > peak:
                peak = now
        elif code == _FREE or code == _FREE_PENDING or code == _COMPLETE:
            old = live.pop(addr, None)
            if old is not None:
                now -= old
    return peak


def _device_capacity(trace: _Trace, capacity: int | None) -> int:
    """The replay device's memory: ``capacity``, or big enough for any configuration."""
    if capacity is not None:
        return capacity
    recorded_total = sum(size for _, size in trace.recorded_segments)
    return max(_DEFAULT_CAPACITY, 4 * recorded_total)


def _replay_one(
    trace: _Trace,
    text: str,
    capacity: int | None,
    record_use: bool,
    progress: Callable[[int], None] | None = None,
    timeline: bool = False,
    bound: int | None = None,
) -> _Run:
    """Replay ``trace`` under ``text`` (on top of its recorded settings); its result row.
    Raises ``Pruned`` when ``bound`` is given and the replay reserves more than that."""
    recorded = settings_to_config(trace.settings)
    own, use, limit = _split_config(text)
    try:
        config = parse_config(own, parse_config(recorded))
    except ValueError as exc:
        raise ValueError(f"config {text!r}: {exc}") from None
    use = use or record_use
    replayer = _Replayer(trace, config, _device_capacity(trace, capacity), use, limit)
    try:
        replayer.setup()
    except OutOfMemoryError:  # what was live before the trace does not fit
        oom, oom_at = True, 0
    else:
        oom, oom_at = replayer.run(progress, timeline, bound)
    stats = replayer.allocator.stats
    sizes = replayer.segments.sizes
    peak_allocated = stats.peak("allocated_bytes")
    peak_reserved = stats.peak("reserved_bytes")
    at_peak = replayer.reserved_at_peak
    unallocated = at_peak - replayer.peak_allocated
    own_text = ["record_use:True"] if use else []
    if limit is not None:
        own_text.append(f"memory_limit:{limit}")
    row = {
        "config": text or ("recorded, record_use" if record_use else "recorded"),
        "settings": ",".join(filter(None, [settings_to_config(config.settings()), *own_text])),
        "device_malloc": stats.num_device_alloc,
        "device_free": stats.num_device_free,
        "segment_sizes": sizes,
        "peak_reserved": peak_reserved,
        "peak_allocated": peak_allocated,
        "peak_ratio": round(peak_reserved / peak_allocated, 4) if peak_allocated else None,
        "reserved_at_peak": at_peak,
        "largest_free_at_peak": replayer.largest_free_at_peak,
        "fragmentation_at_peak": (
            round(1 - replayer.largest_free_at_peak / unallocated, 4) if unallocated > 0 else 0.0
        ),
        "capacity": capacity,
        "oom": oom,
        "oom_at": oom_at,
        "matches_recorded": sizes == trace.recorded_sizes,
        "notes": list(trace.notes),
    }
    return _Run(row, replayer.reserved, replayer.allocated)


def _runs(
    trace: Any,
    configs: list[str] | None,
    capacity: int | None,
    record_use: bool,
    device: int | None,
    timeline: bool = False,
) -> list[_Run]:
    snapshot = load_snapshot(trace)
    parsed = _read_trace(snapshot, device)
    if capacity is not None and capacity <= 0:
        raise ValueError(f"capacity: must be positive, got {capacity}")
    texts = configs or [""]
    name = Path(trace).name if isinstance(trace, (str, Path)) else "the trace"
    with progress(f"replaying {name}", len(parsed.entries) * len(texts)) as advance:
        return [
            _replay_one(parsed, text, capacity, record_use, advance, timeline) for text in texts
        ]


def replay(
    trace: dict | str | Path,
    configs: list[str] | None = None,
    capacity: int | None = None,
    record_use: bool = False,
    device: int | None = None,
) -> list[dict]:
    """Replay a snapshot's device trace once per configuration; one result dict each.

    ``configs`` are VRAM_ALLOC_CONF strings applied on top of the trace's recorded
    settings ("" or None: the recorded settings alone). ``capacity`` (bytes) is the replay
    device's memory; ``record_use`` replays pending frees with record_use. ``device``: the
    trace's device index (the first with a trace if None).
    """
    return [run.row for run in _runs(trace, configs, capacity, record_use, device)]


# ============================================================================= output
def _table(rows: list[dict], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for name in (
        "config",
        "device mallocs",
        "peak reserved",
        "peak allocated",
        "peak reserved / peak allocated",
        "reserved at allocated peak",
        "largest free there",
        "fragmentation there",
        "OOM",
        "matches trace",
    ):
        if name == "config":
            table.add_column(name, overflow="fold")
        else:
            table.add_column(name, justify="right", no_wrap=True)
    for row in rows:
        oom = "-" if row["capacity"] is None else ("yes" if row["oom"] else "no")
        table.add_row(
            row["config"],
            str(row["device_malloc"]),
            format_bytes(row["peak_reserved"]),
            format_bytes(row["peak_allocated"]),
            "-" if row["peak_ratio"] is None else f"{row['peak_ratio']:.3f}",
            format_bytes(row["reserved_at_peak"]),
            format_bytes(row["largest_free_at_peak"]),
            f"{row['fragmentation_at_peak']:.1%}",
            oom,
            "yes" if row["matches_recorded"] else "no",
        )
    return table


def _downsample(values: list[int], points: int) -> list[int]:
    """At most ``points`` values, each the maximum of its stretch (peaks stay visible)."""
    if len(values) <= points:
        return list(values)
    step = len(values) / points
    return [
        max(values[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)])
        for i in range(points)
    ]


def write_html(runs: list[_Run], path: str | Path, title: str = "vram replay") -> None:
    """The configurations' reserved and allocated timelines side by side, in one HTML file."""
    import html

    top = max((max(r.reserved, default=0) for r in runs), default=0) or 1
    width, height, pad, left = 420, 240, 30, 72  # pixels; left holds the byte labels
    panels = []
    for run in runs:
        reserved = _downsample(run.reserved, width)
        allocated = _downsample(run.allocated, width)
        n = max(len(reserved) - 1, 1)

        def line(values: list[int], n: int = n) -> str:
            return " ".join(
                f"{left + i * width / n:.1f},{pad + height - v * height / top:.1f}"
                for i, v in enumerate(values)
            )

        row = run.row
        ticks = "".join(
            f'<text x="{left - 4}" y="{pad + height - f * height + 4:.1f}" text-anchor="end">'
            f"{format_bytes(int(top * f))}</text>"
            f'<line x1="{left}" x2="{left + width}" y1="{pad + height - f * height:.1f}" '
            f'y2="{pad + height - f * height:.1f}" class="grid"/>'
            for f in (0, 0.25, 0.5, 0.75, 1)
        )
        panels.append(
            f'<div class="panel"><h2>{html.escape(row["config"])}</h2>'
            f'<svg width="{left + width + pad}" height="{height + 2 * pad}">{ticks}'
            f'<polyline class="reserved" points="{line(reserved)}"/>'
            f'<polyline class="allocated" points="{line(allocated)}"/>'
            f'<text x="{left + width / 2}" y="{height + 2 * pad - 8}" text-anchor="middle">'
            f"event ({len(run.reserved)} events)</text></svg>"
            f"<p>device mallocs {row['device_malloc']} · peak reserved "
            f"{format_bytes(row['peak_reserved'])} · peak allocated "
            f"{format_bytes(row['peak_allocated'])}"
            f"{' · OOM' if row['oom'] else ''}</p></div>"
        )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>
body {{ font: 13px system-ui, sans-serif; margin: 16px; }}
.panels {{ display: flex; flex-wrap: wrap; gap: 16px; }}
.panel h2 {{ font-size: 14px; margin: 0; }}
svg text {{ font-size: 10px; fill: #444; }}
.grid {{ stroke: #ddd; }}
.reserved {{ fill: none; stroke: #d62728; stroke-width: 1.2; }}
.allocated {{ fill: none; stroke: #1f77b4; stroke-width: 1.2; }}
</style></head><body><h1>{html.escape(title)}</h1>
<p><span style="color:#d62728">reserved</span> and
<span style="color:#1f77b4">allocated</span> bytes after each event of the trace</p>
<div class="panels">{"".join(panels)}</div></body></html>
"""
    Path(path).write_text(page)


# ================================================================================ CLI
def main_replay(argv: list[str] | None = None) -> int:
    """``vram replay TRACE [--config STR ...] [--capacity BYTES] [--json] [--html OUT]``, or
    ``vram replay TRACE --suggest [--capacity BYTES] [--json] [--jobs N]``."""
    parser = argparse.ArgumentParser(
        prog="vram replay",
        description="Replay a PyTorch or vram memory trace through vram's allocator.",
    )
    parser.add_argument("trace", help="a snapshot pickle with a device trace")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="STR",
        help="a VRAM_ALLOC_CONF string applied on top of the recorded settings (repeatable)",
    )
    parser.add_argument("--capacity", metavar="BYTES", help="device memory, e.g. 40GiB")
    parser.add_argument("--device", type=int, default=None, help="the trace's device index")
    parser.add_argument(
        "--record-use", action="store_true", help="replay pending frees with record_use"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--html", metavar="OUT", help="write the timelines to an HTML file")
    parser.add_argument(
        "--suggest",
        action="store_true",
        help="search the settings that matter and rank them by peak reserved",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="--suggest: worker processes (default: CPUs)"
    )
    args = parser.parse_args(argv)
    if args.suggest:
        if args.config or args.html or args.record_use:
            print(
                "vram replay: error: --suggest chooses the settings itself; "
                "it takes no --config, --record-use or --html",
                file=sys.stderr,
            )
            return 2
        from .suggest import main_suggest

        try:
            capacity = None if args.capacity is None else parse_bytes(args.capacity, "--capacity")
        except ValueError as exc:
            print(f"vram replay: error: {describe_error(exc)}", file=sys.stderr)
            return 2
        return main_suggest(args.trace, capacity, args.json, args.device, args.jobs)
    try:
        capacity = None if args.capacity is None else parse_bytes(args.capacity, "--capacity")
        html_out = None if args.html is None else check_output_path(args.html, "--html")
        configs = [""] + [c for c in args.config if c != ""]
        runs = _runs(
            args.trace, configs, capacity, args.record_use, args.device, html_out is not None
        )
    except (OSError, ValueError) as exc:
        print(f"vram replay: error: {describe_error(exc)}", file=sys.stderr)
        return 2
    rows = [run.row for run in runs]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        out = console()
        out.print(fitted(_table(rows, f"replay of {args.trace}"), out.width))
        for note in rows[0]["notes"]:
            out.print(f"note: {note}")
    if html_out is not None:
        write_html(runs, html_out, f"vram replay: {Path(args.trace).name}")
    return 0
