"""LU benchmark (issue 13): ms per call of fp32 lu_factor and solve, vram vs PyTorch and CuPy,
and the device mallocs of one lu_factor_ex (pytorch#181997).

lu_factor, n x batch: 32x4096, 128x1024, 256x256, 511x64, 512x64, 1024x16, 4096x1, and
1023x16 / 2047x16 / 2048x16 (with 1024x16: the no-cliff check), and 512x1 / 2048x1 (where
one matrix leaves cuSOLVER). solve (A (batch, n, n), B (batch, n, k)) with k = 1 and 64 at
32x4096, 256x256, 512x64, 1024x16, 4096x1. Peers in one process, on the same inputs
(random normal, fp32):
- PyTorch: ``torch.linalg.lu_factor`` / ``solve`` with its default library choice, and with
  ``torch.backends.cuda.preferred_linalg_library("cusolver")``;
- CuPy: ``cupyx.scipy.linalg.lu_factor`` (one matrix: the batch-1 row) and
  ``cupy.linalg.solve`` (batched);
- vram: its default dispatch, and each way pinned where it is in the running (``blocked``,
  vram's own kernels; ``cublas``; ``cusolver`` looped on one stream; ``streams`` over 8 and
  16 side streams), so the crossovers can be read off the table.
Every call is timed whole, as a user calls it: lu_factor and solve check info, so each
synchronizes. After two warm-up calls, a cell runs the call as many times as fit in about
TARGET_MS (2 to 1000 times) with perf_counter, REPEATS times; the cell is the median, in ms.
The cells of a row take turns (``time_row``): each round times every cell once.
For the small rows, "vram _ex" and "torch _ex" time lu_factor_ex, which does not
synchronize, 50 calls between synchronizations: where the GPU is faster than the host,
that is the host's cost of a call.

Before timing, a child process checks vram's blocked LU and solve on every shape against
PyTorch (``--smoke``); if it fails, the run goes on without them (and says so), so that a
broken kernel cannot cost the rest of the run.

Device mallocs (``--mallocs``, run by the benchmark in a child process with
``VRAM_NO_CACHING=1``): lu_factor_ex of (16, n, n) and (64, n, n) for n = 511, 512, 513:
vram's device mallocs cold (after empty_cache: every workspace new) and warm, and its
allocator requests; PyTorch's allocator requests for the same call (each is a cudaMalloc
with PYTORCH_NO_CUDA_MEMORY_CACHING=1), under both of its library choices. The issue
measured PyTorch before the fix at 20 cudaMalloc for (16, 512, 512) and 7 for (16, 511, 511).

``--device sim:0`` runs vram alone on small sizes, to check the script anywhere.
``--profile`` prints where the host's time goes in lu_factor and solve at 32 x 4096.
``--suggest RESULT.json`` prints, without running anything, each row's fastest vram way,
vram / best PyTorch for the run's default, for that way and for the way the crossover
tables pick now (``LU_CROSSOVERS``, ``SOLVE_CROSSOVERS`` in vram/linalg/_dispatch.py, read
from such a result), and the no-cliff ratios.

    python bench/linalg.py [--device cuda:0] [--out FILE.json|DIR] [--save]
    python bench/linalg.py --profile
    python bench/linalg.py --suggest bench/results/linalg-cuda0-DATE.json
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from pathlib import Path

import numpy as np

import vram
from _common import add_output_arguments, description_of, device_name, write_results
from vram.linalg import _blocked, _dispatch

LU_SIZES = (
    (32, 4096),
    (128, 1024),
    (256, 256),
    (511, 64),
    (512, 64),
    (1024, 16),
    (4096, 1),
    (1023, 16),
    (2047, 16),
    (2048, 16),
    (512, 1),
    (2048, 1),
)
SOLVE_SIZES = ((32, 4096), (256, 256), (512, 64), (1024, 16), (4096, 1))
NRHS = (1, 64)
MALLOC_N = (511, 512, 513)
MALLOC_BATCHES = (16, 64)
SIM_LU_SIZES = ((8, 64), (32, 16), (64, 4), (96, 1))
SIM_SOLVE_SIZES = ((8, 64), (64, 4))
SIM_MALLOC_N = (31, 32, 33)
STREAMS = (8, 16)
CUBLAS_MAX_N = 512  # pinned cuBLAS above this is far off the crossover (69 ms at 1024 x 16)
CUSOLVER_MAX_BATCH = 64  # looped cuSOLVER beyond this is far off (247 ms at 32 x 4096)
EX_MAX_N = 128  # rows timed without a synchronization per call too
TARGET_MS = 100.0
REPEATS = 5  # medians of 5: on the H100 host, back-to-back cells of one call ranged 0.082-0.143 ms
PYTORCH_ISSUE = {  # cudaMalloc per lu_factor_ex, from pytorch#181997 / #181998
    "16x511": "7 (cuBLAS batched)",
    "16x512": "20 before the fix, 5 after (looped cuSOLVER)",
    "64x512": "5 after the fix",
}

Call = Callable[[], object]
Setting = Callable[[], AbstractContextManager]  # makes the context a cell runs in


class _Skip(Exception):
    pass


# ---- timing --------------------------------------------------------------------------------


def _count(call: Call, sync: Callable[[], None]) -> int:
    """After two warm-up calls, how many calls fit in about TARGET_MS (2 to 1000)."""
    for _ in range(2):
        call()
    sync()
    start = time.perf_counter()
    call()
    sync()
    first = (time.perf_counter() - start) * 1e3
    return int(min(1000, max(2, TARGET_MS / max(first, 1e-3))))


def _run(call: Call, sync: Callable[[], None], count: int) -> float:
    """ms per call of ``count`` calls and one synchronization."""
    start = time.perf_counter()
    for _ in range(count):
        call()
    sync()
    return (time.perf_counter() - start) * 1e3 / count


@dataclasses.dataclass
class Cell:
    """One cell of a row: ``call`` run inside a fresh ``setting()`` (the plan or library
    it pins), ``count`` calls between synchronizations (None: as many as fit TARGET_MS)."""

    name: str
    call: Call
    sync: Callable[[], None]
    setting: Callable[[], AbstractContextManager] = nullcontext
    count: int | None = None


def time_row(cells: list[Cell], skipped: list[str]) -> dict[str, float | None]:
    """Each cell's median ms per call, the cells taking turns: REPEATS rounds of one timed
    run each, so that the host's drift in speed lands on every cell of the row alike (timed
    one after the other, the row's first cell ran 28-96% slower than the same way
    pinned, timed next). A cell that fails is reported and left out, not fatal."""
    counts: dict[str, int] = {}
    runs: dict[str, list[float]] = {cell.name: [] for cell in cells}
    for turn in range(REPEATS + 1):  # turn 0 warms every cell up and sizes its runs
        for cell in cells:
            if turn > 0 and cell.name not in counts:
                continue  # it failed
            try:
                with cell.setting():
                    if turn == 0:
                        measured = _count(cell.call, cell.sync)  # (warms it up either way)
                        counts[cell.name] = cell.count or measured
                    else:
                        runs[cell.name].append(_run(cell.call, cell.sync, counts[cell.name]))
            except Exception as exc:  # one broken variant must not cost the whole GPU run
                skipped.append(f"{cell.name}: {type(exc).__name__}: {exc}"[:300])
                counts.pop(cell.name, None)
                runs[cell.name] = []
    return {name: statistics.median(times) if times else None for name, times in runs.items()}


@contextmanager
def _torch_library(torch, library: str) -> Iterator[None]:
    """PyTorch's preferred_linalg_library set to ``library`` while the block runs."""
    torch.backends.cuda.preferred_linalg_library(library)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_linalg_library("default")


