"""Which allocator settings suit a trace: ``vram replay TRACE --suggest``.

    vram replay train.pickle --suggest --capacity 24GiB
    vram replay train.pickle --suggest --json

Every candidate is a real replay of the trace under its settings (``vram.tools.replay``).
The search:

1. The recorded settings (the baseline) and the lower bound: the peak of the bytes the
   program holds, each request rounded up to 512 B. No setting can reserve less at its
   peak; the gap between the baseline and the bound is what any setting could recover.
2. One knob at a time, the settings that matter: ``max_split_size_mb`` (powers of two
   from 32 MiB up to the largest segment the trace made), ``roundup_power2_divisions``
   (2, 4, 8, 16), ``expandable_segments`` with PyTorch's 20 MiB page and with vram's smaller
   pages (``expandable_page_mb``), ``garbage_collection_threshold`` under a memory fraction
   that caps the process at the recorded settings' peak (PyTorch collects only under one),
   and, when the trace has frees that waited on record_stream events, ``record_use`` in
   their place (and vram's ``cross_stream_reuse`` when it has several streams). Each is
   tried on top of the recorded settings and, when those set anything, instead of them;
   dropping the recorded settings (PyTorch's defaults) is a candidate too.
3. The best value of each knob that helped, combined in pairs.

Candidates run in parallel, one process each (``jobs``), and are pruned: a replay stops
as soon as it has reserved more than the baseline's peak (it cannot be a suggestion), so
the result does not depend on the order the processes finish in.

With ``capacity`` each replay runs to its end on a device of that size (the allocator's
release-and-retry included, counted as cache flushes); a candidate fits when it does not
run out of memory. The result says whether the recorded settings fit, which candidates do,
and the change that makes the run fit: the fitting candidate that reserves least, PyTorch's
settings and single knobs first.

PyTorch's settings and vram's own options are ranked apart: the first are what
``PYTORCH_CUDA_ALLOC_CONF`` takes; the second need vram as PyTorch's allocator. What
``vram replay --suggest`` prints is ``suggest_report``'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Any

from ._replay_trace import ALLOC, FREE_PENDING, Trace, live_peak, read_trace
from ._replayer import Pruned, replay_config
from ._settings import fraction, fraction_call, items, join, merge, settings_to_config, unset
from ._snapshot_file import load_snapshot

__all__ = ["Candidate", "Suggestion", "suggest_settings"]

_MB = 1 << 20
_SPLIT_MB = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # max_split_size_mb values tried
_DIVISIONS = (2, 4, 8, 16)  # roundup_power2_divisions values tried
_PAGES_MB = (2, 8)  # vram's expandable_page_mb values tried besides PyTorch's 20
_GC_THRESHOLDS = (0.6, 0.8)
_PARALLEL_EVENTS = 20_000  # below this many requests a trace is replayed in this process


@dataclass
class Candidate:
    """One replayed setting: what it reserves, what it recovers, whether it fits."""

    config: str  # the change tried on the recorded settings (replay's own keys included)
    knob: str  # max_split, rp2, expandable, gc, record_use, cross_stream, combined,
    #            defaults (the recorded settings dropped), recorded
    settings: str = ""  # the allocator settings that result (what to paste)
    change: str = "recorded"  # what it does to the recorded ones: adds, replaces, drops
    change_text: str = ""
    pytorch: bool = True  # PYTORCH_CUDA_ALLOC_CONF takes it (else vram's own options)
    checked: bool = True  # PyTorch runs have checked predictions of every key it changes
    memory_limit: int | None = None  # bytes its memory fraction allows
    fraction_call: str | None = None  # the PyTorch call that sets that fraction
    peak_reserved: int | None = None  # None when pruned
    peak_allocated: int | None = None
    device_malloc: int | None = None
    flushes: int = 0  # the times it gave its cache back and retried to stay within capacity
    oom: bool = False
    pruned: bool = False  # stopped early: it reserved more than the baseline's peak
    pruned_at: int | None = None  # bytes reserved when it stopped
    recovers: int = 0  # bytes of peak reserved below the baseline's
    recovers_share: float | None = None  # of what any setting could recover at most
    fits: bool | None = None  # with a capacity: it ran without running out of memory

    @property
    def how(self) -> list[str]:
        """The lines that ask for it: the environment variable, and the memory fraction
        call when it needs one."""
        variable = "PYTORCH_CUDA_ALLOC_CONF" if self.pytorch else "VRAM_ALLOC_CONF"
        lines = [f"{variable}={self.settings}" if self.settings else f"unset {variable}"]
        if "record_use" in {k for k, _ in items(self.config)}:
            lines.append("and tensor.record_use(stream) where the trace used record_stream")
        if self.fraction_call is not None:
            lines.append(self.fraction_call)
        return lines

    @property
    def done(self) -> bool:
        return not self.pruned and not self.oom and self.peak_reserved is not None


@dataclass
class Suggestion:
    """The result of a search: the baseline, the lower bound, every candidate ranked."""

    trace: str
    capacity: int | None
    lower_bound: int  # peak of live bytes, each request rounded to 512 B
    baseline: Candidate  # the recorded settings on a device with room for them
    candidates: list[Candidate] = field(default_factory=list)  # ranked, best first
    replays: int = 0
    at_capacity: Candidate | None = None  # the recorded settings on the capacity's device
    device_total: int | None = None  # bytes of the device the fractions are computed for

    @property
    def best(self) -> Candidate | None:
        """The best of PyTorch's settings: the one that reserves least (with a capacity:
        that fits, without flushing first)."""
        found = [c for c in self.candidates if c.pytorch and c.done]
        if self.capacity is not None:
            found = [c for c in found if c.fits]
        return found[0] if found else None

    @property
    def best_vram(self) -> Candidate | None:
        found = [c for c in self.candidates if not c.pytorch and c.done]
        if self.capacity is not None:
            found = [c for c in found if c.fits]
        return found[0] if found else None

    @property
    def fits_without_flushing(self) -> Candidate | None:
        """With a capacity: the PyTorch setting that reserves least of those that fit
        without giving their cache back (None if none does)."""
        if self.capacity is None:
            return None
        return next((c for c in self.candidates if c.pytorch and c.fits and not c.flushes), None)

    @property
    def makes_it_fit(self) -> Candidate | None:
        """With a capacity: the change that makes the run fit (None if it fits already or
        nothing does): PyTorch's settings before vram's, single knobs before combinations,
        runs that need no cache flush first, then the least reserved."""
        if self.capacity is None or self.baseline.fits:
            return None
        fitting = [c for c in self.candidates if c.fits]
        if not fitting:
            return None
        return min(
            fitting,
            key=lambda c: (not c.pytorch, c.knob == "combined", c.flushes > 0, c.peak_reserved),
        )

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        rows = [out["baseline"], *out["candidates"]]
        for row, c in zip(rows, [self.baseline, *self.candidates], strict=True):
            row["how"] = c.how
        best, fit, vram = self.best, self.makes_it_fit, self.best_vram
        out["best"] = None if best is None else best.config
        out["best_vram"] = None if vram is None else vram.config
        out["makes_it_fit"] = None if fit is None else fit.config
        out["recoverable"] = max(self.baseline.peak_reserved - self.lower_bound, 0)  # type: ignore[operator]
        return out


# ======================================================================== candidates
def _knobs(trace: Trace, limit: int) -> list[tuple[str, str]]:
    """Step 2's changes: (change, knob). ``limit``: the bytes the garbage-collection
    candidates' memory fraction allows."""
    out: list[tuple[str, str]] = []
    largest = max((size for _, size in trace.recorded_segments), default=0)
    largest = max(largest, max((op[2] for op in trace.ops if op[0] == ALLOC), default=0))
    for mb in _SPLIT_MB:
        if mb * _MB <= 2 * largest:
            out.append((f"max_split_size_mb:{mb}", "max_split"))
    for divisions in _DIVISIONS:
        out.append((f"roundup_power2_divisions:{divisions}", "rp2"))
    out.append(("expandable_segments:True", "expandable"))
    for page in _PAGES_MB:
        out.append((f"expandable_segments:True,expandable_page_mb:{page}", "expandable"))
    for threshold in _GC_THRESHOLDS:
        out.append((f"garbage_collection_threshold:{threshold},memory_limit:{limit}", "gc"))
    if any(op[0] == FREE_PENDING for op in trace.ops):  # frees that waited on events
        out.append(("record_use:True", "record_use"))
    if len({op[3] for op in trace.ops if op[0] == ALLOC}) > 1:
        out.append(("cross_stream_reuse:True", "cross_stream"))
    return out


