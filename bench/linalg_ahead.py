"""The blocked LU's look-ahead (issue 13): ms per lu_factor_ex of one large matrix, or a few,
by vram's blocked LU with its look-ahead (and the graph replay that comes with it), without
it (the steps in turn, queued from Python each call), by cuSOLVER's getrf in vram, and by
PyTorch with each library setting; float32 and float64, random normal matrices.

Each cell: two warm-up calls (the second captures the look-ahead's graph), then as many
calls as fit in about 150 ms between synchronizations, five times; the cell is the median,
in ms per call. "host" is the host's time per call of five calls queued without waiting
(a graph's launch is one call). "pivots" is the fraction of vram's pivots equal to
PyTorch's (random matrices in float32 tie closely in places: a pivot that differs changes
the rows after it, so this is 1.0 or well below, for every way alike).

    python bench/linalg_ahead.py [--device cuda:0] [--out FILE.json|DIR] [--save]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

import vram
from _common import description_of, device_from_arguments, device_name, write_results
from vram.linalg import _blocked, _dispatch, _lu, _replay

SIZES = (  # (n, batch, dtype)
    *((n, 1, "float32") for n in (512, 1024, 1536, 2048, 3072, 4096)),
    (1024, 4, "float32"),
    (2048, 2, "float32"),
    (2048, 4, "float32"),
    (4096, 2, "float32"),
    *((n, 1, "float64") for n in (512, 1024, 2048, 4096)),
)
SIM_SIZES = ((96, 1, "float32"), (96, 2, "float64"))
TARGET_S = 0.15
REPEATS = 5


def _direct(stream, key, queue) -> None:  # _replay.replayed without the graphs
    queue()


@contextmanager
def _blocked_way(ahead: bool) -> Iterator[None]:
    """vram's blocked LU pinned, looking ahead (every size and batch of up to 4, replayed
    as graphs) or not at all."""
    saved = _blocked.AHEAD_FROM, _lu.replayed
    _blocked.AHEAD_FROM = ((4, 1),) if ahead else ()
    _lu.replayed = _replay.replayed if ahead else _direct
    try:
        with _dispatch.forced("blocked"):
            yield
    finally:
        _blocked.AHEAD_FROM, _lu.replayed = saved


def _time(call: Callable[[], object], sync: Callable[[], None]) -> float:
    call()
    call()
    sync()
    start = time.perf_counter()
    call()
    sync()
    first = time.perf_counter() - start
    count = max(2, min(200, int(TARGET_S / max(first, 1e-5))))
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(count):
            call()
        sync()
        runs.append((time.perf_counter() - start) * 1e3 / count)
    return statistics.median(runs)


def _host(call: Callable[[], object], sync: Callable[[], None], count: int = 5) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(count):
        call()
    queued = time.perf_counter()
    sync()
    return (queued - start) * 1e3 / count


def row(device: vram.Device, n: int, batch: int, dtype: str, torch) -> dict:
    a = np.random.default_rng(n + batch).standard_normal((batch, n, n)).astype(dtype)
    if batch == 1:
        a = a[0]
    A = vram.tensor(a, device=device)

    def sync() -> None:
        vram.synchronize(device)
        if torch is not None:
            torch.cuda.synchronize()

    out: dict = {"n": n, "batch": batch, "dtype": dtype}
    want = None
    if torch is not None:
        T = torch.from_numpy(a).cuda()
        want = torch.linalg.lu_factor_ex(T).pivots.cpu().numpy()
    call = lambda: vram.linalg.lu_factor_ex(A)  # noqa: E731
    for name, ahead in (("vram ahead", True), ("vram in turn", False)):
        with _blocked_way(ahead):
            out[name] = round(_time(call, sync), 4)
            out[f"{name} host"] = round(_host(call, sync), 4)
            if want is not None:
                out[f"{name} pivots"] = round(float((call().pivots.numpy() == want).mean()), 3)
    if torch is not None:
        with _dispatch.forced("cusolver"):
            out["vram cusolver"] = round(_time(call, sync), 4)
        torch_call = lambda: torch.linalg.lu_factor_ex(T)  # noqa: E731
        for library in ("default", "cusolver"):
            torch.backends.cuda.preferred_linalg_library(library)
            try:
                out[f"torch {library}"] = round(_time(torch_call, sync), 4)
            finally:
                torch.backends.cuda.preferred_linalg_library("default")
        best = min(out["torch default"], out["torch cusolver"])
        out["ahead / best torch"] = round(out["vram ahead"] / best, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    options, device = device_from_arguments(parser, argv)
    torch = None
    if device.type == "cuda":
        import torch  # the peer: on the GPU machine it is there
    print(f"linalg look-ahead benchmark on {device} ({device_name(device)})", flush=True)
    rows = []
    for n, batch, dtype in SIZES if device.type == "cuda" else SIM_SIZES:
        rows.append(row(device, n, batch, dtype, torch))
        print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    for path in write_results("linalg_ahead", device, rows, options.out, options.save):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
