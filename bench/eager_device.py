"""Is a bench/eager.py row bound by the host or by the GPU? Device µs per call of each row.

bench/eager.py times a batch of calls from the first to the synchronize after the last:
that is the host's cost per call only while the GPU keeps up. Here each batch is queued
behind GPU work that outlasts the host's queuing of it (``--hold`` large matrix products),
so the GPU finds the whole batch waiting and runs its kernels back to back; the time
between an event recorded before the batch and one after it, over the calls, is the
device's cost per call. A row whose device µs is near its host µs (bench/eager.py) is
bound by the GPU, and its host time cannot be measured lower by that benchmark. A row
shows "-" where queuing a batch outlasted the held work (raise ``--hold``).

    python bench/eager_device.py --rows "a + b,a < b,where,softmax,sum"   # cuda:0
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
from _common import device_from_arguments, write_results  # noqa: E402
from eager import _torch_cases, _vram_cases  # noqa: E402


def _held(batch: Callable[[], object], hold: Callable[[], object], events: tuple) -> float | None:
    """Milliseconds the GPU spent on one batch queued behind ``hold``'s work; None when
    queuing the batch took the host longer than the GPU took for ``hold`` (the GPU may
    have waited for the host: raise ``--hold``)."""
    before, start, end = events
    before.record()
    hold()
    start.record()
    queued = time.perf_counter()
    batch()
    queued = (time.perf_counter() - queued) * 1e3
    end.record()
    end.synchronize()
    if queued >= before.elapsed_time(start):
        return None
    return start.elapsed_time(end)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per batch")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (median taken)")
    parser.add_argument("--rows", default=None, help="comma-separated row names to run")
    parser.add_argument("--hold", type=int, default=8, help="4096^2 products queued first")
    options, device = device_from_arguments(parser, argv)
    big = vram.ones(4096, 4096, device=device)
    cases = {"vram": _vram_cases(device)}
    holds = {"vram": lambda: [big @ big for _ in range(options.hold)]}
    events = {"vram": tuple(vram.Event(enable_timing=True) for _ in range(3))}
    torch_cases = _torch_cases() if device.type == "cuda" else None
    if torch_cases is not None:
        import torch

        torch_cases.pop("_sync", None)
        big_t = torch.ones(4096, 4096, device="cuda")
        cases["torch"] = torch_cases
        holds["torch"] = lambda: [big_t @ big_t for _ in range(options.hold)]
        events["torch"] = tuple(torch.cuda.Event(enable_timing=True) for _ in range(3))
    names = list(cases["vram"])
    if options.rows:
        wanted = [r.strip() for r in options.rows.split(",")]
        names = [n for n in names if any(w in n for w in wanted)]
    rows = []
    print(f"{'call':<22}{'vram dev us':>14}{'torch dev us':>14}")
    for name in names:
        row: dict = {"call": name}
        for lib in ("vram", "torch"):
            case = cases.get(lib, {}).get(name)
            if case is None:
                row[f"{lib}_device_us"] = None
                continue

            def batch(case: Callable[[], object] = case) -> None:
                for _ in range(options.calls):
                    case()

            batch()  # warm
            times = [_held(batch, holds[lib], events[lib]) for _ in range(options.rounds)]
            held = [t for t in times if t is not None]
            median = statistics.median(held) * 1e3 / options.calls if held else None
            row[f"{lib}_device_us"] = None if median is None else round(median, 2)
        rows.append(row)
        cells = "".join(
            f"{'-' if row[f'{lib}_device_us'] is None else row[f'{lib}_device_us']:>14}"
            for lib in ("vram", "torch")
        )
        print(f"{name:<22}{cells}")
    for path in write_results("eager_device", device, rows, options.out, options.save):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
