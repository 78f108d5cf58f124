"""Which allocator settings suit a trace: ``vram replay TRACE --suggest``.

    vram replay train.pickle --suggest --capacity 24GiB
    vram replay train.pickle --suggest --json

Every candidate is a real replay of the trace (``vram.tools.replay``) under its settings,
on top of the settings the trace was recorded with. The search:

1. The recorded settings (the baseline) and the lower bound: the peak of the bytes the
   program holds, each request rounded up to 512 B (``replay.live_peak``). No setting can
   reserve less at its peak; the gap between the baseline and the bound is what any
   setting could recover at most.
2. One knob at a time, the settings that matter: ``max_split_size_mb`` (powers of two
   from 32 MiB up to the largest segment the trace made), ``roundup_power2_divisions``
   (2, 4, 8, 16), ``expandable_segments`` with PyTorch's 20 MiB page and with vram's smaller
   pages (``expandable_page_mb``), ``garbage_collection_threshold`` with a memory fraction
   (PyTorch collects only under one), and, when the trace has frees that waited on
   record_stream events, ``record_use`` in their place (and vram's ``cross_stream_reuse``
   when it has several streams).
3. The best value of each knob that helped, combined in pairs.

Candidates run in parallel, one process each (``jobs``), and are pruned: a replay stops
as soon as it has reserved more than the baseline's peak (it cannot be a suggestion). So
the result does not depend on the order the processes finish in.

With ``capacity`` each replay runs on a device of that size (the allocator's
release-and-retry included); a candidate fits when it does not run out of memory. The
report says whether the recorded settings fit, which candidates do, and the change that
makes the run fit: the fitting candidate that reserves least, single knobs and PyTorch's
own settings first.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from .._units import format_bytes
from ._output import console, describe_error, fitted
from .replay import (
    Pruned,
    _device_capacity,
    _read_trace,
    _replay_one,
    _Trace,
    live_peak,
    load_snapshot,
)

__all__ = ["Candidate", "Suggestion", "suggest_settings", "main_suggest"]

_MB = 1 << 20
_SPLIT_MB = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # max_split_size_mb values tried
_DIVISIONS = (2, 4, 8, 16)  # roundup_power2_divisions values tried
_PAGES_MB = (2, 8)  # vram's expandable_page_mb values tried besides PyTorch's 20
_GC_THRESHOLDS = (0.6, 0.8)
_PARALLEL_EVENTS = 20_000  # below this many requests a trace is replayed in this process


@dataclass
class Candidate:
    """One replayed setting: what it reserves, what it recovers, whether it fits."""

    config: str  # the settings string tried (replay's own keys included)
    knob: str  # max_split, rp2, expandable, gc, record_use, cross_stream, combined, recorded
    pytorch: bool  # PyTorch 2.x accepts it as it is (else a vram setting)
    peak_reserved: int | None = None  # None when pruned
    peak_allocated: int | None = None
    device_malloc: int | None = None
    oom: bool = False
    pruned: bool = False  # stopped early: it reserved more than the baseline's peak
    pruned_at: int | None = None  # bytes reserved when it stopped
    recovers: int = 0  # bytes of peak reserved below the baseline's
    recovers_share: float | None = None  # of what any setting could recover at most
    fits: bool | None = None  # with a capacity: it ran without running out of memory
    cap: int | None = None  # bytes its memory limit allows (when no capacity was given)

    @property
    def how(self) -> str:
        """How to ask for it: the allocator string, and the memory fraction call if any."""
        parts, calls = [], []
        for part in self.config.split(","):
            key, _, value = part.partition(":")
            if key == "memory_limit" and self.cap is not None:
                calls.append(f"set_per_process_memory_fraction allowing {format_bytes(self.cap)}")
            elif key == "memory_limit":
                calls.append("set_per_process_memory_fraction(1.0)")
            elif part:
                parts.append(part)
        return " + ".join(filter(None, [",".join(parts), *calls])) or "(recorded settings)"


@dataclass
class Suggestion:
    """The result of a search: the baseline, the lower bound, every candidate ranked."""

    trace: str
    capacity: int | None
    lower_bound: int  # peak of live bytes, each request rounded to 512 B
    baseline: Candidate
    candidates: list[Candidate] = field(default_factory=list)  # ranked, best first
    replays: int = 0

    @property
    def best(self) -> Candidate | None:
        found = [c for c in self.candidates if not c.pruned and not c.oom]
        return found[0] if found else None

    @property
    def makes_it_fit(self) -> Candidate | None:
        """With a capacity: the change that makes the run fit (None if it fits already or
        nothing does): single knobs before combinations, PyTorch's settings before vram's,
        then the least reserved."""
        if self.capacity is None or self.baseline.fits:
            return None
        fitting = [c for c in self.candidates if c.fits]
        if not fitting:
            return None
        return min(fitting, key=lambda c: (c.knob == "combined", not c.pytorch, c.peak_reserved))

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for row, c in zip(
            [out["baseline"], *out["candidates"]], [self.baseline, *self.candidates], strict=True
        ):
            row["how"] = c.how
        best, fit = self.best, self.makes_it_fit
        out["best"] = None if best is None else best.config
        out["makes_it_fit"] = None if fit is None else fit.config
        out["recoverable"] = max(self.baseline.peak_reserved - self.lower_bound, 0)  # type: ignore[operator]
        return out


# ======================================================================== candidates
def _knob_candidates(
    trace: _Trace, baseline_peak: int, device_total: int, whole_device: bool
) -> list[Candidate]:
    """Step 2: one knob at a time. Garbage collection runs under a memory fraction: the
    whole device when its capacity was given, else a cap at the baseline's peak."""
    out: list[Candidate] = []
    largest = max((size for _, size in trace.recorded_segments), default=0)
    largest = max(largest, max((op[2] for op in trace.ops if op[0] == 0), default=0))
    for mb in _SPLIT_MB:
        if mb * _MB <= 2 * largest:
            out.append(Candidate(f"max_split_size_mb:{mb}", "max_split", True))
    for divisions in _DIVISIONS:
        out.append(Candidate(f"roundup_power2_divisions:{divisions}", "rp2", True))
    out.append(Candidate("expandable_segments:True", "expandable", True))
    for page in _PAGES_MB:
        text = f"expandable_segments:True,expandable_page_mb:{page}"
        out.append(Candidate(text, "expandable", False))
    limit = device_total if whole_device else baseline_peak
    for threshold in _GC_THRESHOLDS:
        text = f"garbage_collection_threshold:{threshold},memory_limit:{limit}"
        out.append(Candidate(text, "gc", True, cap=None if whole_device else limit))
    if any(op[0] == 2 for op in trace.ops):  # frees that waited on record_stream events
        out.append(Candidate("record_use:True", "record_use", False))
    if len({op[3] for op in trace.ops if op[0] == 0}) > 1:
        out.append(Candidate("cross_stream_reuse:True", "cross_stream", False))
    return out


