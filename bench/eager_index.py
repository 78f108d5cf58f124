"""Host time per call of indexing and joining ops: vram vs PyTorch eager vs CuPy.

Rows (small tensors, so that the host's cost is what is measured): ``index_select`` of 128
rows of a [1024, 64] float32 table (int64 indices), the same read as ``t[idx]``, ``gather``
along the last dimension of [64, 64], ``cat`` of two [64, 64] tensors, and
``masked_fill_`` of [64, 64] with a boolean mask. Each peer runs ``CALLS`` calls in a round;
the peers take turns round by round (so that clock drift is shared), the GPU is
synchronized between rounds, and a cell is the median round in microseconds per call.

``index_select_us(device)`` gives the index_select row alone, for bench/eager.py.

    python bench/eager_index.py [--device cuda:0] [--out FILE.json|DIR] [--save]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

import vram
from _common import add_output_arguments, write_results

CALLS = 2000  # calls per round
ROUNDS = 7
ROWS, WIDTH, PICKED = 1024, 64, 128

Call = Callable[[], object]


def _inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "table": rng.standard_normal((ROWS, WIDTH)).astype(np.float32),
        "rows": rng.integers(0, ROWS, PICKED),
        "square": rng.standard_normal((64, 64)).astype(np.float32),
        "columns": rng.integers(0, 64, (64, 64)),
        "mask": rng.random((64, 64)) > 0.5,
    }


def vram_calls(device: vram.Device, data: dict[str, np.ndarray]) -> dict[str, Call]:
    table = vram.tensor(data["table"], device=device)
    rows = vram.tensor(data["rows"], device=device)
    square = vram.tensor(data["square"], device=device)
    columns = vram.tensor(data["columns"], device=device)
    mask = vram.tensor(data["mask"], device=device)
    return {
        "index_select": lambda: vram.index_select(table, 0, rows),
        "t[idx]": lambda: table[rows],
        "gather": lambda: vram.gather(square, 1, columns),
        "cat": lambda: vram.cat([square, square]),
        "masked_fill_": lambda: square.masked_fill_(mask, 0.5),
    }


def torch_calls(data: dict[str, np.ndarray]) -> tuple[dict[str, Call], Call] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    table = torch.tensor(data["table"], device="cuda")
    rows = torch.tensor(data["rows"], device="cuda")
    square = torch.tensor(data["square"], device="cuda")
    columns = torch.tensor(data["columns"], device="cuda")
    mask = torch.tensor(data["mask"], device="cuda")
    calls = {
        "index_select": lambda: torch.index_select(table, 0, rows),
        "t[idx]": lambda: table[rows],
        "gather": lambda: torch.gather(square, 1, columns),
        "cat": lambda: torch.cat([square, square]),
        "masked_fill_": lambda: square.masked_fill_(mask, 0.5),
    }
    return calls, torch.cuda.synchronize


def cupy_calls(data: dict[str, np.ndarray]) -> tuple[dict[str, Call], Call] | None:
    try:
        import cupy
    except ImportError:
        return None
    table = cupy.asarray(data["table"])
    rows = cupy.asarray(data["rows"])
    square = cupy.asarray(data["square"])
    columns = cupy.asarray(data["columns"])
    mask = cupy.asarray(data["mask"])

    def masked_fill() -> None:
        square[mask] = 0.5

    calls = {
        "index_select": lambda: cupy.take(table, rows, axis=0),
        "t[idx]": lambda: table[rows],
        "gather": lambda: cupy.take_along_axis(square, columns, axis=1),
        "cat": lambda: cupy.concatenate([square, square]),
        "masked_fill_": masked_fill,
    }
    return calls, cupy.cuda.runtime.deviceSynchronize


def _round(call: Call, sync: Call, calls: int) -> float:
    """Microseconds per call of one round (the GPU idle at its start)."""
    sync()
    start = time.perf_counter_ns()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter_ns() - start
    sync()
    return elapsed / calls / 1000


def measure(
    peers: dict[str, tuple[dict[str, Call], Call]], rounds: int = ROUNDS, calls: int = CALLS
) -> list[dict]:
    """One row per op: each peer's median round (us per call), peers interleaved."""
    ops = list(next(iter(peers.values()))[0])
    rows = []
    for op in ops:
        times: dict[str, list[float]] = {name: [] for name in peers}
        for table, sync in peers.values():  # warm up: plans, kernels, caches
            _round(table[op], sync, 20)
        for _ in range(rounds):
            for name, (table, sync) in peers.items():
                times[name].append(_round(table[op], sync, calls))
        row: dict = {"op": op}
        for name in peers:
            row[f"{name}_us"] = round(statistics.median(times[name]), 2)
        if "torch" in peers:
            row["vram_over_torch"] = round(row["vram_us"] / row["torch_us"], 3)
        rows.append(row)
    return rows


def _peers(device: vram.Device) -> dict[str, tuple[dict[str, Call], Call]]:
    data = _inputs()
    peers = {"vram": (vram_calls(device, data), lambda: vram.synchronize(device))}
    if device.type == "cuda":
        for name, found in (("torch", torch_calls(data)), ("cupy", cupy_calls(data))):
            if found is not None:
                peers[name] = found
    return peers


def index_select_us(device: object = "cuda:0", rounds: int = ROUNDS, calls: int = CALLS) -> dict:
    """The index_select row: host us per call of vram (and PyTorch, CuPy where present)."""
    found = vram.device(device)
    peers = {
        name: ({"index_select": table["index_select"]}, sync)
        for name, (table, sync) in _peers(found).items()
    }
    return measure(peers, rounds, calls)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda:N or sim:N (default: the default)")
    parser.add_argument("--calls", type=int, default=CALLS, help="calls per round")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per cell")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    device = vram.default_device() if options.device is None else vram.device(options.device)
    vram.set_device(device)
    rows = measure(_peers(device), options.rounds, options.calls)
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    for path in write_results("eager_index", device, rows, options.out, options.save):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
