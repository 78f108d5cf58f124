"""PyTorch's ``_foreach_*`` ops: one elementwise op over lists of tensors, in a few launches
(multi_tensor_apply), with PyTorch's names and overloads.

- ``self`` is a list (or tuple) of tensors; another tensor list has the same length, and its
  tensor i has ``self[i]``'s shape, dtype and device (or one element, broadcast: a 0-d
  tensor such as an optimizer's step). Floating dtypes only: float16, bfloat16, float32,
  float64. Errors are RuntimeErrors naming the op, the argument and the index, as PyTorch's.
- ``other`` / ``value`` / ``weight`` may be a number, a list of numbers (one per tensor), a
  tensor list, or (add, sub, mul, div) a one-element tensor, as PyTorch's overloads allow.
- Ops ending in ``_`` update ``self`` and return None; the others return new tensors. The new
  tensors of one device and dtype are views of one allocation (freed when all are gone).
- Tensors are grouped by device and dtype; each group runs on its device's current stream in
  launches of hundreds of tensors. Non-contiguous tensors go through contiguous copies.
- Arithmetic runs in the opmath type (float32 for float16 / bfloat16), rounded once to the
  element type, as PyTorch's foreach kernels. On sim and cpu, NumPy computes the same
  formulas (without the FMA contractions the GPU may make).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from .._dtypes import bfloat16, dtype, float16, float32, float64
from .._tensor import Storage, Tensor, contiguous_strides
from ..driver._work import Arg, Kernel
from ..memory import allocate
from ._multi_tensor import TensorListPlan, kernel_source, list_reference

__all__ = [
    "_foreach_add",
    "_foreach_add_",
    "_foreach_sub",
    "_foreach_sub_",
    "_foreach_mul",
    "_foreach_mul_",
    "_foreach_div",
    "_foreach_div_",
    "_foreach_maximum",
    "_foreach_maximum_",
    "_foreach_pow",
    "_foreach_pow_",
    "_foreach_lerp",
    "_foreach_lerp_",
    "_foreach_addcmul",
    "_foreach_addcmul_",
    "_foreach_addcdiv",
    "_foreach_addcdiv_",
    "_foreach_sqrt",
    "_foreach_sqrt_",
    "_foreach_neg",
    "_foreach_neg_",
    "_foreach_reciprocal",
    "_foreach_reciprocal_",
    "_foreach_zero_",
    "_foreach_copy_",
]

_FLOATS = (float16, bfloat16, float32, float64)
_FLOAT_NAMES = frozenset(dt.name for dt in _FLOATS)
_ALIGN = 64  # bytes between the views of one output allocation


def _source() -> str:
    return kernel_source("ops/kernels/foreach.cu")


_PARAMS = (Arg("d"), Arg("d"))  # the kernel's scalar and alpha, as doubles


def _opmath(dt: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


def _lerp(x: list[np.ndarray], w: Any, alpha: Any) -> np.ndarray:
    diff = x[1] - x[0]
    if -0.5 < w < 0.5:
        return x[0] + w * diff
    return x[1] - diff * (w.dtype.type(1) - w)


@dataclass(frozen=True, slots=True)
class _Op:
    """An elementwise functor: its CUDA name (kernels/foreach.cu), how many input lists it
    reads, and the same formula in NumPy over opmath arrays: ``numpy(x, scalar, alpha)``."""

    functor: str
    inputs: int
    numpy: Callable[[list[np.ndarray], Any, Any], Any]


_OPS = {
    "AddScalar": _Op("AddScalar", 1, lambda x, s, a: x[0] + a * s),
    "SubScalar": _Op("SubScalar", 1, lambda x, s, a: x[0] - a * s),
    "MulScalar": _Op("MulScalar", 1, lambda x, s, a: x[0] * s),
    "DivScalar": _Op("DivScalar", 1, lambda x, s, a: x[0] / s),
    "MaximumScalar": _Op("MaximumScalar", 1, lambda x, s, a: np.maximum(x[0], s)),
    "PowScalar": _Op("PowScalar", 1, lambda x, s, a: np.power(x[0], s)),
    "ScalarPow": _Op("ScalarPow", 1, lambda x, s, a: np.power(s, x[0])),
    "AddList": _Op("AddList", 2, lambda x, s, a: x[0] + a * x[1]),
    "SubList": _Op("SubList", 2, lambda x, s, a: x[0] - a * x[1]),
    "MulList": _Op("MulList", 2, lambda x, s, a: x[0] * x[1]),
    "DivList": _Op("DivList", 2, lambda x, s, a: x[0] / x[1]),
    "MaximumList": _Op("MaximumList", 2, lambda x, s, a: np.maximum(x[0], x[1])),
    "Lerp": _Op("Lerp", 2, _lerp),
    "Addcmul": _Op("Addcmul", 3, lambda x, s, a: x[0] + s * x[1] * x[2]),
    "Addcdiv": _Op("Addcdiv", 3, lambda x, s, a: x[0] + s * x[1] / x[2]),
    "Sqrt": _Op("Sqrt", 1, lambda x, s, a: np.sqrt(x[0])),
    "Neg": _Op("Neg", 1, lambda x, s, a: -x[0]),
    "Reciprocal": _Op("Reciprocal", 1, lambda x, s, a: 1 / x[0]),
    "Zero": _Op("Zero", 0, lambda x, s, a: 0),
    "Copy": _Op("Copy", 1, lambda x, s, a: x[0]),
}
_SCALAR_FORM = {"AddList": "AddScalar", "SubList": "SubScalar", "MulList": "MulScalar"}
_SCALAR_FORM.update(DivList="DivScalar", MaximumList="MaximumScalar")


# ---- arguments ---------------------------------------------------------------------------
def _tensor_list(name: str, argument: str, value: Any) -> list[Tensor]:
    if isinstance(value, Tensor) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name}: '{argument}' must be a list of tensors, got {_kind(value)}")
    for i, t in enumerate(value):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: '{argument}'[{i}] is {type(t).__name__}, not a vram.Tensor")
    return list(value)


def _kind(value: Any) -> str:
    return "vram.Tensor" if isinstance(value, Tensor) else type(value).__name__


def _is_number(value: Any) -> bool:
    return isinstance(value, (numbers.Real, np.generic)) and not isinstance(value, Tensor)


def _check_self(name: str, tensors: list[Tensor]) -> None:
    for i, t in enumerate(tensors):
        if t.dtype.name not in _FLOAT_NAMES:
            raise RuntimeError(
                f"{name}: self[{i}] has dtype {t.dtype}; foreach ops take float16, bfloat16, "
                "float32 and float64 tensors"
            )


def _check_pair(name: str, argument: str, self_: list[Tensor], other: list[Tensor]) -> None:
    """``other`` matches ``self_`` tensor by tensor: length, device, dtype, shape (or one
    element, broadcast)."""
    if len(other) != len(self_):
        raise RuntimeError(
            f"{name}: Tensor lists must have the same number of tensors, got {len(self_)} "
            f"and {len(other)} ('{argument}')"
        )
    for i, (a, b) in enumerate(zip(self_, other, strict=True)):
        if b.device is not a.device and b.device != a.device:
            raise RuntimeError(
                f"{name}: '{argument}'[{i}] is on {b.device}, but self[{i}] is on {a.device}"
            )
        if b.dtype is not a.dtype and b.dtype != a.dtype:
            raise RuntimeError(
                f"{name}: '{argument}'[{i}] has dtype {b.dtype}, but self[{i}] has {a.dtype}"
            )
        if b.shape != a.shape and b.numel() != 1:
            raise RuntimeError(
                f"{name}: the size of '{argument}'[{i}] {tuple(b.shape)} must match the size "
                f"of self[{i}] {tuple(a.shape)}"
            )


def _scalar_list(name: str, argument: str, values: Sequence[Any], n: int) -> list[float]:
    if len(values) != n:
        raise RuntimeError(
            f"{name}: '{argument}' has {len(values)} scalars for {n} tensors; give one each"
        )
    for i, v in enumerate(values):
        if not _is_number(v):
            raise TypeError(f"{name}: '{argument}'[{i}] must be a number, got {_kind(v)}")
    return [float(v) for v in values]


# ---- running -----------------------------------------------------------------------------
def _run(
    op: _Op,
    inputs: list[list[Tensor]],
    out: list[Tensor],
    scalar: float = 0.0,
    scalars: list[float] | list[Tensor] | None = None,
    alpha: float = 1.0,
) -> None:
    """``out[i] = op(inputs[k][i] ..., scalar or scalars[i], alpha)`` for every i; ``out``
    may be ``inputs[0]`` (in place). ``scalars`` of tensors are one-element device scalars."""
    in_place = bool(inputs) and out is inputs[0]
    groups: dict[tuple[str, int, str], list[int]] = {}
    slow: list[int] = []
    for i, t in enumerate(out):
        if _dense(t) and all(_dense(lst[i]) for lst in inputs):
            device = t._storage.device
            groups.setdefault((device.type, device.index, t.dtype.name), []).append(i)
        else:
            slow.append(i)
    for index in groups.values():
        dt = out[index[0]].dtype
        lists = [[lst[i] for i in index] for lst in inputs]
        if not in_place:
            lists.append([out[i] for i in index])
        extras = None if scalars is None else [scalars[i] for i in index]
        _launch(op, dt, lists, in_place, scalar, extras, alpha)
    for i in slow:
        sources = [lst[i].contiguous() for lst in inputs]
        target = (
            out[i]
            if out[i].is_contiguous()
            else Tensor._empty(out[i].shape, out[i].dtype, out[i].device)
        )
        extra = None if scalars is None else [scalars[i]]
        lists = [[s] for s in sources] + [[target]]
        _launch(op, out[i].dtype, lists, False, scalar, extra, alpha)
        if target is not out[i]:
            out[i].copy_(target)


def _launch(
    op: _Op,
    dt: dtype,
    lists: list[list[Tensor]],
    in_place: bool,
    scalar: float,
    extras: list[Any] | None,
    alpha: float,
) -> None:
    mode = 0 if extras is None else 2 if isinstance(extras[0], Tensor) else 1
    plan = TensorListPlan(lists, extras, extra_dtype=dt.np, check=False)
    depth, nin = len(lists), op.inputs
    out_index = 0 if in_place else nin
    entry = (
        f"vram::foreach::apply<{dt.c_type}, vram::foreach::{op.functor}, {depth}, {nin}, "
        f"{out_index}, {mode}, {{N}}>"
    )
    plan.launch(_kernel(op, out_index, mode), entry, _PARAMS, (), (float(scalar), float(alpha)))


@cache
def _kernel(op: _Op, out_index: int, mode: int) -> Kernel:
    """The foreach kernel of ``op`` writing list ``out_index``, with per-tensor scalars of
    ``mode`` (0 none, 1 numbers, 2 one-element tensors), and its reference: ``op``'s
    formula in the opmath type, rounded once to the element type."""
    nin = op.inputs

    def step(arrays: list[np.ndarray], extra: Any, aligned: bool, scalar: float, alpha: float):
        element = arrays[out_index].dtype
        math = _opmath(element)
        s = math.type(scalar if extra is None else extra if mode == 1 else extra[0])
        x = [a.astype(math) for a in arrays[:nin]]
        with np.errstate(all="ignore"):
            result = op.numpy(x, s, math.type(alpha))
        arrays[out_index][...] = np.asarray(result, dtype=math).astype(element)

    return Kernel(f"_foreach {op.functor}", _source(), list_reference(step))


def _dense(t: Tensor) -> bool:
    """Contiguous (the common case answered by one comparison of cached strides)."""
    return t._stride == contiguous_strides(t._shape) or t.is_contiguous()


def _new_like(tensors: list[Tensor]) -> list[Tensor]:
    """Uninitialized contiguous tensors shaped like ``tensors``; those of one device and
    dtype are views of one allocation."""
    out: list[Tensor | None] = [None] * len(tensors)
    groups: dict[tuple[Any, dtype], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype), []).append(i)
    for (device, dt), index in groups.items():
        if device.type == "cpu" or len(index) == 1:
            for i in index:
                out[i] = Tensor._empty(tensors[i].shape, dt, device)
            continue
        offsets, total = [], 0
        for i in index:
            offsets.append(total)
            total += -(-tensors[i].numel() * dt.itemsize // _ALIGN) * _ALIGN
        allocation = allocate(max(total, 1), device)
        storage = Storage(device, allocation.ptr, total, allocation)
        for i, offset in zip(index, offsets, strict=True):
            shape = tuple(tensors[i].shape)
            out[i] = Tensor._make(
                storage, shape, contiguous_strides(shape), offset // dt.itemsize, dt
            )
    return out  # type: ignore[return-value]


# ---- the binary ops: add, sub, mul, div, maximum -------------------------------------------
def _binary(
    name: str, list_op: str, self_: Any, other: Any, alpha: Any, in_place: bool
) -> list[Tensor] | None:
    tensors = _tensor_list(name, "self", self_)
    _check_self(name, tensors)
    if not tensors:
        return None if in_place else []
    out = tensors if in_place else _new_like(tensors)
    if alpha is not None and not _is_number(alpha):
        raise TypeError(f"{name}: 'alpha' must be a number, got {_kind(alpha)}")
    a = 1.0 if alpha is None else float(alpha)
    scalar_op = _OPS[_SCALAR_FORM[list_op]]
    if _is_number(other):
        _run(scalar_op, [tensors], out, float(other), alpha=a)
    elif isinstance(other, Tensor):
        if other.numel() != 1:
            raise RuntimeError(
                f"{name}: a tensor 'other' must have one element, not {other.numel()}"
            )
        _run_broadcast(name, scalar_op, tensors, out, [other] * len(tensors), a)
    elif isinstance(other, (list, tuple)) and other and all(_is_number(v) for v in other):
        values = _scalar_list(name, "other", other, len(tensors))
        _run(scalar_op, [tensors], out, scalars=values, alpha=a)
    else:
        others = _tensor_list(name, "other", other)
        _check_pair(name, "other", tensors, others)
        full = [
            i for i, (t, o) in enumerate(zip(tensors, others, strict=True)) if o.shape == t.shape
        ]
        if len(full) == len(tensors):
            _run(_OPS[list_op], [tensors, others], out, alpha=a)
        else:
            chosen = set(full)
            rest = [i for i in range(len(tensors)) if i not in chosen]
            if full:
                mine, theirs, target = _pick([tensors, others, out], full)
                _run(_OPS[list_op], [mine, theirs], mine if in_place else target, alpha=a)
            mine, theirs, target = _pick([tensors, others, out], rest)
            _run_broadcast(name, scalar_op, mine, mine if in_place else target, theirs, a)
    return None if in_place else out


def _pick(lists: list[list[Tensor]], index: list[int]) -> list[list[Tensor]]:
    return [[lst[i] for i in index] for lst in lists]


def _run_broadcast(
    name: str,
    op: _Op,
    tensors: list[Tensor],
    out: list[Tensor],
    scalars: list[Tensor],
    alpha: float,
) -> None:
    """``op`` with each tensor's scalar read from a one-element tensor on its device."""
    ready = []
    for i, (t, s) in enumerate(zip(tensors, scalars, strict=True)):
        if s.device != t.device:
            raise RuntimeError(
                f"{name}: the scalar tensor for self[{i}] is on {s.device}, not {t.device}"
            )
        ready.append(s if s.dtype == t.dtype and s.is_contiguous() else s.to(t.dtype, copy=True))
    _run(op, [tensors], out, scalars=ready, alpha=alpha)


