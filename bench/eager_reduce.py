"""Reductions and fused row ops: GB/s of large calls and host time of small ones, vram vs
PyTorch vs CuPy.

Throughput (GB/s: the bytes an op must move, over its device time):
- ``add`` of two tensors (reads 2n, writes n) and ``exp`` (reads and writes n), elementwise;
- ``sum`` of every element and ``sum(dim=-1)`` of rows of ``width`` (reads n elements),
  ``softmax`` over rows of ``width`` (reads and writes n), ``layer_norm`` over rows of
  ``width`` with weight and bias (reads and writes n); and ``copy`` (a device copy of n
  elements: the bandwidth ceiling), at 16M, 64M and 256M elements in float32 and bfloat16.
- peers: vram, PyTorch (+, torch.exp, torch.sum, torch.softmax, torch.nn.functional.layer_norm,
  Tensor.copy_), CuPy (+, cupy.exp, cupy.sum, cupyx.scipy.special.softmax; no layer_norm in CuPy, no
  bfloat16). Outputs are new tensors each call, as an eager user gets them.
Each peer's calls run between two CUDA events on its current stream, as many as fit in
about ``TARGET_MS``; the peers take turns round by round (clock and temperature drift are
shared), a cell is the median of ``ROUNDS`` rounds. ``ratio`` divides by PyTorch's GB/s.

Host time per call (us, ``--host``): ``sum()`` and ``sum(dim=-1)`` of 1,024 floats,
``softmax`` over the rows of [64, 1024]: 7 interleaved rounds of 2,000 calls timed with
perf_counter_ns, synchronizing between rounds; a cell is the median round.

Inputs are random normal values. ``--device sim:0`` runs vram alone at small sizes, to check
the script anywhere. ``measure``, ``host_times`` and ``moved`` are importable (bench/eager.py,
bench/kernel_sweep.py).

    python bench/eager_reduce.py [--device cuda:0] [--host] [--out FILE.json|DIR] [--save]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import ml_dtypes
import numpy as np

import vram
import vram.nn.functional as F
from _common import add_output_arguments, write_results

SIZES = (16 << 20, 64 << 20, 256 << 20)  # elements
SIM_SIZES = (1 << 14,)
WIDTHS = (1024, 8192)  # row lengths of sum(dim=-1), softmax and layer_norm
DTYPES = ("float32", "bfloat16")
ROUNDS = 5
TARGET_MS = 20.0
HOST_CALLS = 2000
HOST_ROUNDS = 7

Call = Callable[[], object]


class Peer:
    """One library's way of timing calls on its current stream with CUDA events."""

    def __init__(
        self,
        name: str,
        event: Callable[[], object],
        elapsed: Callable[[object, object], float],
        synchronize: Call,
    ) -> None:
        self.name = name
        self.event = event
        self.elapsed = elapsed
        self.synchronize = synchronize

    def time_ms(self, call: Call, count: int) -> float:
        """Device milliseconds per call over ``count`` calls."""
        start, end = self.event(), self.event()
        start.record()
        for _ in range(count):
            call()
        end.record()
        end.synchronize()
        return self.elapsed(start, end) / count


def _elapsed(start, end) -> float:
    return start.elapsed_time(end)


def _peers(device) -> dict[str, tuple[Peer, object]]:
    """name -> (Peer, module) for vram and the peers importable here (none on sim)."""
    timing = lambda: vram.Event(enable_timing=True)  # noqa: E731
    found = {"vram": (Peer("vram", timing, _elapsed, lambda: vram.synchronize(device)), vram)}
    if device.type != "cuda":
        return found
    try:
        import torch

        timing = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        found["torch"] = (Peer("torch", timing, _elapsed, torch.cuda.synchronize), torch)
    except ImportError:
        pass
    try:
        import cupy

        elapsed = cupy.cuda.get_elapsed_time
        sync = cupy.cuda.Device().synchronize
        found["cupy"] = (Peer("cupy", cupy.cuda.Event, elapsed, sync), cupy)
    except ImportError:
        pass
    return found


