"""Elementwise ops: fill, copy (strided, with a cast), cast, add, sub, mul, div.

The declarations and their kernels come first (cpu: NumPy; sim: the cpu kernels, queued;
cuda: kernels/elementwise.cu). Then the functions tensors call (``binary``, ``fill``,
``copy``, ``cast``), which apply PyTorch's type promotion and broadcasting and check every
argument before anything is queued.

Arithmetic runs in the "opmath" type, as PyTorch: float32 for float16 and bfloat16, the
element type otherwise. Integer results wrap around; ``/`` is true division (integers and
bools promote to float32).
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np

from .._dtypes import (
    all_dtypes,
    bfloat16,
    bool_,
    complex64,
    complex128,
    dtype,
    float16,
    float32,
    float64,
    int64,
)
from .._streams import Stream
from .._tensor import Tensor, broadcast_shapes, dispatch
from . import _launch
from ._registry import declare

__all__ = ["binary", "fill", "copy", "cast", "result_type", "BINARY_OPS", "cuda_kernel_names"]

_FLOATS = frozenset(d for d in all_dtypes if d.is_floating_point)
_COMPLEX = frozenset((complex64, complex128))
_ALL = frozenset(all_dtypes)
_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}
_CUDA_OPS = {"add": "AddOp", "sub": "SubOp", "mul": "MulOp", "div": "DivOp"}
BINARY_OPS = {  # op -> the dtypes its kernels compute in
    "add": _ALL,
    "sub": _ALL - {bool_},
    "mul": _ALL,
    "div": _FLOATS | _COMPLEX,
}


def _source() -> str:
    return _launch.kernel_source("elementwise")


def _opmath(np_dtype: np.dtype) -> np.dtype:
    """The NumPy type arithmetic runs in: float32 for float16 and bfloat16."""
    return np.dtype(np.float32) if np_dtype in (float16.np, bfloat16.np) else np_dtype


# ---- declarations and kernels ------------------------------------------------------------

fill_op = declare("fill(Tensor(a!) self, Scalar value)")
copy_op = declare("copy(Tensor(a!) self, Tensor src)", mixed_dtypes=True)
cast_op = declare("cast(Tensor self, ScalarType dtype)", elementwise=False, mixed_dtypes=True)


@fill_op.impl("cpu")
def _fill_cpu(out: np.ndarray, value: Any) -> None:
    out[...] = value


@fill_op.impl("cuda", dtypes=_ALL)
def _fill_cuda(stream: Stream, out: Tensor, value: Any) -> None:
    name = f"vram::fill<{_launch.c_type(out.dtype)}>"
    _launch.launch(_source(), name, [out], (out.dtype.np.type(value),), stream)


@copy_op.impl("cpu")
def _copy_cpu(out: np.ndarray, src: np.ndarray) -> None:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # complex to real drops the imaginary part
        if src.dtype.kind == "c" and out.dtype == np.bool_:
            src = src != 0
        np.copyto(out, src, casting="unsafe")


@copy_op.impl("cuda", dtypes=_ALL)
def _copy_cuda(stream: Stream, out: Tensor, src: Tensor) -> None:
    if out.dtype == src.dtype:
        dims = _launch.tiled_dims(out, src)
        if dims is not None:  # a batch of transposes: coalesced on both sides
            _launch.launch_tiled(_source(), out, src, dims, stream)
            return
    name = f"vram::copy<{_launch.c_type(out.dtype)}, {_launch.c_type(src.dtype)}>"
    _launch.launch(_source(), name, [out, src], (), stream)


@cast_op.impl("composite")
def _cast(self: Tensor, dtype: dtype) -> Tensor:
    out = Tensor._empty(self.shape, dtype, self.device)
    copy_op(out, self)
    return out


def _declare_binary(name: str) -> None:
    tensor_op = declare(f"{name}.Tensor(Tensor(a!) out, Tensor self, Tensor other)")
    scalar_op = declare(
        f"{name}.Scalar(Tensor(a!) out, Tensor self, Scalar other, bool reverse=False)"
    )
    ufunc, functor, dtypes = _UFUNCS[name], _CUDA_OPS[name], BINARY_OPS[name]

    @tensor_op.impl("cpu", dtypes=dtypes)
    def _tensor_cpu(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        math = _opmath(out.dtype)
        with np.errstate(all="ignore"):
            out[...] = ufunc(a.astype(math, copy=False), b.astype(math, copy=False))

    @scalar_op.impl("cpu", dtypes=dtypes)
    def _scalar_cpu(out: np.ndarray, a: np.ndarray, other: Any, reverse: bool) -> None:
        math = _opmath(out.dtype)
        x, s = a.astype(math, copy=False), _to_opmath(other, out.dtype, math)
        with np.errstate(all="ignore"):
            out[...] = ufunc(s, x) if reverse else ufunc(x, s)

    @tensor_op.impl("cuda", dtypes=dtypes)
    def _tensor_cuda(stream: Stream, out: Tensor, a: Tensor, b: Tensor) -> None:
        kernel = f"vram::binary<{_launch.c_type(out.dtype)}, vram::{functor}>"
        _launch.launch(_source(), kernel, [out, a, b], (), stream)

    @scalar_op.impl("cuda", dtypes=dtypes)
    def _scalar_cuda(stream: Stream, out: Tensor, a: Tensor, other: Any, reverse: bool) -> None:
        kernel = f"vram::binary_scalar<{_launch.c_type(out.dtype)}, vram::{functor}>"
        value = _to_opmath(other, out.dtype.np, _opmath(out.dtype.np))
        _launch.launch(_source(), kernel, [out, a], (value, np.bool_(reverse)), stream)


for _name in _UFUNCS:
    _declare_binary(_name)


def cuda_kernel_names() -> dict[str, list[str]]:
    """Every kernel instance the cuda kernels may launch, by kind (what CI compiles)."""
    types = [_launch.c_type(d) for d in all_dtypes]
    names = {
        "fill": [f"vram::fill<{c}>" for c in types],
        "copy": [f"vram::copy<{a}, {b}>" for a in types for b in types],
        "copy_tiled": [f"vram::copy_tiled<{e}>" for e in _launch.BITS_TYPES.values()],
    }
    for name, functor in _CUDA_OPS.items():
        supported = [_launch.c_type(d) for d in all_dtypes if d in BINARY_OPS[name]]
        names[name] = [f"vram::binary<{c}, vram::{functor}>" for c in supported] + [
            f"vram::binary_scalar<{c}, vram::{functor}>" for c in supported
        ]
    return names


# ---- scalars -----------------------------------------------------------------------------


def _to_opmath(value: Any, element: np.dtype, math: np.dtype) -> np.generic:
    """A Python number as the opmath type of ``element`` (integers wrap as the elements do)."""
    if element.kind == "b":
        return np.bool_(value)
    if element.kind in "iu":
        return np.array(value, dtype=np.int64).astype(element)[()]
    return math.type(value)


def _check_scalar(value: Any, dt: dtype, argument: str, fits: bool = True) -> None:
    """TypeError if ``value`` is no number for ``dt``; with ``fits``, RuntimeError (as
    PyTorch) when an integer does not fit ``dt``."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, numbers.Number):
        raise TypeError(f"{argument}: expected a number, got {type(value).__name__}")
    if isinstance(value, complex) and not dt.is_complex:
        raise TypeError(f"{argument}: a complex value cannot be stored in {dt}")
    if fits and dt.np.kind in "iu" and isinstance(value, numbers.Real):
        info = np.iinfo(dt.np)
        if isinstance(value, numbers.Integral):
            fits_dt = info.min <= value <= info.max
        else:  # a float is truncated toward zero, as PyTorch does; NaN and inf never fit
            fits_dt = math.isfinite(value) and info.min - 1 < value < info.max + 1
        if not fits_dt:
            raise RuntimeError(
                f"{argument}: value {value} cannot be converted to {dt} without overflow"
            )