def _foreach_add(self: Any, other: Any, *, alpha: Any = None) -> list[Tensor]:
    """``[s + alpha * o for s, o in ...]``: ``other`` a number, numbers, tensors or a tensor."""
    return _binary("_foreach_add", "AddList", self, other, alpha, False)  # type: ignore[return-value]


def _foreach_add_(self: Any, other: Any, *, alpha: Any = None) -> None:
    """In place: ``s += alpha * o`` for each tensor."""
    _binary("_foreach_add_", "AddList", self, other, alpha, True)


def _foreach_sub(self: Any, other: Any, *, alpha: Any = None) -> list[Tensor]:
    return _binary("_foreach_sub", "SubList", self, other, alpha, False)  # type: ignore[return-value]


def _foreach_sub_(self: Any, other: Any, *, alpha: Any = None) -> None:
    _binary("_foreach_sub_", "SubList", self, other, alpha, True)


def _foreach_mul(self: Any, other: Any) -> list[Tensor]:
    return _binary("_foreach_mul", "MulList", self, other, None, False)  # type: ignore[return-value]


def _foreach_mul_(self: Any, other: Any) -> None:
    _binary("_foreach_mul_", "MulList", self, other, None, True)


def _foreach_div(self: Any, other: Any) -> list[Tensor]:
    return _binary("_foreach_div", "DivList", self, other, None, False)  # type: ignore[return-value]