# ---- peers ---------------------------------------------------------------------------------


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise _Skip(f"PyTorch is not installed ({exc})") from None
    if not torch.cuda.is_available():
        raise _Skip("PyTorch has no CUDA")
    return torch


def _cupy():
    try:
        import cupy
        import cupyx.scipy.linalg
    except ImportError as exc:
        raise _Skip(f"CuPy is not installed ({exc})") from None
    return cupy, cupyx.scipy.linalg


class _Blocked:
    """Whether vram's blocked LU is in the running (the smoke check may take it out)."""

    enabled = True
    reason = ""


def disable_blocked(reason: str) -> None:
    """Take vram's blocked LU and solve out: of the variants, and of the default tables."""
    _Blocked.enabled = False
    _Blocked.reason = reason
    for table in (_dispatch.LU_CROSSOVERS, _dispatch.SOLVE_CROSSOVERS):
        for dtype, crossover in table.items():
            bands, single = (
                tuple((most, "streams" if way == "blocked" else way) for most, way in ways)
                for ways in (crossover.bands, crossover.single)
            )
            table[dtype] = dataclasses.replace(crossover, bands=bands, single=single)


def blocked_supports(device: vram.Device, n: int, batch: int) -> bool:
    """Whether vram's blocked LU runs fp32 n x n matrices in batches of ``batch`` there
    (cluster panels included, where the device has them)."""
    clusters = _blocked.clusters_on(device)
    return _Blocked.enabled and _blocked.supports("float32", n, n, batch, clusters)


