"""Why an OOM happened: ``vram explain SNAPSHOT`` and ``find_setting(report)``.

    vram explain oom.pickle                 the report, and the setting that avoids the OOM
    vram explain oom.pickle --no-replay     the report alone
    vram explain snapshot.pickle --capacity 80GiB

``report_from_snapshot`` builds the report an OutOfMemoryError carries
(``vram.memory.MemoryReport``) from a saved snapshot, PyTorch's or vram's: free blocks per
pool and stream, split free blocks, pending frees (blocks in ``active_pending_free``, by
the stream of their segment: a snapshot does not say which stream's events they wait on),
private pools, the 10 largest live blocks with their frames (the state's, else those of
their alloc event in the trace), and the findings. A snapshot
written by ``VRAM_OOM_SNAPSHOT`` also holds the report made at the raise
(``vram_oom_report``): the request, the device's memory and what it had free.

``find_setting`` replays the snapshot's recorded history up to its OOM, with the failed
request in place of the ``oom`` event, on a device of the memory the process had (the
report's limit; for a PyTorch snapshot, what was reserved plus what the device had free at
the OOM, or ``capacity``), under the settings ``vram replay --suggest`` searches. It names
the change that makes the run fit, or says that none does, or that the replay fits under
the recorded settings too (then the OOM was not the allocator's doing: another process, or
memory the trace does not show).
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from pathlib import Path
from typing import Any

from .._units import format_bytes, parse_bytes
from ..memory._oom_report import FreeBlocks, LiveBlock, MemoryReport, PoolUse, findings
from ._output import describe_error
from ._snapshot_file import load_snapshot
from .suggest import Suggestion, suggest_settings

__all__ = ["report_from_snapshot", "find_setting", "main_explain"]

_MB = 1 << 20
_FAILED = -1  # the address the failed request gets in the replayed trace (never freed)


def _pool_name(segment: dict) -> str:
    kind = segment.get("segment_type", "large")
    pool_id = tuple(segment.get("segment_pool_id") or (0, 0))
    if pool_id == (0, 0):
        return kind
    what = "graph pool" if pool_id[0] > 0 and pool_id[1] == 0 else "MemPool"
    return f"{what} {pool_id} {kind}"


def _device_index(snapshot: dict, device: int | None) -> int:
    if device is not None:
        return device
    traces = snapshot.get("device_traces") or []
    traced = [i for i, t in enumerate(traces) if t]
    if traced:
        return traced[0]
    return min((s.get("device", 0) for s in snapshot.get("segments") or []), default=0)


def report_from_snapshot(source: dict | str | Path, device: int | None = None) -> MemoryReport:
    """The MemoryReport of a saved snapshot's ``device`` (the first one it has if None)."""
    snapshot = load_snapshot(source)
    index = _device_index(snapshot, device)
    settings = snapshot.get("allocator_settings") or {}
    split = settings.get("max_split_size", -1)
    max_split = None if split in (-1, None) or split >= 1 << 63 else int(split)
    free: dict[tuple[str, int], list[int]] = {}
    split_bytes = split_count = oversize = reserved = allocated = 0
    pending: dict[int, int] = {}
    pools: dict[str, list[int]] = {}
    live: list[LiveBlock] = []
    stacks = {  # address -> frames of its last alloc event (for blocks the state has none)
        e["addr"]: e.get("frames") for e in _trace(snapshot, index) if e["action"] == "alloc"
    }
    for seg in snapshot.get("segments") or []:
        if seg.get("device", index) != index:
            continue
        name, stream = _pool_name(seg), seg.get("stream", 0)
        blocks = seg.get("blocks") or []
        expandable = bool(seg.get("is_expandable"))
        reserved += seg["total_size"]
        if tuple(seg.get("segment_pool_id") or (0, 0)) != (0, 0):
            held = pools.setdefault(name.rsplit(" ", 1)[0], [0, 0])
            held[0] += seg["total_size"]
            held[1] += seg.get("allocated_size", 0)
        for block in blocks:
            state, size = block["state"], block["size"]
            if state == "inactive":
                free.setdefault((name, stream), []).append(size)
                if not expandable and len(blocks) > 1:
                    split_bytes += size
                    split_count += 1
                elif expandable and max_split is not None and size >= max_split:
                    oversize += size
            elif state == "active_pending_free":
                pending[stream] = pending.get(stream, 0) + size
            else:
                allocated += size
                live.append(
                    LiveBlock(
                        block["address"],
                        size,
                        block.get("requested_size", size),
                        stream,
                        name,
                        tuple(block.get("frames") or stacks.get(block["address"]) or ()),
                    )
                )
    report = MemoryReport(
        device=f"device {index}",
        reserved=reserved,
        allocated=allocated,
        free_blocks=sorted(
            (FreeBlocks(n, s, max(v), sum(v), len(v)) for (n, s), v in free.items()),
            key=lambda f: (-f.largest, f.pool, f.stream),
        ),
        split_free_bytes=split_bytes,
        split_free_blocks=split_count,
        pending=dict(sorted(pending.items())),
        private_pools=[PoolUse(n, r, a) for n, (r, a) in sorted(pools.items())],
        largest_live=heapq.nlargest(10, live, key=lambda b: (b.size, -b.address)),
        settings=settings.get("PYTORCH_CUDA_ALLOC_CONF") or "",
        max_split_size=max_split,
        expandable_oversize_free=oversize,
    )
    _add_request(report, snapshot, index)
    report.findings = findings(report)
    if _trace(snapshot, index):
        report.history = snapshot
    return report


