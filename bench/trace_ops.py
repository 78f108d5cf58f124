"""Real traces' alloc/free sequences through vram, PyTorch and CuPy (issue 8).

Each trace the repository carries (tests/data/traces, recorded by bench/record_traces.py,
or ``--traces DIR``) is turned into its sequence of requests on device 0 in order: an
``alloc`` of the recorded size, a ``free_requested`` of a live allocation (frees of what was
allocated before the trace began are left out). Each peer runs the whole sequence through
its raw API, in one process:

- vram: ``vram.memory.caching_allocator_alloc`` / ``caching_allocator_delete``;
- PyTorch: ``torch.cuda.caching_allocator_alloc`` / ``caching_allocator_delete``;
- CuPy: a ``cupy.cuda.MemoryPool``'s ``malloc``, freed by dropping the pointer;
- python floor: ``_floor.FloorPool``, the bare decisions of a best-fit pool in pure Python
  with nothing a real allocator must also do (no device, statistics, events or checks):
  what the interpreter alone costs per request.

The sequence runs once to warm each peer's cache, then ``--repeats`` interleaved rounds time
every peer on every trace in turn (a shared machine's slow moments fall on all alike). In a
round a peer runs the sequence as many whole times as take at least ``--min-ms`` (the same
count for every peer: the smallest trace is a few milliseconds, short enough for one
interruption to move it). A row is the median µs per request over the rounds, with its
ratio to PyTorch and to CuPy (the ratio of the medians), and the median of the rounds' own
ratios (``paired_ratio_to_*``: each round's peers ran back to back on the same machine).

``--vram-src DIR`` runs vram from another source tree (an older commit: the "before" rows)
and ``--label`` names it; ``--also-src DIR`` (named by ``--also-label``, "before") loads a
second tree's vram beside the first, in the same process, as one more peer: its rounds are
interleaved with the others', so a before/after ratio does not move with the machine's
load between runs. ``--device sim:0`` times vram alone, to check the script anywhere.

    python bench/trace_ops.py [--traces DIR] [--repeats 7] [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import math
import operator
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

if "--vram-src" in sys.argv:  # before vram is imported: run another tree's vram
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--vram-src") + 1]).resolve()))

import importlib  # noqa: E402
import json  # noqa: E402

import vram  # noqa: E402
from _common import add_output_arguments, description_of, device_name, write_results  # noqa: E402
from _floor import FloorPool  # noqa: E402
from _traces import trace_files  # noqa: E402

TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"

Request = tuple[bool, int, int]  # (is an alloc, recorded address, size)
Runner = Callable[[list[Request]], None]


def sequence(path: Path) -> list[Request]:
    """A trace's requests on device 0: allocs, and the frees of what the trace allocated."""
    out: list[Request] = []
    live: set[int] = set()
    from vram.tools import load_snapshot  # (not in older trees: they read --sequences)

    traces = load_snapshot(path).get("device_traces") or [[]]
    for entry in next((t for t in traces if t), []):
        action, addr = entry["action"], entry["addr"]
        if action == "alloc":
            out.append((True, addr, max(entry["size"], 1)))
            live.add(addr)
        elif action == "free_requested" and addr in live:
            out.append((False, addr, 0))
            live.discard(addr)
    return out


def replayer(alloc: Callable[[int], object], free: Callable[[object], None]) -> Runner:
    """Run a sequence through ``alloc(size) -> handle`` and ``free(handle)``; whatever is
    still live at the end is freed (untimed rounds leave the cache as they found it)."""

    def run(ops: list[Request]) -> None:
        live: dict[int, object] = {}
        for is_alloc, addr, size in ops:
            if is_alloc:
                live[addr] = alloc(size)
            else:
                free(live.pop(addr))
        for handle in live.values():
            free(handle)

    return run


class _Skip(Exception):
    pass


def _vram(device: vram.Device) -> Runner:
    return replayer(vram.memory.caching_allocator_alloc, vram.memory.caching_allocator_delete)


def _other_vram(src: str) -> object:
    """The vram package of source tree ``src``, imported beside the one already loaded (its
    modules are kept apart from sys.modules, so each copy sees only its own)."""

    def ours() -> dict:
        return {k: v for k, v in sys.modules.items() if k == "vram" or k.startswith("vram.")}

    saved = ours()
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(Path(src).resolve()))
    try:
        return importlib.import_module("vram")
    finally:
        sys.path.pop(0)
        for name in ours():
            del sys.modules[name]
        sys.modules.update(saved)


def _also(src: str) -> Callable[[vram.Device], Runner]:
    def setup(device: vram.Device) -> Runner:
        other = _other_vram(src)
        other.set_device(other.device(str(device)))
        memory = other.memory
        return replayer(memory.caching_allocator_alloc, memory.caching_allocator_delete)

    return setup


def _torch(device: vram.Device) -> Runner:
    if device.type != "cuda":
        raise _Skip("PyTorch times a real GPU only")
    try:
        import torch
    except ImportError as exc:
        raise _Skip(f"torch is not importable ({exc})") from None
    torch.cuda.set_device(device.index)
    return replayer(torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete)