def _combinations(done: list[Candidate], baseline_peak: int) -> list[Candidate]:
    """Step 3: the best value of each knob that lowered the peak, in pairs."""
    best: dict[str, Candidate] = {}
    for c in done:
        if c.pruned or c.oom or c.peak_reserved is None or c.peak_reserved >= baseline_peak:
            continue
        if c.knob not in best or c.peak_reserved < best[c.knob].peak_reserved:  # type: ignore[operator]
            best[c.knob] = c
    knobs = sorted(best)
    out = []
    for i, a in enumerate(knobs):
        for b in knobs[i + 1 :]:
            if {a, b} in ({"rp2", "expandable"}, {"cross_stream", "expandable"}):
                # expandable segments split at 512 B (rounding only adds waste), and
                # cross_stream_reuse moves whole device allocations only (none there)
                continue
            first, second = best[a], best[b]
            text = _join(first.config, second.config)
            pytorch = first.pytorch and second.pytorch
            out.append(Candidate(text, "combined", pytorch, cap=first.cap or second.cap))
    return out


def _join(a: str, b: str) -> str:
    """Two settings strings as one, the memory limit last."""
    parts = [p for p in (a + "," + b).split(",") if p]
    own = [p for p in parts if p.startswith("memory_limit:")]
    return ",".join([p for p in parts if not p.startswith("memory_limit:")] + own[:1])


# ======================================================================== replaying
_worker_trace: _Trace | None = None


def _init_worker(trace: _Trace) -> None:
    global _worker_trace
    _worker_trace = trace