def _data(numel: int, dtype: str, seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal(numel, dtype=np.float32)
    return values.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else values


def _calls(name: str, module: object, host: np.ndarray, dtype: str, width: int, device):
    """{op: call} of one peer over its own copy of ``host`` (None where it has no such op)."""
    rows = host.size // width
    weight, bias = _data(width, dtype, 1), _data(width, dtype, 2)
    if name == "vram":
        x = vram.tensor(host, device=device)
        w, b = vram.tensor(weight, device=device), vram.tensor(bias, device=device)
        grid = x.view(rows, width)
        out = vram.empty(x.shape, dtype=x.dtype, device=device)
        return {
            "add": lambda: x + out,
            "exp": lambda: vram.exp(x),
            "sum": lambda: vram.sum(x),
            "sum_rows": lambda: vram.sum(grid, -1),
            "softmax": lambda: F.softmax(grid, -1),
            "layer_norm": lambda: F.layer_norm(grid, (width,), w, b),
            "copy": lambda: out.copy_(x),
        }
    if name == "torch":
        torch = module
        tdtype = getattr(torch, dtype)
        x = torch.from_numpy(host.astype(np.float32)).to(device=str(device)).to(tdtype)
        w = torch.from_numpy(weight.astype(np.float32)).to(device=str(device)).to(tdtype)
        b = torch.from_numpy(bias.astype(np.float32)).to(device=str(device)).to(tdtype)
        grid = x.view(rows, width)
        out = torch.empty_like(x)
        return {
            "add": lambda: x + out,
            "exp": lambda: torch.exp(x),
            "sum": lambda: torch.sum(x),
            "sum_rows": lambda: torch.sum(grid, -1),
            "softmax": lambda: torch.softmax(grid, -1),
            "layer_norm": lambda: torch.nn.functional.layer_norm(grid, (width,), w, b),
            "copy": lambda: out.copy_(x),
        }
    cupy = module
    if dtype == "bfloat16":
        return {}
    x = cupy.asarray(host)
    grid = x.reshape(rows, width)
    out = cupy.empty_like(x)
    calls = {
        "add": lambda: x + out,
        "exp": lambda: cupy.exp(x),
        "sum": lambda: cupy.sum(x),
        "sum_rows": lambda: cupy.sum(grid, axis=-1),
        "copy": lambda: cupy.copyto(out, x),
    }
    try:
        from cupyx.scipy.special import softmax

        calls["softmax"] = lambda: softmax(grid, axis=-1)
    except ImportError:
        pass
    return calls


def moved(op: str, numel: int, itemsize: int) -> int:
    """Bytes an op must move: reads of n elements (two operands for add), and writes of n
    for the elementwise and row ops."""
    if op in ("sum", "sum_rows"):
        return numel * itemsize
    return numel * itemsize * (3 if op == "add" else 2)


def _count(peer: Peer, call: Call) -> int:
    """How many calls fill about TARGET_MS (after a warm-up call)."""
    call()
    once = peer.time_ms(call, 1)
    return max(1, min(1000, int(TARGET_MS / max(once, 1e-3))))


def measure(device, sizes=SIZES, dtypes=DTYPES, widths=WIDTHS, rounds=ROUNDS) -> list[dict]:
    """GB/s rows: one per (op, dtype, numel, width, peer)."""
    peers = _peers(device)
    rows: list[dict] = []
    for dtype in dtypes:
        itemsize = 4 if dtype == "float32" else 2
        for numel in sizes:
            host = _data(numel, dtype)
            for width in widths:
                calls = {
                    name: _calls(name, module, host, dtype, width, device)
                    for name, (_, module) in peers.items()
                }
                ops = (
                    ("sum_rows", "softmax", "layer_norm")
                    if width != widths[0]
                    else ("add", "exp", "sum", "copy", "sum_rows", "softmax", "layer_norm")
                )
                for op in ops:
                    found = {n: c[op] for n, c in calls.items() if op in c}
                    counts = {n: _count(peers[n][0], call) for n, call in found.items()}
                    times: dict[str, list[float]] = {n: [] for n in found}
                    for _ in range(rounds):
                        for n, call in found.items():  # round by round: the peers take turns
                            times[n].append(peers[n][0].time_ms(call, counts[n]))
                    nbytes = moved(op, numel, itemsize)
                    best = {n: statistics.median(t) for n, t in times.items()}
                    torch_gbps = nbytes / best["torch"] / 1e6 if "torch" in best else None
                    for n, ms in best.items():
                        gbps = nbytes / ms / 1e6
                        rows.append(
                            {
                                "section": "throughput",
                                "op": op,
                                "dtype": dtype,
                                "numel": numel,
                                "width": None if op in ("add", "exp", "sum", "copy") else width,
                                "peer": n,
                                "ms": round(ms, 5),
                                "gbps": round(gbps, 1),
                                "ratio": round(gbps / torch_gbps, 3) if torch_gbps else None,
                            }
                        )
                del calls
    return rows


def _small_calls(name: str, module: object, small: np.ndarray, grid: np.ndarray, device):
    """{label: call} of one peer's small calls (over its own copies of the data)."""
    if name == "vram":
        x, g = vram.tensor(small, device=device), vram.tensor(grid, device=device)
        return {
            "sum()": lambda: vram.sum(x),
            "sum(dim=-1)": lambda: vram.sum(x, -1),
            "softmax [64, 1024]": lambda: F.softmax(g, -1),
        }
    if name == "torch":
        torch = module
        x, g = torch.from_numpy(small).to(str(device)), torch.from_numpy(grid).to(str(device))
        return {
            "sum()": lambda: torch.sum(x),
            "sum(dim=-1)": lambda: torch.sum(x, -1),
            "softmax [64, 1024]": lambda: torch.softmax(g, -1),
        }
    cupy = module
    x = cupy.asarray(small)
    return {"sum()": lambda: cupy.sum(x), "sum(dim=-1)": lambda: cupy.sum(x, axis=-1)}


def host_times(device, calls: int = HOST_CALLS, rounds: int = HOST_ROUNDS) -> list[dict]:
    """Host us per call of small calls, each peer's rounds interleaved."""
    peers = _peers(device)
    small = _data(1024, "float32")
    grid = _data(64 * 1024, "float32").reshape(64, 1024)
    work = {
        name: _small_calls(name, module, small, grid, device) for name, (_, module) in peers.items()
    }
    result: list[dict] = []
    for label in ("sum()", "sum(dim=-1)", "softmax [64, 1024]"):
        found = {n: w[label] for n, w in work.items() if label in w}
        samples: dict[str, list[float]] = {n: [] for n in found}
        for call in found.values():
            for _ in range(50):
                call()
        for _ in range(rounds):
            for n, call in found.items():
                peers[n][0].synchronize()
                start = time.perf_counter_ns()
                for _ in range(calls):
                    call()
                samples[n].append((time.perf_counter_ns() - start) / calls / 1e3)
                peers[n][0].synchronize()
        torch_us = statistics.median(samples["torch"]) if "torch" in samples else None
        for n, values in samples.items():
            us = statistics.median(values)
            result.append(
                {
                    "section": "host",
                    "op": label,
                    "peer": n,
                    "us": round(us, 2),
                    "ratio": round(us / torch_us, 3) if torch_us else None,
                }
            )
    return result


def _print(rows: list[dict]) -> None:
    for row in rows:
        if row["section"] == "throughput":
            width = f"x{row['width']}" if row["width"] else ""
            ratio = f"  {row['ratio']:.3f}x torch" if row["ratio"] else ""
            print(
                f"{row['op']:<11} {row['dtype']:<9} {row['numel'] / 2**20:>5g}M{width:<6} "
                f"{row['peer']:<6} {row['gbps']:>8.1f} GB/s{ratio}"
            )
        else:
            ratio = f"  {row['ratio']:.2f}x torch" if row["ratio"] else ""
            print(f"host {row['op']:<20} {row['peer']:<6} {row['us']:>7.2f} us{ratio}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0", help="cuda:N or sim:N")
    parser.add_argument("--host", action="store_true", help="also time small calls on the host")
    parser.add_argument("--sizes", default=None, help="elements, comma-separated (e.g. 16M,64M)")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    device = vram.device(options.device)
    vram.set_device(device)
    sizes = SIZES if device.type == "cuda" else SIM_SIZES
    if options.sizes:
        sizes = tuple(
            int(s[:-1]) << 20 if s.endswith("M") else int(s) for s in options.sizes.split(",")
        )
    widths = WIDTHS if device.type == "cuda" else (256,)
    rows = measure(device, sizes, DTYPES, widths)
    if options.host:
        rows += host_times(device, calls=HOST_CALLS if device.type == "cuda" else 20)
    _print(rows)
    for path in write_results("eager_reduce", device, rows, options.out, options.save):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
