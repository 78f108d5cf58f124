"""Factories that run on the device: empty_like, zeros_like, ones_like, full_like, eye,
linspace and logspace, with torch's arguments and results.

- ``*_like``: the input's shape, dtype and device unless given; its strides when it is
  dense (PyTorch's ``preserve_format``: ``empty_like(x.t())`` is transposed), else
  contiguous ones.
- eye: zeros, then ones written through the diagonal (a strided view), as PyTorch does.
- linspace / logspace are computed on the device (no synchronization) by PyTorch's formula
  (RangeFactories.cu): element i is ``start + step * i`` below the halfway point and ``end -
  step * (steps - 1 - i)`` from it, in the dtype itself for floating and complex dtypes
  (float16 and bfloat16 rounded at each step, as c10::Half's arithmetic), in float for
  integer dtypes; logspace raises ``base`` to it.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .._device import Device, as_device
from .._dtypes import (
    as_dtype,
    bfloat16,
    bool_,
    complex64,
    complex128,
    dtype,
    float16,
    float32,
    float64,
)
from .._streams import this_thread
from .._tensor import Tensor, contiguous_strides
from ..driver._work import Arg, Kernel, Launch, View
from ._args import cached, require_tensor
from ._index_kernels import BLOCK, grid, source
from ._iterator import non_overlapping_and_dense
from ._kernels import c_type
from ._plans import launcher, new_tensor
from ._promotion import get_default_dtype, kind

__all__ = [
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
    "eye",
    "linspace",
    "logspace",
]


# ---- *_like and eye ------------------------------------------------------------------------------


def empty_like(input: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:  # noqa: A002
    """torch.empty_like: uninitialized, ``input``'s shape (and strides when dense)."""
    require_tensor("empty_like", "input", input)
    dt = input.dtype if dtype is None else as_dtype(dtype)
    found = input.device if device is None else as_device(device)
    shape = input._shape
    if non_overlapping_and_dense(shape, input._stride):
        stride = input._stride
    else:
        stride = contiguous_strides(shape)
    return new_tensor(shape, stride, dt, found, math.prod(shape) * dt.itemsize)


