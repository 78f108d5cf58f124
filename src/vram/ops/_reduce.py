"""The reduction engine (PyTorch's Reduce.cuh): one plan per signature, one or two launches.

A reduction is a ``Reduction`` (ops/_reduce_ops.py): its C++ op (kernels/reduce.cu) and the
NumPy functions that do the same (fold a range of elements into accumulators, combine
accumulators, store results), which the simulated GPU and the cpu device run.

The plan of a call (``ReducePlan``), worked out once per signature:

- Shape: the output is contiguous, of the input's shape with the reduced dims removed (or
  kept as 1 with ``keepdim``), as PyTorch allocates it.
- Layout: the kept dims (in the tensor's order, so that output ``o`` is ``out[o]``) and the
  reduced dims (in memory order; in the tensor's order for the ops that report indices) are
  each coalesced into (size, stride) lists.
- Strategy: when the reduced dims are the innermost in memory, a group of threads shares
  each output and walks its range, with 16-byte vector loads where the range is contiguous
  and aligned (``reduce_inner``); otherwise consecutive threads take consecutive outputs, so
  that loads along the innermost kept dim coalesce (``reduce_outer``).
- Splits: when the outputs alone give too few blocks to fill the GPU, the reduced range is
  split across blocks that write accumulators to a workspace, and a second launch
  (``reduce_partials``) combines them: a full reduction is at most two launches.

A call is then a dict lookup (the caller's), the output's allocation (and the workspace's),
and one or two launches. A vector launch is taken when the input's address is 16-byte
aligned; the element-wise one (compiled on first need) otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from .._device import Device
from .._dtypes import dtype, uint8
from .._streams import this_thread
from .._tensor import Tensor, contiguous_strides
from ..driver._work import Arg, Kernel, Launch, Launcher, View
from ._kernels import KERNEL_DIR, c_type
from ._plans import PLANS, launcher, new_tensor

__all__ = [
    "MAX_REDUCE_DIMS",
    "Reduction",
    "ReducePlan",
    "source",
    "layout_dtype",
    "multiprocessors",
    "next_pow2",
    "plan_for",
    "InnerTuning",
    "INNER",
]

MAX_REDUCE_DIMS = 16  # kept and reduced dims after coalescing (kReduceDims in reduce.cu)
_THREADS = 512  # threads per block at most (the kernels' __launch_bounds__)
_RESIDENT = 2048  # threads an SM holds at once
_MIN_FOLDS = 8  # loads a thread makes before a range is worth splitting across blocks
_MAX_SPLITS = 65535  # gridDim.y
_SLACK = 1 << 16  # room under 2**31 for the unrolled loads' look-ahead in 32-bit offsets
_DEFAULT_SMS = 132  # the cpu device has no multiprocessors: plan as for an H100


@dataclass(frozen=True, slots=True)
class InnerTuning:
    """How ``reduce_inner`` walks a contiguous range: ``unroll`` 16-byte loads in flight a
    thread, folded into ``accumulators`` (dividing ``unroll``); at most ``threads`` a
    block; splits of a range fill ``resident`` threads a multiprocessor (times ``waves``)
    and take a chunk of it each, or (``interleave``) tiles of it in turn."""

    unroll: int
    accumulators: int
    threads: int = _THREADS
    resident: int = _RESIDENT
    waves: int = 1
    interleave: bool = False


INNER = InnerTuning(unroll=4, accumulators=4, interleave=True)  # the launch every plan takes


@cache
def source() -> str:
    """The reduction kernels' source: the shared header, the group helpers and the ops."""
    folder = KERNEL_DIR
    return "".join((folder / name).read_text() for name in ("common.cuh", "group.cuh", "reduce.cu"))


@dataclass(frozen=True, eq=False)
class Reduction:
    """A reduction op: ``functor(D, A)`` names its C++ op for elements of dtype D and compute
    dtype A; ``acc(A)`` the NumPy dtype of its accumulator (a structured dtype for structs);
    ``fold(x, first, A, fields)`` the accumulators of the rows of ``x`` [rows, n] (D values,
    ``first`` the index of column 0), ``combine(acc, fields)`` of accumulators [rows, n],
    ``store(acc, out, out2, fields)`` writes the results. ``fields``: the names of the op's
    fields (of A's real dtype, packed in order). ``indices``: the op reports positions in the
    reduced range, so the reduced dims keep the tensor's order."""

    name: str
    functor: Callable[[dtype, dtype], str]
    acc: Callable[[np.dtype], np.dtype]
    fold: Callable[..., np.ndarray]
    combine: Callable[..., np.ndarray]
    store: Callable[..., None]
    fields: tuple[str, ...] = ()
    indices: bool = False

    def __repr__(self) -> str:
        return f"<vram Reduction {self.name}>"


