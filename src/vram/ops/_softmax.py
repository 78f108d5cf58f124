"""softmax and log_softmax as fused row kernels (kernels/softmax.cu), one plan per signature.

As PyTorch's host_softmax: the input is made contiguous (a copy only when it is not) and
seen as [outer, n, inner] around the softmax dim; the output is a new contiguous tensor.
With ``inner == 1`` each row is read once when it fits in registers (``_rows.row_layout``),
twice when it does not (online softmax); otherwise consecutive threads take consecutive
columns. Arithmetic runs in the output dtype's opmath type (float32 for float16 and
bfloat16). ``dtype=`` converts the input first, in the kernel as it loads (a separate copy
only when the conversion narrows to float16 or bfloat16, where the kernel's float32 load
would skip the rounding PyTorch does).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np

from .._dtypes import as_dtype, dtype, float32, float64
from .._streams import this_thread
from .._tensor import Tensor, contiguous_strides, dispatch
from ..driver._work import Arg, Kernel, Launch, Launcher, View
from ._kernels import KERNEL_DIR, c_type
from ._math import _torch_name
from ._plans import launcher, new_tensor
from ._pointwise import signature_id
from ._pointwise import store as _put
from ._promotion import kind, opmath
from ._reduce import multiprocessors, next_pow2, plan_for
from ._reductions import one_dim
from ._rows import RowLayout, row_layout

__all__ = ["softmax", "log_softmax", "SoftmaxPlan"]

_COLUMN_THREADS = 512  # threads of a softmax_columns block


@cache
def source() -> str:
    folder = KERNEL_DIR
    return "".join(
        (folder / name).read_text()
        for name in ("common.cuh", "group.cuh", "rows.cuh", "softmax.cu")
    )


@cache
def _kernel(log: bool) -> Kernel:
    """The softmax kernels' NumPy reference: x [outer, n, inner] along axis 1."""

    def reference(x: np.ndarray, out: np.ndarray, compute: np.dtype) -> None:
        values = np.asarray(x).astype(compute)
        with np.errstate(all="ignore"):
            top = values.max(axis=1, keepdims=True)
            exps = np.exp(values - top)
            total = exps.sum(axis=1, keepdims=True, dtype=compute)
            _put(out, values - top - np.log(total) if log else exps / total)

    return Kernel("log_softmax" if log else "softmax", source(), reference)


def _view(outer: int, n: int, inner: int, dt: dtype) -> View:
    item = dt.itemsize
    return View((outer, n, inner), (n * inner * item, inner * item, item), dt.np)