def _foreach_div_(self: Any, other: Any) -> None:
    _binary("_foreach_div_", "DivList", self, other, None, True)


def _foreach_maximum(self: Any, other: Any) -> list[Tensor]:
    """Elementwise maximum (NaN wins, as torch.maximum)."""
    return _binary("_foreach_maximum", "MaximumList", self, other, None, False)  # type: ignore[return-value]


def _foreach_maximum_(self: Any, other: Any) -> None:
    _binary("_foreach_maximum_", "MaximumList", self, other, None, True)


# ---- pow, lerp, addcmul, addcdiv --------------------------------------------------------------
def _foreach_pow(self: Any, exponent: Any) -> list[Tensor]:
    """``self ** exponent``: a list to a number or numbers, or a number to a list."""
    name = "_foreach_pow"
    if _is_number(self):
        tensors = _tensor_list(name, "exponent", exponent)
        _check_self(name, tensors)
        out = _new_like(tensors)
        if tensors:
            _run(_OPS["ScalarPow"], [tensors], out, float(self))
        return out
    return _pow(name, self, exponent, False)  # type: ignore[return-value]


def _foreach_pow_(self: Any, exponent: Any) -> None:
    _pow("_foreach_pow_", self, exponent, True)


def _pow(name: str, self_: Any, exponent: Any, in_place: bool) -> list[Tensor] | None:
    tensors = _tensor_list(name, "self", self_)
    _check_self(name, tensors)
    out = tensors if in_place else _new_like(tensors)
    if not tensors:
        return None if in_place else out
    if _is_number(exponent):
        _run(_OPS["PowScalar"], [tensors], out, float(exponent))
    elif isinstance(exponent, (list, tuple)) and all(_is_number(v) for v in exponent):
        values = _scalar_list(name, "exponent", exponent, len(tensors))
        _run(_OPS["PowScalar"], [tensors], out, scalars=values)
    else:
        raise TypeError(f"{name}: 'exponent' must be a number or a list of numbers")
    return None if in_place else out


