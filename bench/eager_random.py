"""Random numbers' host cost per call (issue 31's ``randn(1024)`` row): vram, PyTorch eager
and CuPy, interleaved round by round in one process, microseconds per call over a batch of
calls with one synchronize at its end (the median of the rounds).

Rows: ``randn(1024)`` (the issue's, also a row of bench/eager.py), ``rand(1024)`` and
``dropout`` of 1,024 floats (vram.nn.functional.dropout, torch.nn.functional.dropout; CuPy
has none). ``measure()`` is importable; ``--device sim:0`` runs vram alone, to check the
script.

    python bench/eager_random.py [--device cuda:0] [--rounds 15] [--calls 2000] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vram  # noqa: E402
import vram.nn.functional as F  # noqa: E402
from _common import device_from_arguments, write_results  # noqa: E402

SIZE = 1024


def _peers(device: vram.Device) -> dict[str, dict[str, Callable[[], object]]]:
    """Per row, per library, one call to time (PyTorch and CuPy only on a GPU)."""
    ones = vram.ones(SIZE)
    rows: dict[str, dict[str, Callable[[], object]]] = {
        "randn(1024)": {"vram": lambda: vram.randn(SIZE)},
        "rand(1024)": {"vram": lambda: vram.rand(SIZE)},
        "dropout(1024)": {"vram": lambda: F.dropout(ones, 0.1)},
    }
    if device.type != "cuda":
        return rows
    try:
        import torch

        x = torch.ones(SIZE, device="cuda")
        rows["randn(1024)"]["torch"] = lambda: torch.randn(SIZE, device="cuda")
        rows["rand(1024)"]["torch"] = lambda: torch.rand(SIZE, device="cuda")
        rows["dropout(1024)"]["torch"] = lambda: torch.nn.functional.dropout(x, 0.1)
    except ImportError:
        pass
    try:
        import cupy

        rows["randn(1024)"]["cupy"] = lambda: cupy.random.randn(SIZE, dtype=cupy.float32)
        rows["rand(1024)"]["cupy"] = lambda: cupy.random.rand(SIZE, dtype=cupy.float32)
    except ImportError:
        pass
    return rows


def _synchronizer(name: str, device: vram.Device) -> Callable[[], None]:
    if name == "torch":
        import torch

        return torch.cuda.synchronize
    if name == "cupy":
        import cupy

        return cupy.cuda.Device().synchronize
    return lambda: vram.synchronize(device)


def measure(device: object = None, rounds: int = 15, calls: int = 2000) -> list[dict]:
    """One row per call: median host microseconds per call of each library, and vram's
    ratio to PyTorch's where PyTorch ran."""
    found = vram.device(device) if device is not None else vram.default_device()
    rows = []
    with found:
        for row, libraries in _peers(found).items():
            syncs = {name: _synchronizer(name, found) for name in libraries}
            times: dict[str, list[float]] = {name: [] for name in libraries}
            for name, call in libraries.items():  # warm up: plans, kernels, pools
                for _ in range(50):
                    call()
                syncs[name]()
            for _ in range(rounds):
                for name, call in libraries.items():
                    start = time.perf_counter()
                    for _ in range(calls):
                        call()
                    syncs[name]()
                    times[name].append((time.perf_counter() - start) / calls * 1e6)
            result: dict = {"call": row, "calls_per_round": calls, "rounds": rounds}
            for name, values in times.items():
                result[f"{name}_us"] = round(statistics.median(values), 2)
            if "torch_us" in result:
                result["vram_over_torch"] = round(result["vram_us"] / result["torch_us"], 3)
            rows.append(result)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    options, device = device_from_arguments(parser, argv)
    calls = options.calls if device.type == "cuda" else min(options.calls, 50)
    rows = measure(device, options.rounds, calls)
    for row in rows:
        print(row)
    for path in write_results("eager_random", device, rows, options.out, options.save):
        print("wrote", path)


if __name__ == "__main__":
    main()
