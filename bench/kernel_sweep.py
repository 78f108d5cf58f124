"""The launch choices of the bandwidth-bound kernels, timed against PyTorch at 64M elements.

For each op of issue 31's "large sizes" target (add, exp, sum, softmax over rows of 1,024,
layer_norm over rows of 8,192) and the rows that must not regress, the production call
(vram's public op) and candidate launches of the same kernels (``VecLoop`` of
``ops._pointwise``, ``InnerTuning`` of ``ops._reduce``, row layouts of ``ops._rows``) run
on the same data as PyTorch's op, in one process, interleaved round by round: per round
each candidate makes ``--reps`` calls between two CUDA events (after a warm-up), and a
cell is the median round. Outputs are new tensors each call, as an eager user gets them.

Every candidate's result is checked against PyTorch's (on the sim: against NumPy in
float64) and a mismatch is printed loudly (and marked in the JSON).

Every candidate is planned first on the simulated GPU and its kernels compiled with NVRTC
(``vram.ops.warm``: in parallel, into the kernel cache), so the timed plans only load them.
``--device sim:0`` plans, compiles (for sm_90) and checks every candidate at a small size:
it checks the plumbing, not the speed.

    python bench/kernel_sweep.py [--device cuda:0] [--out FILE.json|DIR] [--only add,sum]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

import eager_reduce  # (its bytes moved; its measurement, run at the end)
import vram
from _common import add_output_arguments, write_results
from vram.ops import warm as warm_module
from vram.ops._layer_norm import LayerNormPlan
from vram.ops._math import BINARY, UNARY
from vram.ops._pointwise import COPY, VEC_LOOP, PointwisePlan, VecLoop
from vram.ops._promotion import opmath
from vram.ops._reduce import INNER, InnerTuning, ReducePlan, multiprocessors
from vram.ops._reduce_ops import SUM
from vram.ops._rows import (
    RowLayout,
    norm_layout,
    online_layout,
    register_layout,
    row_layout,
)
from vram.ops._softmax import SoftmaxPlan

NUMEL = 64 << 20  # elements of every input on a GPU
SIM_NUMEL = 1 << 15  # and on the simulated GPU
REPS = 30
ROUNDS = 7
EPS = 1e-5  # layer_norm's
RTOL = {"float32": 2e-5, "bfloat16": 2e-2}
SIM = vram.device("sim:0")

# candidate launches (the production one is always timed too, through the public op)
LOOPS = (
    VecLoop(unroll=1, block=256, waves=16),
    VecLoop(unroll=2, block=256, waves=16),
    VecLoop(unroll=4, block=256, waves=16),
    VecLoop(unroll=1, block=128, waves=0),
    VecLoop(unroll=2, block=128, waves=0),
    VecLoop(unroll=4, block=256, waves=0),
)
INNERS = (
    InnerTuning(unroll=4, accumulators=1),
    InnerTuning(unroll=4, accumulators=4),
    InnerTuning(unroll=8, accumulators=4),
    InnerTuning(unroll=4, accumulators=4, threads=256),
    InnerTuning(unroll=4, accumulators=4, waves=2),
    InnerTuning(unroll=4, accumulators=1, interleave=True),
    InnerTuning(unroll=4, accumulators=4, interleave=True),
    InnerTuning(unroll=8, accumulators=4, interleave=True),
    InnerTuning(unroll=8, accumulators=4, threads=256, waves=2, interleave=True),
)
# (threads per row, rows per block at most, __launch_bounds__)
SOFTMAX_ROWS = ((32, 4, 128), (64, 2, 128), (32, 8, 256), (128, 1, 128))
NORM_ROWS = ((512, 1, 1024), (256, 1, 256), (128, 1, 128))
NORM_SHORT_ROWS = ((32, 4, 128), (64, 2, 128))
# online: (threads per row, vectors a thread loads at once, blocks a multiprocessor)
NORM_ONLINE = ((256, 2, 4), (256, 1, 5), (128, 2, 8), (128, 4, 6), (512, 2, 2), (256, 4, 3))


@dataclass
class Case:
    """One op on one dtype and shape: the candidates (label -> call) and PyTorch's."""

    op: str
    dtype: str
    width: int | None
    moved: int  # bytes the op must move
    calls: dict[str, Callable[[], Any]] = field(default_factory=dict)
    launches: list = field(default_factory=list)  # every candidate plan's launches