def _ternary(
    name: str, functor: str, self_: Any, lists: list[tuple[str, Any]], value: Any, in_place: bool
) -> list[Tensor] | None:
    tensors = _tensor_list(name, "self", self_)
    _check_self(name, tensors)
    others = []
    for argument, values in lists:
        found = _tensor_list(name, argument, values)
        _check_pair(name, argument, tensors, found)
        for i, (t, o) in enumerate(zip(tensors, found, strict=True)):
            if o.shape != t.shape:
                raise RuntimeError(
                    f"{name}: '{argument}'[{i}] must have the shape of self[{i}] "
                    f"{tuple(t.shape)}, not {tuple(o.shape)}"
                )
        others.append(found)
    out = tensors if in_place else _new_like(tensors)
    if not tensors:
        return None if in_place else out
    op = _OPS[functor]
    if _is_number(value):
        _run(op, [tensors, *others], out, float(value))
    elif isinstance(value, (list, tuple)):
        _run(
            op, [tensors, *others], out, scalars=_scalar_list(name, "scalars", value, len(tensors))
        )
    else:
        raise TypeError(
            f"{name}: the scalar must be a number or a list of numbers, got {_kind(value)}"
        )
    return None if in_place else out


def _foreach_lerp(self: Any, tensors1: Any, weight: Any) -> list[Tensor]:
    """``s + weight * (t - s)`` with PyTorch's two-sided formula; weight a number or numbers."""
    return _ternary("_foreach_lerp", "Lerp", self, [("tensors1", tensors1)], weight, False)  # type: ignore[return-value]


