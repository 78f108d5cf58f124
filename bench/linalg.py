"""LU benchmark (issue 13): ms per call of fp32 lu_factor and solve, vram vs PyTorch and CuPy,
and the device mallocs of one lu_factor_ex (pytorch#181997).

lu_factor, n x batch: 32x4096, 128x1024, 256x256, 511x64, 512x64, 1024x16, 4096x1, and
1023x16 / 2047x16 / 2048x16 (with 1024x16: the no-cliff check). solve (A (batch, n, n),
B (batch, n, k)) with k = 1 and 64 at 32x4096, 256x256, 512x64, 1024x16, 4096x1.
Peers in one process, on the same inputs (random normal, fp32):
- PyTorch: ``torch.linalg.lu_factor`` / ``solve`` with its default library choice, and with
  ``torch.backends.cuda.preferred_linalg_library("cusolver")``;
- CuPy: ``cupyx.scipy.linalg.lu_factor`` (one matrix: the batch-1 row) and
  ``cupy.linalg.solve`` (batched);
- vram: its default dispatch, and each way pinned (``cublas``, ``cusolver`` looped on one
  stream, ``streams`` over 4, 8 and 16 side streams, cuSOLVER's Xgetrf with ALG_0 and
  ALG_1 where the batch is at most 16), so the crossovers can be read off the table.
Every call is timed whole, as a user calls it: lu_factor and solve check info, so each
synchronizes. After two warm-up calls, a cell runs the call as many times as fit in about
TARGET_MS (2 to 50 times) with perf_counter, REPEATS times; the cell is the median, in ms.

Device mallocs (``--mallocs``, run by the benchmark in a child process with
``VRAM_NO_CACHING=1``): lu_factor_ex of (16, n, n) and (64, n, n) for n = 511, 512, 513:
vram's device mallocs cold (after empty_cache: every workspace new) and warm, and its
allocator requests; PyTorch's allocator requests for the same call (each is a cudaMalloc
with PYTORCH_NO_CUDA_MEMORY_CACHING=1), under both of its library choices. The issue
measured PyTorch before the fix at 20 cudaMalloc for (16, 512, 512) and 7 for (16, 511, 511).

``--device sim:0`` runs vram alone on small sizes, to check the script anywhere.
``--suggest RESULT.json`` prints the crossover table (``LU_CROSSOVERS`` in
vram/linalg/_dispatch.py) that a result supports, each row's vram / best PyTorch ratio and
the no-cliff ratios, without running anything.

    python bench/linalg.py [--device cuda:0] [--out FILE.json|DIR] [--save]
    python bench/linalg.py --suggest bench/results/linalg-cuda0-DATE.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import numpy as np

import vram
from _common import add_output_arguments, device_name, write_results
from vram.linalg import _dispatch

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
)
SOLVE_SIZES = ((32, 4096), (256, 256), (512, 64), (1024, 16), (4096, 1))
NRHS = (1, 64)
MALLOC_N = (511, 512, 513)
MALLOC_BATCHES = (16, 64)
SIM_LU_SIZES = ((8, 64), (32, 16), (64, 4), (96, 1))
SIM_SOLVE_SIZES = ((8, 64), (64, 4))
SIM_MALLOC_N = (31, 32, 33)
STREAMS = (4, 8, 16)
CUBLAS_MAX_N = 1024  # pinned cuBLAS above this is far off the crossover (and slow)
TARGET_MS = 100.0
REPEATS = 3
PYTORCH_ISSUE = {  # cudaMalloc per lu_factor_ex, from pytorch#181997 / #181998
    "16x511": "7 (cuBLAS batched)",
    "16x512": "20 before the fix, 5 after (looped cuSOLVER)",
    "64x512": "5 after the fix",
}

Call = Callable[[], object]


class _Skip(Exception):
    pass


# ---- timing --------------------------------------------------------------------------------


def time_call(call: Call, sync: Callable[[], None]) -> float:
    """Median ms per call (see the module docstring)."""
    for _ in range(2):
        call()
    sync()
    start = time.perf_counter()
    call()
    sync()
    first = (time.perf_counter() - start) * 1e3
    count = int(min(50, max(2, TARGET_MS / max(first, 1e-3))))
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(count):
            call()
        sync()
        runs.append((time.perf_counter() - start) * 1e3 / count)
    return statistics.median(runs)


def guarded(name: str, context, call: Call, sync, skipped: list[str]) -> float | None:
    """``time_call`` inside ``context``; a variant that fails is reported, not fatal."""
    try:
        with context:
            return time_call(call, sync)
    except Exception as exc:  # one broken variant must not cost the whole GPU run
        skipped.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
        return None


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


def vram_variants(n: int, batch: int) -> list[tuple[str, object]]:
    """(name, the plan context) of every vram variant of an n x batch row."""
    variants: list[tuple[str, object]] = [("vram", nullcontext())]
    if n <= CUBLAS_MAX_N:
        variants.append(("vram cublas", _dispatch.forced("cublas")))
    variants.append(("vram cusolver", _dispatch.forced("cusolver")))
    for count in STREAMS:
        if batch >= count:
            variants.append((f"vram streams {count}", _dispatch.forced("streams", streams=count)))
    if batch <= 16:
        for algo in (0, 1):
            variants.append((f"vram xgetrf alg{algo}", _dispatch.forced("cusolver", algo=algo)))
    return variants


def lu_rows(device: vram.Device, sizes, cuda: bool) -> tuple[list[dict], list[str]]:
    rows, skipped = [], []
    rng = np.random.default_rng(0)
    for n, batch in sizes:
        a = rng.standard_normal((batch, n, n)).astype(np.float32)
        if batch == 1:
            a = a[0]
        A = vram.tensor(a, device=device)
        sync = lambda: vram.synchronize(device)  # noqa: E731
        cells: dict[str, float | None] = {}
        for name, context in vram_variants(n, batch):
            cells[name] = guarded(name, context, partial(vram.linalg.lu_factor, A), sync, skipped)
        plan = vram.linalg.plan_lu(n, n, batch, "float32")
        if cuda:
            try:
                torch = _torch()
                T = torch.from_numpy(a).cuda()
                for name, library in (("torch default", "default"), ("torch cusolver", "cusolver")):
                    torch.backends.cuda.preferred_linalg_library(library)
                    call = partial(torch.linalg.lu_factor, T)
                    cells[name] = time_call(call, torch.cuda.synchronize)
                torch.backends.cuda.preferred_linalg_library("default")
                del T
            except Exception as skip:  # a peer that fails is reported, not fatal
                skipped.append(str(skip))
            try:
                cupy, cupy_linalg = _cupy()
                if batch == 1:
                    C = cupy.asarray(a)
                    sync_cupy = cupy.cuda.runtime.deviceSynchronize
                    cells["cupy"] = time_call(partial(cupy_linalg.lu_factor, C), sync_cupy)
                    del C
            except Exception as skip:  # a peer that fails is reported, not fatal
                skipped.append(str(skip))
        best_torch = min((v for k, v in cells.items() if k.startswith("torch") and v), default=None)
        row = {"op": "lu_factor", "n": n, "batch": batch, "vram_plan": plan.path}
        row.update({k: round(v, 4) for k, v in cells.items() if v is not None})
        if best_torch and cells.get("vram"):
            row["vram / best torch"] = round(cells["vram"] / best_torch, 3)
        rows.append(row)
        print(_line(row), flush=True)
    return rows, skipped


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
            cells: dict[str, float | None] = {}
            variants = [("vram", nullcontext()), ("vram cusolver", _dispatch.forced("cusolver"))]
            if n <= CUBLAS_MAX_N:
                variants.append(("vram cublas", _dispatch.forced("cublas")))
            if batch >= 8:
                variants.append(("vram streams 8", _dispatch.forced("streams", streams=8)))
            for name, context in variants:
                call = partial(vram.linalg.solve, A, B)
                cells[name] = guarded(name, context, call, sync, skipped)
            if cuda:
                try:
                    torch = _torch()
                    TA, TB = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
                    for name, lib in (("torch default", "default"), ("torch cusolver", "cusolver")):
                        torch.backends.cuda.preferred_linalg_library(lib)
                        call = partial(torch.linalg.solve, TA, TB)
                        cells[name] = time_call(call, torch.cuda.synchronize)
                    torch.backends.cuda.preferred_linalg_library("default")
                    del TA, TB
                except Exception as skip:  # a peer that fails is reported, not fatal
                    skipped.append(str(skip))
                try:
                    cupy, _ = _cupy()
                    CA, CB = cupy.asarray(a), cupy.asarray(b)
                    sync_cupy = cupy.cuda.runtime.deviceSynchronize
                    cells["cupy"] = time_call(partial(cupy.linalg.solve, CA, CB), sync_cupy)
                    del CA, CB
                except Exception as skip:  # a peer that fails is reported, not fatal
                    skipped.append(str(skip))
            best_torch = min(
                (v for key, v in cells.items() if key.startswith("torch") and v), default=0
            )
            row = {"op": "solve", "n": n, "batch": batch, "nrhs": k}
            row["vram_plan"] = vram.linalg.plan_lu(n, n, batch, "float32").path
            row.update({key: round(v, 4) for key, v in cells.items() if v is not None})
            if best_torch and cells.get("vram"):
                row["vram / best torch"] = round(cells["vram"] / best_torch, 3)
            rows.append(row)
            print(_line(row), flush=True)
    return rows, skipped


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
    child = subprocess.run(
        [sys.executable, str(script), "--mallocs", "--device", str(device)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if child.returncode != 0:
        raise RuntimeError(f"the malloc count failed:\n{child.stderr}")
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

PINNED = ("vram cublas", "vram cusolver", *(f"vram streams {k}" for k in STREAMS))


def suggest(result: Path) -> str:
    """The crossover table (vram/linalg/_dispatch.py) that a linalg result supports: the
    note's table of pinned timings, and LU_CROSSOVERS["float32"] read off it; then each
    row's vram / best PyTorch and the no-cliff ratios."""
    rows = [r for r in json.loads(result.read_text())["results"] if r.get("op") == "lu_factor"]
    lines = ["#   n x batch   " + "  ".join(f"{name[5:]:>10}" for name in PINNED) + "  best"]
    winners = []
    for row in rows:
        cells = {name: row.get(name) for name in PINNED}
        timed = {k: v for k, v in cells.items() if v is not None}
        best = min(timed, key=timed.get) if timed else "-"
        winners.append((row["n"], row["batch"], best, row))
        text = "  ".join(f"{'-' if v is None else f'{v:.3f}':>10}" for v in cells.values())
        lines.append(f"#   {row['n']:>4} x {row['batch']:<5} {text}  {best[5:]}")
    batched = sorted((n, b, best) for n, b, best, _ in winners if b >= 2)
    cublas_max = 0
    for n, _, best in batched:
        if best != "vram cublas":
            break
        cublas_max = n
    spread = [best for _, _, best in batched if best.startswith("vram streams")]
    streams = max(set(spread), key=spread.count) if spread else "vram streams 8"
    looped_wins = [b for n, b, best, _ in winners if b >= 2 and best == "vram cusolver"]
    min_batch = (max(looped_wins) + 1) if looped_wins else 2
    algo = "None"
    singles = [row for n, b, _, row in winners if b <= 16 and row.get("vram xgetrf alg1")]
    for name, value in (("vram xgetrf alg1", "1"), ("vram xgetrf alg0", "0")):
        if singles and all(r[name] < 0.95 * r["vram cusolver"] for r in singles if r.get(name)):
            algo = value
            break
    lines.append(
        f'    "float32": Crossover(cublas_max_n={cublas_max}, streams_min_batch={min_batch}, '
        f"streams={streams.split()[-1]}, getrf_algo={algo}),"
    )
    for row in rows:
        lines.append(f"  {row['n']} x {row['batch']}: vram / best torch = "
                     f"{row.get('vram / best torch')}")  # fmt: skip
    vram_ms = {(r["n"], r["batch"]): r.get("vram") for r in rows}
    for low, high, batch in ((511, 512, 64), (1023, 1024, 16), (2047, 2048, 16)):
        a, b = vram_ms.get((low, batch)), vram_ms.get((high, batch))
        if a and b:
            lines.append(f"  cliff {high}/{low} at batch {batch}: {b / a:.3f} (at most 1.2)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None, help="cuda:N or sim:N (default: the default)")
    parser.add_argument("--mallocs", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--suggest",
        type=Path,
        metavar="RESULT.json",
        help="print the crossover table a linalg result supports, and its ratios; no run",
    )
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    if options.suggest is not None:
        print(suggest(options.suggest))
        return 0
    device = vram.default_device() if options.device is None else vram.device(options.device)
    vram.set_device(device)
    cuda = device.type == "cuda"
    if options.mallocs:  # the child: VRAM_NO_CACHING=1 is set
        print(json.dumps(malloc_counts(device, MALLOC_N if cuda else SIM_MALLOC_N)))
        return 0
    print(f"linalg benchmark on {device} ({device_name(device)})", flush=True)
    mallocs, skipped_m = malloc_table(device, cuda)
    lu, skipped_lu = lu_rows(device, LU_SIZES if cuda else SIM_LU_SIZES, cuda)
    solves, skipped_s = solve_rows(device, SOLVE_SIZES if cuda else SIM_SOLVE_SIZES, cuda)
    paths = write_results("linalg", device, lu + solves, options.out, options.save)
    paths += write_results("linalg_mallocs", device, mallocs, options.out, options.save)
    for skip in dict.fromkeys(skipped_m + skipped_lu + skipped_s):
        print(f"skipped: {skip}")
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
