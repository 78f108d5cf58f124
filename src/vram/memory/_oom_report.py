"""Why memory ran out: the report an OutOfMemoryError carries, and ``memory_report()``.

When the caching allocator raises OutOfMemoryError it builds a ``MemoryReport`` under its
lock, from the state that failed the request (``error.report``):

- the largest free block per pool (small, large, each private pool) and stream: a block is
  reused only on its stream, so free memory elsewhere does not help;
- the bytes in free blocks of split segments (memory that can only serve requests that
  fit between live blocks: pytorch#44742, 13 GB stranded while 50 MB failed);
- the bytes held by frees still waiting on record_stream events, per stream;
- the bytes in private pools (MemPools and CUDA graphs' pools);
- the 10 largest live blocks, with their stacks when history records them (the frames of
  the program, not vram's own);
- findings: the patterns above named in words;
- the allocation history, when ``_record_memory_history(enabled="all")`` keeps one, so
  that the setting that would have avoided the OOM can be found by replaying it
  (``vram.tools.explain.find_setting(error.report)``; ``vram explain`` does it for a saved
  snapshot). The replay is left to that call, to keep the raise cheap.

Advice has one source: a replay's verdict (``avoided_by``) when one was made, else the
settings worth trying for the findings, given the settings in force (never one that is on
already), said to be unchecked. So the report never offers a setting its own replay found
useless.

The report is built one way, from the rows a snapshot has (``MemoryReport.from_segments``:
the ``segments`` of PyTorch's format): at an OOM from the allocator's own rows
(``_snapshot.segment_rows``), and by ``vram explain`` from a saved snapshot's. What only a
live allocator knows (which stream's events a pending free waits on) is passed beside them.

``VRAM_OOM_SNAPSHOT=PATH`` (or the allocator setting ``oom_snapshot:PATH``) also writes a
snapshot (PyTorch's format, with the report under ``vram_oom_report``) when an OOM is
raised: to PATH, or into PATH when it is a folder. ``vram explain PATH`` reads it.

``memory_report(device)`` builds the same report for a device now, without an OOM.
"""

from __future__ import annotations

import heapq
import os
import pickle
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePath
from typing import Any

from .._errors import OutOfMemoryError
from .._units import format_bytes, format_size
from ._caching import DeviceCachingAllocator, register_oom_report
from ._config import SIZE_MAX
from ._history import frames_to_dicts
from ._registry import _allocators, allocator_for
from ._snapshot import _snapshot, segment_rows

__all__ = [
    "FreeBlocks",
    "LiveBlock",
    "PoolUse",
    "MemoryReport",
    "oom_report",
    "memory_report",
    "report_of",
    "dump_on_oom",
    "format_size",
    "out_of_memory",
    "findings",
    "advice",
    "program_frames",
]

_LARGEST_LIVE = 10  # live blocks listed
_FRAMES_SHOWN = 4  # frames of the program printed per live block (all are kept)
_PACKAGE = Path(__file__).resolve().parents[1]  # vram's own folder: its frames are not shown
_dumps = 0  # snapshots written on OOM by this process (numbers the files in a folder)


def out_of_memory(
    allocator: DeviceCachingAllocator, size: int, stream: int
) -> tuple[OutOfMemoryError, tuple]:
    """The OutOfMemoryError for a failed request, with PyTorch's message, and what the
    OOM observers are told: (device, alloc size, device limit, device free)."""
    rounded = allocator.round_size(size)
    alloc_size = allocator.allocation_size(rounded)
    free, total = allocator.driver.mem_get_info(allocator.index)
    allocated = allocator.stats.current("allocated_bytes")
    reserved = allocator.stats.reserved_bytes[0].current
    limit = allocator.allowed_memory_maximum
    allowed = "" if limit is None else f"{format_size(limit)} allowed; "
    error = OutOfMemoryError(
        f"{allocator.device.type.upper()} out of memory. Tried to allocate "
        f"{format_size(alloc_size)}. {allocator.device} has a total capacity of "
        f"{format_size(total)} of which {format_size(free)} is free. {allowed}"
        f"Of the allocated memory {format_size(allocated)} is allocated by vram, and "
        f"{format_size(reserved - allocated)} is reserved by vram but unallocated."
        + (
            ""
            if allocator.config.expandable_segments
            else " If reserved but unallocated memory is large try setting "
            "VRAM_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
        )
    )
    cap = total if limit is None else limit
    error.report = oom_report(allocator, size, rounded, stream, cap, free)  # why (below)
    return error, (allocator.index, alloc_size, cap, free)