def _foreach_lerp_(self: Any, tensors1: Any, weight: Any) -> None:
    _ternary("_foreach_lerp_", "Lerp", self, [("tensors1", tensors1)], weight, True)


def _foreach_addcmul(self: Any, tensor1: Any, tensor2: Any, value: Any = 1) -> list[Tensor]:
    """``s + value * t1 * t2``; ``value`` a number or numbers (one per tensor)."""
    pair = [("tensor1", tensor1), ("tensor2", tensor2)]
    return _ternary("_foreach_addcmul", "Addcmul", self, pair, value, False)  # type: ignore[return-value]


def _foreach_addcmul_(self: Any, tensor1: Any, tensor2: Any, value: Any = 1) -> None:
    pair = [("tensor1", tensor1), ("tensor2", tensor2)]
    _ternary("_foreach_addcmul_", "Addcmul", self, pair, value, True)


def _foreach_addcdiv(self: Any, tensor1: Any, tensor2: Any, value: Any = 1) -> list[Tensor]:
    """``s + value * t1 / t2``; ``value`` a number or numbers (one per tensor)."""
    pair = [("tensor1", tensor1), ("tensor2", tensor2)]
    return _ternary("_foreach_addcdiv", "Addcdiv", self, pair, value, False)  # type: ignore[return-value]


