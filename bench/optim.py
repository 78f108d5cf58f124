"""Optimizer step benchmark (issue 9): vram's fused and foreach Adam against PyTorch's fused,
foreach and for-loop Adam, in one run.

Cases (``--device sim:0`` runs each at 1/1000 of its size, vram alone, to check the script):
- ``100M fp32 / 200``: 100M float32 parameters in 200 tensors of 500,000;
- ``100M fp32 / 10,000``: 100M float32 parameters in 10,000 tensors of 10,000;
- ``1.3B bf16``: a 1.3B-parameter bfloat16 model (24 layers of a 2048-wide transformer and a
  50,257-word embedding: 292 tensors). vram keeps its moments in float32 (``state_dtype``);
  PyTorch's fused Adam needs state in the parameters' dtype, so its rows (and a vram row
  for the same work) keep bfloat16 moments.

Each row: ms per step (CUDA events around ``--steps`` steps after warm-up steps, so a step
that Python cannot feed fast enough shows as such), GB/s (the bytes PyTorch's fused kernel
moves per step: parameters read and written, gradients read, both moments read and written;
for the other implementations the same count, an effective rate) and kernel launches per
step (vram: launches counted at the driver; PyTorch: CUDA kernels in a profiler trace).
A device-to-device copy gives the ceiling. ``--sweep`` also times vram's fused kernel at
other tile and block sizes on the first case.

    python bench/optim.py [--device cuda:0] [--steps 20] [--out DIR] [--save] [--sweep]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import vram
from _common import description_of, write_results
from vram.ops import _multi_tensor

GB = 1e9
LAYERS, WIDTH, VOCAB = 24, 2048, 50257
WARMUP = 3


def transformer_shapes() -> list[tuple[int, ...]]:
    """The parameter shapes of a 1.3B GPT-style model (tied embedding)."""
    shapes: list[tuple[int, ...]] = [(VOCAB, WIDTH), (2048, WIDTH)]
    for _ in range(LAYERS):
        shapes += [(WIDTH,), (WIDTH,), (3 * WIDTH, WIDTH), (3 * WIDTH,), (WIDTH, WIDTH), (WIDTH,)]
        shapes += [(WIDTH,), (WIDTH,), (4 * WIDTH, WIDTH), (4 * WIDTH,), (WIDTH, 4 * WIDTH)]
        shapes += [(WIDTH,)]
    return shapes + [(WIDTH,), (WIDTH,)]


def cases(scale: int) -> list[dict]:
    """The benchmark cases; ``scale`` divides every tensor's size (1 on a GPU)."""
    big = [(500_000 // scale,)] * 200
    small = [(10_000 // scale,)] * (10_000 if scale == 1 else 1_000)
    model = transformer_shapes()
    if scale != 1:
        model = [(max(int(np.prod(s)) // scale, 1),) for s in model]
    return [
        {"case": "100M fp32 / 200", "shapes": big, "dtype": "float32", "state": "float32"},
        {"case": "100M fp32 / 10,000", "shapes": small, "dtype": "float32", "state": "float32"},
        {"case": "1.3B bf16", "shapes": model, "dtype": "bfloat16", "state": "float32"},
    ]


def bytes_per_step(numel: int, param_bytes: int, state_bytes: int) -> int:
    """What PyTorch's fused Adam kernel moves: params r+w, grads r, two moments r+w."""
    return numel * (3 * param_bytes + 4 * state_bytes)


# ================================================================== vram
def vram_setup(device: vram.Device, shapes, dtype: str, seed: int = 0):
    dt = getattr(vram, dtype)
    params, grads = [], []
    for shape in shapes:
        p = vram.empty(shape, dtype=dt, device=device)
        p.fill_(0.01)
        g = vram.empty(shape, dtype=dt, device=device)
        g.fill_(0.001)
        p.grad = g
        params.append(p)
        grads.append(g)
    return params


def count_vram_launches(params: list, **options: Any) -> int:
    """Kernel launches of the second step of a new ``Adam(params, **options)`` (every launch
    goes through a launcher multi_tensor_apply prepared; the first step prepares them)."""
    count = [0]
    real = _multi_tensor.launcher

    def counting(device: vram.Device, launch: Any) -> Callable[..., None]:
        run = real(device, launch)

        def counted(*args: Any) -> None:
            count[0] += 1
            run(*args)

        return counted

    _multi_tensor.launcher = counting  # type: ignore[assignment]
    try:
        opt = vram.optim.Adam(params, **options)
        opt.step()
        count[0] = 0
        opt.step()
    finally:
        _multi_tensor.launcher = real  # type: ignore[assignment]
    return count[0]


def time_vram(device: vram.Device, step: Callable[[], None], steps: int) -> float:
    """ms per step: CUDA events on the current stream around ``steps`` steps (wall time on
    the sim)."""
    for _ in range(WARMUP):
        step()
    vram.synchronize(device)
    gc.collect()
    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        vram.synchronize(device)
        return (time.perf_counter() - t0) * 1e3 / steps
    stream = vram.current_stream(device)
    start, end = vram.Event(enable_timing=True), vram.Event(enable_timing=True)
    start.record(stream)
    for _ in range(steps):
        step()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / steps


def vram_rows(device: vram.Device, case: dict, steps: int) -> list[dict]:
    rows = []
    numel = sum(int(np.prod(s)) for s in case["shapes"])
    variants = [("vram fused", {"fused": True}, case["state"])]
    if case["state"] != case["dtype"]:
        variants.append(("vram fused", {"fused": True}, case["dtype"]))
    variants.append(("vram foreach", {"foreach": True}, case["dtype"]))
    for name, options, state in variants:
        params = vram_setup(device, case["shapes"], case["dtype"])
        state_dtype = None if state == case["dtype"] else getattr(vram, state)
        launches = count_vram_launches(params, lr=1e-4, state_dtype=state_dtype, **options)
        opt = vram.optim.Adam(params, lr=1e-4, state_dtype=state_dtype, **options)
        opt.step()  # make the state
        ms = time_vram(device, opt.step, steps if "fused" in name else max(steps // 4, 2))
        rows.append(_row(case, name, state, numel, ms, launches))
        del opt, params
        gc.collect()
        vram.synchronize(device)
        vram.memory.empty_cache(device)
    return rows


def _row(case: dict, variant: str, state: str, numel: int, ms: float, launches: int) -> dict:
    p_bytes = 2 if case["dtype"] == "bfloat16" else 4
    s_bytes = 2 if state == "bfloat16" else 4
    moved = bytes_per_step(numel, p_bytes, s_bytes)
    return {
        "case": case["case"],
        "variant": variant,
        "tensors": len(case["shapes"]),
        "params": numel,
        "dtype": case["dtype"],
        "state_dtype": state,
        "ms_per_step": round(ms, 3),
        "gb_per_s": round(moved / (ms / 1e3) / GB, 1),
        "bytes_per_step": moved,
        "launches_per_step": launches,
    }


def vram_copy(device: vram.Device, nbytes: int, steps: int) -> dict:
    a = vram.empty(nbytes, dtype=vram.uint8, device=device)
    b = vram.empty(nbytes, dtype=vram.uint8, device=device)
    driver, stream = device.driver, vram.current_stream(device)

    def copy() -> None:
        driver.memcpy_dtod(b.data_ptr(), a.data_ptr(), nbytes, stream.cuda_stream)

    ms = time_vram(device, copy, steps)
    return {
        "case": "device copy",
        "variant": "vram memcpy_dtod",
        "bytes_per_step": 2 * nbytes,
        "ms_per_step": round(ms, 3),
        "gb_per_s": round(2 * nbytes / (ms / 1e3) / GB, 1),
    }


def sweep(device: vram.Device, case: dict, steps: int) -> list[dict]:
    """vram fused at other tile and block sizes (the first case)."""
    rows = []
    numel = sum(int(np.prod(s)) for s in case["shapes"])
    saved = _multi_tensor.TILE, _multi_tensor.BLOCK
    try:
        for tile in (8192, 16384, 32768, 65536):
            for block in (256, 512):
                _multi_tensor.TILE, _multi_tensor.BLOCK = tile, block
                params = vram_setup(device, case["shapes"], case["dtype"])
                opt = vram.optim.Adam(params, lr=1e-4, fused=True)
                opt.step()
                ms = time_vram(device, opt.step, steps)
                row = _row(
                    case, f"vram fused tile={tile} block={block}", case["state"], numel, ms, 2
                )
                rows.append(row)
                del opt, params
                gc.collect()
                vram.memory.empty_cache(device)
    finally:
        _multi_tensor.TILE, _multi_tensor.BLOCK = saved
    return rows


# ================================================================== PyTorch
def torch_rows(torch, index: int, case: dict, steps: int) -> list[dict]:
    device = torch.device("cuda", index)
    dt = getattr(torch, case["dtype"])
    numel = sum(int(np.prod(s)) for s in case["shapes"])
    small = len(case["shapes"]) > 1000
    rows = []
    for name, options in (
        ("pytorch fused", {"fused": True}),
        ("pytorch foreach", {"foreach": True}),
        ("pytorch for-loop", {"foreach": False}),
    ):
        params = [torch.full(s, 0.01, device=device, dtype=dt) for s in case["shapes"]]
        for p in params:
            p.grad = torch.full_like(p, 0.001)
        opt = torch.optim.Adam(params, lr=1e-4, **options)
        opt.step()
        launches = _torch_launches(torch, opt.step)
        n = steps if name == "pytorch fused" else max(steps // (10 if small else 4), 2)
        ms = _time_torch(torch, opt.step, n)
        rows.append(_row(case, name, case["dtype"], numel, ms, launches))
        del opt, params
        gc.collect()
        torch.cuda.empty_cache()
    return rows


def _time_torch(torch, step: Callable[[], None], steps: int) -> float:
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    gc.collect()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def _torch_launches(torch, step: Callable[[], None]) -> int:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kinds = ("Memcpy", "Memset")
    return sum(
        1
        for e in prof.events()
        if e.device_type.name == "CUDA" and not any(k in e.name for k in kinds)
    )


def torch_copy(torch, index: int, nbytes: int, steps: int) -> dict:
    a = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{index}")
    b = torch.empty_like(a)
    ms = _time_torch(torch, lambda: b.copy_(a), steps)
    return {
        "case": "device copy",
        "variant": "pytorch copy_",
        "bytes_per_step": 2 * nbytes,
        "ms_per_step": round(ms, 3),
        "gb_per_s": round(2 * nbytes / (ms / 1e3) / GB, 1),
    }


# ================================================================== main
def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=str(vram.default_device()))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--save", action="store_true", help="also write into bench/results/")
    parser.add_argument("--sweep", action="store_true", help="also time other tile/block sizes")
    parser.add_argument("--no-torch", action="store_true", help="vram only")
    args = parser.parse_args(argv)
    device = vram.device(args.device)
    gpu = device.type == "cuda"
    scale = 1 if gpu else 1000
    torch = None
    if gpu and not args.no_torch:
        try:
            import torch  # noqa: F811
        except ImportError:
            torch = None
    rows: list[dict] = []
    copy_bytes = 2 << 30 if gpu else 16 << 20
    rows.append(vram_copy(device, copy_bytes, args.steps))
    if torch is not None:
        rows.append(torch_copy(torch, device.index, copy_bytes, args.steps))
    for case in cases(scale):
        rows += vram_rows(device, case, args.steps)
        if torch is not None:
            rows += torch_rows(torch, device.index, case, args.steps)
        _print(rows, case["case"])
    if args.sweep:
        rows += sweep(device, cases(scale)[0], args.steps)
        _print(rows, cases(scale)[0]["case"])
    for path in write_results("optim", device, rows, args.out, args.save):
        print(f"wrote {path}")
    return rows


def _print(rows: list[dict], case: str) -> None:
    for row in rows:
        if row["case"] in (case, "device copy"):
            launches = row.get("launches_per_step", "")
            print(
                f"{row['case']:>20} | {row['variant']:<34} | {row['ms_per_step']:9.3f} ms | "
                f"{row['gb_per_s']:8.1f} GB/s | {launches}",
                flush=True,
            )


if __name__ == "__main__":
    main()