# ---- type promotion ----------------------------------------------------------------------


def _kind(dt: dtype) -> int:
    """0 bool, 1 integer, 2 floating point, 3 complex."""
    if dt == bool_:
        return 0
    return 3 if dt.is_complex else 2 if dt.is_floating_point else 1


def _category(value: Any) -> int:
    if isinstance(value, Tensor):
        return _kind(value.dtype)
    if isinstance(value, (bool, np.bool_)):
        return 0
    if isinstance(value, numbers.Integral):
        return 1
    if isinstance(value, numbers.Real):
        return 2
    return 3


def _promote_pair(a: dtype, b: dtype) -> dtype:
    """PyTorch's promote_types for the dtypes vram has."""
    if a == b:
        return a
    if _kind(a) != _kind(b):
        high, low = (a, b) if _kind(a) > _kind(b) else (b, a)
        return complex128 if high.is_complex and low == float64 else high
    if _kind(a) == 2:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    found = np.promote_types(a.np, b.np)
    return next(d for d in all_dtypes if d.np == found)


def _lift(dt: dtype, category: int) -> dtype:
    """``dt`` raised to ``category`` with PyTorch's defaults (int64, float32, complex64)."""
    if _kind(dt) >= category:
        return dt
    if category == 1:
        return int64
    if category == 2:
        return float32
    return complex128 if dt.name == "float64" else complex64