class _Maker:
    """Makes candidates from changes to the recorded settings, each resulting setting once."""

    def __init__(self, recorded: str, device_total: int | None) -> None:
        self.recorded = recorded
        self.device_total = device_total
        self.seen: set[tuple] = set()

    def make(self, text: str, knob: str) -> Candidate | None:
        change = merge(self.recorded, text)
        key = (change.settings, change.record_use, change.memory_limit)
        if key in self.seen:
            return None
        self.seen.add(key)
        call = None
        if change.memory_limit is not None:
            call = fraction_call(change.memory_limit, self.device_total, change.pytorch)
        return Candidate(
            config=text,
            knob=knob,
            settings=change.settings,
            change=change.kind,
            change_text=change.describe(),
            pytorch=change.pytorch,
            checked=change.checked,
            memory_limit=change.memory_limit,
            fraction_call=call,
        )

    def variants(self, text: str, knob: str) -> list[Candidate]:
        """``text`` on top of the recorded settings and, when they set anything, instead
        of them (each recorded key it does not set dropped)."""
        out = [self.make(text, knob)]
        own = {key for key, _ in items(text)}
        dropped = [unset(key) for key, _ in items(self.recorded) if key not in own]
        if dropped:
            out.append(self.make(",".join([*dropped, text]), knob))
        return [c for c in out if c is not None]