@dataclass(frozen=True)
class FreeBlocks:
    """The free (cached) blocks of one pool and stream."""

    pool: str  # "large", "small", "MemPool (0, 1) large", "graph pool (1, 0) small"
    stream: int
    largest: int  # bytes of the largest free block
    free_bytes: int
    count: int


@dataclass(frozen=True)
class LiveBlock:
    """A block handed out to a user."""

    address: int
    size: int  # bytes of the block
    requested: int  # bytes asked for
    stream: int
    pool: str
    frames: tuple = ()  # PyTorch's {filename, line, name} dicts, innermost first


@dataclass(frozen=True)
class PoolUse:
    """What a private pool (a MemPool, or a CUDA graph's pool) holds."""

    pool: str
    reserved: int
    allocated: int


@dataclass
class MemoryReport:
    """The state of one device's caching allocator, explained (see the module docstring)."""

    device: str
    reserved: int
    allocated: int
    free_blocks: list[FreeBlocks]  # largest free block per pool and stream
    split_free_bytes: int  # free blocks of split segments (not expandable)
    split_free_blocks: int
    pending: dict[int, int]  # stream -> bytes of frees waiting on events recorded there
    private_pools: list[PoolUse]
    largest_live: list[LiveBlock]
    settings: str  # the allocator settings string
    max_split_size: int | None = None  # bytes; None: no limit
    expandable_oversize_free: int = 0  # free expandable blocks >= max_split_size
    expandable: bool = False  # expandable_segments was on
    cross_stream_reuse: bool = False  # vram's cross_stream_reuse was on
    request: int | None = None  # with an OOM: bytes asked for
    rounded: int | None = None  # ... rounded as the allocator rounds them
    stream: int | None = None  # ... on this stream
    limit: int | None = None  # the device's memory, or what the memory fraction allows
    device_free: int | None = None  # bytes the device reported free at the OOM
    findings: list[str] = field(default_factory=list)  # the patterns, in words
    advice: list[str] = field(default_factory=list)  # settings worth trying, unchecked
    avoided_by: str | None = None  # the verdict of a replay (tools.explain.find_setting)
    avoided_how: list[str] = field(default_factory=list)  # ... the lines that ask for it
    snapshot_path: str | None = None  # where VRAM_OOM_SNAPSHOT wrote the state
    history: dict | None = field(default=None, repr=False)  # for the replay (snapshot())

    @classmethod
    def from_segments(
        cls,
        segments: list[dict],
        device: str,
        settings: str = "",
        max_split_size: int | None = None,
        expandable: bool = False,
        cross_stream_reuse: bool = False,
        pending: dict[int, int] | None = None,
        stacks: dict[int, Any] | None = None,
    ) -> MemoryReport:
        """The report of one device's ``segments`` (a snapshot's rows, PyTorch's format).

        ``pending``: bytes of pending frees per stream whose events they wait on (a live
        allocator knows it; else they count on their segment's stream, all a snapshot
        says). ``stacks``: address -> frames, for live blocks whose row has none (the
        frames of their alloc event in a trace). Findings are left to ``explain()``.
        """
        free: dict[tuple[str, int], list[int]] = {}
        split_bytes = split_count = oversize = reserved = allocated = 0
        found_pending: dict[int, int] = {}
        pools: dict[str, list[int]] = {}
        live: list[LiveBlock] = []
        for seg in segments:
            name, stream = _pool_name(seg), seg.get("stream", 0)
            blocks = seg.get("blocks") or []
            in_expandable = bool(seg.get("is_expandable"))
            reserved += seg["total_size"]
            if tuple(seg.get("segment_pool_id") or (0, 0)) != (0, 0):
                held = pools.setdefault(name.rsplit(" ", 1)[0], [0, 0])
                held[0] += seg["total_size"]
                held[1] += seg.get("allocated_size", 0)
            for block in blocks:
                state, size = block["state"], block["size"]
                if state == "inactive":
                    free.setdefault((name, stream), []).append(size)
                    if not in_expandable and len(blocks) > 1:
                        split_bytes += size
                        split_count += 1
                    elif in_expandable and max_split_size is not None and size >= max_split_size:
                        oversize += size
                elif state == "active_pending_free":
                    found_pending[stream] = found_pending.get(stream, 0) + size
                else:
                    allocated += size
                    frames = block.get("frames") or (stacks or {}).get(block["address"]) or ()
                    live.append(
                        LiveBlock(
                            block["address"],
                            size,
                            block.get("requested_size", size),
                            stream,
                            name,
                            tuple(frames),
                        )
                    )
        return cls(
            device=device,
            reserved=reserved,
            allocated=allocated,
            free_blocks=sorted(
                (FreeBlocks(n, s, max(v), sum(v), len(v)) for (n, s), v in free.items()),
                key=lambda f: (-f.largest, f.pool, f.stream),
            ),
            split_free_bytes=split_bytes,
            split_free_blocks=split_count,
            pending=dict(sorted((found_pending if pending is None else pending).items())),
            private_pools=[PoolUse(n, r, a) for n, (r, a) in sorted(pools.items())],
            largest_live=heapq.nlargest(_LARGEST_LIVE, live, key=lambda b: (b.size, -b.address)),
            settings=settings,
            max_split_size=max_split_size,
            expandable_oversize_free=oversize,
            expandable=expandable,
            cross_stream_reuse=cross_stream_reuse,
        )

    def explain(self) -> MemoryReport:
        """Fill in ``findings`` and ``advice`` from what the report holds now (after the
        failed request is set, if any); returns the report."""
        self.findings = findings(self)
        self.advice = advice(self)
        return self

    @property
    def largest_free(self) -> int:
        return max((f.largest for f in self.free_blocks), default=0)

    def snapshot(self) -> dict | None:
        """The recorded history as a snapshot dict (segments, the device trace ending at
        the OOM, settings) for a replay; None when no history was recorded."""
        if self.history is None:
            return None
        found = self.history
        if "device_traces" not in found:  # made at the raise: entries still as tuples
            default = found["default_stream"]
            trace = [
                {
                    "action": action,
                    "addr": addr,
                    "frames": frames_to_dicts(frames),
                    "size": size,
                    "stream": 0 if stream == default else stream,
                    "time_us": time_us,
                    "compile_context": "N/A",
                    "user_metadata": "",
                }
                for action, addr, size, stream, time_us, frames in found["entries"]
            ]
            traces: list[list[dict]] = [[] for _ in range(found["index"] + 1)]
            traces[found["index"]] = trace
            self.history = found = {
                "segments": found["segments"],
                "device_traces": traces,
                "allocator_settings": found["allocator_settings"],
            }
        return found

    def as_dict(self) -> dict[str, Any]:
        """Plain data (what a snapshot file stores under ``vram_oom_report``)."""
        out = asdict(self)
        del out["history"]
        out["pending"] = [[stream, nbytes] for stream, nbytes in self.pending.items()]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> MemoryReport:
        """The report ``as_dict`` wrote."""
        kept = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        kept["free_blocks"] = [FreeBlocks(**f) for f in data.get("free_blocks", ())]
        kept["private_pools"] = [PoolUse(**p) for p in data.get("private_pools", ())]
        kept["largest_live"] = [
            LiveBlock(**{**b, "frames": tuple(b.get("frames") or ())})
            for b in data.get("largest_live", ())
        ]
        kept["pending"] = {int(s): int(n) for s, n in data.get("pending", ())}
        kept["findings"] = list(data.get("findings", ()))
        kept["advice"] = list(data.get("advice", ()))
        kept["avoided_how"] = list(data.get("avoided_how", ()))
        return cls(**kept)

    def __str__(self) -> str:
        lines = []
        if self.request is not None:
            lines.append(
                f"out of memory on {self.device}: {format_bytes(self.request)} requested "
                f"({format_bytes(self.rounded)} rounded) on stream {_stream(self.stream)}"
            )
            if self.limit is not None:
                free = (
                    "" if self.device_free is None else f", {format_bytes(self.device_free)} free"
                )
                lines.append(f"  device memory allowed: {format_bytes(self.limit)}{free}")
        else:
            lines.append(f"memory of {self.device}")
        lines.append(
            f"  reserved {format_bytes(self.reserved)}, allocated {format_bytes(self.allocated)}: "
            f"{format_bytes(self.reserved - self.allocated)} reserved but not allocated"
        )
        if self.settings:
            lines.append(f"  settings: {self.settings}")
        lines.append("largest free block per pool and stream:")
        if not self.free_blocks:
            lines.append("  (no free blocks)")
        for f in self.free_blocks:
            lines.append(
                f"  {f.pool:<26} stream {_stream(f.stream):<14} {format_bytes(f.largest):>11}"
                f"   ({format_bytes(f.free_bytes)} free in {f.count} blocks)"
            )
        lines.append(
            f"free blocks of split segments: {format_bytes(self.split_free_bytes)} in "
            f"{self.split_free_blocks} blocks"
        )
        if self.pending:
            held = ", ".join(
                f"stream {_stream(s)}: {format_bytes(n)}" for s, n in self.pending.items()
            )
            lines.append(f"frees waiting on stream events: {held}")
        else:
            lines.append("frees waiting on stream events: none")
        for p in self.private_pools:
            lines.append(
                f"private pool {p.pool}: {format_bytes(p.reserved)} reserved, "
                f"{format_bytes(p.allocated)} allocated"
            )
        lines.append(f"{len(self.largest_live)} largest live blocks:")
        for b in self.largest_live:
            lines.append(
                f"  {format_bytes(b.size):>11} at {b.address:#x}  stream {_stream(b.stream)}  "
                f"{b.pool}  (requested {format_bytes(b.requested)})"
            )
            lines += _frame_lines(b.frames)
        if self.findings:
            lines.append("why:")
            lines += [f"  - {text}" for text in self.findings]
        lines += self._advice_lines()
        if self.snapshot_path:
            lines.append(f"snapshot written to {self.snapshot_path}")
        return "\n".join(lines)

    def _advice_lines(self) -> list[str]:
        """The one source of advice: the replay's verdict, else the unchecked settings."""
        if self.avoided_by is not None:
            lines = [f"the setting that would have avoided it: {self.avoided_by}"]
            return lines + [f"    {line}" for line in self.avoided_how]
        lines = []
        if self.request is not None and self.history is not None:
            lines.append(
                "the setting that would have avoided it: not searched yet; "
                "vram.tools.explain.find_setting(report) replays the recorded history"
            )
        elif self.request is not None:
            lines.append(
                "the setting that would have avoided it: no history was recorded to replay "
                "(vram.memory._record_memory_history(enabled='all') keeps one)"
            )
        if self.advice:
            lines.append("worth trying (not checked by a replay):")
            lines += [f"  - {text}" for text in self.advice]
        return lines