def result_type(a: Tensor, b: Any) -> dtype:
    """PyTorch's result dtype of ``a op b``: dimensioned tensors decide the type, then 0-d
    tensors, then Python numbers; a lower tier only raises the category."""
    tiers: list[list[dtype]] = [[], [], []]
    categories = [0, 0, 0]
    for value in (a, b):
        tier = 0 if isinstance(value, Tensor) and value.ndim else 1
        tier = 2 if not isinstance(value, Tensor) else tier
        categories[tier] = max(categories[tier], _category(value))
        if isinstance(value, Tensor):
            tiers[tier].append(value.dtype)
    result: dtype | None = None
    for tier in range(3):
        if result is None and tiers[tier]:
            result = tiers[tier][0]
            for dt in tiers[tier][1:]:
                result = _promote_pair(result, dt)
        elif result is not None and categories[tier] > _kind(result):
            result = _lift(result, categories[tier])
    assert result is not None
    return result


def _can_cast(source: dtype, target: dtype) -> bool:
    return _kind(source) <= _kind(target)


# ---- what tensors call -------------------------------------------------------------------


def fill(t: Tensor, value: Any) -> None:
    """Set every element of ``t`` to ``value`` (queued on the current stream)."""
    _check_scalar(value, t.dtype, "value")
    if isinstance(value, np.generic):
        value = value.item()
    fill_op(t, value)


def copy(dst: Tensor, src: Tensor) -> None:
    """Copy ``src`` into ``dst`` on one device: any strides, broadcasting, any dtype cast."""
    copy_op(dst, src)


def cast(t: Tensor, dt: dtype) -> Tensor:
    """A new contiguous tensor holding ``t``'s values as ``dt``."""
    return cast_op(t, dt)


def binary(
    name: str, a: Tensor, b: Any, *, out: Tensor | None = None, reverse: bool = False
) -> Tensor:
    """``a op b`` (``b op a`` when ``reverse``) for op in add, sub, mul, div, into ``out``
    (in place) or a new tensor, with PyTorch's promotion and broadcasting."""
    if isinstance(b, np.generic):
        b = b.item()
    if not isinstance(b, (Tensor, numbers.Number)):
        raise TypeError(f"other: expected a vram.Tensor or a number, got {type(b).__name__}")
    if isinstance(b, Tensor) and b.device != a.device:
        raise ValueError(
            f"other: expected all tensors on one device, but the tensor is on {a.device} "
            f"and other is on {b.device}"
        )
    dt = result_type(a, b)
    if name == "div" and not (dt.is_floating_point or dt.is_complex):
        dt = float32
    _check_supported(name, dt, a, b)
    shape = a.shape if not isinstance(b, Tensor) else _broadcast(a, b)
    if out is not None:
        if out.shape != shape:
            raise ValueError(f"out: shape {out.shape} does not match the broadcast shape {shape}")
        if not _can_cast(dt, out.dtype):
            raise TypeError(f"out: result type {dt} can't be cast to the output dtype {out.dtype}")
    else:
        out = Tensor._empty(shape, dt, a.device)
    a_in = a if a.dtype == dt else cast(a, dt)
    target = out if out.dtype == dt else Tensor._empty(shape, dt, a.device)
    if isinstance(b, Tensor):
        b_in = b if b.dtype == dt else cast(b, dt)
        x, y = (b_in, a_in) if reverse else (a_in, b_in)
        _op(f"{name}.Tensor")(target, x.expand(shape), y.expand(shape))
    else:
        _op(f"{name}.Scalar")(target, a_in, b, reverse)
    if target is not out:
        copy_op(out, target)
    return out


def _op(name: str) -> Any:
    from ._registry import get_op

    return get_op(name)


def _broadcast(a: Tensor, b: Tensor) -> tuple[int, ...]:
    try:
        return broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(
            f"other: shape {b.shape} cannot be broadcast with the tensor's shape {a.shape}"
        ) from None


def _check_supported(name: str, dt: dtype, a: Tensor, b: Any) -> None:
    if name == "sub" and dt == bool_:
        raise TypeError(
            "other: subtraction, the `-` operator, with bool tensors is not supported; "
            "use the `^` operator or logical_xor() instead"
        )
    if not isinstance(b, Tensor):
        _check_scalar(b, dt, "other", fits=False)
    if not _op(f"{name}.Tensor").supports(a.device.type, dt):
        raise TypeError(f"{name}: dtype {dt} is not supported on {a.device.type} devices")


# Tensor methods reach these through the tensor layer's dispatch table.
dispatch.update(binary=binary, fill=fill, copy=copy, cast=cast)