def _foreach_addcdiv_(self: Any, tensor1: Any, tensor2: Any, value: Any = 1) -> None:
    pair = [("tensor1", tensor1), ("tensor2", tensor2)]
    _ternary("_foreach_addcdiv_", "Addcdiv", self, pair, value, True)


# ---- unary ops, zero, copy ----------------------------------------------------------------------
def _unary(name: str, functor: str, self_: Any, in_place: bool) -> list[Tensor] | None:
    tensors = _tensor_list(name, "self", self_)
    _check_self(name, tensors)
    out = tensors if in_place else _new_like(tensors)
    if tensors:
        _run(_OPS[functor], [tensors], out)
    return None if in_place else out


def _foreach_sqrt(self: Any) -> list[Tensor]:
    return _unary("_foreach_sqrt", "Sqrt", self, False)  # type: ignore[return-value]


def _foreach_sqrt_(self: Any) -> None:
    _unary("_foreach_sqrt_", "Sqrt", self, True)


def _foreach_neg(self: Any) -> list[Tensor]:
    return _unary("_foreach_neg", "Neg", self, False)  # type: ignore[return-value]


def _foreach_neg_(self: Any) -> None:
    _unary("_foreach_neg_", "Neg", self, True)


def _foreach_reciprocal(self: Any) -> list[Tensor]:
    return _unary("_foreach_reciprocal", "Reciprocal", self, False)  # type: ignore[return-value]


def _foreach_reciprocal_(self: Any) -> None:
    _unary("_foreach_reciprocal_", "Reciprocal", self, True)


def _foreach_zero_(self: Any) -> None:
    """Set every element of every tensor to zero."""
    tensors = _tensor_list("_foreach_zero_", "self", self)
    _check_self("_foreach_zero_", tensors)
    if tensors:
        _run(_OPS["Zero"], [], tensors)


def _foreach_copy_(self: Any, src: Any, non_blocking: bool = False) -> None:
    """``s.copy_(o)`` for each pair; tensors of another dtype or device take ``Tensor.copy_``."""
    name = "_foreach_copy_"
    tensors = _tensor_list(name, "self", self)
    sources = _tensor_list(name, "src", src)
    if len(sources) != len(tensors):
        raise RuntimeError(
            f"{name}: Tensor lists must have the same number of tensors, got {len(tensors)} "
            f"and {len(sources)}"
        )
    fast = [
        i
        for i, (t, s) in enumerate(zip(tensors, sources, strict=True))
        if t.dtype == s.dtype and t.dtype in _FLOATS and t.device == s.device and t.shape == s.shape
    ]
    chosen = set(fast)
    if fast:
        _run(_OPS["Copy"], [[sources[i] for i in fast]], [tensors[i] for i in fast])
    for i, (t, s) in enumerate(zip(tensors, sources, strict=True)):
        if i not in chosen:
            t.copy_(s, non_blocking=non_blocking)