def program_frames(frames: tuple | list) -> tuple[list[dict], int]:
    """The frames of the program, innermost first, without vram's own (its allocation
    functions: a frame whose file lies in a folder ``vram`` that holds one of vram's
    modules, here or on the machine that recorded it); and how many of vram's were left
    out. Labels such as a library workspace's (``<vram>``) are kept."""
    own = _own_names()
    kept, left = [], 0
    for frame in frames:
        parts = PurePath(str(frame.get("filename", ""))).parts
        mine = any(
            part == "vram" and parts[i + 1].removesuffix(".py") in own
            for i, part in enumerate(parts[:-1])
        )
        if mine:
            left += 1
        else:
            kept.append(frame)
    return kept, left


_OWN: set[str] = set()


def _own_names() -> set[str]:
    if not _OWN:
        _OWN.update(p.name.removesuffix(".py") for p in _PACKAGE.iterdir())
    return _OWN


def _frame_lines(frames: tuple) -> list[str]:
    if not frames:
        return ["      (no stack: _record_memory_history() records them)"]
    kept, left = program_frames(frames)
    lines = [
        f"      {f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})"
        for f in kept[:_FRAMES_SHOWN]
    ]
    more = len(kept) - _FRAMES_SHOWN
    if more > 0:
        lines.append(f"      ... {more} more frames")
    if not kept:
        lines.append(f"      ({left} frames, all of them vram's own)")
    return lines


