"""Does the cached path slow down as the cache grows? (issue 8)

For N = 10, 100, 1k, 10k and 100k cached free blocks (allocate 2N blocks of 512 B, free
every other one: N free 512 B blocks that cannot merge), time an alternating pattern that
no repeated-pair shortcut serves: allocate 512 B (a size that fits: the lowest free block
of that size), allocate 1 KiB (a size that must pass all N blocks to a larger one), free
both. µs per request (alloc or free), median of interleaved rounds, vram and PyTorch side
by side (the same raw APIs as bench/trace_ops.py). ``--device sim:0`` times vram alone.

    python bench/scaling.py [--counts 10,100,1000,10000,100000] [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable

if "--vram-src" in sys.argv:  # before vram is imported: run another tree's vram
    from pathlib import Path

    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--vram-src") + 1]).resolve()))

import vram  # noqa: E402
from _common import add_output_arguments, description_of, device_name, write_results  # noqa: E402

SMALL, PASSING = 512, 1024  # bytes: the size that fits, the size that passes them all
Api = tuple[Callable[[int], int], Callable[[int], None]]


def _fragment(api: Api, count: int) -> list[int]:
    """``count`` free 512 B blocks between live ones; the live ones, to free at the end."""
    alloc, free = api
    ptrs = [alloc(SMALL) for _ in range(2 * count)]
    for ptr in ptrs[::2]:
        free(ptr)
    return ptrs[1::2]


def _time_pattern(api: Api, rounds: int) -> float:
    """µs per request of ``rounds`` times: alloc 512 B, alloc 1 KiB, free both."""
    alloc, free = api
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for _ in range(rounds):
            a = alloc(SMALL)
            b = alloc(PASSING)
            free(a)
            free(b)
        return (time.perf_counter_ns() - start) / (4 * rounds) / 1e3
    finally:
        if gc_was_enabled:
            gc.enable()


def _apis(device: vram.Device, only_vram: bool) -> dict[str, Api]:
    apis = {"vram": (vram.memory.caching_allocator_alloc, vram.memory.caching_allocator_delete)}
    if device.type == "cuda" and not only_vram:
        try:
            import torch
        except ImportError as exc:
            print(f"skip pytorch: {exc}", file=sys.stderr)
        else:
            torch.cuda.set_device(device.index)
            apis["pytorch"] = (
                torch.cuda.caching_allocator_alloc,
                torch.cuda.caching_allocator_delete,
            )
    return apis


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=None, help="cuda:N or sim:N (default: the default)")
    parser.add_argument("--counts", default="10,100,1000,10000,100000", help="free blocks N")
    parser.add_argument("--rounds", type=int, default=5000, help="patterns per timed run")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs")
    parser.add_argument("--vram-src", default=None, help="run vram from this source folder")
    parser.add_argument("--label", default="vram", help="the name of vram's rows")
    parser.add_argument("--only-vram", action="store_true", help="time vram alone")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    device = vram.default_device() if options.device is None else vram.device(options.device)
    vram.set_device(device)
    counts = [int(c) for c in options.counts.split(",")]
    apis = _apis(device, options.only_vram)
    rows = []
    for count in counts:
        held = {name: _fragment(api, count) for name, api in apis.items()}
        for api in apis.values():
            _time_pattern(api, 200)  # warm
        runs: dict[str, list[float]] = {name: [] for name in apis}
        for _ in range(options.repeats):
            for name, api in apis.items():
                runs[name].append(_time_pattern(api, options.rounds))
        for name, api in apis.items():
            label = options.label if name == "vram" else name
            us = statistics.median(runs[name])
            rows.append({"impl": label, "free_blocks": count, "us_per_op": round(us, 3)})
            print(f"{label:<16} N={count:>7}  {us:8.3f} µs/op", file=sys.stderr)
            for ptr in held[name]:
                api[1](ptr)
        if device.type == "sim":
            vram.memory.empty_cache()
    name = "scaling" if options.label == "vram" else f"scaling-{options.label}"
    written = write_results(name, device, rows, options.out, options.save)
    print(f"\ncached path vs cache size on {device} ({device_name(device)}), µs per request")
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    print(f"{'free blocks':>12}" + "".join(f"{impl:>16}" for impl in impls))
    for count in counts:
        cells = {r["impl"]: r["us_per_op"] for r in rows if r["free_blocks"] == count}
        print(f"{count:>12}" + "".join(f"{cells[i]:16.3f}" for i in impls))
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