def _label(tuning: Any) -> str:
    if isinstance(tuning, VecLoop):
        return f"unroll{tuning.unroll}/block{tuning.block}/waves{tuning.waves}"
    if isinstance(tuning, InnerTuning):
        return (
            f"unroll{tuning.unroll}/acc{tuning.accumulators}/threads{tuning.threads}"
            f"/waves{tuning.waves}" + ("/interleave" if tuning.interleave else "")
        )
    rows: RowLayout = tuning
    if rows.online:
        return f"online/threads{rows.threads}/unroll{rows.items}/blocks{rows.blocks}"
    return f"threads{rows.threads}x{rows.items}items/rows{rows.rows}/bound{rows.bound}"


class Inputs:
    """The inputs of one dtype: a flat tensor, a second one (add), row weights and biases,
    for vram (and PyTorch on a GPU: the same memory, shared through DLPack)."""

    def __init__(self, device: Any, numel: int, dtype: str, widths: tuple[int, ...]) -> None:
        self.device, self.numel, self.dtype = device, numel, dtype
        self.torch = None
        rng = np.random.default_rng(0)
        if device.type == "cuda":
            import torch

            self.torch = torch
            tdtype = getattr(torch, dtype)
            gen = torch.Generator(device="cuda").manual_seed(0)
            self.tx = torch.randn(numel, device="cuda", generator=gen).to(tdtype)
            self.ty = torch.randn(numel, device="cuda", generator=gen).to(tdtype)
            self.tparams = {
                w: (
                    torch.randn(w, device="cuda", generator=gen).to(tdtype),
                    torch.randn(w, device="cuda", generator=gen).to(tdtype),
                )
                for w in widths
            }
            self.x, self.y = vram.asarray(self.tx), vram.asarray(self.ty)
            self.params = {w: tuple(vram.asarray(t) for t in p) for w, p in self.tparams.items()}
            torch.cuda.synchronize()
            self._own()
            return
        npdtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32
        draw = lambda n: rng.standard_normal(n, dtype=np.float32).astype(npdtype)  # noqa: E731
        self.hx, self.hy = draw(numel), draw(numel)
        self.hparams = {w: (draw(w), draw(w)) for w in widths}
        self.x = vram.tensor(self.hx, device=device)
        self.y = vram.tensor(self.hy, device=device)
        self.params = {
            w: tuple(vram.tensor(a, device=device) for a in p) for w, p in self.hparams.items()
        }
        self._own()

    def _own(self) -> None:
        """Copies of the inputs in memory from vram's own allocator (the production call is
        timed on both: bench/eager_reduce.py's inputs are vram's)."""
        params = {w: (a.clone(), b.clone()) for w, (a, b) in self.params.items()}
        self.own = (self.x.clone(), self.y.clone(), params)
        vram.synchronize(self.device)


def production(op: str, width: int | None, x: Any, y: Any, params: dict) -> Callable[[], Any]:
    """vram's public call of ``op`` on these tensors."""
    if op == "add":
        return lambda: x + y
    if op == "exp":
        return lambda: vram.exp(x)
    if op == "copy":
        return lambda: vram.empty_like(x).copy_(x)
    if op == "sum":
        return lambda: vram.sum(x)
    grid = x.view(-1, width)
    if op == "sum_rows":
        return lambda: vram.sum(grid, -1)
    if op == "softmax":
        return lambda: vram.nn.functional.softmax(grid, -1)
    if op == "log_softmax":
        return lambda: vram.nn.functional.log_softmax(grid, -1)
    w, b = params[width]
    return lambda: vram.nn.functional.layer_norm(grid, (width,), w, b, EPS)


def _productions(case: Case, inputs: Inputs) -> None:
    """The production call on the shared inputs and on vram's own copies of them."""
    case.calls["production"] = production(case.op, case.width, inputs.x, inputs.y, inputs.params)
    case.calls["production@vram-memory"] = production(case.op, case.width, *inputs.own)


