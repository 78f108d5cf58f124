"""TunableOp for GEMMs: measure the candidates once per problem, remember the fastest.

PyTorch's design (aten/src/ATen/cuda/tunable), with its names, settings and file format:
- A problem is (op, params): op ``GemmTunableOp_<T>_<TA><TB>`` (``GemmStridedBatchedTunableOp``
  for batches, ``GemmAndBiasTunableOp`` for a fused bias), params
  ``<ta><tb>_<m>_<n>_<k>_ld_<lda>_<ldb>_<ldc>`` (``_B_<batch>`` after k for batches) in
  cuBLAS's column-major terms, after the operand swap.
- Candidates: "Default" (the default cuBLAS call: cublasGemmEx, or for a fused bias the
  first cuBLASLt heuristic) and ``Gemm_Cublaslt_<TA><TB>_<i>``, the i-th of up to 8
  algorithms cuBLASLt's heuristic proposes. Each runs on the current stream into a scratch
  output; a candidate whose result differs from Default's by more than the dtype's
  tolerance (relative to the largest magnitude of Default's result) is rejected, as is one
  that fails. The rest are timed with CUDA events: one run to estimate, then as many as fit
  in ``max_tuning_duration`` ms (at most ``max_tuning_iterations``, at least 1); the lowest
  average wins. Tuning synchronizes the stream.
- The results file is PyTorch's CSV: ``Validator,KEY,VALUE`` lines, then
  ``op,params,solution,ms`` lines. It is read at the first tunable GEMM and written at exit
  when tuning found something new (``write_file`` writes it at any time); a file whose
  validators do not match this process's (vram, cuBLAS and cuBLASLt versions) is rejected
  with a warning, so a second process with the same libraries reuses the results and tunes
  nothing.
- Settings: ``enable``/``tuning_enable``... and ``VRAM_TUNABLEOP_ENABLED=1``,
  ``VRAM_TUNABLEOP_TUNING=0``, ``VRAM_TUNABLEOP_FILENAME``, ``..._MAX_TUNING_DURATION_MS``,
  ``..._MAX_TUNING_ITERATIONS`` (each read as ``PYTORCH_TUNABLEOP_*`` when the VRAM_ name is
  unset). As in PyTorch, the variables are read once and win over the functions.

What differs between devices is asked of the device's BLAS library (``_ops`` declares the
queries, ``Driver.ask`` answers them; the cpu device has no library and no TunableOp): its
identity (``Library``: the versions a results file must match, the device ordinal its name
takes), its candidates and how long one runs. On the simulated GPU the candidates are the
sim's own algorithms (Default: one fp32 pass; candidate i: K split into 2**i chunks, see
``_ops.numpy_gemm``), validated the same way, and "timed" by the sim's deterministic cost
model (``sim_ms``) instead of events, so the same problem always picks the same algorithm:
wall-clock time of NumPy would not say anything about a GPU, and a test could not rely on
it. The tuning itself (``choose``) is one piece of code for both.
"""

from __future__ import annotations

import atexit
import csv
import math
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

from ._layout import GemmCall

__all__ = [
    "state",
    "Library",
    "Problem",
    "lookup",
    "tune",
    "choose",
    "sim_candidates",
    "sim_ms",
    "sim_library",
    "read_file",
    "write_file",
    "resolved_filename",
    "validators",
    "solution_algo",
    "candidate_name",
    "TYPE_NAMES",
]

TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "Half", "bfloat16": "BFloat16"}
LT_CANDIDATES = 8  # cuBLASLt heuristics asked for (PyTorch's count)
SIM_CANDIDATES = 4  # the sim's split-K variants
_TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
_TF32_TOLERANCE = 5e-3
_DEFAULT_FILENAME = "tunableop_results.csv"


def _env(name: str) -> str | None:
    value = os.environ.get(f"VRAM_TUNABLEOP_{name}")
    return value if value is not None else os.environ.get(f"PYTORCH_TUNABLEOP_{name}")


def _env_int(name: str) -> int | None:
    text = _env(name)
    if text is None:
        return None
    try:
        return max(int(text), 0)
    except ValueError:
        warnings.warn(f"VRAM_TUNABLEOP_{name}={text!r} is not an int; ignored", stacklevel=3)
        return None


