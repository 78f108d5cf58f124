"""Eager ops: host time per call of vram, PyTorch eager and CuPy, interleaved round by round.

Each row is one small call (1,024 floats unless said) repeated ``--calls`` times with a
synchronize at the end of the batch; a round times every library once, in turn, and the
row's number is the median over ``--rounds`` rounds (µs per call). ``paired_vs_torch`` is
the median of the rounds' own vram / PyTorch ratios (each round's two ran back to back).
The device work of a small op is far shorter than its host cost, so this measures what a
Python program pays per op. Ratios are within one run (this host's speed moves between
runs).

    python bench/eager.py                   # cuda:0; sim:0 measures vram's Python alone
    python bench/eager.py --rows add,exp    # some rows only
    python bench/eager.py --decoder         # a GPT-2-small decoder block (bench/_decoder.py)
"""

from __future__ import annotations

import argparse
import operator
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import vram  # noqa: E402
from _common import device_from_arguments, write_results  # noqa: E402
from _decoder import decoder_rows  # noqa: E402

Case = Callable[[], object]


def _mlp(lib: Any, device: Any) -> tuple[Any, list[tuple[Any, Any]]]:
    """The issue's MLP: a batch of 64 rows of width 256 and eight (weight, bias) layers of
    256 x 256, float32 (the same in vram and PyTorch)."""
    x = lib.ones(64, 256, device=device)
    layers = [
        (lib.ones(256, 256, device=device) / 256, lib.ones(256, device=device)) for _ in range(8)
    ]
    return x, layers


def _forward(lib: Any, x: Any, layers: list[tuple[Any, Any]], relu: Callable) -> Any:
    """Eight ``relu(addmm(bias, x, weight))``: one op after another, as eager code runs."""
    for weight, bias in layers:
        x = relu(lib.addmm(bias, x, weight))
    return x


def _vram_cases(device: vram.Device) -> dict[str, Case]:
    make = getattr(vram, "randn", vram.ones)
    a = make(1024, device=device)
    b = vram.ones(1024, device=device)
    c = a < b
    m = vram.ones(64, 64, device=device)
    rows = vram.ones(64, 1024, device=device)
    index = vram.arange(0, 1024, 4, device=device)
    m_out = vram.empty(64, 64, device=device)
    x, layers = _mlp(vram, device)
    cases: dict[str, Case] = {
        "empty(256) + del": lambda: vram.empty(256, device=device),
        "empty(4 MiB) + del": lambda: vram.empty(1 << 20, device=device),
        "a + b": lambda: a + b,
        "a += b": lambda: a.__iadd__(b),
        "exp(a)": lambda: vram.exp(a),
        "a < b": lambda: a < b,
        "where(c, a, b)": lambda: vram.where(c, a, b),
        "mm 64x64": lambda: m @ m,
        "mm 64x64, out=": lambda: vram.mm(m, m, out=m_out),
        "8 x (addmm + relu)": lambda: _forward(vram, x, layers, vram.nn.functional.relu),
    }
    if hasattr(vram.Tensor, "sum"):
        cases["a.sum()"] = lambda: a.sum()
        cases["rows.sum(dim=-1)"] = lambda: rows.sum(dim=-1)
    if hasattr(vram, "softmax"):
        cases["softmax [64, 1024]"] = lambda: vram.softmax(rows, dim=-1)
    if hasattr(vram, "index_select"):
        cases["index_select"] = lambda: vram.index_select(a, 0, index)
    if hasattr(vram, "randn"):
        cases["randn(1024)"] = lambda: vram.randn(1024, device=device)
    return cases


def _torch_cases() -> dict[str, Case] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    d = "cuda"
    a, b = torch.randn(1024, device=d), torch.ones(1024, device=d)
    c = a < b
    m = torch.ones(64, 64, device=d)
    rows = torch.ones(64, 1024, device=d)
    index = torch.arange(0, 1024, 4, device=d)
    m_out = torch.empty(64, 64, device=d)
    relu = torch.nn.functional.relu
    x, layers = _mlp(torch, d)
    return {
        "empty(256) + del": lambda: torch.empty(256, device=d),
        "empty(4 MiB) + del": lambda: torch.empty(1 << 20, device=d),
        "a + b": lambda: a + b,
        "a += b": lambda: a.__iadd__(b),
        "exp(a)": lambda: torch.exp(a),
        "a < b": lambda: a < b,
        "where(c, a, b)": lambda: torch.where(c, a, b),
        "mm 64x64": lambda: m @ m,
        "mm 64x64, out=": lambda: torch.mm(m, m, out=m_out),
        "8 x (addmm + relu)": lambda: _forward(torch, x, layers, relu),
        "a.sum()": lambda: a.sum(),
        "rows.sum(dim=-1)": lambda: rows.sum(dim=-1),
        "softmax [64, 1024]": lambda: torch.softmax(rows, dim=-1),
        "index_select": lambda: torch.index_select(a, 0, index),
        "randn(1024)": lambda: torch.randn(1024, device=d),
        "_sync": torch.cuda.synchronize,
    }