def _pointwise_case(inputs: Inputs, op: str, loops: tuple[VecLoop, ...]) -> Case:
    x, y, item = inputs.x, inputs.y, x_itemsize(inputs)
    case = Case(op, inputs.dtype, None, eager_reduce.moved(op, inputs.numel, item))
    _productions(case, inputs)
    if op == "add":
        plans = [(loop, PointwisePlan(BINARY["add"], (x, y), None, loop)) for loop in loops]
        for loop, plan in _candidates(plans, VEC_LOOP):
            case.calls[_label(loop)] = lambda plan=plan: plan.binary(x, y, (1,))
    elif op == "exp":
        plans = [(loop, PointwisePlan(UNARY["exp"], (x,), None, loop)) for loop in loops]
        for loop, plan in _candidates(plans, VEC_LOOP):
            case.calls[_label(loop)] = lambda plan=plan: plan.unary(x, ())
    else:  # copy: into a new tensor each call, as the other ops
        out = vram.empty_like(x)
        plans = [(loop, PointwisePlan(COPY, (x,), out, loop)) for loop in loops]
        for loop, plan in _candidates(plans, VEC_LOOP):
            case.calls[_label(loop)] = lambda plan=plan: plan((x,), (), vram.empty_like(x))
    for _, plan in plans:
        case.launches += [launch for launch in plan.launches if "pointwise_vec" in launch.entry]
    return case


def x_itemsize(inputs: Inputs) -> int:
    return inputs.x.dtype.itemsize