@dataclass
class _State:
    """Process-wide TunableOp settings and results; ``lock`` guards every field."""

    enabled: bool = False
    tuning: bool = True
    max_duration_ms: int = 30
    max_iterations: int = 100
    write_on_exit: bool = True
    filename: str | None = None  # None: not set, the default is taken at first use
    results: dict[str, dict[str, tuple[str, float]]] = field(default_factory=dict)
    loaded: bool = False  # the file was read (or there was none)
    from_file: int = 0  # results that came from the file
    tunings: int = 0  # problems tuned in this process
    generation: int = 0  # bumped whenever results or settings change (plans key on it)
    env: dict[str, object] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def read_env(self) -> None:
        self.env = {
            "enabled": _env("ENABLED") == "1",
            "tuning_off": _env("TUNING") == "0",
            "filename": _env("FILENAME"),
            "duration": _env_int("MAX_TUNING_DURATION_MS"),
            "iterations": _env_int("MAX_TUNING_ITERATIONS"),
        }

    def is_enabled(self) -> bool:
        return bool(self.env["enabled"]) or self.enabled

    def is_tuning(self) -> bool:
        return not self.env["tuning_off"] and self.tuning

    def duration(self) -> int:
        found = self.env["duration"]
        return self.max_duration_ms if found is None else int(found)  # type: ignore[arg-type]

    def iterations(self) -> int:
        found = self.env["iterations"]
        return self.max_iterations if found is None else int(found)  # type: ignore[arg-type]

    def changed(self) -> None:
        self.generation += 1


state = _State()
state.read_env()


def _reset() -> None:
    """Forget every setting and result and read the variables again (for tests); cached
    plans keyed on the old generation are not reused."""
    global state
    generation = state.generation + 1
    state = _State(generation=generation)
    state.read_env()


# ---- problems and their names --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Library:
    """The BLAS library of a device as a results file knows it: the versions the file must
    match, and the device ordinal its name takes (PyTorch's: the index alone on a GPU)."""

    versions: tuple[tuple[str, str], ...]
    ordinal: str


def sim_library(index: int) -> Library:
    """The simulated GPU's library (its files are named apart from a GPU's)."""
    return Library((("CUBLAS_VERSION", "sim"), ("CUBLASLT_VERSION", "sim")), f"_sim{index}")


@dataclass(frozen=True, slots=True)
class Problem:
    """One tunable GEMM, named as PyTorch's TunableOp names it."""

    op: str
    params: str
    dtype: str  # vram dtype name
    library: Library  # of the device it runs on
    layout: str  # "NN", "NT", ...: TA TB as the op name spells them


def make_problem(
    dtype: str,
    transa: int,
    transb: int,
    m: int,
    n: int,
    k: int,
    lds: tuple[int, int, int],
    batch: int,
    fused_bias: bool,
    activation: int,
    library: Library,
) -> Problem:
    ta, tb = "NT"[transa], "NT"[transb]
    kind = "GemmAndBias" if fused_bias else "GemmStridedBatched" if batch > 1 else "Gemm"
    op = f"{kind}TunableOp_{TYPE_NAMES[dtype]}_{ta}{tb}"
    params = f"{ta.lower()}{tb.lower()}_{m}_{n}_{k}"
    if batch > 1:
        params += f"_B_{batch}"
    params += "_ld_{}_{}_{}".format(*lds)
    if activation:
        params += ("", "_relu", "_gelu")[activation]
    return Problem(op, params, dtype, library, ta + tb)


def candidate_name(problem: Problem, algo: int) -> str:
    """TunableOp's name for candidate ``algo`` (0: "Default")."""
    return "Default" if algo == 0 else f"Gemm_Cublaslt_{problem.layout}_{algo - 1}"


def solution_algo(problem: Problem, solution: str) -> int | None:
    """The candidate a solution name in a results file names; None if it is not one."""
    if solution == "Default":
        return 0
    prefix = f"Gemm_Cublaslt_{problem.layout}_"
    if solution.startswith(prefix) and solution[len(prefix) :].isdigit():
        return int(solution[len(prefix) :]) + 1
    return None


# ---- results -------------------------------------------------------------------------------


def lookup(problem: Problem) -> int | None:
    """The remembered candidate for ``problem``, reading the results file on first use."""
    with state.lock:
        _load_once(problem.library)
        found = state.results.get(problem.op, {}).get(problem.params)
    if found is None:
        return None
    algo = solution_algo(problem, found[0])
    if algo is None:
        warnings.warn(
            f"TunableOp: unknown solution {found[0]!r} for {problem.op},{problem.params}; "
            "using Default",
            RuntimeWarning,
            stacklevel=3,
        )
        return 0
    return algo