def _combinations(done: list[Candidate], baseline_peak: int, maker: _Maker) -> list[Candidate]:
    """Step 3: the best value of each knob that lowered the peak, in pairs."""
    best: dict[str, Candidate] = {}
    for c in done:
        if c.knob in ("defaults", "recorded") or not c.done:
            continue
        if c.peak_reserved >= baseline_peak:  # type: ignore[operator]
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
            found = maker.make(join(best[a].config, best[b].config), "combined")
            if found is not None:
                out.append(found)
    return out


# ======================================================================== replaying
_worker_trace: Trace | None = None


def _init_worker(trace: Trace) -> None:
    global _worker_trace
    _worker_trace = trace


def _replay_candidate(
    text: str, capacity: int | None, bound: int | None, trace: Trace | None = None
) -> dict[str, Any]:
    """Replay one candidate (in a worker process, or here with ``trace``)."""
    found = trace if trace is not None else _worker_trace
    assert found is not None, "the worker has no trace"
    try:
        row = replay_config(found, text, capacity, bound=bound).row
    except Pruned as stop:
        return {"pruned": True, "pruned_at": stop.reserved}
    return {
        "pruned": False,
        "peak_reserved": row["peak_reserved"],
        "peak_allocated": row["peak_allocated"],
        "device_malloc": row["device_malloc"],
        "flushes": row["flushes"],
        "oom": row["oom"],
    }


class _Runner:
    """Replays candidates: in worker processes when there is work for more than one."""

    def __init__(self, trace: Trace, jobs: int, advance: Callable[..., None]) -> None:
        self.trace = trace
        self.jobs = jobs
        self.pool: ProcessPoolExecutor | None = None
        self.replays = 0
        self.advance = advance

    def __enter__(self) -> _Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def run(self, candidates: list[Candidate], capacity: int | None, bound: int | None) -> None:
        """Replay each candidate and fill in its results."""
        self.replays += len(candidates)
        self.advance(0, total=self.replays)
        texts = [c.config for c in candidates]
        if self.jobs <= 1 or len(candidates) <= 1:
            results: Iterable[dict] = (
                _replay_candidate(t, capacity, bound, self.trace) for t in texts
            )
        else:
            if self.pool is None:
                method = "fork" if "fork" in get_all_start_methods() else "spawn"
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
            candidate.flushes = result.get("flushes", 0)
            candidate.oom = result.get("oom", False)
            self.advance(1)


