"""The GPU tests of vram's own kernels under compute-sanitizer's four tools, and a summary.

    bash bench/sanitize.sh [--seconds S] [--only NAME,...]

The runs (``RUNS``) go at once, each a ``pytest -v`` process under one tool (one GPU, many
cores: the tools spend their time on the host), each stopped after ``--seconds`` (default
420, so that the whole finishes in about 8 minutes on an H100); what a run covers is said
with it, and in the JSON. Every CUDA call that failed is listed: deliberate ones (``WHY``:
an out-of-memory test, a query of unfinished work, ...) with the reason, any other one as
an error. The summary: error count per tool (device-side findings, the tool's own failures
and unexpected API errors), the tests each run ran and their outcomes, in
bench/results/sanitize-cuda0-DATE.json (and $OUT), the logs in $OUT.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from _sanitizer import Report, command, find_sanitizer, read_report

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GPU = "tests/gpu"
KERNEL_SUITES = tuple(f"{GPU}/test_{name}_gpu.py" for name in ("tensor", "optim", "linalg", "blas"))
# what takes minutes under the tools and adds no kernel: the largest LU (cluster and tall
# tables' last rows), eight threads of a thousand GEMMs, and tests that count the caching
# allocator's device mallocs (the memcheck runs allocate each tensor on its own)
HEAVY = "(one_matrix_panels_match and (2049 or 4096)) or thousand_gemms or o1_device_mallocs"
# the kernels that use shared memory or barriers, on small shapes (racecheck is slow):
# tiled copies, every kind of LU panel, swap_trsm, the solves, first_nonzero
SHARED = (
    "tiled or blocked_lu_and_solve or first_nonzero or zero_pivot_flag or "
    "(one_matrix_panels_match and 300) or (look_ahead and 300) or two_hundred_tensors"
)
UNCACHED = {"VRAM_NO_CACHING": "1", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
NO_CLUSTERS = {"VRAM_LINALG_CLUSTERS": "0"}


@dataclass(frozen=True)
class Run:
    name: str
    tool: str
    tests: tuple[str, ...]
    select: str  # pytest -k ("" for every test of ``tests``)
    covers: str
    env: dict[str, str] = field(default_factory=dict)


RUNS = (
    Run(
        "memcheck",
        "memcheck",
        KERNEL_SUITES,
        f"not ({HEAVY} or look_ahead)",
        "every kernel vram owns that the GPU tests launch (elementwise ops, copies and fills, "
        "foreach, multi-tensor and fused optimizers, the BLAS epilogues, LU panels, swaps and "
        "solves, det, slogdet, pivots, first_nonzero); each tensor its own device allocation "
        "(VRAM_NO_CACHING=1), so that an access past its end is one; LU without cluster "
        "panels (VRAM_LINALG_CLUSTERS=0: see bench/sanitize/cluster_probe.py)",
        {**UNCACHED, **NO_CLUSTERS},
    ),
    Run(
        "memcheck, graphs and the runtime",
        "memcheck",
        (
            f"{GPU}/test_graphs_gpu.py",
            f"{GPU}/test_streams_gpu.py",
            f"{GPU}/test_memory_gpu.py",
            f"{GPU}/test_cuda_driver.py",
            f"{GPU}/test_async_backend_gpu.py",
            f"{GPU}/test_sanitizer_gpu.py",
            f"{GPU}/test_linalg_gpu.py",
        ),
        "not test_linalg_gpu.py or look_ahead",
        "CUDA graphs captured and replayed (an MLP step a thousand times, "
        "make_graphed_callables, the LU look-ahead's replays), streams, events, the caching, "
        "expandable and async allocators on the GPU; the deliberate API errors (OOM tests, "
        "queries of unfinished work, illegal work during capture); LU without cluster panels",
        dict(NO_CLUSTERS),
    ),
    Run(
        "racecheck",
        "racecheck",
        (f"{GPU}/test_tensor_gpu.py", f"{GPU}/test_linalg_gpu.py", f"{GPU}/test_optim_gpu.py"),
        SHARED,
        "the kernels with shared memory or barriers, on small shapes: tiled copies, LU panels "
        "(one block, tall, and cluster panels with their bulk-copy exchange), swap_trsm, "
        "getrs, first_nonzero; the multi-tensor apply",
    ),
    Run(
        "synccheck",
        "synccheck",
        (f"{GPU}/test_tensor_gpu.py", f"{GPU}/test_linalg_gpu.py", f"{GPU}/test_optim_gpu.py"),
        SHARED,
        "the same kernels as racecheck: their __syncthreads, mbarriers and cluster barriers",
    ),
    Run(
        "initcheck",
        "initcheck",
        KERNEL_SUITES,
        f"not ({HEAVY} or look_ahead or 1500 or crossovers or constant_in_the_batch or "
        "test_matmul_matches_numpy)",
        "reads of device memory nothing wrote, over the kernel tests but the largest and the "
        "plain GEMM shapes; each tensor its own device allocation (VRAM_NO_CACHING=1); LU "
        "on cluster panels",
        dict(UNCACHED),
    ),
)

# Deliberate API errors: (call, error, the test that makes them; "" for any), and why.
WHY = (
    ("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "", "out-of-memory tests ask for 10 TiB or 1 PiB"),
    ("cuMemAllocAsync", "CUDA_ERROR_OUT_OF_MEMORY", "", "the same, on cudaMallocAsync's pool"),
    ("cuMemAllocFromPoolAsync", "CUDA_ERROR_OUT_OF_MEMORY", "", "the same, from a pool"),
    ("cuMemCreate", "CUDA_ERROR_OUT_OF_MEMORY", "", "the same, expandable segments' pages"),
    ("cuEventQuery", "CUDA_ERROR_NOT_READY", "", "Event.query() of unfinished work (False)"),
    ("cuStreamQuery", "CUDA_ERROR_NOT_READY", "", "Stream.query() of unfinished work (False)"),
    ("cudaEventQuery", "cudaErrorNotReady", "", "PyTorch's allocator polls its events"),
    ("cudaStreamQuery", "cudaErrorNotReady", "", "PyTorch polls its streams"),
    ("cuGetProcAddress", "CUDA_ERROR_NOT_FOUND", "", "cuda-bindings looks up entry points"),
    ("", "", "illegal_work_during_capture", "what capture forbids, done on purpose (vs the sim)"),
)


def _call(name: str) -> str:
    """A CUDA call's name without its version and stream-mode suffixes (cuMemAlloc_v2)."""
    return re.sub(r"(_v\d+|_ptds|_ptsz)+$", "", name)


