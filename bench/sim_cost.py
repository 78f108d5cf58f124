"""What the allocator's cached path costs the interpreter, counted, not timed (sim).

On a shared machine wall-clock timings of a few microseconds move with the load; the
instructions the CPU runs for the same work do not. This script runs each piece of work on
``sim:0`` under valgrind's callgrind, warm first, then ``n`` times with collection on (only
inside one call of ``functools.reduce``, callgrind's toggle: start-up, imports and warm-up
are not counted), and reports instructions per operation.
The sim's cached path is the same Python as on a GPU, so the count follows what the H100
runs (bench/trace_ops.py and bench/alloc.py time that).

Work (``--work``, repeatable):
- ``trace:NAME``: the requests of bundled trace NAME (tests/data/traces) through
  ``caching_allocator_alloc`` / ``caching_allocator_delete``, per request;
- ``empty:NBYTES``: ``vram.empty(NBYTES, dtype=vram.uint8)`` and del, per pair;
- ``raw:NBYTES``: ``caching_allocator_alloc`` and ``caching_allocator_delete``, per pair;
- ``decoder:BxTxD``: one GPT-2-small decoder block (bench/_decoder.py) of width D on
  [B, T, D], per block (D 128 is the Python of D 768 for less reference work under
  valgrind), and ``mm:N``: ``vram.mm`` of two float32 N x N tensors, per call: eager ops, their
  work held by the sim's deferred mode while they are counted (the NumPy reference kernels
  run after; bench/eager_cost.py counts the same ops' bytecodes per function).

``--vram-src DIR`` counts another source tree's vram (an older commit: the "before" rows).
Without valgrind (``--no-valgrind``) it times best-of-``--repeats`` instead.

    python bench/sim_cost.py [--work trace:gpt_train-default] [--n 1] [--vram-src DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
_EAGER = ("decoder", "mm")  # work kinds of eager ops (bench/eager_cost.py's)
DEFAULT_WORK = ("trace:gpt_train-default", "trace:two_stream-default", "empty:1024", "raw:512")


def _requests(name: str) -> list[tuple[bool, int, int]]:
    """The trace's allocs and the frees of what it allocated, as bench/trace_ops.py has them."""
    from vram.tools import load_snapshot

    snapshot = load_snapshot(TRACES / f"{name}.pickle.xz")
    out, live = [], set()
    for entry in next((t for t in snapshot.get("device_traces") or [] if t), []):
        action, addr = entry["action"], entry["addr"]
        if action == "alloc":
            out.append((True, addr, max(entry["size"], 1)))
            live.add(addr)
        elif action == "free_requested" and addr in live:
            out.append((False, addr, 0))
            live.discard(addr)
    return out


def _work(spec: str):
    """(function running the work once, operations per run)."""
    import vram

    kind, _, arg = spec.partition(":")
    alloc, delete = vram.memory.caching_allocator_alloc, vram.memory.caching_allocator_delete
    if kind == "trace":
        ops = _requests(arg)

        def run() -> None:
            live: dict[int, int] = {}
            for is_alloc, addr, size in ops:
                if is_alloc:
                    live[addr] = alloc(size)
                else:
                    delete(live.pop(addr))
            for ptr in live.values():
                delete(ptr)

        return run, len(ops)
    if kind in _EAGER:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from eager_cost import _work as eager_work

        once = eager_work(spec)

        def run() -> None:
            for _ in range(10):
                once()

        return run, 10
    nbytes = int(arg)
    if kind == "empty":
        empty, uint8, device = vram.empty, vram.uint8, vram.device("sim:0")

        def run() -> None:
            for _ in range(1000):
                empty(nbytes, dtype=uint8, device=device)

        return run, 1000
    if kind == "raw":

        def run() -> None:
            for _ in range(1000):
                delete(alloc(nbytes))

        return run, 1000
    raise SystemExit(f"--work: unknown work {spec!r}")


def _child(spec: str, n: int) -> None:
    """Warm the work, then run it ``n`` times inside functools.reduce (what is counted);
    prints the operations counted."""
    import vram

    vram.set_device("sim:0")
    run, per = _work(spec)
    run()  # warm: the cache holds what the work needs
    eager = spec.partition(":")[0] in _EAGER
    with vram.sim.deferred() if eager else contextlib.nullcontext():  # (kernels run after)
        functools.reduce(lambda _, work: work(), [run] * n, None)
    print(per * n)


def _instructions(spec: str, n: int, env: dict) -> tuple[int, int]:
    """(instructions counted, operations) of one child under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--collect-atstart=no",
             "--toggle-collect=*functools_reduce*", f"--callgrind-out-file={out}",
             sys.executable, __file__, "--child", spec, "--n", str(n)],
            env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        text = Path(out).read_text()
    counted = int(re.search(r"^summary: (\d+)", text, re.M).group(1))
    return counted, int(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", action="append", help="what to count (see the docstring)")
    parser.add_argument("--n", type=int, default=1, help="counted runs of each work")
    parser.add_argument("--vram-src", default=None, help="count vram from this source folder")
    parser.add_argument("--no-valgrind", action="store_true", help="time best-of instead")
    parser.add_argument("--repeats", type=int, default=20, help="timed runs (--no-valgrind)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    src = Path(options.vram_src or Path(__file__).resolve().parents[1] / "src").resolve()
    if options.child:
        _child(options.child, options.n)
        return 0
    env = {**os.environ, "PYTHONPATH": str(src), "VRAM_DEVICE": "sim"}
    rows = []
    for spec in options.work or DEFAULT_WORK:
        if options.no_valgrind:
            sys.path.insert(0, str(src))
            import vram

            vram.set_device("sim:0")
            run, per = _work(spec)
            run()
            best = min(_timed(run) for _ in range(options.repeats))
            rows.append({"work": spec, "us_per_op": round(best / per * 1e6, 3)})
        else:
            counted, ops = _instructions(spec, options.n, env)
            rows.append({"work": spec, "instructions_per_op": counted // ops})
        print(json.dumps(rows[-1]), flush=True)
    return 0


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