def _cupy(device: vram.Device) -> Runner:
    if device.type != "cuda":
        raise _Skip("CuPy times a real GPU only")
    try:
        import cupy
    except ImportError as exc:
        raise _Skip(f"cupy is not importable ({exc})") from None
    cupy.cuda.Device(device.index).use()
    pool = cupy.cuda.MemoryPool()
    return replayer(pool.malloc, lambda pointer: None)  # dropping the pointer frees it


def _floor(device: vram.Device) -> Runner:
    pool = FloorPool()
    return replayer(lambda size: pool.malloc(size), pool.free)


def time_per_request(run: Runner, ops: list[Request], times: int = 1) -> float:
    """µs per request of ``times`` runs of ``ops``, with the garbage collector off."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for _ in range(times):
            run(ops)
        return (time.perf_counter_ns() - start) / (len(ops) * times) / 1e3
    finally:
        if gc_was_enabled:
            gc.enable()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=None, help="cuda:N or sim:N (default: the default)")
    parser.add_argument("--traces", default=str(TRACES), help="folder of trace files")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds")
    parser.add_argument(
        "--min-ms", type=float, default=20.0, help="least time of one peer's timing in a round"
    )
    parser.add_argument("--vram-src", default=None, help="run vram from this source folder")
    parser.add_argument("--label", default="vram", help="the name of vram's rows")
    parser.add_argument("--only-vram", action="store_true", help="time vram alone")
    parser.add_argument("--also-src", default=None, help="also run this tree's vram, interleaved")
    parser.add_argument("--also-label", default="before", help="the name of --also-src's rows")
    parser.add_argument("--sequences", default=None, help="read the requests from this JSON")
    parser.add_argument("--dump-sequences", default=None, help="write the requests as JSON")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    device = vram.default_device() if options.device is None else vram.device(options.device)
    vram.set_device(device)
    if options.sequences:  # (an older tree cannot read trace files: it reads these)
        traces = {
            k: [tuple(r) for r in v]
            for k, v in json.loads(Path(options.sequences).read_text()).items()
        }
    else:
        paths = trace_files(options.traces)
        if not paths:
            parser.error(f"--traces: no traces in {options.traces}")
        traces = {p.name.split(".")[0]: sequence(p) for p in paths}
    if options.dump_sequences:
        Path(options.dump_sequences).write_text(json.dumps(traces))
    peers = [(options.label, _vram)]
    if options.also_src:
        peers.append((options.also_label, _also(options.also_src)))
    if not options.only_vram:
        peers += [("pytorch", _torch), ("cupy", _cupy), ("python floor", _floor)]
    runners: dict[str, Runner] = {}
    for name, setup in peers:
        try:
            runners[name] = setup(device)
        except _Skip as why:
            print(f"skip {name}: {why}", file=sys.stderr)
    for run in runners.values():
        for ops in traces.values():
            run(ops)  # warm: every later round is served from the cache
    # whole runs per timing: enough for the slowest peer's run to last --min-ms
    loops = {
        trace: max(
            1,
            math.ceil(
                options.min_ms
                * 1e3
                / max(time_per_request(r, ops) * len(ops) for r in runners.values())
            ),
        )
        for trace, ops in traces.items()
    }
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(options.repeats):
        for trace, ops in traces.items():
            for name, run in runners.items():
                times.setdefault((trace, name), []).append(time_per_request(run, ops, loops[trace]))
    columns = ("pytorch", "cupy", *((options.also_label,) if options.also_src else ()))  # ratios
    rows = []
    for trace, ops in traces.items():
        medians = {n: statistics.median(times[trace, n]) for n in runners}
        for name, us in medians.items():
            row = {
                "trace": trace,
                "impl": name,
                "requests": len(ops),
                "us_per_op": round(us, 3),
                "runs_us": [round(t, 3) for t in times[trace, name]],
                "runs_per_timing": loops[trace],
            }
            for peer in columns:
                if peer in medians and name != peer:
                    row[f"ratio_to_{peer}"] = round(us / medians[peer], 3)
                    paired = map(operator.truediv, times[trace, name], times[trace, peer])
                    row[f"paired_ratio_to_{peer}"] = round(statistics.median(paired), 3)
            rows.append(row)
    name = "trace_ops" if options.label == "vram" else f"trace_ops-{options.label}"
    written = write_results(name, device, rows, options.out, options.save)
    print(f"\ntrace alloc/free sequences on {device} ({device_name(device)}), µs per request")
    header = "".join(f"{'/' + ('torch' if p == 'pytorch' else p)[:7]:>8}" for p in columns)
    print(f"{'trace':<34}{'impl':<18}{'requests':>9}{'µs/op':>9}{header}")
    for row in rows:
        ratios = [row.get(f"ratio_to_{p}") for p in columns]
        cells = "".join("       -" if r is None else f"{r:8.2f}" for r in ratios)
        print(
            f"{row['trace']:<34}{row['impl']:<18}{row['requests']:>9}{row['us_per_op']:9.3f}{cells}"
        )
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