def why(call: str, error: str, test: str) -> str | None:
    """The reason an API error that ``test`` made is deliberate, or None."""
    for known_call, known_error, by, reason in WHY:
        if known_error in ("", error) and known_call in ("", _call(call)) and by in test:
            return reason
    return None


def start(run: Run, sanitizer: str, log: Path) -> subprocess.Popen:
    pytest = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-m", "gpu",
              "--tb=short", "-o", "console_output_style=classic", *run.tests]  # fmt: skip
    if run.select:
        pytest += ["-k", run.select]
    env = {**os.environ, **run.env, "PYTHONUNBUFFERED": "1"}
    with log.open("w") as out:
        return subprocess.Popen(
            command(sanitizer, run.tool, pytest),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
            start_new_session=True,  # a group of its own: stopped as a whole past its time
        )


def wait(processes: dict[str, subprocess.Popen], seconds: float) -> dict[str, dict]:
    """Wait for every run, stopping (SIGINT, then SIGKILL) those past ``seconds``."""
    begun = time.monotonic()
    done: dict[str, dict] = {}
    while len(done) < len(processes):
        for name, process in processes.items():
            if name in done:
                continue
            status = process.poll()
            elapsed = time.monotonic() - begun
            if status is not None:
                done[name] = {"status": status, "seconds": round(elapsed, 1), "timed_out": False}
            elif elapsed > seconds:
                os.killpg(process.pid, signal.SIGINT)  # pytest prints what it has run
                try:
                    status = process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    status = process.wait()
                done[name] = {"status": status, "seconds": round(elapsed, 1), "timed_out": True}
        time.sleep(1)
    return done


