"""cumsum and cumprod (kernels/scan.cu), one plan per signature.

The input is made contiguous (a copy only when it is not) and seen as [outer, n, inner]
around the scanned dim; the output is a new contiguous tensor. Dtypes as PyTorch's: bool
and integers accumulate to int64 unless ``dtype=`` says otherwise; float16 and bfloat16
accumulate in float32; ``dtype=`` converts the elements as they are loaded.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np

from .._dtypes import as_dtype, bool_, dtype, int64
from .._streams import current_handle
from .._tensor import Tensor, contiguous_strides, dispatch
from ..driver._work import Arg, Kernel, Launch, View
from . import _launch
from ._math import _torch_name
from ._plans import PLANS, launcher, new_tensor
from ._pointwise import store as _put
from ._promotion import kind, opmath
from ._reduce import multiprocessors, next_pow2
from ._reductions import one_dim

__all__ = ["cumsum", "cumprod", "ScanPlan"]

_ROW_THREADS = 1024  # threads of a row scan's block at most
_COLUMN_THREADS = 256


@cache
def source() -> str:
    folder = _launch.KERNEL_DIR
    return "".join((folder / name).read_text() for name in ("common.cuh", "group.cuh", "scan.cu"))


@cache
def _kernel(prod: bool) -> Kernel:
    """The scans' NumPy reference: x [outer, n, inner] along axis 1."""
    scan = np.cumprod if prod else np.cumsum

    def reference(x: np.ndarray, out: np.ndarray, d: np.dtype, a: np.dtype) -> None:
        with np.errstate(all="ignore"):
            values = np.asarray(x).astype(d).astype(a)
            _put(out, scan(values, axis=1, dtype=a))

    return Kernel("cumprod" if prod else "cumsum", source(), reference)


class ScanPlan:
    """One signature of cumsum or cumprod."""

    __slots__ = ("device", "shape", "stride", "out", "nbytes", "numel", "copy", "run")

    def __init__(self, x: Tensor, dim: int, d: dtype, prod: bool) -> None:
        device = x.device
        self.device = device
        self.shape = x._shape
        self.stride = contiguous_strides(x._shape)
        self.out = d
        self.numel = math.prod(x._shape)
        self.nbytes = self.numel * d.itemsize
        self.copy = not x.is_contiguous()
        shape = x._shape or (1,)
        outer, n, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1 :])
        a = opmath(d)
        types = f"{_launch.c_type(x.dtype)}, {_launch.c_type(d)}, {_launch.c_type(a)}"
        types += f", {_launch.c_type(d)}, {'true' if prod else 'false'}"
        item, out_item = x.dtype.itemsize, d.itemsize
        views = (
            View((outer, n, inner), (n * inner * item, inner * item, item), x.dtype.np),
            View((outer, n, inner), (n * inner * out_item, inner * out_item, out_item), d.np),
        )
        sms = multiprocessors(device)
        if inner == 1:
            threads = min(_ROW_THREADS, next_pow2(n))
            rows = max(1, min(256 // threads, next_pow2(-(-outer // sms))), 32 // threads)
            grid = max(1, min(-(-outer // rows), sms * (2048 // (threads * rows)) * 8))
            entry = f"vram::scan_rows<{types}>"
            params = (Arg("P"), Arg("P"), np.int64(outer), np.int64(n))
            block = (threads, rows, 1)
        else:
            columns = outer * inner
            grid = max(1, min(-(-columns // _COLUMN_THREADS), sms * 8))
            entry = f"vram::scan_columns<{types}>"
            params = (Arg("P"), Arg("P"), np.int64(outer), np.int64(n), np.int64(inner))
            block = (_COLUMN_THREADS, 1, 1)
        kernel = _kernel(prod)
        values = (d.np, a.np)
        self.run = launcher(
            device, Launch(kernel, entry, (grid, 1, 1), block, params, views, values)
        )

    def __call__(self, x: Tensor) -> Tensor:
        device = self.device
        result = new_tensor(self.shape, self.stride, self.out, device, self.nbytes)
        if not self.numel:
            return result
        if self.copy:
            x = x.contiguous()
        stream = current_handle(device) if device.type != "cpu" else 0
        self.run(stream, x._storage.ptr + x._offset * x.dtype.itemsize, result._storage.ptr)
        return result


def _build(x: Any, dim: Any, dt: Any, prod: bool) -> ScanPlan:
    name = "cumprod" if prod else "cumsum"
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(x).__name__}")
    d = as_dtype(dt, f"{name}(): argument 'dtype'") if dt is not None else None
    if d is None:
        d = int64 if kind(x.dtype) <= 1 else x.dtype
    if d is bool_:
        raise NotImplementedError(f"\"{name}\" not implemented for '{_torch_name(d)}'")
    return ScanPlan(x, one_dim(name, dim, x.ndim), d, prod)


def _plan(x: Any, dim: Any, dt: Any, prod: bool) -> ScanPlan:
    if isinstance(x, Tensor):
        key = (
            "cumprod" if prod else "cumsum",
            x.dtype,
            x._shape,
            x._stride,
            x._storage.device,
            dim,
            dt,
        )
        plan = PLANS.get(key)
        if plan is None:
            plan = PLANS.add(key, _build(x, dim, dt, prod))
        return plan
    return _build(x, dim, dt, prod)


def cumsum(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """torch.cumsum: running sums along ``dim`` (bool and integers in int64)."""
    return _plan(input, dim, dtype, False)(input)


def cumprod(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """torch.cumprod: running products along ``dim`` (bool and integers in int64)."""
    return _plan(input, dim, dtype, True)(input)


dispatch.update(cumsum=cumsum, cumprod=cumprod)