def lu_variants(device: vram.Device, n: int, batch: int) -> list[tuple[str, Setting]]:
    """(name, what makes its plan context) of every vram variant of an lu_factor row."""
    variants: list[tuple[str, Setting]] = [("vram", nullcontext)]
    if blocked_supports(device, n, batch):
        variants.append(("vram blocked", partial(_dispatch.forced, "blocked")))
    if n <= CUBLAS_MAX_N and batch > 1:
        variants.append(("vram cublas", partial(_dispatch.forced, "cublas")))
    if batch <= CUSOLVER_MAX_BATCH:
        variants.append(("vram cusolver", partial(_dispatch.forced, "cusolver")))
    for count in STREAMS:
        if batch >= count and n >= 256 * count // 8:
            setting = partial(_dispatch.forced, "streams", streams=count)
            variants.append((f"vram streams {count}", setting))
    return variants


def solve_variants(n: int, batch: int) -> list[tuple[str, Setting]]:
    """(name, what makes its plan context) of every vram variant of a solve row."""
    variants: list[tuple[str, Setting]] = [("vram", nullcontext)]
    if _Blocked.enabled and _blocked.solve_supports("float32", n):
        variants.append(("vram blocked", partial(_dispatch.forced, "blocked")))
    if n <= CUBLAS_MAX_N and batch > 1:
        variants.append(("vram cublas", partial(_dispatch.forced, "cublas")))
    if batch <= 16:
        variants.append(("vram cusolver", partial(_dispatch.forced, "cusolver")))
    if batch >= 8 and n >= 512:
        variants.append(("vram streams 8", partial(_dispatch.forced, "streams", streams=8)))
    return variants


UNSYNCHRONIZED = 50  # the "_ex" cells' calls between synchronizations


def _ratios(row: dict) -> None:
    """vram / best PyTorch, for the default and for vram's fastest way."""
    best_torch = min(
        (v for k, v in row.items() if k in ("torch default", "torch cusolver") and v), default=0
    )
    ways = {k: v for k, v in row.items() if k.startswith("vram ") and k != "vram _ex" and v}
    if ways:
        fastest = min(ways, key=ways.get)
        row["vram fastest"] = fastest[5:]
    if best_torch and row.get("vram"):
        row["vram / best torch"] = round(row["vram"] / best_torch, 3)
    if best_torch and ways:
        row["fastest / best torch"] = round(ways[fastest] / best_torch, 3)