def summary(run: Run, report: Report, ended: dict, log: Path) -> dict:
    """One run's row of the JSON."""
    listed: dict[tuple[str, str, str | None], dict] = {}  # (call, error, why) -> a row
    for row in report.grouped("api"):
        for test, count in row["tests"].items():
            reason = why(row["where"], row["what"], test)
            found = listed.setdefault(
                (row["where"], row["what"], reason),
                {"what": row["what"], "where": row["where"], "count": 0, "tests": {}},
            )
            found["count"] += count
            found["tests"][test] = count
    deliberate = [{**row, "why": key[2]} for key, row in listed.items() if key[2]]
    unexpected = [row for key, row in listed.items() if not key[2]]
    outcomes = report.outcomes
    counts = {kind: sum(v == kind for v in outcomes.values()) for kind in set(outcomes.values())}
    failed = sorted(test for test, outcome in outcomes.items() if outcome in ("FAILED", "ERROR"))
    errors = report.count("device") + report.count("tool") + report.unprinted
    errors += sum(row["count"] for row in unexpected)
    return {
        "run": run.name,
        "tool": run.tool,
        **ended,
        "errors": errors,
        "unprinted": report.unprinted,
        "summary_errors": report.summary_errors,
        "processes": report.summaries,
        "tests_ran": len(outcomes),
        "tests_failed": len(failed),
        # (lists and dicts: the details, left out of the README's table)
        "about": {
            "covers": run.covers,
            "tests": list(run.tests),
            "select": run.select,
            "env": run.env,
            "log": str(log),
        },  # fmt: skip
        "findings": report.grouped("device") + report.grouped("tool"),
        "warnings": report.grouped("warning"),
        "api_errors_deliberate": deliberate,
        "api_errors_unexpected": unexpected,
        "outcomes": counts,
        "failed": failed,
        "ran": list(outcomes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=420, help="each run's time (420)")
    parser.add_argument("--only", default="", help="runs to do, by name, comma-separated")
    parser.add_argument("--sanitizer", default=None, help="compute-sanitizer (default: PATH)")
    options = parser.parse_args(argv)
    sanitizer = options.sanitizer or find_sanitizer()
    if sanitizer is None:
        print("sanitize: compute-sanitizer is not on PATH nor in /usr/local/cuda/bin")
        return 2
    wanted = [name.strip() for name in options.only.split(",") if name.strip()]
    runs = [run for run in RUNS if not wanted or run.name in wanted]
    out = Path(os.environ.get("OUT") or "/tmp/vram-sanitize")
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([sanitizer, "--version"], capture_output=True, text=True).stdout
    print(f"sanitize: {version.strip().splitlines()[-1:]}; {len(runs)} runs at once, "
          f"{options.seconds:.0f} s each at most", flush=True)  # fmt: skip
    logs = {run.name: out / f"sanitize-{run.name.replace(' ', '_').replace(',', '')}.log"
            for run in runs}  # fmt: skip
    processes = {run.name: start(run, sanitizer, logs[run.name]) for run in runs}
    ended = wait(processes, options.seconds)
    rows = []
    for run in runs:
        report = read_report(logs[run.name].read_text(errors="replace"))
        rows.append(summary(run, report, ended[run.name], logs[run.name]))
    for row in rows:
        row["about"]["sanitizer"] = version.strip().splitlines()[-1:]
    totals: dict[str, int] = {}
    for row in rows:
        totals[row["tool"]] = totals.get(row["tool"], 0) + row["errors"]
    print(f"\n{'run':36s} {'tool':10s} {'errors':>6s} {'api ok':>6s} {'tests':>6s} {'failed':>6s}"
          f" {'seconds':>8s}")  # fmt: skip
    for row in rows:
        ok = sum(item["count"] for item in row["api_errors_deliberate"])
        late = " (stopped)" if row["timed_out"] else ""
        print(f"{row['run']:36s} {row['tool']:10s} {row['errors']:6d} {ok:6d} {row['tests_ran']:6d}"
              f" {row['tests_failed']:6d} {row['seconds']:8.0f}{late}")  # fmt: skip
        for finding in row["findings"] + row["api_errors_unexpected"]:
            print(f"    {finding['count']} x {finding['what']} [{finding['where']}]")
    print("errors per tool: " + ", ".join(f"{tool} {n}" for tool, n in totals.items()))
    sys.path.insert(0, str(HERE.parent))
    import vram
    from _common import write_results

    device = vram.default_device()  # cuda:0 on the GPU machine
    for path in write_results("sanitize", device, rows, None, save=True):
        print(f"wrote {path}")
    clean = all(n == 0 for n in totals.values()) and not any(r["timed_out"] for r in rows)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
