"""Draws: the plans that launch kernels/random.cu's kernels, one per (kind, sampler, dtype,
size, device), and the one call every random op makes (``DrawPlan.__call__``).

A draw writes ``numel`` values into dense memory from a tensor's data pointer on, in memory
order (PyTorch's TensorIterator walks a nullary op's output in memory order too). The plan
holds two launchers: the eager one takes the generator's (seed, offset) by value; the
captured one, used while the current stream captures a graph, the generator's device state
and the offset within the graph (Note [Graph-safe generators] in _generator.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from ..._device import Device
from ..._dtypes import all_dtypes, bool_, dtype, float64
from ..._streams import this_thread
from ...driver._work import Arg, Kernel, Launch, View
from .._plans import PLANS, launcher
from . import _philox
from ._generator import Generator, _captures
from ._source import source

__all__ = [
    "DrawKind",
    "DrawPlan",
    "UNIFORM",
    "NORMAL",
    "FROM_TO",
    "BERNOULLI",
    "BERNOULLI_TENSOR",
    "DROPOUT",
    "draw_plan",
    "randperm_plan",
    "instances",
]

_MASK64 = (1 << 64) - 1
_BLOCK = _philox.BLOCK
_STATE_VIEW = View((2,), (8,), np.dtype(np.uint64))  # the generator's device state
_SAMPLERS = {
    "uniform32": "UniformFloat",
    "uniform64": "UniformDouble",
    "normal32": "NormalFloat",
    "normal64": "NormalDouble",
    "bits32": "Bits32",
    "bits64": "Bits64",
}


@dataclass(frozen=True, eq=False)
class DrawKind:
    """A transform of kernels/random.cu: ``transform`` its C++ name, ``fields`` the struct
    format of its fields ("a" the accumulate type: "f" or "d"), ``pointers`` how many
    leading fields are pointers to arrays laid out as the output (of the accumulate type,
    or of the output's with ``input_typed``), ``reference(values, fields, out dtype)``."""

    name: str
    transform: str
    fields: str
    reference: Callable[[np.ndarray, tuple, np.dtype], np.ndarray]
    accumulates: bool = True  # the C++ template takes <T, A> (else <T>)
    pointers: int = 0
    input_typed: bool = False


def _acc(values: np.ndarray) -> type:
    return np.float64 if values.dtype == np.float64 else np.float32


def _uniform(values: np.ndarray, fields: tuple, out: np.dtype) -> np.ndarray:
    low, span, high = fields
    return _philox.uniform_to(values, low, span, high, out)


def _normal(values: np.ndarray, fields: tuple, out: np.dtype) -> np.ndarray:
    mean, std = fields
    return _philox.normal(values, mean, std, out)


def _from_to(values: np.ndarray, fields: tuple, out: np.dtype) -> np.ndarray:
    span, low = fields
    return _philox.from_to(values, span, low, out)


def _bernoulli(values: np.ndarray, fields: tuple, out: np.dtype) -> np.ndarray:
    return (values < _acc(values)(fields[0])).astype(out)


def _bernoulli_tensor(values: np.ndarray, fields: tuple, out: np.dtype) -> np.ndarray:
    return (values <= fields[0]).astype(out)


def _dropout(values: np.ndarray, fields: tuple, out: np.dtype) -> np.ndarray:
    x, keep, scale = fields
    acc = np.float64 if out == np.float64 else np.float32
    mask = (values.astype(acc) < acc(keep)).astype(acc)
    return (x.astype(acc) * mask * acc(scale)).astype(out)


UNIFORM = DrawKind("uniform_", "UniformTo", "aaa", _uniform)
NORMAL = DrawKind("normal_", "Normal", "aa", _normal)
FROM_TO = DrawKind("random_", "FromTo", "Qq", _from_to, accumulates=False)
BERNOULLI = DrawKind("bernoulli_", "Bernoulli", "a", _bernoulli)
BERNOULLI_TENSOR = DrawKind("bernoulli_", "BernoulliTensor", "P", _bernoulli_tensor, pointers=1)
DROPOUT = DrawKind("dropout", "Dropout", "Paa", _dropout, pointers=1, input_typed=True)


def _resolve(seed: int, offset: int, state: Any) -> tuple[int, int]:
    """The (seed, offset) a launch uses: given, or read from the device state it points at."""
    if isinstance(state, np.ndarray):
        return int(state[0]), (int(state[1]) + offset) & _MASK64
    return seed, offset


@cache
def _draw_kernel(kind: DrawKind, sampler: str) -> Kernel:
    def reference(out: np.ndarray, seed: int, offset: int, state: Any, *fields: Any) -> None:
        seed, offset = _resolve(seed, offset, state)
        values = _philox.sample(sampler, seed, offset, out.shape[0])
        with np.errstate(all="ignore"):
            out[...] = kind.reference(values, fields, out.dtype)

    return Kernel(kind.name, source(), reference)


def _randperm_reference(out: np.ndarray, seed: int, offset: int, state: Any) -> None:
    seed, offset = _resolve(seed, offset, state)
    out[...] = _philox.randperm(seed, offset, out.shape[0]).astype(out.dtype)


_RANDPERM = Kernel("randperm", source(), _randperm_reference)


class DrawPlan:
    """One launch shape of one random kernel: ``plan(generator, ptr, *fields)`` draws into
    the dense memory at ``ptr`` on the current stream."""

    __slots__ = ("device", "increment", "launches", "run", "captured")

    def __init__(self, device: Device, increment: int, launch: Launch, captured: Launch) -> None:
        self.device = device
        self.increment = increment
        self.launches = (launch, captured)
        self.run = launcher(device, launch)
        self.captured = None if device.type == "cpu" else launcher(device, captured)

    def __call__(self, generator: Generator, ptr: int, *fields: Any) -> None:
        device = self.device
        if device.type == "cpu":
            seed, offset = generator._advance(self.increment)
            self.run(0, ptr, seed, offset, 0, *fields)
            return
        stream = this_thread.handles[device]
        if _captures[0] and device.driver.stream_capture_info(stream).status != "none":
            offset, state = generator._advance_captured(self.increment, device)
            self.captured(stream, ptr, 0, offset, state, *fields)  # type: ignore[misc]
            return
        seed, offset = generator._advance(self.increment)
        self.run(stream, ptr, seed, offset, 0, *fields)


def _plan(eager_views: tuple, build: Callable[[tuple], Launch], device: Device, increment: int):
    """A DrawPlan from ``build(views)``: eager views, and the same with the device state."""
    captured_views = (eager_views[0], None, None, _STATE_VIEW, *eager_views[4:])
    return DrawPlan(device, increment, build(eager_views), build(captured_views))


def draw_plan(kind: DrawKind, sampler: str, dt: dtype, numel: int, device: Device) -> DrawPlan:
    """The plan of a draw of ``numel`` values of ``dt`` (built and kept on first sight)."""
    key = (DrawPlan, kind, sampler, dt, numel, device)
    plan = PLANS.get(key)
    if plan is None:
        plan = PLANS.add(key, _build_draw(kind, sampler, dt, numel, device))
    return plan


def _accumulates_in(sampler: str, dt: dtype) -> str:
    """The struct format of a draw's accumulate type: "d" (double) or "f" (float)."""
    return "d" if sampler in ("uniform64", "normal64") or dt is float64 else "f"


def _entry(kind: DrawKind, sampler: str, dt: dtype) -> str:
    """The kernel instance of a draw, as C++ names it."""
    c_acc = "double" if _accumulates_in(sampler, dt) == "d" else "float"
    args = f"{dt.c_type}, {c_acc}" if kind.accumulates else dt.c_type
    transform = f"vram::rng::{kind.transform}<{args}>"
    return f"vram::rng::draw<vram::rng::{_SAMPLERS[sampler]}, {dt.c_type}, {transform}>"


def instances() -> list[tuple[str, str]]:
    """Every instance a random plan may launch, as (source, name expression): for warm."""
    floats = [dt for dt in all_dtypes if dt.is_floating_point]
    reals = [dt for dt in all_dtypes if not dt.is_complex]
    found = set()
    for dt in floats:
        wide = dt is float64
        found.add(_entry(UNIFORM, "uniform64" if wide else "uniform32", dt))
        found.add(_entry(NORMAL, "normal64" if wide else "normal32", dt))
        found.add(_entry(DROPOUT, "uniform32", dt))
    for dt in reals:
        uniform = "uniform64" if dt is float64 else "uniform32"
        found.update(_entry(FROM_TO, bits, dt) for bits in ("bits32", "bits64"))
        found.update(_entry(kind, uniform, dt) for kind in (BERNOULLI, BERNOULLI_TENSOR))
        if dt is not bool_:
            found.add(f"vram::rng::randperm<{dt.c_type}>")
    found.add("vram::rng::set_state")
    return [(source(), entry) for entry in sorted(found)]


def _build_draw(kind: DrawKind, sampler: str, dt: dtype, numel: int, device: Device) -> DrawPlan:
    acc_char = _accumulates_in(sampler, dt)
    acc = np.dtype(np.float64 if acc_char == "d" else np.float32)
    fmt = kind.fields.replace("a", acc_char)
    entry = _entry(kind, sampler, dt)
    threads = _philox.threads(numel)
    params = (Arg("P"), np.int64(numel), Arg("Q"), Arg("Q"), Arg("P"), Arg(fmt))
    pointed = dt.np if kind.input_typed else acc
    views = (
        View((numel,), (dt.itemsize,), dt.np),
        None,
        None,
        None,
        *(View((numel,), (pointed.itemsize,), pointed),) * kind.pointers,
        *(None,) * (len(fmt) - kind.pointers),
    )
    kernel = _draw_kernel(kind, sampler)

    def build(v: tuple) -> Launch:
        return Launch(kernel, entry, (threads // _BLOCK, 1, 1), (_BLOCK, 1, 1), params, v)

    increment = _philox.increment(numel, _philox.UNROLL[sampler])
    return _plan(views, build, device, increment)


def randperm_plan(dt: dtype, n: int, device: Device) -> DrawPlan:
    """The plan of ``randperm(n)`` into ``dt`` (Note [randperm] in kernels/random.cu)."""
    key = (DrawPlan, _RANDPERM, dt, n, device)
    plan = PLANS.get(key)
    if plan is None:
        bits = np.uint32((n - 1).bit_length() if n > 1 else 0)
        params = (Arg("P"), np.int64(n), Arg("Q"), Arg("Q"), Arg("P"), bits)
        grid = (min(-(-n // _BLOCK), _philox.MAX_BLOCKS * 4), 1, 1)
        entry = f"vram::rng::randperm<{dt.c_type}>"

        def build(v: tuple) -> Launch:
            return Launch(_RANDPERM, entry, grid, (_BLOCK, 1, 1), params, v)

        views = (View((n,), (dt.itemsize,), dt.np), None, None, None)
        plan = PLANS.add(key, _plan(views, build, device, 4))
    return plan