def lu_rows(device: vram.Device, sizes, cuda: bool) -> tuple[list[dict], list[str]]:
    rows, skipped = [], []
    rng = np.random.default_rng(0)
    for n, batch in sizes:
        a = rng.standard_normal((batch, n, n)).astype(np.float32)
        if batch == 1:
            a = a[0]
        A = vram.tensor(a, device=device)
        sync = lambda: vram.synchronize(device)  # noqa: E731
        call = partial(vram.linalg.lu_factor, A)
        cells = [Cell(name, call, sync, setting) for name, setting in lu_variants(device, n, batch)]
        if n <= EX_MAX_N:
            ex = partial(vram.linalg.lu_factor_ex, A)
            cells.append(Cell("vram _ex", ex, sync, count=UNSYNCHRONIZED))
        if cuda:
            cells += _peer_cells(a, batch, skipped, solve=None)
        times = time_row(cells, skipped)
        plan = vram.linalg.plan_lu(n, n, batch, "float32")
        row = {"op": "lu_factor", "n": n, "batch": batch, "vram_plan": plan.path}
        row.update({k: round(v, 4) for k, v in times.items() if v is not None})
        _ratios(row)
        rows.append(row)
        print(_line(row), flush=True)
    return rows, skipped


def _peer_cells(
    a: np.ndarray, batch: int, skipped: list[str], solve: np.ndarray | None
) -> list[Cell]:
    """PyTorch's cells (both library settings, and lu_factor_ex for the small rows) and
    CuPy's, on copies of ``a`` (and of the right-hand sides ``solve``, for a solve row)."""
    cells: list[Cell] = []
    n = a.shape[-1]
    try:
        torch = _torch()
        T = torch.from_numpy(a).cuda()
        if solve is None:
            call = partial(torch.linalg.lu_factor, T)
        else:
            call = partial(torch.linalg.solve, T, torch.from_numpy(solve).cuda())
        for name, library in (("torch default", "default"), ("torch cusolver", "cusolver")):
            setting = partial(_torch_library, torch, library)
            cells.append(Cell(name, call, torch.cuda.synchronize, setting))
        if solve is None and n <= EX_MAX_N:
            ex = partial(torch.linalg.lu_factor_ex, T)
            setting = partial(_torch_library, torch, "cusolver")
            cells.append(Cell("torch _ex", ex, torch.cuda.synchronize, setting, UNSYNCHRONIZED))
    except Exception as skip:  # a peer that fails is reported, not fatal
        skipped.append(str(skip))
    try:
        cupy, cupy_linalg = _cupy()
        sync_cupy = cupy.cuda.runtime.deviceSynchronize
        if solve is not None:
            call = partial(cupy.linalg.solve, cupy.asarray(a), cupy.asarray(solve))
            cells.append(Cell("cupy", call, sync_cupy))
        elif batch == 1:  # (its lu_factor takes one matrix)
            cells.append(Cell("cupy", partial(cupy_linalg.lu_factor, cupy.asarray(a)), sync_cupy))
    except Exception as skip:  # a peer that fails is reported, not fatal
        skipped.append(str(skip))
    return cells


def solve_rows(device: vram.Device, sizes, cuda: bool) -> tuple[list[dict], list[str]]:
    rows, skipped = [], []
    rng = np.random.default_rng(1)
    for n, batch in sizes:
        a = rng.standard_normal((batch, n, n)).astype(np.float32) + n**0.5 * np.eye(n, dtype="f4")
        A = vram.tensor(a, device=device)
        for k in NRHS:
            b = rng.standard_normal((batch, n, k)).astype(np.float32)
            B = vram.tensor(b, device=device)
            sync = lambda: vram.synchronize(device)  # noqa: E731
            call = partial(vram.linalg.solve, A, B)
            cells = [Cell(name, call, sync, setting) for name, setting in solve_variants(n, batch)]
            if cuda:
                cells += _peer_cells(a, batch, skipped, solve=b)
            times = time_row(cells, skipped)
            row = {"op": "solve", "n": n, "batch": batch, "nrhs": k}
            row["vram_plan"] = (
                f"{vram.linalg.plan_lu(n, n, batch, 'float32').path}+"
                f"{vram.linalg.plan_solve(n, k, batch, 'float32').path}"
            )
            row.update({key: round(v, 4) for key, v in times.items() if v is not None})
            _ratios(row)
            rows.append(row)
            print(_line(row), flush=True)
    return rows, skipped


# ---- the blocked LU's smoke check (a child process) ------------------------------------------