def _sum_case(inputs: Inputs, width: int | None, tunings: tuple[InnerTuning, ...]) -> Case:
    x = inputs.x if width is None else inputs.x.view(inputs.numel // width, width)
    dims = (0,) if width is None else (1,)
    d = x.dtype
    op = "sum" if width is None else "sum_rows"
    case = Case(op, inputs.dtype, width, eager_reduce.moved(op, inputs.numel, d.itemsize))
    _productions(case, inputs)
    plans = [(t, ReducePlan(SUM, x, dims, False, d, opmath(d), d, None, (), t)) for t in tunings]
    for tuning, plan in _candidates(plans, INNER):
        case.calls[_label(tuning)] = lambda plan=plan: plan(x)[0]
    own = inputs.own[0] if width is None else inputs.own[0].view(x.shape)
    for tuning, plan in plans:  # each choice on vram's own memory too
        case.calls[_label(tuning) + "@vram-memory"] = lambda plan=plan: plan(own)[0]
    case.launches += [launch for _, plan in plans for launch in plan.launches]
    return case


def _rows_of(inputs: Inputs, width: int):
    return inputs.x.view(inputs.numel // width, width)


def _layouts(
    inputs: Inputs, width: int, choices: tuple, online: tuple = (), norm: bool = False
) -> list[RowLayout]:
    """The production layout (first), then those of ``choices`` in registers and of
    ``online`` (threads, vectors loaded at once, blocks a multiprocessor)."""
    rows = inputs.numel // width
    sms = multiprocessors(inputs.device)
    item = x_itemsize(inputs)
    found = [register_layout(width, rows, item, sms, t, r, b) for t, r, b in choices]
    found += [online_layout(width, rows, item, sms, t, u, b) for t, u, b in online]
    return list(dict.fromkeys((_production_layout(inputs, width, norm), *found)))


def _softmax_case(inputs: Inputs, width: int, choices: tuple, log: bool = False) -> Case:
    grid = _rows_of(inputs, width)
    dt = grid.dtype
    name = "log_softmax" if log else "softmax"
    case = Case(name, inputs.dtype, width, eager_reduce.moved(name, inputs.numel, dt.itemsize))
    _productions(case, inputs)
    plans = [
        (layout, SoftmaxPlan(grid, 1, dt, log, layout))
        for layout in _layouts(inputs, width, choices)
    ]
    for layout, plan in _candidates(plans, _production_layout(inputs, width)):
        case.calls[_label(layout)] = lambda plan=plan: plan(grid)
    case.launches += [launch for _, plan in plans for launch in plan.launches]
    return case


def _norm_case(inputs: Inputs, width: int, choices: tuple, online: tuple = ()) -> Case:
    grid = _rows_of(inputs, width)
    w, b = inputs.params[width]
    nbytes = eager_reduce.moved("layer_norm", inputs.numel, grid.dtype.itemsize)
    case = Case("layer_norm", inputs.dtype, width, nbytes)
    _productions(case, inputs)
    plans = [
        (layout, LayerNormPlan(grid, (width,), w, b, layout))
        for layout in _layouts(inputs, width, choices, online, norm=True)
    ]
    for layout, plan in _candidates(plans, _production_layout(inputs, width, norm=True)):
        case.calls[_label(layout)] = lambda plan=plan: plan(grid, w, b, EPS)
    case.launches += [launch for _, plan in plans for launch in plan.launches]
    return case


def _candidates(plans: list[tuple[Any, Any]], production: Any) -> list[tuple[Any, Any]]:
    """The plans of choices other than the production one (which is timed through the
    public op; its plan is made only for its kernels to be compiled with the others)."""
    return [(choice, plan) for choice, plan in plans if choice != production]


def _production_layout(inputs: Inputs, width: int, norm: bool = False) -> RowLayout:
    rows = inputs.numel // width
    layout = norm_layout if norm else row_layout
    return layout(width, rows, x_itemsize(inputs), 4, multiprocessors(inputs.device))


def build_cases(inputs: Inputs, only: set[str] | None) -> list[Case]:
    """Every case of one dtype (its candidates planned on ``inputs``' device)."""
    dtype = inputs.dtype
    wanted = lambda op: only is None or op in only  # noqa: E731
    loops = tuple(dict.fromkeys((VEC_LOOP, *LOOPS)))
    inners = tuple(dict.fromkeys((INNER, *INNERS)))
    cases: list[Case] = []

    def add(build: Callable[..., Case], *args: Any) -> None:
        try:
            cases.append(build(inputs, *args))
        except Exception as exc:  # one case's failure must not cost the others' numbers
            print(f"!!! FAILED to plan {build.__name__}{args[:1]} {dtype}: {exc!r}", flush=True)

    for op in ("add", "exp", "copy"):
        if wanted(op) and (op != "copy" or dtype == "float32"):
            add(_pointwise_case, op, loops)
    if wanted("sum"):
        add(_sum_case, None, inners)
    if wanted("sum_rows"):
        add(_sum_case, 1024, inners)
    if wanted("softmax"):
        add(_softmax_case, 1024, SOFTMAX_ROWS)
        add(_softmax_case, 8192, ())
    if wanted("log_softmax") and dtype == "bfloat16":
        add(_softmax_case, 1024, (), True)
    if wanted("layer_norm"):
        wide = dtype == "bfloat16"
        add(_norm_case, 8192, NORM_ROWS if wide else (), NORM_ONLINE if wide else NORM_ONLINE[4:5])
        add(_norm_case, 1024, NORM_SHORT_ROWS if dtype == "bfloat16" else ())
    return cases


# ---- what PyTorch (or NumPy on the sim) makes of each case ---------------------------------
def torch_call(inputs: Inputs, case: Case) -> Callable[[], Any]:
    torch = inputs.torch
    x, y = inputs.tx, inputs.ty
    if case.op == "add":
        return lambda: x + y
    if case.op == "exp":
        return lambda: torch.exp(x)
    if case.op == "copy":
        return lambda: torch.empty_like(x).copy_(x)
    if case.op == "sum":
        return lambda: torch.sum(x)
    grid = x.view(-1, case.width)
    if case.op == "sum_rows":
        return lambda: torch.sum(grid, -1)
    if case.op == "softmax":
        return lambda: torch.softmax(grid, -1)
    if case.op == "log_softmax":
        return lambda: torch.log_softmax(grid, -1)
    w, b = inputs.tparams[case.width]
    return lambda: torch.nn.functional.layer_norm(grid, (case.width,), w, b, EPS)


def numpy_reference(inputs: Inputs, case: Case) -> np.ndarray:
    """The case's result in float64 (the sim's check)."""
    x, y = inputs.hx.astype(np.float64), inputs.hy.astype(np.float64)
    if case.op == "add":
        return x + y
    if case.op == "exp":
        return np.exp(x)
    if case.op == "copy":
        return x
    if case.op == "sum":
        return np.array(x.sum())
    grid = x.reshape(-1, case.width)
    if case.op == "sum_rows":
        return grid.sum(-1)
    top = grid - grid.max(-1, keepdims=True)
    if case.op == "softmax":
        return np.exp(top) / np.exp(top).sum(-1, keepdims=True)
    if case.op == "log_softmax":
        return top - np.log(np.exp(top).sum(-1, keepdims=True))
    w, b = (p.astype(np.float64) for p in inputs.hparams[case.width])
    mean = grid.mean(-1, keepdims=True)
    var = ((grid - mean) ** 2).mean(-1, keepdims=True)
    return (grid - mean) / np.sqrt(var + EPS) * w + b


def tolerance(dtype: str, scale: float, summed: float | None, value: float) -> float:
    """The absolute tolerance of a result: ``scale`` the largest |expected| (at least 1);
    for a sum, ``summed`` the sum of |x| (its rounding grows with it) and ``value`` |sum|
    (a bfloat16 result may round to either neighbour: two of its steps)."""
    if summed is None:
        return RTOL[dtype] * scale
    steps = 2**-6 if dtype == "bfloat16" else 0.0
    return 2e-7 * summed + (2e-6 + steps) * value


def _within(got: np.ndarray, want: np.ndarray, dtype: str, summed: float | None) -> str:
    """'' when ``got`` matches ``want``, else what is wrong."""
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    rtol = RTOL[dtype]
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1.0)
    atol = tolerance(dtype, scale, summed, abs(float(want.reshape(-1)[0])) if want.size else 0)
    bad = ~(np.abs(got - want) <= atol + rtol * np.abs(want))
    if not bad.any():
        return ""
    first = int(np.argmax(bad.reshape(-1)))
    return (
        f"{int(bad.sum())} of {bad.size} elements differ; first at {first}: "
        f"{got.reshape(-1)[first]!r} vs {want.reshape(-1)[first]!r} (atol {atol:.3g})"
    )


def check(inputs: Inputs, case: Case, got: Any, want: Any, summed: float | None) -> str:
    """'' when vram's result ``got`` matches ``want`` (PyTorch's result, or NumPy's)."""
    if inputs.torch is not None:
        torch = inputs.torch
        mine = torch.utils.dlpack.from_dlpack(got).double()
        theirs = want.double()
        if mine.shape != theirs.shape:
            return f"shape {tuple(mine.shape)} != {tuple(theirs.shape)}"
        rtol = RTOL[case.dtype]
        scale = max(float(theirs.abs().max()) if theirs.numel() else 0.0, 1.0)
        value = abs(float(theirs.reshape(-1)[0])) if theirs.numel() else 0.0
        atol = tolerance(case.dtype, scale, summed, value)
        bad = ~((mine - theirs).abs() <= atol + rtol * theirs.abs())
        count = int(bad.sum())
        if not count:
            return ""
        first = int(bad.reshape(-1).nonzero()[0])
        return (
            f"{count} of {bad.numel()} elements differ; first at {first}: "
            f"{float(mine.reshape(-1)[first])!r} vs {float(theirs.reshape(-1)[first])!r}"
        )
    return _within(np.asarray(got.numpy(), np.float64), want, case.dtype, summed)


# ---- timing ---------------------------------------------------------------------------------
def _time_ms(event: Callable[[], Any], call: Callable[[], Any], reps: int) -> tuple[float, float]:
    """(device ms a call between two events, host us a call to issue it)."""
    start, end = event(), event()
    start.record()
    begin = time.perf_counter()
    for _ in range(reps):
        call()
    issued = time.perf_counter() - begin
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps, issued / reps * 1e6


def run_case(inputs: Inputs, case: Case, reps: int, rounds: int) -> list[dict]:
    """Check and time every candidate of ``case`` (and PyTorch's op): one row each."""
    device = inputs.device
    torch = inputs.torch
    calls = dict(case.calls)
    summed = None
    if torch is not None:
        reference = torch_call(inputs, case)
        want = reference()
        if case.op == "sum":
            summed = float(inputs.tx.double().abs().sum())
    else:
        want = numpy_reference(inputs, case)
        if case.op == "sum":
            summed = float(np.abs(inputs.hx.astype(np.float64)).sum())
    wrong = {label: check(inputs, case, call(), want, summed) for label, call in calls.items()}
    del want
    for label, problem in wrong.items():
        if problem:
            print(
                f"!!! MISMATCH {case.op} {case.dtype} {case.width or ''} {label}: {problem}",
                flush=True,
            )
    times: dict[str, list[float]] = {label: [] for label in calls}
    host: dict[str, list[float]] = {label: [] for label in calls}
    if torch is not None:
        calls["torch"] = reference
        times["torch"], host["torch"] = [], []
        vram_event = lambda: vram.Event(enable_timing=True)  # noqa: E731
        torch_event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        for call in calls.values():  # warm-up
            call()
        vram.synchronize(device)
        torch.cuda.synchronize()
        for _ in range(rounds):
            for label, call in calls.items():  # round by round: the candidates take turns
                event = torch_event if label == "torch" else vram_event
                ms, us = _time_ms(event, call, reps)
                times[label].append(ms)
                host[label].append(us)
    else:  # the sim: host time of one call, to show the plumbing runs
        for label, call in calls.items():
            start = time.perf_counter()
            call()
            vram.synchronize(device)
            times[label].append((time.perf_counter() - start) * 1e3)
            host[label].append(times[label][-1] * 1e3)
    best = {label: statistics.median(t) for label, t in times.items()}
    torch_gbps = case.moved / best["torch"] / 1e6 if "torch" in best else None
    rows = []
    for label, ms in best.items():
        gbps = case.moved / ms / 1e6
        rows.append(
            {
                "op": case.op,
                "dtype": case.dtype,
                "numel": inputs.numel,
                "width": case.width,
                "variant": label,
                "ms": round(ms, 5),
                "host_us": round(statistics.median(host[label]), 1),
                "gbps": round(gbps, 1),
                "ratio": round(gbps / torch_gbps, 3) if torch_gbps else None,
                "ok": label == "torch" or not wrong[label],
                "mismatch": wrong.get(label, ""),
            }
        )
    return rows


def _print(rows: list[dict]) -> None:
    for row in rows:
        width = f"x{row['width']}" if row["width"] else ""
        ratio = f"{row['ratio']:.3f}x" if row["ratio"] is not None else ""
        flag = "" if row["ok"] else "  MISMATCH"
        print(
            f"{row['op'] + width:<17} {row['dtype']:<9} {row['variant']:<56} "
            f"{row['ms']:>9.4f} ms {row['gbps']:>8.1f} GB/s {ratio:>7} "
            f"(host {row['host_us']:>6.1f} us){flag}",
            flush=True,
        )


def compile_all(instances: list[tuple[str, str]], arch: str, jobs: int | None) -> None:
    """Compile every candidate's kernels into the kernel cache (NVRTC, in parallel)."""
    start = time.perf_counter()
    count = warm_module.warm(sorted(set(instances)), arch, jobs)
    print(f"compiled {count} kernel instances for {arch} in {time.perf_counter() - start:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0", help="cuda:N or sim:N")
    parser.add_argument("--numel", type=int, default=None, help="elements of each input")
    parser.add_argument("--only", default=None, help="ops, comma-separated (add,exp,sum,...)")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--reps", type=int, default=REPS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--jobs", type=int, default=None, help="compiling processes")
    parser.add_argument(
        "--no-eager-reduce",
        dest="eager_reduce",
        action="store_false",
        help="skip bench/eager_reduce.py's measurement at the end (cuda only)",
    )
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    device = vram.device(options.device)
    vram.set_device(device)
    only = set(options.only.split(",")) if options.only else None
    dtypes = options.dtypes.split(",")
    numel = options.numel or (NUMEL if device.type == "cuda" else SIM_NUMEL)
    widths = (1024, 8192)
    # plan every candidate on the sim at a small size (the same kernel instances), compile
    instances: list[tuple[str, str]] = []
    for dtype in dtypes:
        for case in build_cases(Inputs(SIM, SIM_NUMEL, dtype, widths), only):
            instances += [(launch.work.source, launch.entry) for launch in case.launches]
    arch = "sm_90"
    if device.type == "cuda":
        from vram.driver._nvrtc import arch_for

        props = device.driver.properties(device.index)
        arch = arch_for(props.major, props.minor)
    compile_all(instances, arch, options.jobs)
    rows: list[dict] = []
    failed = 0
    for dtype in dtypes:
        inputs = Inputs(device, numel, dtype, widths)
        for case in build_cases(inputs, only):
            try:
                found = run_case(inputs, case, options.reps, options.rounds)
            except Exception as exc:  # print it, and go on to the next case
                print(f"!!! FAILED {case.op} {case.dtype} {case.width or ''}: {exc!r}", flush=True)
                failed += 1
                continue
            _print(found)
            rows += found
    if options.eager_reduce and device.type == "cuda":
        found = eager_reduce.measure(device, (numel,), tuple(dtypes), widths)
        print("bench/eager_reduce.py in this process (vram, torch, cupy interleaved):")
        eager_reduce._print(found)
        rows += [dict(row, variant="eager_reduce:" + row["peer"]) for row in found]
    bad = [r for r in rows if not r.get("ok", True)]
    trouble = "  !!!" if bad or failed else ""
    print(f"{len(rows)} rows, {len(bad)} mismatches, {failed} cases failed{trouble}")
    for path in write_results("kernel_sweep", device, rows, options.out, False):
        print(f"wrote {path}")
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main())