def _stream(stream: int | None) -> str:
    return "-" if stream is None else f"{stream:#x}"


def _pool_name(segment: dict) -> str:
    """A segment row's pool: "large", "small", "MemPool (0, 1) large", "graph pool ..."."""
    kind = segment.get("segment_type", "large")
    pool_id = tuple(segment.get("segment_pool_id") or (0, 0))
    if pool_id == (0, 0):
        return kind
    what = "graph pool" if pool_id[0] > 0 and pool_id[1] == 0 else "MemPool"
    return f"{what} {pool_id} {kind}"


# ================================================================= from a live allocator
def _build(allocator: DeviceCachingAllocator, rows: list[dict]) -> MemoryReport:
    """The report of ``allocator``'s state from its snapshot ``rows``. Call under its lock."""
    config = allocator.config
    default = allocator.driver.default_stream(allocator.index)
    pending: dict[int, int] = {}  # by the stream whose events each pending free waits on
    lifetimes = allocator.lifetimes
    for stream, queue in lifetimes.pending.items():
        shown = 0 if stream == default else stream
        for _, block in queue:
            pending[shown] = pending.get(shown, 0) + block.size
    for block, streams in lifetimes.deferred.items():
        for stream in streams:
            shown = 0 if stream == default else stream
            pending[shown] = pending.get(shown, 0) + block.size
    return MemoryReport.from_segments(
        rows,
        str(allocator.device),
        config.text,
        None if config.max_split_size == SIZE_MAX else config.max_split_size,
        config.expandable_segments,
        config.cross_stream_reuse,
        pending,
    )