def _replay_candidate(
    text: str, capacity: int | None, bound: int | None, trace: _Trace | None = None
) -> dict[str, Any]:
    """Replay one candidate (in a worker process, or here with ``trace``)."""
    found = trace if trace is not None else _worker_trace
    assert found is not None, "the worker has no trace"
    try:
        row = _replay_one(found, text, capacity, False, bound=bound).row
    except Pruned as stop:
        return {"pruned": True, "pruned_at": stop.reserved}
    return {
        "pruned": False,
        "peak_reserved": row["peak_reserved"],
        "peak_allocated": row["peak_allocated"],
        "device_malloc": row["device_malloc"],
        "oom": row["oom"],
    }


class _Runner:
    """Replays candidates: in worker processes when there is work for more than one."""

    def __init__(self, trace: _Trace, jobs: int) -> None:
        self.trace = trace
        self.jobs = jobs
        self.pool: ProcessPoolExecutor | None = None
        self.replays = 0

    def __enter__(self) -> _Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def run(
        self,
        candidates: list[Candidate],
        capacity: int | None,
        bound: int | None,
        advance: Callable[[int], None],
    ) -> None:
        """Replay each candidate and fill in its results."""
        self.replays += len(candidates)
        texts = [c.config for c in candidates]
        if self.jobs <= 1 or len(candidates) <= 1:
            results: Iterable[dict] = (
                _replay_candidate(t, capacity, bound, self.trace) for t in texts
            )
        else:
            if self.pool is None:
                method = "fork" if "fork" in _start_methods() else "spawn"
                self.pool = ProcessPoolExecutor(
                    max_workers=self.jobs,
                    mp_context=get_context(method),
                    initializer=_init_worker,
                    initargs=(self.trace,),
                )
            n = len(texts)
            results = self.pool.map(_replay_candidate, texts, [capacity] * n, [bound] * n)
        for candidate, result in zip(candidates, results, strict=True):
            candidate.pruned = result["pruned"]
            candidate.pruned_at = result.get("pruned_at")
            candidate.peak_reserved = result.get("peak_reserved")
            candidate.peak_allocated = result.get("peak_allocated")
            candidate.device_malloc = result.get("device_malloc")
            candidate.oom = result.get("oom", False)
            advance(1)


def _start_methods() -> list[str]:
    import multiprocessing

    return multiprocessing.get_all_start_methods()