def plan_for(key: tuple, build: Callable[..., Any], *args: Any) -> Any:
    """The plan under ``key`` (one dict lookup), or built by ``build(*args)`` and kept."""
    try:
        plan = PLANS.get(key)
    except TypeError:  # a list of dims: the same plan as their tuple's
        key = tuple(tuple(k) if isinstance(k, list) else k for k in key)
        try:
            plan = PLANS.get(key)
        except TypeError:  # still unhashable: a bad argument, which the builder names
            return build(*args)
    if plan is None:
        plan = PLANS.add(key, build(*args))
    return plan


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def multiprocessors(device: Device) -> int:
    if device.type == "cpu":
        return _DEFAULT_SMS
    return device.driver.properties(device.index).multi_processor_count


def _coalesce(dims: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """(size, stride) pairs outermost first -> sizes and strides innermost first, size-1
    dims dropped and neighbours merged where the outer one steps over the inner one."""
    sizes: list[int] = []
    strides: list[int] = []
    for n, s in reversed(dims):
        if n == 1:
            continue
        if sizes and s == strides[-1] * sizes[-1]:
            sizes[-1] *= n
        else:
            sizes.append(n)
            strides.append(s)
    if len(sizes) > MAX_REDUCE_DIMS:
        raise RuntimeError(
            f"a reduction over {len(sizes)} dimensions that cannot be merged is not supported "
            f"(at most {MAX_REDUCE_DIMS}); make the input contiguous first"
        )
    return sizes, strides


@cache
def layout_dtype(index32: bool) -> np.dtype:
    """The NumPy layout of reduce.cu's ``ReduceLayout<Index>``."""
    index = np.int32 if index32 else np.int64
    return np.dtype(
        [
            ("outputs", index),
            ("length", index),
            ("chunk", index),
            ("kept_sizes", index, (MAX_REDUCE_DIMS,)),
            ("kept_strides", index, (MAX_REDUCE_DIMS,)),
            ("red_sizes", index, (MAX_REDUCE_DIMS,)),
            ("red_strides", index, (MAX_REDUCE_DIMS,)),
            ("kept_ndim", np.int32),
            ("red_ndim", np.int32),
        ],
        align=True,
    )


def _pack_layout(index32: bool, outputs: int, length: int, chunk: int, kept, reduced) -> np.void:
    packed = np.zeros((), layout_dtype(index32))
    packed["outputs"], packed["length"], packed["chunk"] = outputs, length, chunk
    for name, (sizes, strides) in (("kept", kept), ("red", reduced)):
        packed[f"{name}_ndim"] = len(sizes)
        packed[f"{name}_sizes"][: len(sizes)] = sizes
        packed[f"{name}_strides"][: len(sizes)] = strides
    return packed[()]


def _real(dt: np.dtype) -> np.dtype:
    return (
        np.dtype(np.float32)
        if dt == np.complex64
        else np.dtype(np.float64 if dt == np.complex128 else dt)
    )


def pack_fields(red: Reduction, compute: dtype, values: tuple) -> tuple[Any, tuple]:
    """The op's fields as a kernel parameter (a struct by value) and as NumPy scalars."""
    if not red.fields:
        return b"\0", ()
    real = _real(compute.np)
    record = np.array(tuple(values), np.dtype([(f, real) for f in red.fields], align=True))
    return record[()], tuple(real.type(v) for v in values)


@cache
def _kernels(red: Reduction) -> tuple[Kernel, Kernel]:
    """The Kernels of a reduction's two launches, with their NumPy references."""

    def first_pass(x, out, out2, partials, outputs, length, splits, chunk, d, a, fields):
        rows = np.asarray(x).reshape(outputs, length).astype(d, copy=False)
        with np.errstate(all="ignore"):
            parts = [
                red.fold(rows[:, s * chunk : min(length, (s + 1) * chunk)], s * chunk, a, fields)
                for s in range(splits)
            ]
            if splits == 1:
                red.store(parts[0], out, out2, fields)
            else:
                partials[...] = np.stack(parts, axis=1)

    def second_pass(partials, out, out2, fields):
        with np.errstate(all="ignore"):
            red.store(red.combine(np.asarray(partials), fields), out, out2, fields)

    return Kernel(red.name, source(), first_pass), Kernel(red.name, source(), second_pass)


def _c_type(dt: dtype | None) -> str:
    return "char" if dt is None else c_type(dt)


class ReducePlan:
    """One signature of one reduction: what every call of it needs.

    ``dims``: the reduced dims (normalized, sorted, distinct); ``d``: the dtype elements are
    converted to as they are loaded (the ``dtype=`` argument); ``compute``: the op's compute
    dtype; ``out`` / ``out2``: the dtypes of the results (None: not made)."""

    __slots__ = (
        "device",
        "shape",
        "stride",
        "outputs",
        "out",
        "out2",
        "nbytes",
        "nbytes2",
        "item",
        "workspace",
        "run",
        "run_vec",
        "scalar_launch",
        "finish",
        "launches",
    )

    def __init__(
        self,
        red: Reduction,
        x: Tensor,
        dims: tuple[int, ...],
        keepdim: bool,
        d: dtype,
        compute: dtype,
        out: dtype | None,
        out2: dtype | None,
        field_values: tuple = (),
        tuning: InnerTuning = INNER,
    ) -> None:
        device = x.device
        self.device = device
        shape, stride = x._shape, x._stride
        reduced_set = set(dims)
        if keepdim:
            out_shape = tuple(1 if i in reduced_set else n for i, n in enumerate(shape))
        else:
            out_shape = tuple(n for i, n in enumerate(shape) if i not in reduced_set)
        self.shape = out_shape
        self.stride = contiguous_strides(out_shape)
        outputs = math.prod(out_shape)
        length = math.prod(shape[i] for i in dims)
        self.outputs = outputs
        self.out, self.out2 = out, out2
        self.nbytes = outputs * out.itemsize if out is not None else 0
        self.nbytes2 = outputs * out2.itemsize if out2 is not None else 0
        self.item = x.dtype.itemsize
        kept = _coalesce([(shape[i], stride[i]) for i in range(len(shape)) if i not in reduced_set])
        red_dims = [(shape[i], stride[i]) for i in dims]
        if not red.indices:  # any order sums the same: walk memory in order
            red_dims.sort(key=lambda p: (p[1], p[0]), reverse=True)
        reduced = _coalesce(red_dims)
        inner = not kept[0] or (bool(reduced[0]) and reduced[1][0] <= kept[1][0])
        vec = 1
        if inner and len(reduced[0]) == 1 and reduced[1][0] == 1 and self.item <= 8:
            vec = 16 // self.item
            if any(s % vec for s in kept[1]):
                vec = 1
        sms = multiprocessors(device)
        threads = _THREADS
        resident = _RESIDENT
        if inner and vec > 1:
            threads, resident = tuning.threads, tuning.resident * tuning.waves
        if inner:
            folds = max(1, -(-length // vec))
            bx = min(threads, next_pow2(-(-folds // _MIN_FOLDS)))
            by = max(1, min(threads // bx, next_pow2(-(-outputs // sms))))
            by = max(by, 32 // bx)
            blocks, lanes = -(-outputs // by), bx
        else:
            folds = max(length, 1)
            by = min(16, next_pow2(folds))
            bx = min(_THREADS // by, max(next_pow2(outputs), 32 // by))
            blocks, lanes = -(-outputs // bx), by
        capacity = sms * max(1, resident // (bx * by))
        splits = 1
        if blocks < capacity and folds > lanes * _MIN_FOLDS:
            splits = min(-(-capacity // blocks), folds // (lanes * _MIN_FOLDS), _MAX_SPLITS)
        chunk = length
        if splits > 1:
            chunk = _ceil(_ceil(length, splits), vec) * vec
            splits = -(-length // chunk)
        grid = (max(1, min(blocks, capacity * 8)), splits, 1)
        span = sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) + 1
        reach = length  # how far past a range's start an offset goes
        if tuning.interleave and splits > 1:  # a split's last tile may start near the end
            reach += splits * bx * vec * tuning.unroll
        index32 = max(span, outputs * splits, reach) < (1 << 31) - _SLACK
        a = compute
        functor = red.functor(d, a)
        fields, field_np = pack_fields(red, a, field_values)
        acc_np = red.acc(a.np)
        first, second = _kernels(red)
        types = f"{_c_type(x.dtype)}, {_c_type(d)}, {_c_type(out)}"
        types += f", {_c_type(out2)}, {'int' if index32 else 'long long'}"
        in_view = View(
            tuple(reversed(kept[0])) + tuple(reversed(reduced[0])),
            tuple(s * self.item for s in reversed(kept[1]))
            + tuple(s * self.item for s in reversed(reduced[1])),
            x.dtype.np,
        )
        out_view = View((outputs,), (out.itemsize,), out.np) if out is not None else None
        out2_view = View((outputs,), (out2.itemsize,), out2.np) if out2 is not None else None
        part_view = None
        if splits > 1:
            part_view = View((outputs, splits), (splits * acc_np.itemsize, acc_np.itemsize), acc_np)
        self.workspace = outputs * splits * acc_np.itemsize if splits > 1 else 0
        params = (
            fields,
            Arg("P"),
            Arg("P"),
            Arg("P"),
            Arg("P"),
            _pack_layout(index32, outputs, length, chunk, kept, reduced),
        )
        views = (in_view, out_view, out2_view, part_view)
        values = (outputs, length, splits, chunk, d.np, a.np, field_np)

        def launch(v: int) -> Launch:
            if inner:
                tune = "4, 1, false"
                if v > 1:
                    interleave = "true" if tuning.interleave and splits > 1 else "false"
                    tune = f"{tuning.unroll}, {tuning.accumulators}, {interleave}"
                entry = f"vram::reduce_inner<{functor}, {types}, {v}, {tune}>"
            else:
                entry = f"vram::reduce_outer<{functor}, {types}>"
            return Launch(first, entry, grid, (bx, by, 1), params, views, values)

        self.run_vec: Launcher | None = None
        self.run: Launcher | None = None
        self.scalar_launch = launch(1)
        if vec > 1 and device.type != "cpu":
            first_launch = launch(vec)
            self.run_vec = launcher(device, first_launch)
        else:
            first_launch = self.scalar_launch
            self.run = launcher(device, first_launch)
        self.launches: tuple[Launch, ...] = (first_launch,)  # what it launches, in order
        self.finish: Launcher | None = None
        if splits > 1:
            bx2 = min(256, next_pow2(splits))
            by2 = max(1, min(_THREADS // bx2, next_pow2(outputs)), 32 // bx2)
            entry = f"vram::reduce_partials<{functor}, {_c_type(out)}, {_c_type(out2)}>"
            grid2 = (max(1, min(-(-outputs // by2), capacity * 8)), 1, 1)
            params2 = (fields, Arg("P"), Arg("P"), Arg("P"), np.int64(outputs), np.int32(splits))
            second_launch = Launch(
                second,
                entry,
                grid2,
                (bx2, by2, 1),
                params2,
                (part_view, out_view, out2_view),
                (field_np,),
            )
            self.finish = launcher(device, second_launch)
            self.launches += (second_launch,)

    def __call__(self, x: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """Reduce ``x`` (of the plan's signature): (result, second result or None)."""
        device = self.device
        stream = this_thread.handles[device]
        result = second = None
        if self.out is not None:
            result = new_tensor(self.shape, self.stride, self.out, device, self.nbytes, stream)
        if self.out2 is not None:
            second = new_tensor(self.shape, self.stride, self.out2, device, self.nbytes2, stream)
        if not self.outputs:
            return result, second
        ptr = x._storage.ptr + x._offset * self.item
        po = result._storage.ptr if result is not None else 0
        p2 = second._storage.ptr if second is not None else 0
        workspace = None
        pw = 0
        if self.workspace:
            workspace = new_tensor((self.workspace,), (1,), uint8, device, self.workspace, stream)
            pw = workspace._storage.ptr
        run = self.run_vec
        if run is None or ptr & 15:
            run = self.run
            if run is None:
                run = self.run = launcher(device, self.scalar_launch)
        run(stream, ptr, po, p2, pw)
        if self.finish is not None:
            self.finish(stream, pw, po, p2)
        return result, second