def smoke(device: vram.Device, cuda: bool) -> dict:
    """vram's blocked LU and solve on every benchmark shape, against PyTorch (on a GPU) or
    NumPy (on sim): P L U = A and A X = B to fp32's accuracy; the failures found."""
    failures = []
    lu_sizes = LU_SIZES if cuda else SIM_LU_SIZES
    solve_sizes = SOLVE_SIZES if cuda else SIM_SOLVE_SIZES
    rng = np.random.default_rng(2)
    for n, batch in sorted(set(lu_sizes) | set(solve_sizes)):
        if not blocked_supports(device, n, batch):
            continue
        count = min(batch, 8 if n <= 512 else 2)  # checked on the first few (of the whole run)
        a = rng.standard_normal((batch, n, n)).astype(np.float32) + n**0.5 * np.eye(n, dtype="f4")
        b = rng.standard_normal((batch, n, 3)).astype(np.float32)
        A, B = vram.tensor(a, device=device), vram.tensor(b, device=device)
        with _dispatch.forced("blocked"):
            LU, pivots, info = vram.linalg.lu_factor_ex(A)
            X = vram.linalg.solve(A, B) if _blocked.solve_supports("float32", n) else None
        lu, piv = LU.numpy()[:count].astype(np.float64), pivots.numpy()[:count]
        if (info.numpy() != 0).any():
            failures.append(f"{n}x{batch}: info {np.unique(info.numpy())}")
        for i in range(count):
            product = (np.tril(lu[i], -1) + np.eye(n)) @ np.triu(lu[i])
            for k in range(n - 1, -1, -1):
                p = piv[i, k] - 1
                product[[k, p]] = product[[p, k]]
            error = np.abs(product - a[i]).max()
            if not error < 1e-3 * n**0.5:
                failures.append(f"{n}x{batch}: P L U - A is {error:.3g} in matrix {i}")
                break
        if X is not None:
            residual = np.abs(a[:count] @ X.numpy()[:count] - b[:count]).max()
            if not residual < 1e-3 * n**0.5:
                failures.append(f"{n}x{batch}: A X - B is {residual:.3g}")
    return {"ok": not failures, "failures": failures}