def record(problem: Problem, algo: int, ms: float) -> None:
    with state.lock:
        ops = state.results.setdefault(problem.op, {})
        if problem.params not in ops:
            ops[problem.params] = (candidate_name(problem, algo), ms)
            state.tunings += 1
            state.changed()


def resolved_filename(library: Library) -> str:
    """The results file: as set, or the variable's / PyTorch's default with the device
    ordinal inserted (``tunableop_results0.csv``; ``tunableop_results_sim0.csv`` for sim:0)."""
    with state.lock:
        if state.filename is None:
            name = state.env["filename"] or _DEFAULT_FILENAME
            state.filename = insert_ordinal(str(name), library.ordinal)
        return state.filename


def insert_ordinal(filename: str, ordinal: str) -> str:
    """PyTorch's rule: replace ``%d`` by the ordinal, else insert it before the last '.'."""
    if not filename:
        return filename
    if "%d" in filename:
        return filename.replace("%d", ordinal, 1)
    stem, dot, suffix = filename.rpartition(".")
    return f"{stem}{ordinal}.{suffix}" if dot and stem else f"{filename}{ordinal}"


def validators(library: Library) -> dict[str, str]:
    """What a results file must match: vram's version and the BLAS libraries' versions."""
    try:
        version = metadata.version("vram")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {"VRAM_VERSION": version, **dict(library.versions)}


def _load_once(library: Library) -> None:
    if state.loaded:
        return
    state.loaded = True
    filename = resolved_filename(library)
    if filename and os.path.exists(filename):
        read_file(filename, library)
        state.from_file = sum(len(v) for v in state.results.values())
    if not _exit_hook_registered:
        _register_exit_hook(library)


