"""AOTInductor models on vram against torch's own runner (issue 33): per run of each package
that bench/aoti_export.py made, host and device time, device mallocs and peak reserved.

Implementations, each in a process of its own:
- ``vram eager``: ``vram.aoti.load(package)`` called on vram tensors (no torch in it);
- ``vram graph replay``: the same model's run captured once with ``vram.graph``, replayed;
- ``vram, no caching (ExecuTorch's policy)``: vram eager with ``VRAM_NO_CACHING=1``: every
  intermediate straight from the device and back, as ExecuTorch's CUDA backend does;
- ``torch AOTI runner``: ``torch._inductor.aoti_load_package(package)`` (torch's loader,
  libtorch's shims and allocator), called on torch tensors.

Per row:
- ``host_us``: the median over ``--reps`` samples of the host time to queue ``QUEUED`` runs
  on an idle device, per run (no synchronization inside);
- ``device_us``: the median over ``--reps`` runs of the GPU time between events recorded
  before and after one run (synchronized after each: the device's time for a run that
  does not overlap another);
- ``device_mallocs_per_run``: device allocations over ``RUNS`` warm runs, per run (vram:
  count_device_calls; torch: memory_stats' num_device_alloc);
- ``peak_reserved_mib``: the allocator's peak reserved memory while loading and running the
  package (its cache emptied and peak reset first); weights the model allocates itself
  (ways A and B: cudaMalloc) are outside every allocator, and ``constants_mib`` says how
  much they are.
Summary rows per package: the replayed graph's host time over torch's runner's (the target
is <= 0.5), and the device mallocs per warm run of vram eager beside the no-caching policy's.

    python bench/aoti.py --models DIR [--reps 50] [--out DIR] [--save]

``DIR`` holds aoti_export.py's output (it is run into DIR first where DIR has no manifest).
``--worker vram --device sim:0`` runs vram's part alone on the simulated GPU (a check of the
script: sim timings mean nothing).
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
from functools import partial
from pathlib import Path

QUEUED = 10  # runs queued per host-time sample
WARMUP = 5
RUNS = 20  # warm runs counted for device mallocs
MIB = 1 << 20
EAGER, GRAPH = "vram eager", "vram graph replay"
NO_CACHING, TORCH = "vram, no caching (ExecuTorch's policy)", "torch AOTI runner"
ROOT = Path(__file__).resolve().parents[1]


def timed(run: Callable[[], object], sync: Callable[[], None], event, reps: int) -> dict:
    """host_us and device_us of ``run`` (see the module docstring); ``event()`` makes a
    timing event with record() and elapsed_time()."""
    for _ in range(WARMUP):
        run()
    sync()
    host = []
    for _ in range(reps):
        sync()
        start = time.perf_counter_ns()
        for _ in range(QUEUED):
            run()
        host.append((time.perf_counter_ns() - start) / QUEUED / 1e3)
    sync()
    device = []
    for _ in range(reps):
        begin, end = event(), event()
        begin.record()
        run()
        end.record()
        end.synchronize()
        device.append(begin.elapsed_time(end) * 1e3)
    return {
        "host_us": round(statistics.median(host), 2),
        "device_us": round(statistics.median(device), 2),
    }


# ------------------------------------------------------------------------ the vram worker
def measure(package: str, impl: str, run: Callable[[], object], model, device, reps: int) -> dict:
    """One row for vram (see the module docstring)."""
    import vram

    sync = lambda: vram.synchronize(device)  # noqa: E731
    row = {"measure": "per run", "package": package, "impl": impl}
    row.update(timed(run, sync, lambda: vram.Event(enable_timing=True), reps))
    with vram.memory.count_device_calls(device) as calls:
        for _ in range(RUNS):
            run()
        sync()
    row["device_mallocs_per_run"] = calls.device_malloc / RUNS
    row["peak_reserved_mib"] = round(vram.memory.max_memory_reserved(device) / MIB, 1)
    row["constants_mib"] = round(model.constants_bytes / MIB, 2)
    return row


def vram_rows(
    folder: Path, entries: list[dict], reps: int, graph: bool, impl: str, device: str = "cuda:0"
) -> list[dict]:
    import numpy as np

    import vram
    import vram.aoti

    device = vram.device(device)
    vram.set_device(device)
    rows = []
    for entry in entries:
        vram.memory.empty_cache(device)
        vram.memory.reset_peak_memory_stats(device)
        try:
            model = vram.aoti.load(folder / entry["package"], device)
            x = [vram.tensor(np.load(folder / f), device=device) for f in entry["inputs"]]
            rows.append(measure(entry["name"], impl, partial(model, *x), model, device, reps))
            if graph:
                static = [t.clone() for t in x]
                g = vram.CUDAGraph()
                with vram.graph(g):
                    model(*static)
                rows.append(measure(entry["name"], GRAPH, g.replay, model, device, reps))
        except Exception as exc:  # one package's failure is its row; the others still run
            rows.append(failed(entry["name"], impl, exc))
        model = g = None  # the next package starts from an emptied cache
    return rows


def failed(package: str, impl: str, exc: Exception) -> dict:
    return {"measure": "per run", "package": package, "impl": impl, "error": repr(exc)[:300]}


# ------------------------------------------------------------------------ the torch worker
def torch_rows(folder: Path, entries: list[dict], reps: int) -> list[dict]:
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    from aoti_export import promote_libtorch

    promote_libtorch()
    sync = torch.cuda.synchronize
    event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    rows = []
    for entry in entries:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            runner = torch._inductor.aoti_load_package(str(folder / entry["package"]))
            x = [torch.from_numpy(np.load(folder / f)).cuda() for f in entry["inputs"]]
            with torch.no_grad():
                row = {"measure": "per run", "package": entry["name"], "impl": TORCH}
                row.update(timed(partial(runner, *x), sync, event, reps))
                before = torch.cuda.memory_stats().get("num_device_alloc")
                for _ in range(RUNS):
                    runner(*x)
                sync()
                after = torch.cuda.memory_stats().get("num_device_alloc")
            row["device_mallocs_per_run"] = None if before is None else (after - before) / RUNS
            row["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved() / MIB, 1)
            rows.append(row)
        except Exception as exc:
            rows.append(failed(entry["name"], TORCH, exc))
        runner = None
    return rows


def worker(options) -> int:
    folder = options.models
    entries = json.loads((folder / "manifest.json").read_text())["packages"]
    if options.worker == "torch":
        rows = torch_rows(folder, entries, options.reps)
    else:
        no_caching = options.worker == "vram-no-caching"
        impl = NO_CACHING if no_caching else EAGER
        rows = vram_rows(folder, entries, options.reps, not no_caching, impl, options.device)
    print(json.dumps(rows), flush=True)
    return 0


# --------------------------------------------------------------------------- orchestration
def run_worker(kind: str, options, env: dict | None = None) -> list[dict]:
    command = [sys.executable, __file__, "--worker", kind, "--models", str(options.models)]
    command += ["--reps", str(options.reps)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200,
                            env={**os.environ, **(env or {})})  # fmt: skip
    if result.returncode != 0:
        message = (result.stdout + result.stderr).strip().splitlines()[-6:]
        print(f"{kind}: FAILED\n  " + "\n  ".join(message), flush=True)
        return [{"measure": "per run", "package": "-", "impl": kind, "error": " | ".join(message)}]
    return json.loads(result.stdout.strip().splitlines()[-1])


def summary(rows: list[dict]) -> list[dict]:
    cell = {(r["package"], r["impl"]): r for r in rows if "error" not in r}
    out = []
    for package in dict.fromkeys(r["package"] for r in rows if "error" not in r):
        graph, torch_ = cell.get((package, GRAPH)), cell.get((package, TORCH))
        eager, uncached = cell.get((package, EAGER)), cell.get((package, NO_CACHING))
        out.append({
            "measure": "summary",
            "package": package,
            "graph_host_over_torch_runner": round(graph["host_us"] / torch_["host_us"], 3)
            if graph and torch_ else None,
            "eager_host_over_torch_runner": round(eager["host_us"] / torch_["host_us"], 3)
            if eager and torch_ else None,
            "vram_mallocs_per_run": eager["device_mallocs_per_run"] if eager else None,
            "no_caching_mallocs_per_run": uncached["device_mallocs_per_run"] if uncached else None,
        })  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="aoti_export.py's folder")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--device", default="cuda:0", help="vram's device (sim:0: a check)")
    parser.add_argument(
        "--worker", choices=("vram", "vram-no-caching", "torch"), help=argparse.SUPPRESS
    )
    sys.path.insert(0, str(ROOT / "bench"))
    from _common import add_output_arguments, write_results

    add_output_arguments(parser)
    options = parser.parse_args(argv)
    if options.worker:
        return worker(options)
    if not (options.models / "manifest.json").is_file():
        export = [sys.executable, str(ROOT / "bench" / "aoti_export.py"), str(options.models)]
        if (
            subprocess.run(export).returncode != 0
            and not (options.models / "manifest.json").is_file()
        ):
            parser.error(f"--models: exporting into {options.models} failed")
    rows = run_worker("vram", options)
    rows += run_worker("vram-no-caching", options, {"VRAM_NO_CACHING": "1"})
    rows += run_worker("torch", options)
    rows.sort(key=lambda r: (r["package"], r["impl"]))
    rows += summary(rows)
    for row in rows:
        print(json.dumps(row))
    for path in write_results("aoti", "cuda:0", rows, options.out, options.save):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
