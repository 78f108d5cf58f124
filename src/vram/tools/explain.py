"""Why an OOM happened, or whether a run would fit: ``vram explain SNAPSHOT``.

    vram explain oom.pickle                 the report, and the setting that avoids the OOM
    vram explain oom.pickle --no-replay     the report alone
    vram explain run.pickle --capacity 8GiB would this run fit in 8 GiB, with which setting

``report_from_snapshot`` builds the report an OutOfMemoryError carries
(``vram.memory.MemoryReport``) from a saved snapshot, PyTorch's or vram's, with the same
code (``MemoryReport.from_segments``, from the snapshot's rows): free blocks per pool and
stream, split free blocks, pending frees (blocks in ``active_pending_free``, by the stream
of their segment: a snapshot does not say which stream's events they wait on), private
pools, the 10 largest live blocks with the program's frames (the state's, else those of
their alloc event in the trace), and the findings. A snapshot written by
``VRAM_OOM_SNAPSHOT`` also holds the report made at the raise (``vram_oom_report``): the
request, the device's memory and what it had free.

``find_setting`` replays the snapshot's recorded history up to its OOM, with the failed
request in place of the ``oom`` event, on a device of the memory the process had (the
report's limit; for a PyTorch snapshot, what was reserved plus what the device had free at
the OOM, or ``capacity``), under the settings ``vram replay --suggest`` searches. Its
verdict is the report's one piece of advice: the change that makes the run fit, or that
none does, or that the replay fits under the recorded settings too (then the OOM was not
the allocator's doing: another process, or memory the trace does not show).

``fit_verdict`` answers the question a snapshot without an OOM leaves: would the whole
recorded run fit in ``capacity`` bytes, and under which setting.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .._units import format_bytes
from ..memory import MemoryReport
from ._snapshot_file import load_snapshot
from .output import counted, wrap
from .suggest import Suggestion, suggest_settings

__all__ = [
    "report_from_snapshot",
    "find_setting",
    "fit_verdict",
    "has_oom",
    "explain_lines",
]

_FAILED = -1  # the address the failed request gets in the replayed trace (never freed)


def _device_index(snapshot: dict, device: int | None) -> int:
    if device is not None:
        return device
    traces = snapshot.get("device_traces") or []
    traced = [i for i, t in enumerate(traces) if t]
    if traced:
        return traced[0]
    return min((s.get("device", 0) for s in snapshot.get("segments") or []), default=0)


def _trace(snapshot: dict, index: int) -> list[dict]:
    traces = snapshot.get("device_traces") or []
    return traces[index] if 0 <= index < len(traces) else []


def has_oom(snapshot: dict | str | Path, device: int | None = None) -> bool:
    """True when the snapshot records an out-of-memory error (an ``oom`` event in the
    device's trace, or the report ``VRAM_OOM_SNAPSHOT`` saved)."""
    found = load_snapshot(snapshot)
    saved = found.get("vram_oom_report")
    if isinstance(saved, dict) and saved.get("request") is not None:
        return True
    return any(e["action"] == "oom" for e in _trace(found, _device_index(found, device)))


def report_from_snapshot(source: dict | str | Path, device: int | None = None) -> MemoryReport:
    """The MemoryReport of a saved snapshot's ``device`` (the first one it has if None)."""
    snapshot = load_snapshot(source)
    index = _device_index(snapshot, device)
    settings = snapshot.get("allocator_settings") or {}
    split = settings.get("max_split_size", -1)
    max_split = None if split in (-1, None) or split >= 1 << 63 else int(split)
    segments = [s for s in snapshot.get("segments") or [] if s.get("device", index) == index]
    stacks = {  # address -> frames of its last alloc event (for blocks the state has none)
        e["addr"]: e.get("frames") for e in _trace(snapshot, index) if e["action"] == "alloc"
    }
    report = MemoryReport.from_segments(
        segments,
        f"device {index}",
        settings.get("PYTORCH_CUDA_ALLOC_CONF") or "",
        max_split,
        bool(settings.get("expandable_segments")) or any(s.get("is_expandable") for s in segments),
        bool(settings.get("cross_stream_reuse")),
        stacks=stacks,
    )
    _add_request(report, snapshot, index)
    report.explain()
    if _trace(snapshot, index):
        report.history = snapshot
    return report


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
    progress: Callable[..., None] | None = None,
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
    result = suggest_settings(replayed, capacity=limit, jobs=jobs, device=index, progress=progress)
    report.avoided_by = _verdict(result, capacity is not None)
    fix = result.makes_it_fit
    report.avoided_how = [] if fix is None or result.baseline.fits else fix.how
    return result


def _verdict(result: Suggestion, given: bool) -> str:
    """The replay's advice; ``given``: the device's size is the user's ``capacity``, not
    the memory the process had at the OOM (then the verdict says which size it is for)."""
    on = f"on a device of {format_bytes(result.capacity)}: " if given else ""
    if result.baseline.fits:
        if given:
            return f"{on}none needed: the recorded history fits there under its own settings"
        return (
            "none needed: replayed on a device of that size, the recorded history fits "
            "under its own settings; the OOM came from memory the trace does not show "
            "(another process, or allocations made before it began)"
        )
    fix = result.makes_it_fit
    if fix is None:
        return (
            f"{on}none of the {result.replays} settings tried fits it: the live memory at the "
            f"peak ({format_bytes(result.lower_bound)}, each request rounded to 512 B) needs more "
            "than the device allows"
        )
    flushed = (
        f", after {counted(fix.flushes, 'cache flush', 'cache flushes')}" if fix.flushes else ""
    )
    checked = "" if fix.checked else "; a prediction no PyTorch run has checked"
    return (
        f"{on}{fix.settings or 'PyTorch defaults'} (a replay of the recorded history fits: "
        f"{format_bytes(fix.peak_reserved)} peak{flushed}{checked}):"
    )


def fit_verdict(result: Suggestion) -> list[str]:
    """Would the recorded run fit in ``result.capacity``, and under which setting: lines
    of 80 columns, then the lines that ask for the setting (never wrapped)."""
    cap = format_bytes(result.capacity)
    base, at = result.baseline, result.at_capacity
    if at is not None and not at.oom:
        flushed = (
            f", by flushing its cache {counted(at.flushes, 'time', 'times')}"
            if at.flushes
            else " without flushing"
        )
        text = (
            f"would the recorded run fit in {cap}: yes, under the recorded settings{flushed} "
            f"(they need {format_bytes(base.peak_reserved)} at their peak on a device with room)."
        )
        clean = result.fits_without_flushing
        if not at.flushes or clean is None:
            return wrap(text)
        text += f" {clean.settings or 'PyTorch defaults'} fits without flushing:"
        return [*wrap(text), *(f"    {line}" for line in clean.how)]
    fix = result.makes_it_fit
    if fix is None:
        return wrap(
            f"would the recorded run fit in {cap}: no; none of the {result.replays} settings "
            f"tried fits it (the live memory alone peaks at {format_bytes(result.lower_bound)})."
        )
    flushed = (
        f", after {counted(fix.flushes, 'cache flush', 'cache flushes')}" if fix.flushes else ""
    )
    checked = "" if fix.checked else "; a prediction no PyTorch run has checked"
    text = (
        f"would the recorded run fit in {cap}: not under the recorded settings (they need "
        f"{format_bytes(base.peak_reserved)}); yes with {fix.settings or 'PyTorch defaults'} "
        f"({format_bytes(fix.peak_reserved)} at its peak{flushed}{checked}):"
    )
    return [*wrap(text), *(f"    {line}" for line in fix.how)]


def explain_lines(report: MemoryReport, oom: bool, fit: list[str] | None = None) -> list[str]:
    """What ``vram explain`` prints: the report, whether there was an OOM at all, and
    whether the run would fit (``fit_verdict``)."""
    lines = str(report).split("\n")
    if not oom:
        lines.insert(1, "  there was no out-of-memory error: the snapshot records none")
    return lines + list(fit or ())
