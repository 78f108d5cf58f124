"""Why memory ran out: the report an OutOfMemoryError carries, and ``memory_report()``.

When the caching allocator raises OutOfMemoryError it builds a ``MemoryReport`` under its
lock, from the state that failed the request (``error.report``):

- the largest free block per pool (small, large, each private pool) and stream: a block is
  reused only on its stream, so free memory elsewhere does not help;
- the bytes in free blocks of split segments (memory that can only serve requests that
  fit between live blocks: pytorch#44742, 13 GB stranded while 50 MB failed);
- the bytes held by frees still waiting on record_stream events, per stream;
- the bytes in private pools (MemPools and CUDA graphs' pools);
- the 10 largest live blocks, with their stacks when history records them;
- findings: the patterns above named in words, with the setting that addresses each;
- the allocation history, when ``_record_memory_history(enabled="all")`` keeps one, so
  that the setting that would have avoided the OOM can be found by replaying it
  (``vram.tools.explain.find_setting(error.report)``; ``vram explain`` does it for a saved
  snapshot). The replay is left to that call, to keep the raise cheap.

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
from typing import TYPE_CHECKING, Any

from .._errors import OutOfMemoryError
from .._units import format_bytes, format_size
from ._caching import DeviceCachingAllocator, register_oom_report
from ._config import SIZE_MAX
from ._history import frames_to_dicts
from ._pool import UNMAPPED
from ._registry import _allocators, allocator_for
from ._snapshot import _segment, _snapshot
from ._workspace import workspace_label

if TYPE_CHECKING:
    from ._pool import Block, Pool

__all__ = [
    "FreeBlocks",
    "LiveBlock",
    "PoolUse",
    "MemoryReport",
    "oom_report",
    "memory_report",
    "dump_on_oom",
    "format_size",
    "out_of_memory",
    "findings",
]

_LARGEST_LIVE = 10  # live blocks listed
_FRAMES_SHOWN = 3  # frames printed per live block (all are kept)
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
        f"{format_size(reserved - allocated)} is reserved by vram but unallocated. "
        "If reserved but unallocated memory is large try setting "
        "VRAM_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
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
    request: int | None = None  # with an OOM: bytes asked for
    rounded: int | None = None  # ... rounded as the allocator rounds them
    stream: int | None = None  # ... on this stream
    limit: int | None = None  # the device's memory, or what the memory fraction allows
    device_free: int | None = None  # bytes the device reported free at the OOM
    findings: list[str] = field(default_factory=list)
    avoided_by: str | None = None  # the setting a replay found (tools.explain.find_setting)
    snapshot_path: str | None = None  # where VRAM_OOM_SNAPSHOT wrote the state
    history: dict | None = field(default=None, repr=False)  # for the replay (snapshot())

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
            for frame in b.frames[:_FRAMES_SHOWN]:
                lines.append(
                    f"      {frame.get('name', '?')} ({frame.get('filename', '?')}:"
                    f"{frame.get('line', '?')})"
                )
            if not b.frames:
                lines.append("      (no stack: _record_memory_history() records them)")
        if self.findings:
            lines.append("why:")
            lines += [f"  - {text}" for text in self.findings]
        if self.avoided_by is not None:
            lines.append(f"the setting that would have avoided it: {self.avoided_by}")
        elif self.request is not None and self.history is not None:
            lines.append(
                "the setting that would have avoided it: not searched yet; "
                "vram.tools.explain.find_setting(report) replays the recorded history"
            )
        elif self.request is not None:
            lines.append(
                "the setting that would have avoided it: no history was recorded to replay "
                "(vram.memory._record_memory_history(enabled='all') keeps one)"
            )
        if self.snapshot_path:
            lines.append(f"snapshot written to {self.snapshot_path}")
        return "\n".join(lines)


def _stream(stream: int | None) -> str:
    return "-" if stream is None else f"{stream:#x}"


def _pool_name(pool: Pool) -> str:
    kind = "small" if pool.is_small else "large"
    owner = pool.owner
    if owner is None:
        return kind
    return f"{_owner_name(owner)} {kind}"


def _owner_name(owner: Any) -> str:
    pool_id = tuple(owner.id)
    what = "graph pool" if pool_id[0] > 0 and pool_id[1] == 0 else "MemPool"
    return f"{what} {pool_id}"


# ================================================================= from a live allocator
def _build(allocator: DeviceCachingAllocator) -> MemoryReport:
    """The report of ``allocator``'s state. Call under its lock."""
    config = allocator.config
    max_split = None if config.max_split_size == SIZE_MAX else config.max_split_size
    default = allocator.driver.default_stream(allocator.index)

    def shown(stream: int) -> int:  # the default stream as PyTorch's 0, as snapshots have it
        return 0 if stream == default else stream

    free_blocks, split_bytes, split_count, oversize = [], 0, 0, 0
    per_owner: dict[int, list] = {}  # id(private pool) -> [owner, reserved, allocated]
    for pool in allocator._all_pools():
        owner = pool.owner
        for stream in sorted(pool.index):
            blocks = list(pool.index[stream].blocks.values())
            if not blocks:
                continue
            sizes = [b.size for b in blocks]
            free_blocks.append(
                FreeBlocks(_pool_name(pool), shown(stream), max(sizes), sum(sizes), len(sizes))
            )
            for b in blocks:
                if not b.segment.expandable:
                    if b.is_split():
                        split_bytes += b.size
                        split_count += 1
                elif max_split is not None and b.size >= max_split:
                    oversize += b.size
            if owner is not None:
                per_owner.setdefault(id(owner), [owner, 0, 0])[1] += sum(sizes)
    free_blocks.sort(key=lambda f: (-f.largest, f.pool, f.stream))
    live = list(allocator._allocated.values())
    for b in live:
        owner = b.segment.pool.owner
        if owner is not None:
            found = per_owner.setdefault(id(owner), [owner, 0, 0])
            found[1] += b.size
            found[2] += b.size
    pending: dict[int, int] = {}
    lifetimes = allocator.lifetimes
    waiting: dict[int, Block] = {}
    for stream, queue in lifetimes.pending.items():
        for _, block in queue:
            pending[shown(stream)] = pending.get(shown(stream), 0) + block.size
            waiting[id(block)] = block
    for block, streams in lifetimes.deferred.items():
        for stream in streams:
            pending[shown(stream)] = pending.get(shown(stream), 0) + block.size
        waiting[id(block)] = block
    for block in waiting.values():
        owner = block.segment.pool.owner
        if owner is not None:
            per_owner.setdefault(id(owner), [owner, 0, 0])[1] += block.size
    largest = heapq.nlargest(_LARGEST_LIVE, live, key=lambda b: (b.size, -b.ptr))
    stats = allocator.stats
    return MemoryReport(
        device=str(allocator.device),
        reserved=allocator.total_allocated_memory,
        allocated=stats.current("allocated_bytes"),
        free_blocks=free_blocks,
        split_free_bytes=split_bytes,
        split_free_blocks=split_count,
        pending=dict(sorted(pending.items())),
        private_pools=[
            PoolUse(_owner_name(owner), reserved, allocated)
            for owner, reserved, allocated in sorted(
                per_owner.values(), key=lambda o: tuple(o[0].id)
            )
        ],
        largest_live=[_live(b, shown(b.segment.stream)) for b in largest],
        settings=config.text,
        max_split_size=max_split,
        expandable_oversize_free=oversize,
    )