def _history(allocator: DeviceCachingAllocator, rows: list[dict]) -> dict | None:
    """The allocation history and the state, for a replay (only when a trace is kept).
    Call under the lock; the trace entries are turned into dicts later, when asked."""
    history = getattr(allocator.recorder, "history", None)
    if history is None or not history.settings.trace or not history.entries:
        return None
    return {
        "entries": list(history.entries),
        "default_stream": allocator.driver.default_stream(allocator.index),
        "index": allocator.index,
        "segments": rows,
        "allocator_settings": allocator.config.settings(),
    }


def oom_report(
    allocator: DeviceCachingAllocator,
    size: int,
    rounded: int,
    stream: int,
    limit: int,
    device_free: int,
) -> MemoryReport:
    """The report of an OutOfMemoryError (the allocator calls it under its lock)."""
    rows = segment_rows(allocator)
    report = _build(allocator, rows)
    default = allocator.driver.default_stream(allocator.index)
    report.request, report.rounded = size, rounded
    report.stream = 0 if stream == default else stream
    report.limit, report.device_free = limit, device_free
    report.history = _history(allocator, rows)
    return report.explain()


def memory_report(device: object = None) -> MemoryReport:
    """The report of ``device``'s caching allocator now (the current device if None)."""
    allocator = allocator_for(device)
    if not hasattr(allocator, "_all_pools"):
        raise ValueError(f"device: {allocator.device}'s allocator has no block pools to report")
    return report_of(allocator)


def report_of(allocator: DeviceCachingAllocator) -> MemoryReport:
    """The report of ``allocator`` (a caching allocator of one's own, such as a replay's)."""
    with allocator.locked():
        report = _build(allocator, segment_rows(allocator))
    return report.explain()