def _trace(snapshot: dict, index: int) -> list[dict]:
    traces = snapshot.get("device_traces") or []
    return traces[index] if index < len(traces) else []


def _add_request(report: MemoryReport, snapshot: dict, index: int) -> None:
    """The failed request: from the report saved at the raise, else the trace's last oom."""
    saved = snapshot.get("vram_oom_report")
    if isinstance(saved, dict) and saved.get("request") is not None:
        for key in ("request", "rounded", "stream", "limit", "device_free"):
            setattr(report, key, saved.get(key))
        report.device = saved.get("device", report.device)
        return
    ooms = [e for e in _trace(snapshot, index) if e["action"] == "oom"]
    if ooms:  # PyTorch's oom entry: addr is the device's free bytes, size the request
        last = ooms[-1]
        report.request = report.rounded = last["size"]
        report.stream = last.get("stream", 0)
        report.device_free = last["addr"]
        report.limit = report.reserved + last["addr"]  # what this process could have had


def _replay_snapshot(snapshot: dict, index: int) -> dict | None:
    """The snapshot with its trace cut at the first oom, the failed request made an alloc."""
    trace = _trace(snapshot, index)
    at = next((i for i, e in enumerate(trace) if e["action"] == "oom"), None)
    if at is None:
        return None
    oom = trace[at]
    failed = {**oom, "action": "alloc", "addr": _FAILED, "frames": []}
    traces = [list(t) for t in snapshot.get("device_traces") or []]
    traces[index] = trace[:at] + [failed]
    return {**snapshot, "device_traces": traces}


def find_setting(
    report: MemoryReport | dict | str | Path,
    capacity: int | None = None,
    jobs: int | None = None,
    device: int | None = None,
) -> Suggestion | None:
    """Replay the history recorded up to the OOM under the candidate settings; the search
    (``vram.tools.suggest``), or None when there is no history or no OOM in it. Sets the
    report's ``avoided_by`` when given a report."""
    if not isinstance(report, MemoryReport):
        report = report_from_snapshot(report, device)
    snapshot = report.snapshot()
    if snapshot is None:
        return None
    index = _device_index(snapshot, device)
    replayed = _replay_snapshot(snapshot, index)
    if replayed is None:
        return None
    limit = capacity if capacity is not None else report.limit
    if limit is None:
        raise ValueError("capacity: the snapshot does not say the device's memory; give one")
    result = suggest_settings(replayed, capacity=limit, jobs=jobs, device=index)
    report.avoided_by = _verdict(result)
    return result


def _verdict(result: Suggestion) -> str:
    if result.baseline.fits:
        return (
            "none needed: replayed on a device of that size, the recorded history fits "
            "under its own settings; the OOM came from memory the trace does not show "
            "(another process, or allocations made before it began)"
        )
    fix = result.makes_it_fit
    if fix is None:
        return (
            f"none of the {result.replays} settings tried fits it: the live memory at the "
            f"peak ({format_bytes(result.lower_bound)}, each request rounded to 512 B) needs more "
            "than the device allows"
        )
    return (
        f"{fix.how} (a replay of the recorded history fits: {format_bytes(fix.peak_reserved)} peak)"
    )


def main_explain(argv: list[str] | None = None) -> int:
    """``vram explain SNAPSHOT [--device N] [--capacity BYTES] [--no-replay] [--json]``."""
    parser = argparse.ArgumentParser(
        prog="vram explain",
        description="Why memory ran out: the OOM report of a saved snapshot, and the "
        "allocator setting that would have avoided it (found by replaying its history).",
    )
    parser.add_argument("snapshot", help="a snapshot pickle (VRAM_OOM_SNAPSHOT's, PyTorch's)")
    parser.add_argument("--device", type=int, default=None, help="the device index")
    parser.add_argument("--capacity", metavar="BYTES", help="the device's memory, e.g. 80GiB")
    parser.add_argument(
        "--no-replay", action="store_true", help="do not search for the avoiding setting"
    )
    parser.add_argument("--jobs", type=int, default=None, help="replay processes")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    try:
        capacity = None if args.capacity is None else parse_bytes(args.capacity, "--capacity")
        report = report_from_snapshot(args.snapshot, args.device)
        if args.device is not None and not report.reserved and report.history is None:
            raise ValueError(f"--device: the snapshot holds nothing for device {args.device}")
        result = None
        if not args.no_replay and report.request is not None:
            result = find_setting(report, capacity, args.jobs, args.device)
    except (OSError, ValueError) as exc:
        print(f"vram explain: error: {describe_error(exc)}", file=sys.stderr)
        return 2
    if args.json:
        out: dict[str, Any] = report.as_dict()
        out["search"] = None if result is None else result.as_dict()
        print(json.dumps(out, indent=2))
        return 0
    print(report)
    return 0