def _live(block: Block, stream: int) -> LiveBlock:
    label = workspace_label(block.ptr)
    frames = (
        ({"filename": "<vram>", "line": 0, "name": label},)
        if label is not None
        else tuple(frames_to_dicts(block.context))
    )
    pool = _pool_name(block.segment.pool)
    return LiveBlock(block.ptr, block.size, block.requested_size, stream, pool, frames)


def _history(allocator: DeviceCachingAllocator) -> dict | None:
    """The allocation history and the state, for a replay (only when a trace is kept).
    Call under the lock; the trace entries are turned into dicts later, when asked."""
    history = getattr(allocator.recorder, "history", None)
    if history is None or not history.settings.trace or not history.entries:
        return None
    heads = [
        b
        for b in allocator.all_blocks()
        if b.prev is None or b.prev.state == UNMAPPED  # the first mapped block of a run
    ]
    return {
        "entries": list(history.entries),
        "default_stream": allocator.driver.default_stream(allocator.index),
        "index": allocator.index,
        "segments": [_segment(allocator, head) for head in heads if head.state != UNMAPPED],
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
    report = _build(allocator)
    default = allocator.driver.default_stream(allocator.index)
    report.request, report.rounded = size, rounded
    report.stream = 0 if stream == default else stream
    report.limit, report.device_free = limit, device_free
    report.history = _history(allocator)
    report.findings = findings(report)
    return report


def memory_report(device: object = None) -> MemoryReport:
    """The report of ``device``'s caching allocator now (the current device if None)."""
    allocator = allocator_for(device)
    if not hasattr(allocator, "_all_pools"):
        raise ValueError(f"device: {allocator.device}'s allocator has no block pools to report")
    with allocator.locked():
        report = _build(allocator)
        report.findings = findings(report)
    return report


# ============================================================================ findings
def findings(report: MemoryReport) -> list[str]:
    """The patterns in ``report`` named in words, each with what addresses it."""
    out = []
    need = report.rounded
    largest = report.largest_free
    if need is not None and report.split_free_bytes >= need > largest:
        out.append(
            f"{format_bytes(report.split_free_bytes)} is free in blocks of split segments, "
            f"but the largest free block is {format_bytes(largest)}, less than the "
            f"{format_bytes(need)} asked for: "
            "the free memory lies between live blocks (fragmentation). "
            "expandable_segments:True maps pages where they are needed instead."
        )
    elif report.split_free_bytes and report.split_free_bytes * 4 >= report.reserved:
        out.append(
            f"{format_bytes(report.split_free_bytes)} of {format_bytes(report.reserved)} "
            "reserved lies in free blocks of split segments (fragmentation); "
            "expandable_segments:True avoids most of it."
        )
    if report.pending:
        total = sum(report.pending.values())
        streams = ", ".join(_stream(s) for s in report.pending)
        out.append(
            f"{format_bytes(total)} is held by frees waiting for work on stream(s) {streams} "
            "(record_stream): a block freed there is reused only once that stream's work "
            "queued before the free has run. record_use(stream) after the last use returns "
            "it at the free instead."
        )
    if report.expandable_oversize_free and report.max_split_size is not None:
        out.append(
            f"{format_bytes(report.expandable_oversize_free)} is free in blocks of expandable "
            f"segments that are at least max_split_size ({format_bytes(report.max_split_size)}): "
            "requests below max_split_size may not use them (PyTorch's rule, which vram "
            "keeps so that replays match PyTorch), so new pages are mapped instead and "
            "reserved memory grows (pytorch#193400). With expandable_segments:True, drop "
            "max_split_size_mb."
        )
    if need is not None and report.stream is not None:
        elsewhere = [
            f for f in report.free_blocks if f.stream != report.stream and f.largest >= need
        ]
        if elsewhere:
            cached = sum(f.free_bytes for f in elsewhere)
            out.append(
                f"free blocks large enough are cached on other streams ({format_bytes(cached)}); "
                "blocks are reused only on their stream. cross_stream_reuse:True (vram) lets "
                "a stream take another's whole free segment after an event wait."
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