def zeros_like(input: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:  # noqa: A002
    """torch.zeros_like."""
    return empty_like(input, dtype=dtype, device=device).zero_()


def ones_like(input: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:  # noqa: A002
    """torch.ones_like."""
    return empty_like(input, dtype=dtype, device=device).fill_(1)


def full_like(
    input: Tensor,  # noqa: A002
    fill_value: Any,
    *,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """torch.full_like: ``input``'s shape (and dtype unless given), every element
    ``fill_value``."""
    return empty_like(input, dtype=dtype, device=device).fill_(fill_value)


def eye(n: int, m: int | None = None, *, dtype: Any = None, device: Any = None) -> Tensor:
    """torch.eye: an ``n`` x ``m`` (default ``n``) matrix with ones on the diagonal."""
    for name, value in (("n", n), ("m", m)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"eye(): argument '{name}' must be int, not {type(value).__name__}")
        if value < 0:
            raise RuntimeError(f"{name} must be greater or equal to 0, got {value}")
    rows, cols = int(n), int(n if m is None else m)
    dt = get_default_dtype() if dtype is None else as_dtype(dtype)
    shape = (rows, cols)
    out = new_tensor(shape, (cols, 1), dt, as_device(device), rows * cols * dt.itemsize).zero_()
    if rows and cols:
        out._view((min(rows, cols),), (cols + 1,), 0).fill_(1)
    return out


# ---- linspace and logspace ---------------------------------------------------------------------


def _step_type(dt: dtype) -> dtype:
    """The type PyTorch's formula runs in for elements of ``dt`` (see index.cu: float16 and
    bfloat16 in float, each step rounded to ``dt``)."""
    if dt.is_floating_point or dt.is_complex:
        return dt
    return float32


def _kernel_type(dt: dtype) -> dtype:
    """The type the kernel holds the formula's numbers in."""
    step = _step_type(dt)
    return float32 if step in (float16, bfloat16) else step


_FORMATS = {float32: "f", float64: "d", complex64: "ff", complex128: "dd"}


def _reference(out: np.ndarray, *args: Any) -> None:
    *values, halfway, log, step_type = args
    pairs = 2 if step_type.is_complex else 1
    s = step_type.np.type
    start, end, step, base = (
        s(complex(*values[i : i + 2]) if pairs == 2 else values[i])
        for i in range(0, 4 * pairs, pairs)
    )
    n = out.shape[0]
    i = np.arange(n)
    low = i < halfway
    count = np.where(low, i, n - 1 - i).astype(step_type.np)
    offset = (step * count).astype(step_type.np)
    value = np.where(low, start + offset, end - offset).astype(step_type.np)
    if log:
        value = np.power(base, value)
    out[...] = np.asarray(value).astype(out.dtype)


_LINSPACE = Kernel("linspace", source(), _reference)


class RangePlan:
    """linspace or logspace of one (dtype, steps, device)."""

    __slots__ = ("run", "device", "dtype", "steps", "step_type", "log")

    def __init__(self, dt: dtype, steps: int, device: Device, log: bool) -> None:
        self.device, self.dtype, self.steps, self.log = device, dt, steps, log
        self.step_type = step = _step_type(dt)
        held = _kernel_type(dt)
        fmt = _FORMATS[held]
        entry = f"vram::index::linspace<{c_type(dt)}, {c_type(held)}, {'true' if log else 'false'}>"
        params = (Arg("P"), np.int64(steps), np.int64(steps // 2), *(Arg(fmt) for _ in range(4)))
        views = (View((steps,), (dt.itemsize,), dt.np),) + (None,) * (4 * len(fmt))
        launch = Launch(
            _LINSPACE,
            entry,
            (grid(device, steps), 1, 1),
            (BLOCK, 1, 1),
            params,
            views,
            (steps // 2, log, step),
        )
        self.run = None if not steps else launcher(device, launch)

    def __call__(self, start: Any, end: Any, base: Any) -> Tensor:
        dt, steps, step_type = self.dtype, self.steps, self.step_type
        out = new_tensor((steps,), (1,), dt, self.device, steps * dt.itemsize)
        if steps == 1:
            return out.fill_(base**start if self.log else start)
        if self.run is not None:
            first, last = _as_element(start, dt), _as_element(end, dt)
            scalar = step_type.np.type
            if kind(dt) == 1 and self.log:  # PyTorch: float(end - start) / (steps - 1)
                delta = scalar(last - first) / scalar(steps - 1)
            else:
                delta = (scalar(last) - scalar(first)) / scalar(steps - 1)
            values = [scalar(first), scalar(last), delta, scalar(base)]
            packed = []
            for v in values:
                packed += [float(v.real), float(v.imag)] if step_type.is_complex else [float(v)]
            stream = this_thread.handles[self.device]
            self.run(stream, out.data_ptr(), *packed)
        return out


def _as_element(value: Any, dt: dtype) -> Any:
    """``value`` converted to an element of ``dt`` first, as PyTorch's ``Scalar.to<T>()``."""
    if dt.is_complex:
        return complex(value)
    if kind(dt) == 1:
        return int(value.real if isinstance(value, complex) else value)
    return float(np.asarray(value.real if isinstance(value, complex) else value).astype(dt.np))


def _number(name: str, value: Any) -> Any:
    if isinstance(value, Tensor):
        if value.numel() != 1 or value.ndim:
            raise RuntimeError(
                f"linspace only supports 0-dimensional {name} and end tensors, but got {name} "
                f"with {value.ndim} dimension(s)."
            )
        return value.item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    return value


def _space(
    name: str, start: Any, end: Any, steps: Any, base: Any, dtype_: Any, device: Any
) -> Tensor:
    start, end = _number("start", start), _number("end", end)
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
        raise TypeError(f"{name}(): argument 'steps' must be int, not {type(steps).__name__}")
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    if dtype_ is None:
        complex_ = isinstance(start, complex) or isinstance(end, complex)
        dt = get_default_dtype()
        if complex_:
            dt = complex128 if dt is float64 else complex64
    else:
        dt = as_dtype(dtype_)
    if dt is bool_:
        raise NotImplementedError(f"\"{name}\" not implemented for 'Bool'")
    if name == "logspace" and dt.is_complex:
        raise NotImplementedError("logspace: complex dtypes are not supported")
    if not dt.is_complex and (isinstance(start, complex) or isinstance(end, complex)):
        raise RuntimeError(f"{name}: complex start or end need a complex dtype, got {dt}")
    for value in (start, end):
        if isinstance(value, float) and not math.isfinite(value) and kind(dt) == 1:
            raise RuntimeError(f"{name}: {value} cannot be converted to {dt}")
    found = as_device(device)
    log = name == "logspace"
    plan = cached(("linspace", dt, int(steps), found, log), RangePlan, dt, int(steps), found, log)
    return plan(start, end, base)


def linspace(start: Any, end: Any, steps: int, *, dtype: Any = None, device: Any = None) -> Tensor:
    """torch.linspace: ``steps`` values evenly spaced from ``start`` to ``end`` (both
    included); the default dtype, or complex for complex ends."""
    return _space("linspace", start, end, steps, 10.0, dtype, device)


def logspace(
    start: Any,
    end: Any,
    steps: int,
    base: float = 10.0,
    *,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """torch.logspace: ``base ** linspace(start, end, steps)``."""
    base = _number("base", base)
    return _space("logspace", start, end, steps, base, dtype, device)