def suggest_settings(
    trace: dict | str | Path,
    capacity: int | None = None,
    jobs: int | None = None,
    device: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Suggestion:
    """Search the allocator settings for ``trace`` (a snapshot dict or file); see the
    module docstring. ``capacity``: the device's bytes (answers which settings fit);
    ``jobs``: worker processes (default: the CPUs); ``device``: the trace's device index."""
    if capacity is not None and capacity <= 0:
        raise ValueError(f"capacity: must be positive, got {capacity}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs: must be at least 1, got {jobs}")
    snapshot = load_snapshot(trace)
    parsed = _read_trace(snapshot, device)
    name = Path(trace).name if isinstance(trace, (str, Path)) else "the trace"
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if jobs is None and len(parsed.ops) < _PARALLEL_EVENTS:
        workers = 1  # starting processes would cost more than the replays
    advance = progress or (lambda n=1: None)
    baseline = Candidate("", "recorded", True)
    with _Runner(parsed, workers) as runner:
        runner.run([baseline], None, None, advance)  # what the recorded settings need
        assert baseline.peak_reserved is not None
        peak = baseline.peak_reserved
        # the pruning bound: the baseline's peak; with a capacity, the capacity itself (a
        # run that needs more runs out of memory), so that every "fits" is exact
        bound = peak if capacity is None else None
        total = _device_capacity(parsed, capacity)
        knobs = _knob_candidates(parsed, peak, total, capacity is not None)
        at_capacity = Candidate("", "recorded", True)  # the recorded settings on the device
        runner.run(
            knobs + ([at_capacity] if capacity is not None else []), capacity, bound, advance
        )
        pairs = _combinations(knobs, peak)
        runner.run(pairs, capacity, bound, advance)
        replays = runner.replays
    lower = live_peak(parsed)
    recoverable = peak - lower
    everything = [*knobs, *pairs]
    for c in [baseline, *everything]:
        if c.peak_reserved is not None and not c.oom:
            c.recovers = peak - c.peak_reserved
            c.recovers_share = round(c.recovers / recoverable, 4) if recoverable > 0 else None
        if capacity is not None:
            c.fits = not c.pruned and not c.oom
    if capacity is not None:
        baseline.fits = not at_capacity.oom
    everything.sort(key=_rank)
    return Suggestion(name, capacity, lower, baseline, everything, replays)


def _rank(c: Candidate) -> tuple:
    """Completed runs by peak reserved (on a tie: PyTorch's settings first, single knobs
    first, fewer device mallocs); out-of-memory runs next; pruned runs last."""
    if c.pruned:
        return (2, 0, False, False, 0, c.config)
    if c.oom:
        return (1, 0, False, False, 0, c.config)
    return (0, c.peak_reserved, not c.pytorch, c.knob == "combined", c.device_malloc, c.config)


# ============================================================================= output
def _table(result: Suggestion, shown: int) -> Any:
    from rich.table import Table

    title = f"settings for {result.trace}, ranked by peak reserved"
    if result.capacity is not None:
        title += f" (fits: on a {format_bytes(result.capacity)} device)"
    table = Table(title=title)
    names = ["#", "setting", "peak reserved", "recovers", "share", "mallocs"]
    if result.capacity is not None:
        names.append("fits")
    for name in names:
        if name == "setting":
            table.add_column(name, overflow="fold", min_width=36)
        else:
            table.add_column(name, justify="right", no_wrap=True)
    rows = [(None, result.baseline)] + list(enumerate(result.candidates[:shown], 1))
    for rank, c in rows:
        if c.pruned:
            peak, recovers, share = f"> {format_bytes(result.baseline.peak_reserved)}", "-", "-"
        elif c.oom:
            peak, recovers, share = "out of memory", "-", "-"
        else:
            peak = format_bytes(c.peak_reserved)
            recovers = (
                format_bytes(c.recovers) if c.recovers >= 0 else f"-{format_bytes(-c.recovers)}"
            )
            share = "-" if c.recovers_share is None else f"{c.recovers_share:.0%}"
        setting = c.how + ("" if c.pytorch else " (vram)")
        cells = ["-" if rank is None else str(rank), setting, peak, recovers, share]
        cells.append("-" if c.device_malloc is None else str(c.device_malloc))
        if result.capacity is not None:
            cells.append("yes" if c.fits else "no")
        table.add_row(*cells)
    return table


def _summary(result: Suggestion) -> list[str]:
    base = result.baseline
    lines = []
    recoverable = max(base.peak_reserved - result.lower_bound, 0)  # type: ignore[operator]
    lines.append(
        f"lower bound: {format_bytes(result.lower_bound)} (the peak of live bytes, each request "
        f"rounded to 512 B); the recorded settings reserve {format_bytes(base.peak_reserved)} at "
        f"their peak (on a device with room for it): at most {format_bytes(recoverable)} can be "
        "recovered by any setting."
    )
    best = result.best
    if best is not None and best.recovers > 0:
        share = "" if best.recovers_share is None else f", {best.recovers_share:.0%} of that"
        lines.append(
            f"best: {best.how} reserves {format_bytes(best.peak_reserved)}, recovering "
            f"{format_bytes(best.recovers)}{share}."
        )
    else:
        lines.append("best: the recorded settings; no candidate reserves less.")
    if result.capacity is not None:
        cap = format_bytes(result.capacity)
        fitting = sum(1 for c in result.candidates if c.fits)
        if base.fits:
            lines.append(f"at {cap}: the recorded settings fit; {fitting} candidates fit too.")
        else:
            fix = result.makes_it_fit
            what = (
                f"{fix.how} makes it fit ({format_bytes(fix.peak_reserved)} at its peak)"
                if fix is not None
                else "no setting tried makes it fit: the program needs more memory"
            )
            lines.append(f"at {cap}: the recorded settings run out of memory; {what}.")
    pruned = sum(1 for c in result.candidates if c.pruned)
    lines.append(
        f"{result.replays} replays; {pruned} stopped early once they reserved more than the "
        "recorded settings did. share: of what any setting could recover. mallocs: device "
        "allocations (segments and mapped pages). (vram): a setting of vram's own."
    )
    return lines


def main_suggest(
    trace: str,
    capacity: int | None,
    as_json: bool,
    device: int | None,
    jobs: int | None,
    shown: int = 15,
) -> int:
    """``vram replay TRACE --suggest``: print the ranked settings (or JSON); exit status."""
    try:
        result = suggest_settings(trace, capacity, jobs, device)
    except (OSError, ValueError) as exc:
        print(f"vram replay: error: {describe_error(exc)}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(result.as_dict(), indent=2))
        return 0
    out = console()
    out.print(fitted(_table(result, shown), out.width))
    for line in _summary(result):
        out.print(line)
    return 0