class SoftmaxPlan:
    """One signature of softmax or log_softmax."""

    __slots__ = (
        "device",
        "shape",
        "stride",
        "out",
        "nbytes",
        "numel",
        "convert",
        "copy",
        "run",
        "run_vec",
        "scalar_launch",
        "launches",
    )

    def __init__(
        self, x: Tensor, dim: int, out: dtype, log: bool, layout: RowLayout | None = None
    ) -> None:
        """``layout``: of rows (the softmax dim innermost), instead of ``row_layout``'s."""
        device = x.device
        self.device = device
        self.shape = x._shape
        self.stride = contiguous_strides(x._shape)
        self.out = out
        self.numel = math.prod(x._shape)
        self.nbytes = self.numel * out.itemsize
        # the dtype the kernel reads: the input's, or the output's after a narrowing copy
        narrowing = out is not x.dtype and out not in (float32, float64)
        self.convert = out if narrowing else None
        source_dtype = out if narrowing else x.dtype
        self.copy = not narrowing and not x.is_contiguous()
        shape = x._shape or (1,)
        outer = math.prod(shape[:dim])
        n = shape[dim]
        inner = math.prod(shape[dim + 1 :])
        compute = opmath(out)
        kernel = _kernel(log)
        flag = "true" if log else "false"
        types = f"{c_type(source_dtype)}, {c_type(out)}, {c_type(compute)}"
        views = (_view(outer, n, inner, source_dtype), _view(outer, n, inner, out))
        values = (compute.np,)
        sms = multiprocessors(device)
        self.run_vec: Launcher | None = None
        self.run: Launcher | None = None
        if inner == 1:
            size = max(source_dtype.itemsize, out.itemsize)
            rows = layout or row_layout(n, outer, size, compute.itemsize, sms)

            def launch(vec: int) -> Launch:
                if rows.online:
                    entry = f"vram::softmax_online<{types}, {flag}, {vec}>"
                    params = (Arg("P"), Arg("P"), np.int64(outer), np.int64(n))
                    block = (rows.threads, 1, 1)
                else:
                    items = rows.items * rows.vec // vec
                    entry = f"vram::softmax_rows<{types}, {flag}, {vec}, {items}, {rows.bound}>"
                    params = (Arg("P"), Arg("P"), np.int64(outer), np.int32(n))
                    block = (rows.threads, rows.rows, 1)
                return Launch(kernel, entry, (rows.grid, 1, 1), block, params, views, values)

            self.scalar_launch = launch(1)
            self.launches = (self.scalar_launch,)  # what it launches (the aligned case's)
            if rows.vec > 1 and device.type != "cpu":
                self.launches = (launch(rows.vec),)
                self.run_vec = launcher(device, self.launches[0])
            else:
                self.run = launcher(device, self.scalar_launch)
        else:
            bx = min(32, next_pow2(inner))
            by = max(1, min(_COLUMN_THREADS // bx, next_pow2(n)))
            blocks = outer * -(-inner // bx)
            grid = max(1, min(blocks, sms * (2048 // (bx * by)) * 8))
            entry = f"vram::softmax_columns<{types}, {flag}>"
            params = (Arg("P"), Arg("P"), np.int64(outer), np.int64(n), np.int64(inner))
            self.scalar_launch = Launch(
                kernel, entry, (grid, 1, 1), (bx, by, 1), params, views, values
            )
            self.launches = (self.scalar_launch,)
            self.run = launcher(device, self.scalar_launch)

    def __call__(self, x: Tensor) -> Tensor:
        device = self.device
        stream = this_thread.handles[device]
        result = new_tensor(self.shape, self.stride, self.out, device, self.nbytes, stream)
        if not self.numel:
            return result
        if self.convert is not None:
            x = x.to(self.convert)
        elif self.copy:
            x = x.contiguous()
        ptr = x._storage.ptr + x._offset * x.dtype.itemsize
        po = result._storage.ptr
        run = self.run_vec
        if run is None or (ptr | po) & 15:
            run = self.run
            if run is None:
                run = self.run = launcher(device, self.scalar_launch)
        run(stream, ptr, po)
        return result


def _build(x: Any, dim: Any, dt: Any, log: bool) -> SoftmaxPlan:
    name = "log_softmax" if log else "softmax"
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(x).__name__}")
    out = x.dtype if dt is None else as_dtype(dt, f"{name}(): argument 'dtype'")
    if kind(out) != 2 or x.dtype.is_complex:
        out = x.dtype if x.dtype.is_complex else out
        raise NotImplementedError(f"\"{name}\" not implemented for '{_torch_name(out)}'")
    return SoftmaxPlan(x, one_dim(name, dim, x.ndim), out, log)


def _key(name: str, x: Any, dim: Any, dt: Any) -> tuple:
    if isinstance(x, Tensor):
        return (name, x._sig or signature_id(x), dim, dt)
    return (name, None, id(x))  # not a tensor: the builder raises


def softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:  # noqa: A002
    """torch.softmax: ``exp(x - max) / sum(exp(x - max))`` along ``dim`` (``dtype``: the
    input is converted to it first, and it is the result's dtype)."""
    key = _key("softmax", input, dim, dtype)
    return plan_for(key, _build, input, dim, dtype, False)(input)


def log_softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:  # noqa: A002
    """torch.log_softmax: ``x - max - log(sum(exp(x - max)))`` along ``dim``."""
    key = _key("log_softmax", input, dim, dtype)
    return plan_for(key, _build, input, dim, dtype, True)(input)


dispatch.update(softmax=softmax, log_softmax=log_softmax)