# ============================================================================ findings
def findings(report: MemoryReport) -> list[str]:
    """The patterns in ``report`` named in words (what to try is ``advice``'s)."""
    out = []
    need = report.rounded
    largest = report.largest_free
    if need is not None and report.split_free_bytes >= need > largest:
        out.append(
            f"{format_bytes(report.split_free_bytes)} is free in blocks of split segments, "
            f"but the largest free block is {format_bytes(largest)}, less than the "
            f"{format_bytes(need)} asked for: "
            "the free memory lies between live blocks (fragmentation)."
        )
    elif report.split_free_bytes and report.split_free_bytes * 4 >= report.reserved:
        out.append(
            f"{format_bytes(report.split_free_bytes)} of {format_bytes(report.reserved)} "
            "reserved lies in free blocks of split segments (fragmentation)."
        )
    if report.pending:
        total = sum(report.pending.values())
        streams = ", ".join(_stream(s) for s in report.pending)
        out.append(
            f"{format_bytes(total)} is held by frees waiting for work on stream(s) {streams} "
            "(record_stream): a block freed there is reused only once that stream's work "
            "queued before the free has run."
        )
    if report.expandable_oversize_free and report.max_split_size is not None:
        out.append(
            f"{format_bytes(report.expandable_oversize_free)} is free in blocks of expandable "
            f"segments that are at least max_split_size ({format_bytes(report.max_split_size)}): "
            "requests below max_split_size may not use them (PyTorch's rule, which vram "
            "keeps so that replays match PyTorch), so new pages are mapped instead and "
            "reserved memory grows (pytorch#193400)."
        )
    if need is not None and report.stream is not None and _elsewhere(report):
        cached = sum(f.free_bytes for f in _elsewhere(report))
        out.append(
            f"free blocks large enough are cached on other streams ({format_bytes(cached)}); "
            "blocks are reused only on their stream."
        )
    held = sum(p.reserved for p in report.private_pools)
    if held:
        out.append(
            f"{format_bytes(held)} is held by private pools (MemPools, CUDA graphs): only their "
            "users get it; it returns to the device when the pool is gone and "
            "empty_cache() runs."
        )
    if need is not None and report.limit is not None and report.reserved + need <= report.limit:
        if report.device_free is not None and report.device_free < need:
            out.append(
                f"vram reserves {format_bytes(report.reserved)} of the "
                f"{format_bytes(report.limit)} allowed, "
                f"but the device has only {format_bytes(report.device_free)} free: other processes "
                "(or other allocators) hold the rest."
            )
    if need is not None and report.reserved - report.allocated < need and not out:
        out.append(
            f"live allocations hold {format_bytes(report.allocated)} of "
            f"{format_bytes(report.reserved)} "
            "reserved: the program needs more memory than the device allows (no setting "
            "frees live memory)."
        )
    return out


def _elsewhere(report: MemoryReport) -> list[FreeBlocks]:
    need = report.rounded or 0
    return [f for f in report.free_blocks if f.stream != report.stream and f.largest >= need]


def advice(report: MemoryReport) -> list[str]:
    """The settings worth trying for ``report``'s findings, given the settings in force
    (none that is on already): unchecked, for when no replay can check them."""
    out = []
    need = report.rounded
    fragmented = report.split_free_bytes and (
        (need is not None and report.split_free_bytes >= need > report.largest_free)
        or report.split_free_bytes * 4 >= report.reserved
    )
    if fragmented and not report.expandable:
        out.append(
            "expandable_segments:True: segments grow page by page where needed, instead of "
            "being split between live blocks."
        )
    if report.pending:
        out.append(
            "record_use(stream) after the last use on the other stream (vram's, "
            "pytorch#181191): the block returns to the pool at its free, the next owner's "
            "stream waits."
        )
    if report.expandable_oversize_free and report.max_split_size is not None:
        out.append(
            "with expandable_segments:True, drop max_split_size_mb: the oversize free blocks "
            "then serve every request."
        )
    if need is not None and report.stream is not None and _elsewhere(report):
        if not report.cross_stream_reuse:
            out.append(
                "cross_stream_reuse:True (vram's): a stream takes another's whole free "
                "segment after an event wait."
            )
    return out


# ======================================================================== dump on OOM
def dump_on_oom(allocator: DeviceCachingAllocator, error: BaseException) -> None:
    """Write a snapshot if ``oom_snapshot`` or VRAM_OOM_SNAPSHOT names a path. Called by
    malloc after the lock is let go; never raises (it warns if it cannot write)."""
    global _dumps
    path = getattr(allocator.config, "oom_snapshot", "") or os.environ.get("VRAM_OOM_SNAPSHOT")
    if not path:
        return
    if _allocators.get(allocator.device) is not allocator:
        return  # not a device's allocator (a replay's, or a test's own): nothing to dump
    try:
        if os.path.isdir(path):
            _dumps += 1
            device = str(allocator.device).replace(":", "")
            path = os.path.join(path, f"oom_{device}_{os.getpid()}_{_dumps}.pickle")
        snapshot = _snapshot(allocator.device)
        report = getattr(error, "report", None)
        if report is not None:
            snapshot["vram_oom_report"] = report.as_dict()
            report.snapshot_path = path
        with open(path, "wb") as f:
            pickle.dump(snapshot, f, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # the OOM itself is what the program must see
        warnings.warn(
            f"VRAM_OOM_SNAPSHOT: could not write {path}: {exc}", RuntimeWarning, stacklevel=3
        )
        return
    if hasattr(error, "add_note"):
        error.add_note(f"memory snapshot written to {path} (vram explain {path})")


register_oom_report(out_of_memory, dump_on_oom)  # the allocator words its OOM with these