def suggest_settings(
    trace: dict | str | Path,
    capacity: int | None = None,
    jobs: int | None = None,
    device: int | None = None,
    progress: Callable[..., None] | None = None,
) -> Suggestion:
    """Search the allocator settings for ``trace`` (a snapshot dict or file); see the
    module docstring. ``capacity``: the device's bytes (answers which settings fit);
    ``jobs``: worker processes (default: the CPUs); ``device``: the trace's device index;
    ``progress(n, total=None)``: told of each replay done (and of the total so far)."""
    if capacity is not None and capacity <= 0:
        raise ValueError(f"capacity: must be positive, got {capacity}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs: must be at least 1, got {jobs}")
    snapshot = load_snapshot(trace)
    parsed = read_trace(snapshot, device)
    name = Path(trace).name if isinstance(trace, (str, Path)) else "the trace"
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if jobs is None and len(parsed.ops) < _PARALLEL_EVENTS:
        workers = 1  # starting processes would cost more than the replays
    recorded = settings_to_config(parsed.settings)
    maker = _Maker(recorded, capacity)
    baseline = maker.make("", "recorded")
    assert baseline is not None
    with _Runner(parsed, workers, progress or (lambda n=1, total=None: None)) as runner:
        runner.run([baseline], None, None)  # what the recorded settings need
        assert baseline.peak_reserved is not None
        peak = baseline.peak_reserved
        # the pruning bound: the baseline's peak; with a capacity none, so that every
        # candidate runs to its end there and every "fits" is exact
        bound = peak if capacity is None else None
        limit = peak if capacity is None else min(peak, capacity)
        if capacity is not None:  # what PyTorch allows under the fraction it is told
            limit = int(fraction(limit, capacity) * capacity)
        singles = []
        for text, knob in _knobs(parsed, limit):
            singles += maker.variants(text, knob)
        if recorded:
            singles += [c for c in [maker.make(",".join(_drop_all(recorded)), "defaults")] if c]
        at_capacity = None
        if capacity is not None:
            at_capacity = Candidate("", "recorded", settings=recorded)
            runner.run([at_capacity], capacity, None)
        runner.run(singles, capacity, bound)
        pairs = _combinations(singles, peak, maker)
        runner.run(pairs, capacity, bound)
        replays = runner.replays
    lower = live_peak(parsed)
    recoverable = peak - lower
    everything = [*singles, *pairs]
    for c in [baseline, *everything]:
        if c.done:
            c.recovers = peak - c.peak_reserved  # type: ignore[operator]
            c.recovers_share = round(c.recovers / recoverable, 4) if recoverable > 0 else None
        if capacity is not None:
            c.fits = not c.pruned and not c.oom
    if at_capacity is not None:
        baseline.fits = at_capacity.fits = not at_capacity.oom
    everything.sort(key=_rank_at_capacity if capacity is not None else _rank)
    return Suggestion(name, capacity, lower, baseline, everything, replays, at_capacity, capacity)


def _drop_all(recorded: str) -> list[str]:
    return [unset(key) for key, _ in items(recorded)]


def _rank(c: Candidate) -> tuple:
    """Completed runs by peak reserved (on a tie: single knobs first, fewer device
    mallocs); out-of-memory runs next; pruned runs last."""
    if c.pruned:
        return (2, 0, False, 0, c.config)
    if c.oom:
        return (1, 0, False, 0, c.config)
    return (0, c.peak_reserved, c.knob == "combined", c.device_malloc, c.config)


def _rank_at_capacity(c: Candidate) -> tuple:
    """Fitting runs first, those that never flushed their cache before those that did,
    then as ``_rank``."""
    return (not c.fits, c.flushes > 0, *_rank(c))
