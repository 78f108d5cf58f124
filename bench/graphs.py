"""CUDA graph benchmark (issue 10): host time per step, eager against graph replay, vram
against PyTorch's torch.cuda.graph of the same work, in one run.

Cases:
- ``chain of 100 adds``: ``x.add_(y)`` 100 times on a 4,096-element float32 tensor: 100
  small kernels a step, where launching is all the cost;
- ``MLP step``: the forward-and-update step of tests/gpu/test_graphs_gpu.py (batch 64,
  128 -> 256 -> 64 with a ReLU, the mean squared error's gradients by hand, fused capturable
  AdamW): 13 kernels and GEMMs.

Per implementation and mode, each row gives:
- ``host_us``: host time per step: the median over ``--reps`` repetitions of the time to
  queue 10 steps (the device idle at the start of each, so nothing waits on it), per step;
- ``wall_us``: wall time per step of ``--steps`` steps and a synchronize (the device's time
  when it is the bottleneck).
Rows ``vram graph (driver call only)`` time vram's launch function alone (the floor under
``CUDAGraph.replay``). The ``head to head`` rows time the graph replays again, their
samples interleaved (vram's replay, its driver call, PyTorch's replay, in turn), so that
the comparison sees one machine state. Summary rows: graph replay host time of vram over
PyTorch from those (the target is <= 1.1), and each implementation's eager over graph host
time (the speed-up). A case that fails is a row with its error; the others still run.
``--device sim:0`` runs vram alone (a check of the script; sim timings mean nothing).

    python bench/graphs.py [--device cuda:0] [--steps 200] [--reps 50] [--out DIR] [--save]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

import numpy as np

import vram
from _common import add_output_arguments, description_of, write_results

CHAIN = 100  # kernels per step of the chain case
CHAIN_NUMEL = 4096
BATCH, D_IN, HIDDEN, D_OUT = 64, 128, 256, 64
QUEUED = 10  # steps queued per host-time sample
WARMUP = 3


def host_us(step: Callable[[], None], sync: Callable[[], None], reps: int) -> float:
    """Median host microseconds per step to queue ``QUEUED`` steps on an idle device."""
    samples = []
    for _ in range(reps):
        sync()
        start = time.perf_counter_ns()
        for _ in range(QUEUED):
            step()
        samples.append((time.perf_counter_ns() - start) / QUEUED / 1e3)
    sync()
    return statistics.median(samples)


def wall_us(step: Callable[[], None], sync: Callable[[], None], steps: int) -> float:
    sync()
    start = time.perf_counter_ns()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter_ns() - start) / steps / 1e3


def measure(case: str, impl: str, mode: str, step, sync, args) -> dict:
    gc.collect()
    gc.disable()
    try:
        for _ in range(WARMUP):
            step()
        row = {
            "case": case,
            "impl": impl,
            "mode": mode,
            "host_us": round(host_us(step, sync, args.reps), 2),
            "wall_us": round(wall_us(step, sync, args.steps), 2),
        }
    finally:
        gc.enable()
    host, wall = row["host_us"], row["wall_us"]
    print(f"{case:20s} {impl:6s} {mode:26s} host {host:9.2f} us  wall {wall:9.2f} us")
    return row


# ================================================================== the work, in vram
def vram_chain(device: vram.Device) -> Callable[[], None]:
    x = vram.ones(CHAIN_NUMEL, device=device)
    y = vram.full((CHAIN_NUMEL,), 1e-3, device=device)

    def step() -> None:
        for _ in range(CHAIN):
            x.add_(y)

    return step


def mlp_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((BATCH, D_IN)),
        "target": rng.standard_normal((BATCH, D_OUT)),
        "w1": rng.standard_normal((HIDDEN, D_IN)) * 0.1,
        "b1": rng.standard_normal(HIDDEN) * 0.1,
        "w2": rng.standard_normal((D_OUT, HIDDEN)) * 0.1,
        "b2": rng.standard_normal(D_OUT) * 0.1,
    }


def vram_mlp(device: vram.Device) -> Callable[[], None]:
    a = {k: vram.tensor(v.astype(np.float32), device=device) for k, v in mlp_arrays().items()}
    x, target, w1, b1, w2, b2 = (a[k] for k in ("x", "target", "w1", "b1", "w2", "b2"))
    params = [w1, b1, w2, b2]
    for p in params:
        p.grad = vram.zeros(p.shape, device=device)
    ones = vram.ones((1, BATCH), device=device)
    opt = vram.optim.AdamW(params, lr=1e-3, fused=True, capturable=True)

    def step() -> None:
        h = vram.addmm(b1, x, w1.t(), activation="relu")
        y = vram.addmm(b2, h, w2.t())
        dy = (y - target) * (2.0 / (BATCH * D_OUT))
        vram.mm(dy.t(), h, out=w2.grad)
        vram.mm(ones, dy, out=b2.grad.view(1, D_OUT))
        dh = vram.mm(dy, w2)
        relu_mask = 1.0 - vram._foreach_maximum([1.0 - h * 1e30], 0.0)[0]
        dz = dh * relu_mask
        vram.mm(dz.t(), x, out=w1.grad)
        vram.mm(ones, dz, out=b1.grad.view(1, HIDDEN))
        opt.step()

    return step


def vram_rows(device: vram.Device, case: str, make, args, replays: dict) -> list[dict]:
    def sync() -> None:
        vram.synchronize(device)

    rows = [measure(case, "vram", "eager", make(device), sync, args)]
    step = make(device)
    for _ in range(WARMUP):  # the optimizer's state, compiled kernels, library plans
        step()
    g = vram.CUDAGraph()
    with vram.graph(g):
        step()
    rows.append(measure(case, "vram", "graph", g.replay, sync, args))
    launch = device.driver.graph_launcher(g._exec)
    handle = vram.current_stream(device).cuda_stream

    def driver_call() -> None:
        launch(handle)

    rows.append(measure(case, "vram", "graph (driver call only)", driver_call, sync, args))
    replays["vram graph"], replays["vram driver call"] = g.replay, driver_call
    replays["_keep"] = (g, step)  # the graph and what it uses live until the case ends
    return rows


def head_to_head(case: str, replays: dict, sync, args) -> list[dict]:
    """Host us per replay of each, the samples of all interleaved (one machine state)."""
    names = [name for name in replays if not name.startswith("_")]
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    gc.disable()
    try:
        for _ in range(WARMUP):
            for name in names:
                replays[name]()
        for _ in range(args.reps):
            for name in names:
                sync()
                start = time.perf_counter_ns()
                for _ in range(QUEUED):
                    replays[name]()
                samples[name].append((time.perf_counter_ns() - start) / QUEUED / 1e3)
        sync()
    finally:
        gc.enable()
    rows = []
    for name in names:
        impl, mode = name.split(" ", 1)
        median = round(statistics.median(samples[name]), 2)
        rows.append(
            {"case": case, "impl": impl, "mode": f"{mode} (head to head)", "host_us": median}
        )
        print(f"{case:20s} {impl:6s} {mode + ' (head to head)':26s} host {median:9.2f} us")
    return rows


# ================================================================ the work, in PyTorch
def torch_rows(torch, case: str, args, replays: dict) -> list[dict]:
    sync = torch.cuda.synchronize
    make = torch_chain if case.startswith("chain") else torch_mlp
    rows = [measure(case, "torch", "eager", make(torch), sync, args)]
    step = make(torch)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    rows.append(measure(case, "torch", "graph", g.replay, sync, args))
    replays["torch graph"], replays["_keep_torch"] = g.replay, (g, step)
    return rows


def torch_chain(torch) -> Callable[[], None]:
    x = torch.ones(CHAIN_NUMEL, device="cuda")
    y = torch.full((CHAIN_NUMEL,), 1e-3, device="cuda")

    def step() -> None:
        for _ in range(CHAIN):
            x.add_(y)

    return step


def torch_mlp(torch) -> Callable[[], None]:
    a = {k: torch.tensor(v.astype(np.float32), device="cuda") for k, v in mlp_arrays().items()}
    x, target, w1, b1, w2, b2 = (a[k] for k in ("x", "target", "w1", "b1", "w2", "b2"))
    params = [w1, b1, w2, b2]
    for p in params:
        p.requires_grad_(True)
        p.grad = torch.zeros_like(p)
    ones = torch.ones((1, BATCH), device="cuda")
    opt = torch.optim.AdamW(params, lr=1e-3, fused=True, capturable=True)

    def step() -> None:
        with torch.no_grad():
            h = torch._addmm_activation(b1, x, w1.t())
            y = torch.addmm(b2, h, w2.t())
            dy = (y - target) * (2.0 / (BATCH * D_OUT))
            torch.mm(dy.t(), h, out=w2.grad)
            torch.mm(ones, dy, out=b2.grad.view(1, D_OUT))
            dh = torch.mm(dy, w2)
            relu_mask = 1.0 - torch._foreach_maximum([1.0 - h * 1e30], 0.0)[0]
            dz = dh * relu_mask
            torch.mm(dz.t(), x, out=w1.grad)
            torch.mm(ones, dz, out=b1.grad.view(1, HIDDEN))
        opt.step()

    return step


# ===================================================================== summary, main
def summary(rows: list[dict]) -> list[dict]:
    """Graph replay host time of vram over PyTorch, and eager over graph per impl."""
    find = {(r["case"], r.get("impl"), r.get("mode")): r for r in rows}
    out = []
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = find.get((case, "vram", "graph (head to head)"))
        theirs = find.get((case, "torch", "graph (head to head)"))
        if mine and theirs:
            ratio = mine["host_us"] / theirs["host_us"]
            out.append(
                {"case": case, "summary": "replay host vram / torch", "value": round(ratio, 3)}
            )
        for impl in ("vram", "torch"):
            eager, graph = find.get((case, impl, "eager")), find.get((case, impl, "graph"))
            if eager and graph:
                out.append(
                    {
                        "case": case,
                        "summary": f"{impl} eager / graph host",
                        "value": round(eager["host_us"] / graph["host_us"], 1),
                    }
                )
    for row in out:
        print(f"{row['case']:20s} {row['summary']:28s} {row['value']}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=None, help="cuda:0 (default where a GPU is) or sim:0")
    parser.add_argument("--steps", type=int, default=200, help="steps per wall-time sample")
    parser.add_argument("--reps", type=int, default=50, help="host-time samples per row")
    add_output_arguments(parser)
    args = parser.parse_args()
    device = vram.device(args.device) if args.device else vram.default_device()
    if device.type != "cuda":
        args.steps, args.reps = min(args.steps, 5), min(args.reps, 3)
    torch = None
    if device.type == "cuda":
        try:
            import torch
        except ImportError:
            print("PyTorch is not installed: vram alone")
    rows = []
    with device:
        for case, make in (("chain of 100 adds", vram_chain), ("MLP step", vram_mlp)):
            replays: dict = {}
            for impl in ("vram", "torch") if torch is not None else ("vram",):
                try:
                    if impl == "vram":
                        rows += vram_rows(device, case, make, args, replays)
                    else:
                        rows += torch_rows(torch, case, args, replays)
                except Exception as exc:  # reported, not fatal: the other rows still run
                    print(f"{case}: {impl} failed: {exc!r}")
                    rows.append({"case": case, "impl": impl, "error": repr(exc)})
            if "vram graph" in replays:
                rows += head_to_head(case, replays, lambda: vram.synchronize(device), args)
            del replays
    rows += summary(rows)
    for path in write_results("graphs", device, rows, args.out, args.save):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