def smoke_check(device: vram.Device) -> list[str]:
    """Run ``smoke`` in a child process; a failure (or a crash) takes the blocked LU out."""
    script = Path(__file__).resolve()
    try:
        child = subprocess.run(
            [sys.executable, str(script), "--smoke", "--device", str(device)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        lines = child.stdout.strip().splitlines()
        found = json.loads(lines[-1]) if child.returncode == 0 and lines else None
    except Exception as exc:  # a hang or a crash: the same verdict
        found, child = None, exc
    if found is None:
        reason = f"the smoke check crashed: {getattr(child, 'stderr', child)}"[-600:]
    elif not found["ok"]:
        reason = "the smoke check failed: " + "; ".join(found["failures"])[:600]
    else:
        print("blocked LU smoke check: passed", flush=True)
        return []
    disable_blocked(reason)
    print(f"blocked LU taken out of this run: {reason}", flush=True)
    return [f"vram blocked: {reason}"]


def _line(row: dict) -> str:
    return "  ".join(f"{k}={v}" for k, v in row.items())


# ---- device mallocs --------------------------------------------------------------------------


def malloc_counts(device: vram.Device, sizes: tuple[int, ...]) -> list[dict]:
    """Run in a process with VRAM_NO_CACHING=1: vram's cold and warm device mallocs and
    allocator requests for one lu_factor_ex per shape, default dispatch and looped cuSOLVER."""
    rows = []
    for n in sizes:
        for batch in MALLOC_BATCHES:
            a = np.random.default_rng(n).standard_normal((batch, n, n)).astype(np.float32)
            A = vram.tensor(a, device=device)
            for name, context in (("default", nullcontext()), ("cusolver", None)):
                row = {"shape": f"{batch}x{n}", "vram": name}
                with context or _dispatch.forced("cusolver"):
                    row["plan"] = vram.linalg.plan_lu(n, n, batch, "float32").path
                    for when in ("cold", "warm"):
                        if when == "cold":
                            vram.memory.empty_cache(device)
                        vram.synchronize(device)
                        with vram.memory.count_device_calls(device) as calls:
                            vram.linalg.lu_factor_ex(A)
                            vram.synchronize(device)
                        row[f"{when} device mallocs"] = calls.device_malloc
                        row[f"{when} requests"] = calls.alloc
                rows.append(row)
    return rows


def torch_requests(sizes: tuple[int, ...]) -> list[dict]:
    """PyTorch's allocator requests for one lu_factor_ex per shape (warm), both libraries."""
    torch = _torch()
    rows = []
    for n in sizes:
        for batch in MALLOC_BATCHES:
            T = torch.randn(batch, n, n, device="cuda")
            for library in ("default", "cusolver"):
                torch.backends.cuda.preferred_linalg_library(library)
                torch.linalg.lu_factor_ex(T)
                torch.cuda.synchronize()
                before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
                torch.linalg.lu_factor_ex(T)
                torch.cuda.synchronize()
                after = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
                rows.append({"shape": f"{batch}x{n}", "torch": library, "requests": after - before})
            torch.backends.cuda.preferred_linalg_library("default")
    return rows


def malloc_table(device: vram.Device, cuda: bool) -> tuple[list[dict], list[str]]:
    sizes = MALLOC_N if cuda else SIM_MALLOC_N
    env = dict(os.environ, VRAM_NO_CACHING="1")
    script = Path(__file__).resolve()
    command = [sys.executable, str(script), "--mallocs", "--device", str(device)]
    if not _Blocked.enabled:
        command.append("--no-blocked")
    child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if child.returncode != 0:  # reported, not fatal
        return [], [f"the malloc count failed: {child.stderr[-600:]}"]
    rows = json.loads(child.stdout.strip().splitlines()[-1])
    skipped = []
    if cuda:
        try:
            by_shape: dict[str, dict] = {}
            for found in torch_requests(sizes):
                by_shape.setdefault(found["shape"], {})[found["torch"]] = found["requests"]
            for row in rows:
                seen = by_shape.get(row["shape"], {})
                row["torch default requests"] = seen.get("default")
                row["torch cusolver requests"] = seen.get("cusolver")
                row["pytorch#181997"] = PYTORCH_ISSUE.get(row["shape"], "")
        except Exception as skip:  # reported, not fatal
            skipped.append(str(skip))
    for row in rows:
        row["op"] = "device mallocs"
        print(_line(row), flush=True)
    return rows, skipped


# ---- the crossover table from a result ------------------------------------------------------

PINNED = ("vram blocked", "vram cublas", "vram cusolver", "vram streams 8", "vram streams 16")


def _cell(value: object) -> str:
    return f"{'-' if value is None else f'{value:.3f}':>9}"


def _with_table(row: dict, torch: float | None) -> str:
    """The way vram's crossover tables pick now for a row, and its measured ratio."""
    n, batch = row["n"], row["batch"]
    if row["op"] == "lu_factor":
        plan = vram.linalg.plan_lu(n, n, batch, "float32")
    else:
        plan = vram.linalg.plan_solve(n, row["nrhs"], batch, "float32")
    name = f"streams {plan.streams}" if plan.path == "streams" else plan.path
    value = row.get(f"vram {name}")
    ratio = f"{value / torch:.3f}" if value and torch else "-"
    return f"{name}, {ratio}"


def suggest(result: Path) -> str:
    """What a linalg result says (see the module docstring): per row, every pinned way, the
    fastest, PyTorch's best, and the ratios; then the no-cliff ratios."""
    rows = json.loads(result.read_text())["results"]
    head = "  ".join(f"{name[5:]:>9}" for name in PINNED)
    lines = [
        f"#   op         n x batch  nrhs {head}    torch  fastest  default/t  fastest/t"
        "  table: way, /t"
    ]
    for row in rows:
        if row.get("op") not in ("lu_factor", "solve"):
            continue
        cells = "  ".join(_cell(row.get(name)) for name in PINNED)
        torch = min(
            (row[k] for k in ("torch default", "torch cusolver") if row.get(k)), default=None
        )
        lines.append(
            f"#   {row['op']:<9} {row['n']:>4} x {row['batch']:<5} {row.get('nrhs', ''):>4} "
            f"{cells} {_cell(torch)}  {row.get('vram fastest', '-'):>7}  "
            f"{row.get('vram / best torch', '-'):>9}  {row.get('fastest / best torch', '-'):>9}"
            f"  {_with_table(row, torch)}"
        )
    lu = {(r["n"], r["batch"]): r for r in rows if r.get("op") == "lu_factor"}
    for low, high, batch in ((511, 512, 64), (1023, 1024, 16), (2047, 2048, 16)):
        a, b = lu.get((low, batch)), lu.get((high, batch))
        if a and b:
            for name in ("vram", *PINNED):
                if a.get(name) and b.get(name):
                    lines.append(
                        f"  cliff {high}/{low} at batch {batch}, {name}: "
                        f"{b[name] / a[name]:.3f} (at most 1.2)"
                    )
    return "\n".join(lines)


def profile(device: vram.Device) -> str:
    """Where the host's time goes in lu_factor and solve of 4096 32 x 32 matrices (fp32),
    as cProfile sees 200 calls of each (after warm-up)."""
    rng = np.random.default_rng(3)
    batch = 4096 if device.type == "cuda" else 16
    a = rng.standard_normal((batch, 32, 32)).astype(np.float32) + 6 * np.eye(32, dtype="f4")
    A = vram.tensor(a, device=device)
    B = vram.tensor(rng.standard_normal((batch, 32, 1)).astype(np.float32), device=device)
    out = []
    for name, call in (
        ("lu_factor", partial(vram.linalg.lu_factor, A)),
        ("solve", partial(vram.linalg.solve, A, B)),
    ):
        for _ in range(20):
            call()
        vram.synchronize(device)
        start = time.perf_counter()
        for _ in range(200):
            call()
        vram.synchronize(device)
        plain = (time.perf_counter() - start) * 1e3 / 200
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(200):
            call()
        vram.synchronize(device)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
        out.append(f"== {name} of ({batch}, 32, 32): {plain:.4f} ms per call unprofiled")
        out.append(text.getvalue())
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=None, help="cuda:N or sim:N (default: the default)")
    parser.add_argument("--mallocs", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-blocked", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--profile", action="store_true", help="print the host's time in lu_factor and solve"
    )
    parser.add_argument(
        "--suggest",
        type=Path,
        metavar="RESULT.json",
        help="print what a linalg result says about the crossover tables; no run",
    )
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    if options.suggest is not None:
        print(suggest(options.suggest))
        return 0
    device = vram.default_device() if options.device is None else vram.device(options.device)
    vram.set_device(device)
    cuda = device.type == "cuda"
    if options.no_blocked:
        disable_blocked("--no-blocked")
    if options.mallocs:  # the child: VRAM_NO_CACHING=1 is set
        print(json.dumps(malloc_counts(device, MALLOC_N if cuda else SIM_MALLOC_N)))
        return 0
    if options.smoke:  # the child: the blocked LU on every shape
        print(json.dumps(smoke(device, cuda)))
        return 0
    if options.profile:
        print(profile(device))
        return 0
    print(f"linalg benchmark on {device} ({device_name(device)})", flush=True)
    skipped_b = smoke_check(device) if not options.no_blocked else []
    mallocs, skipped_m = malloc_table(device, cuda)
    lu, skipped_lu = lu_rows(device, LU_SIZES if cuda else SIM_LU_SIZES, cuda)
    solves, skipped_s = solve_rows(device, SOLVE_SIZES if cuda else SIM_SOLVE_SIZES, cuda)
    paths = write_results("linalg", device, lu + solves, options.out, options.save)
    paths += write_results("linalg_mallocs", device, mallocs, options.out, options.save)
    for skip in dict.fromkeys(skipped_b + skipped_m + skipped_lu + skipped_s):
        print(f"skipped: {skip}")
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
