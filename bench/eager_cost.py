"""How much Python an eager op runs above the driver, counted, not timed (sim).

Issue 31 asks vram's host time per call to be PyTorch's or less; on a shared machine a
few microseconds of wall time move with the load, while the bytecodes the interpreter runs
for one call do not. This script runs each piece of work on ``sim:0``, warm, once more
under ``sys.settrace`` with opcode events on, and counts the bytecodes and Python calls
of every frame except those under ``vram/driver/`` (the sim driver, its work queue and,
below it, the NumPy reference kernels: on a GPU, cuda-bindings' launch) and
``vram/memory/`` (the allocator, counted by bench/sim_cost.py), and anything they call.
The sim runs the same Python above its driver as a GPU, so the count follows what the
H100 runs (bench/eager.py and bench/eager_device.py time that).

Work (``--work``, repeatable):
- ``decoder:BxT``: one GPT-2-small decoder block (bench/_decoder.py's ``vram_block``: d 768,
  12 heads) on a [B, T, 768] bfloat16 input; ``decoder:BxTxD``: of width D (D / 64 heads of
  64, as GPT-2's: the same Python for less reference work);
- ``mm:N``: ``vram.mm`` of two float32 N x N tensors, no ``out=``.

``--vram-src DIR`` counts another source tree's vram (an older commit: the "before" rows);
``--top K`` prints the K (file, function) pairs that run the most bytecodes. Each row also
says the bytecodes per op: per vram function the work called (``Tensor.view`` ...), all
that ran below it.

    python bench/eager_cost.py [--work decoder:1x128] [--work mm:64] [--top 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

DEFAULT_WORK = ("decoder:1x128", "mm:64")
_NOT_COUNTED = (f"{os.sep}vram{os.sep}driver{os.sep}", f"{os.sep}vram{os.sep}memory{os.sep}")


def _work(spec: str):
    """A function running the work once."""
    import ml_dtypes
    import numpy as np

    import vram

    device = vram.device("sim:0")
    rng = np.random.default_rng(0)
    kind, _, arg = spec.partition(":")
    if kind == "decoder":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _decoder import D_MODEL, gpt2_weights, vram_block

        batch, seq, *width = (int(n) for n in arg.split("x"))
        d = width[0] if width else D_MODEL
        block = vram_block(gpt2_weights(d), device, heads=d // 64)
        values = rng.standard_normal((batch, seq, d)).astype(ml_dtypes.bfloat16)
        x = vram.tensor(values, device=device)
        return lambda: block(x)
    if kind == "mm":
        n = int(arg)
        a, b = (vram.tensor(rng.standard_normal((n, n), np.float32), device=device) for _ in "ab")
        return lambda: vram.mm(a, b)
    raise SystemExit(f"--work: unknown work {spec!r}")


def _counted(frame) -> bool:
    """Whether ``frame`` is above the driver and outside the allocator (and not called by
    either)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if any(part in name for part in _NOT_COUNTED):
            return False
        frame = frame.f_back
    return True


def _entry(frame) -> str:
    """The vram function the caller's code called to get to ``frame`` (its op)."""
    found = frame
    while frame is not None:
        if f"{os.sep}vram{os.sep}" in frame.f_code.co_filename:
            found = frame
        frame = frame.f_back
    return found.f_code.co_qualname


def count(run) -> tuple[Counter, Counter, Counter]:
    """(bytecodes, calls) per (file, function), and bytecodes per op, of one ``run()``."""
    bytecodes: Counter = Counter()
    calls: Counter = Counter()
    ops: Counter = Counter()

    def trace(frame, event, arg):
        if event == "call":
            if not _counted(frame):
                return None
            calls[frame.f_code.co_filename, frame.f_code.co_name] += 1
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode":
            bytecodes[frame.f_code.co_filename, frame.f_code.co_name] += 1
            if f"{os.sep}vram{os.sep}" in frame.f_code.co_filename:
                ops[_entry(frame)] += 1
        return trace

    sys.settrace(trace)
    try:
        run()
    finally:
        sys.settrace(None)
    return bytecodes, calls, ops


def _child(spec: str, top: int) -> None:
    """Warm the work, count one run; prints one JSON row."""
    import vram

    vram.set_device("sim:0")
    run = _work(spec)
    for _ in range(3):  # warm: plans made, the allocator's cache holding what the work needs
        run()
    bytecodes, calls, ops = count(run)
    here = Path(__file__).resolve()
    own = (str(here), str(here.parent / "_decoder.py"))  # the caller's lines: not vram's
    functions = []
    for (file, name), n in bytecodes.most_common():
        if file in own:
            continue
        short = file.split(f"{os.sep}vram{os.sep}")[-1]
        calls_in = calls[file, name]
        functions.append({"function": f"{short}:{name}", "bytecodes": n, "calls": calls_in})
    row = {
        "work": spec,
        "bytecodes": sum(f["bytecodes"] for f in functions),
        "calls": sum(f["calls"] for f in functions),
    }
    row["per_op"] = dict(ops.most_common())
    if top:
        row["top"] = functions[:top]
    print(json.dumps(row))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", action="append", help="what to count (see the docstring)")
    parser.add_argument("--vram-src", default=None, help="count vram from this source folder")
    parser.add_argument("--top", type=int, default=0, help="functions listed per work")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        _child(options.child, options.top)
        return 0
    src = Path(options.vram_src or Path(__file__).resolve().parents[1] / "src").resolve()
    env = {**os.environ, "PYTHONPATH": str(src), "VRAM_DEVICE": "sim"}
    for spec in options.work or DEFAULT_WORK:
        done = subprocess.run(
            [sys.executable, __file__, "--child", spec, "--top", str(options.top)],
            env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        print(done.stdout.strip().splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