def read_file(filename: str, library: Library) -> bool:
    """Merge the results of a TunableOp CSV file (existing results win); False, with a
    warning, when it cannot be read (missing, not text, not CSV, a time that is not a
    number) or its validators differ from this process's. Nothing is merged then."""
    try:
        with open(filename, newline="") as f:
            rows = [row for row in csv.reader(f) if row]
        results = [
            (row[0], row[1], row[2], float(row[3]) if len(row) > 3 and row[3] else 0.0)
            for row in rows
            if row[0] != "Validator" and len(row) >= 3
        ]
    except (OSError, csv.Error, ValueError) as exc:
        # csv.Error: a field longer than the csv module's limit (128 KiB); ValueError: a
        # time that is not a number, or bytes that are not text (UnicodeDecodeError)
        warnings.warn(f"TunableOp: cannot read {filename!r}: {exc}", RuntimeWarning, stacklevel=2)
        return False
    found = {row[1]: row[2] for row in rows if row[0] == "Validator" and len(row) >= 3}
    expected = validators(library)
    if found != expected:
        warnings.warn(
            f"TunableOp: {filename!r} was tuned with {found}, this process has {expected}; "
            "its results are not used",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    with state.lock:
        for op, params, solution, ms in results:
            state.results.setdefault(op, {}).setdefault(params, (solution, ms))
        state.changed()
    return True


def write_file(filename: str, library: Library) -> bool:
    """Write the validators and every result to ``filename`` (PyTorch's CSV)."""
    with state.lock:
        rows = [["Validator", key, value] for key, value in validators(library).items()]
        for op, entries in state.results.items():
            for params, (solution, ms) in entries.items():
                rows.append([op, params, solution, f"{ms:.6g}"])
    try:
        with open(filename, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
    except OSError as exc:
        warnings.warn(f"TunableOp: cannot write {filename!r}: {exc}", RuntimeWarning, stacklevel=2)
        return False
    return True


_exit_hook_registered = False


def _register_exit_hook(library: Library) -> None:
    global _exit_hook_registered
    _exit_hook_registered = True

    def write_at_exit() -> None:
        s = state
        total = sum(len(v) for v in s.results.values())
        if not (s.write_on_exit and s.is_enabled() and s.is_tuning() and s.filename):
            return
        if total > s.from_file:
            try:
                write_file(s.filename, library)
            except Exception:  # at exit, a failed write must not raise
                pass

    atexit.register(write_at_exit)


# ---- tuning --------------------------------------------------------------------------------


def tolerance(dtype: str, tf32: bool) -> float:
    return _TF32_TOLERANCE if tf32 and dtype == "float32" else _TOLERANCE[dtype]


class _Reference:
    """Default's result, prepared once for comparing every candidate with it."""

    def __init__(self, reference: np.ndarray) -> None:
        self.values = reference.astype(np.float64)
        self.finite = np.isfinite(self.values)
        self.scale = float(np.max(np.abs(self.values[self.finite]), initial=0.0))

    def agrees(self, other: np.ndarray, rtol: float) -> bool:
        """True when ``other`` is within ``rtol`` of the reference, relative to its largest
        value (a non-finite value must be where the reference has one)."""
        diff = np.abs(other.astype(np.float64) - self.values)
        if not np.all(np.isfinite(diff) | ~self.finite):
            return False
        worst = float(np.max(np.where(self.finite, diff, 0.0), initial=0.0))
        return worst <= rtol * max(self.scale, 1e-30)


def agrees(reference: np.ndarray, other: np.ndarray, rtol: float) -> bool:
    """True when ``other`` is within ``rtol`` of ``reference``, relative to its largest value."""
    return _Reference(reference).agrees(other, rtol)


def tune(
    problem: Problem,
    candidates: list[int],
    run: Callable[[int], np.ndarray | None],
    time_ms: Callable[[int], float],
    rtol: float,
) -> int:
    """Choose among ``candidates`` (0, Default, first): ``run(algo)`` computes the result
    into a scratch output and returns it on the host (None when the candidate cannot run
    this problem); ``time_ms(algo)`` measures one call. Records and returns the winner."""
    result = run(0)
    reference = None if result is None else _Reference(result)
    del result
    timed: list[tuple[float, int]] = []
    if reference is not None:
        timed.append((time_ms(0), 0))
    for algo in candidates:
        if algo == 0:
            continue
        try:
            got = run(algo)
        except Exception:  # a candidate that fails is not a candidate (PyTorch: FAIL)
            continue
        if got is None or (reference is not None and not reference.agrees(got, rtol)):
            continue
        timed.append((time_ms(algo), algo))
    ms, best = min(timed) if timed else (0.0, 0)
    record(problem, best, ms)
    return best


def choose(
    problem: Problem,
    candidates: Callable[[], list[int]],
    run: Callable[[int], np.ndarray | None],
    time_ms: Callable[[int], float],
    rtol: float,
) -> int:
    """TunableOp's algorithm for ``problem``: remembered, or tuned now among
    ``candidates()`` (asked only then) when tuning is on, else Default (0, not recorded)."""
    found = lookup(problem)
    if found is not None:
        return found
    if not state.is_tuning():
        return 0
    return tune(problem, candidates(), run, time_ms, rtol)


def iterations_for(estimate_ms: float) -> int:
    """Timed runs for a candidate whose one run took ``estimate_ms`` (PyTorch's rule)."""
    limit = state.iterations()
    duration = state.duration()
    if duration <= 0 or estimate_ms <= 0:
        return max(limit, 1)
    fit = int(duration / estimate_ms)
    return max(1, min(fit, limit) if limit > 0 else fit)


# ---- the simulated GPU ---------------------------------------------------------------------

_SIM_TILE = 64  # rows and columns of one output tile
_SIM_UNITS = 132  # tiles computed at once (the H100's SM count)
_SIM_TILE_FLOPS_PER_MS = 2.0e8  # one tile's multiply-adds per ms (flops)
_SIM_BYTES_PER_MS = 3.0e9  # memory traffic per ms for the split-K reduction
_SIM_LAUNCH_MS = 0.004  # one kernel launch


def sim_candidates() -> list[int]:
    """The sim's candidates: Default and its split-K variants."""
    return list(range(SIM_CANDIDATES + 1))


def sim_ms(call: GemmCall, algo: int) -> float:
    """The sim's cost model of candidate ``algo`` for ``call``: output tiles (times K
    chunks) run in waves of 132; split-K adds a reduction pass and a launch."""
    m, n, k, batch = call.m, call.n, call.k, call.batch
    splits = 1 if algo == 0 else min(2**algo, max(k, 1))
    tiles = math.ceil(m / _SIM_TILE) * math.ceil(n / _SIM_TILE) * batch
    waves = math.ceil(tiles * splits / _SIM_UNITS)
    tile_ms = 2.0 * _SIM_TILE * _SIM_TILE * math.ceil(k / splits) / _SIM_TILE_FLOPS_PER_MS
    ms = waves * tile_ms + _SIM_LAUNCH_MS
    if splits > 1:
        ms += splits * m * n * batch * 4 / _SIM_BYTES_PER_MS + _SIM_LAUNCH_MS
    return ms
