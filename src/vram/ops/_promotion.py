"""PyTorch's type promotion, for the dtypes vram has.

- ``promote_types(a, b)``: torch.promote_types.
- ``result_type(*operands)``: torch.result_type over tensors and Python numbers: dimensioned
  tensors decide the type, then zero-dimensional tensors, then numbers; a lower tier only
  raises the category (bool < integer < floating point < complex), to the default type of
  that category (int64, the default float dtype, its complex counterpart).
- ``opmath(dt)``: the type arithmetic runs in (float32 for float16 and bfloat16).
"""

from __future__ import annotations

import numbers
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
    get_default_dtype,
    int64,
    set_default_dtype,
)
from .._tensor import Tensor

__all__ = [
    "promote_types",
    "result_type",
    "category",
    "kind",
    "opmath",
    "can_cast",
    "ZeroDim",
    "get_default_dtype",
    "set_default_dtype",
]


def kind(dt: dtype) -> int:
    """0 bool, 1 integer, 2 floating point, 3 complex."""
    if dt is bool_:
        return 0
    if dt.is_complex:
        return 3
    return 2 if dt.is_floating_point else 1


def category(value: Any) -> int:
    """The kind of a tensor's dtype or of a Python number."""
    if isinstance(value, Tensor):
        return kind(value.dtype)
    if isinstance(value, (bool, np.bool_)):
        return 0
    if isinstance(value, numbers.Integral):
        return 1
    if isinstance(value, numbers.Real):
        return 2
    return 3


_table: dict[tuple[dtype, dtype], dtype] = {}


def promote_types(a: dtype, b: dtype) -> dtype:
    """torch.promote_types for vram's dtypes."""
    found = _table.get((a, b))
    if found is None:
        found = _table[(a, b)] = _table[(b, a)] = _promote(a, b)
    return found


def _promote(a: dtype, b: dtype) -> dtype:
    if a is b:
        return a
    ka, kb = kind(a), kind(b)
    if ka != kb:
        high, low = (a, b) if ka > kb else (b, a)
        return complex128 if high.is_complex and low is float64 else high
    if ka == 2:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    if ka == 3:
        return a if a.itemsize > b.itemsize else b
    found = np.promote_types(a.np, b.np)  # integers: NumPy's rules are PyTorch's here
    return next(d for d in all_dtypes if d.np == found)


class ZeroDim:
    """A zero-dimensional cpu tensor's value standing for an operand of a device op (PyTorch
    lets ``cuda_tensor * cpu_scalar_tensor`` pass the value as a kernel argument): it
    promotes as a zero-dimensional tensor of ``dtype`` and is passed as a number."""

    __slots__ = ("dtype", "value")
    _shape = ()

    def __init__(self, dt: dtype, value: Any) -> None:
        self.dtype = dt
        self.value = value


def _wrapped(value: Any) -> dtype:
    """The dtype a Python number takes in promotion (PyTorch's wrapped numbers)."""
    c = category(value)
    if c == 0:
        return bool_
    if c == 1:
        return int64
    if c == 2:
        return get_default_dtype()
    return complex128 if get_default_dtype() is float64 else complex64


def _combine(higher: dtype | None, lower: dtype | None) -> dtype | None:
    """PyTorch's combine_categories: ``higher`` (a higher tier) keeps its type unless
    ``lower`` is of a higher category."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        if higher.is_floating_point:
            return complex128 if higher is float64 else complex64
        return lower
    if higher.is_floating_point:
        return higher
    if higher is bool_ or lower.is_floating_point:
        return promote_types(higher, lower)
    return higher


def result_type(*operands: Any) -> dtype:
    """torch.result_type of tensors, ``ZeroDim`` values and Python numbers (at least one):
    dimensioned tensors decide, then zero-dimensional ones, then numbers, each lower tier
    only raising the category (PyTorch's ResultTypeState)."""
    tiers: list[dtype | None] = [None, None, None]  # dimensioned, 0-dim, numbers
    for value in operands:
        if isinstance(value, (Tensor, ZeroDim)):
            tier, dt = (0 if value._shape else 1), value.dtype
        else:
            tier, dt = 2, _wrapped(value)
        found = tiers[tier]
        tiers[tier] = dt if found is None else promote_types(found, dt)
    result = _combine(tiers[0], _combine(tiers[1], tiers[2]))
    assert result is not None
    return result


def opmath(dt: dtype) -> dtype:
    """The dtype arithmetic on ``dt`` runs in: float32 for float16 and bfloat16."""
    return float32 if dt is float16 or dt is bfloat16 else dt


def can_cast(source: dtype, target: dtype) -> bool:
    """torch.can_cast: no cast to a lower category (float to int, complex to float, ...)."""
    return kind(source) <= kind(target)