def _cupy_cases() -> dict[str, Case] | None:
    try:
        import cupy
    except ImportError:
        return None
    a, b = cupy.random.standard_normal(1024, dtype=cupy.float32), cupy.ones(1024, cupy.float32)
    c = a < b
    m = cupy.ones((64, 64), cupy.float32)
    rows = cupy.ones((64, 1024), cupy.float32)
    index = cupy.arange(0, 1024, 4)
    m_out = cupy.empty((64, 64), cupy.float32)
    return {
        "empty(256) + del": lambda: cupy.empty(256, cupy.float32),
        "empty(4 MiB) + del": lambda: cupy.empty(1 << 20, cupy.float32),
        "a + b": lambda: a + b,
        "a += b": lambda: a.__iadd__(b),
        "exp(a)": lambda: cupy.exp(a),
        "a < b": lambda: a < b,
        "where(c, a, b)": lambda: cupy.where(c, a, b),
        "mm 64x64": lambda: m @ m,
        "mm 64x64, out=": lambda: cupy.matmul(m, m, out=m_out),
        "a.sum()": lambda: a.sum(),
        "rows.sum(dim=-1)": lambda: rows.sum(axis=-1),
        "index_select": lambda: cupy.take(a, index, axis=0),
        "randn(1024)": lambda: cupy.random.standard_normal(1024, dtype=cupy.float32),
        "_sync": cupy.cuda.runtime.deviceSynchronize,
    }


def _time(case: Case, sync: Callable[[], object], calls: int) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        case()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per batch")
    parser.add_argument("--rounds", type=int, default=15, help="rounds (median taken)")
    parser.add_argument("--rows", default=None, help="comma-separated row names to run")
    parser.add_argument(
        "--decoder",
        action="store_true",
        help="time a GPT-2-small decoder block (vram and PyTorch, bf16) instead of the calls",
    )
    options, device = device_from_arguments(parser, argv)
    if options.decoder:
        return _decoder(device, options)
    peers: dict[str, dict[str, Case] | None] = {"vram": _vram_cases(device)}
    if device.type == "cuda":
        peers["torch"] = _torch_cases()
        peers["cupy"] = _cupy_cases()
    libs = {name: cases for name, cases in peers.items() if cases is not None}
    vram_sync = lambda: vram.synchronize(device)  # noqa: E731
    syncs = {name: cases.pop("_sync", vram_sync) for name, cases in libs.items()}
    names = list(libs["vram"])
    if options.rows:
        wanted = [r.strip() for r in options.rows.split(",")]
        names = [n for n in names if any(w in n for w in wanted)]
    times: dict[tuple[str, str], list[float]] = {}
    for name in names:
        for lib, cases in libs.items():
            if name in cases:
                _time(cases[name], syncs[lib], max(options.calls // 10, 10))  # warm up
    for _ in range(options.rounds):
        for name in names:
            for lib, cases in libs.items():
                if name in cases:
                    t = _time(cases[name], syncs[lib], options.calls)
                    times.setdefault((name, lib), []).append(t)
    rows = []
    print(f"{'call':<22}" + "".join(f"{lib:>10}" for lib in libs) + f"{'vs torch':>10}")
    for name in names:
        row = {"call": name}
        for lib in libs:
            found = times.get((name, lib))
            row[f"{lib}_us"] = None if found is None else round(statistics.median(found), 2)
        ratio = None
        if row.get("torch_us"):
            ratio = round(row["vram_us"] / row["torch_us"], 3)
            paired = map(operator.truediv, times[name, "vram"], times[name, "torch"])
            row["paired_vs_torch"] = round(statistics.median(paired), 3)
        row["vram_vs_torch"] = ratio
        rows.append(row)
        cells = "".join(
            f"{'-' if row[f'{lib}_us'] is None else row[f'{lib}_us']:>10}" for lib in libs
        )
        print(f"{name:<22}{cells}{'-' if ratio is None else ratio:>10}")
    for path in write_results("eager", device, rows, options.out, options.save):
        print(f"wrote {path}")
    return 0


def _decoder(device: vram.Device, options: argparse.Namespace) -> int:
    """The decoder-block rows: host and device µs per block, vram against PyTorch eager."""
    if device.type != "cuda":
        print(f"--decoder compares with PyTorch on a GPU: needs a cuda device, not {device}")
        return 2
    rows = decoder_rows(device, options.rounds)
    header = ("batch", "seq", "vram_host_us", "torch_host_us", "host_vs_torch")
    header += ("vram_device_us", "torch_device_us", "device_vs_torch", "max_abs_diff")
    print("".join(f"{name:>16}" for name in header))
    for row in rows:
        print("".join(f"{row[name]!s:>16}" for name in header))
    for path in write_results("eager_decoder", device, rows, options.out, options.save):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
