"""PyTorch's argument checks for the random ops, with its messages: bounds of uniform_,
normal_ and random_ (its update_from / update_to for floating dtypes, check_from_to_in_range),
which sampler random_ takes, randperm's limits, how torch parses (from, to) and randint's
arguments, and broadcasting a probabilities tensor."""

from __future__ import annotations

import numbers
import warnings
from functools import lru_cache
from typing import Any

import ml_dtypes
import numpy as np

from ..._dtypes import bfloat16, bool_, dtype, float16, float32, float64, int64
from ..._tensor import Tensor
from .._math import _torch_name

__all__ = [
    "DIGITS",
    "not_implemented",
    "limits",
    "int_arg",
    "real_arg",
    "uniform_fields",
    "normal_fields",
    "from_to_args",
    "randint_args",
    "random_range",
    "random_bits",
    "randperm_fits",
    "probability",
    "probabilities",
    "expanded",
]

_MASK64 = (1 << 64) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
DIGITS = {float16: 11, bfloat16: 8, float32: 24, float64: 53}  # significand bits


def not_implemented(op: str, dt: dtype) -> NotImplementedError:
    """PyTorch's error for a kernel without an instance for ``dt``."""
    return NotImplementedError(f"\"{op}\" not implemented for '{_torch_name(dt)}'")


def limits(dt: dtype) -> tuple[float, float]:
    """The lowest and largest finite values of a floating dtype."""
    info = ml_dtypes.finfo(dt.np)
    return float(info.min), float(info.max)


def _g(value: float) -> str:
    """A number as PyTorch's messages print it (C++ streams: 6 significant digits)."""
    return f"{value:g}"


def int_arg(value: Any, argument: str, op: str) -> int:
    """An int argument (not a bool or a float), as torch's argument parser takes it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}(): argument '{argument}' must be int, not {type(value).__name__}")
    return int(value)


def real_arg(value: Any, argument: str) -> float:
    """A real number as a float (not a tensor)."""
    if type(value) is float:  # the common case, without the ABC's isinstance
        return value
    if isinstance(value, Tensor) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argument}: expected a real number, got {type(value).__name__}")
    return float(value)


@lru_cache(maxsize=256)
def uniform_fields(dt: dtype, low: float, high: float) -> tuple[float, float, float]:
    """(low, high - low, high) as the kernel takes them, after PyTorch's checks."""
    lowest, highest = limits(dt)
    if not lowest <= low <= highest:
        raise RuntimeError(f"from is out of bounds for {dt.name}")
    if not lowest <= high <= highest:
        raise RuntimeError(f"to is out of bounds for {dt.name}")
    if low > high:
        raise RuntimeError(
            f"uniform_ expects to return a [from, to) range, but found from={_g(low)} > "
            f"to={_g(high)}"
        )
    if high - low > highest:
        raise RuntimeError(
            f"uniform_ expects to-from <= std::numeric_limits<{_torch_name(dt)}>::max(), "
            f"but found to={_g(high)} and from={_g(low)} which result in to-from to exceed the "
            "limit"
        )
    cast = dt.np.type
    lo, hi = (cast(np.float32(v)) if dt.itemsize == 2 else cast(v) for v in (low, high))
    return float(lo), float(hi - lo), float(hi)


def from_to_args(op: str, args: tuple, kwargs: dict, low: Any, high: Any) -> tuple[Any, Any]:
    """(from, to) of ``op(from, to)``, ``op(**{"from": ..., "to": ...})`` or defaults."""
    unknown = set(kwargs) - {"from", "to"}
    if unknown:
        raise TypeError(f"{op}(): unexpected argument '{sorted(unknown)[0]}'")
    if len(args) > 2:
        raise TypeError(f"{op}(): expected at most 2 positional arguments, got {len(args)}")
    values = dict(zip(("from", "to"), args, strict=False))
    for name, value in kwargs.items():
        if name in values:
            raise TypeError(f"{op}(): got multiple values for argument '{name}'")
        values[name] = value
    return values.get("from", low), values.get("to", high)


@lru_cache(maxsize=256)
def normal_fields(dt: dtype, mean: float, std: float) -> tuple[float, float]:
    """(mean, std) in the accumulate type, after PyTorch's check of ``std``."""
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {_g(std)}")
    acc = np.float64 if dt is float64 else np.float32
    return float(acc(mean)), float(acc(std))


def _cast_int(dt: dtype, value: int) -> int:
    """``static_cast<int64_t>(static_cast<dt>(value))`` for a floating dtype."""
    if dt.itemsize == 2:
        return int(float(dt.np.type(np.float32(value))))
    return int(float(dt.np.type(value)))


def _update_from(dt: dtype, low: int) -> int:
    """PyTorch's update_from: the smallest ``low`` that ``dt`` holds exactly."""
    plus = _cast_int(dt, low + 1)
    if plus < low:
        n = abs(low + 1).bit_length() - 1
        low = plus + (1 << (n - DIGITS[dt] + 1))
    return low


def _update_to(dt: dtype, high: int) -> int:
    """PyTorch's update_to: the largest ``high`` that ``dt`` holds exactly."""
    minus = _cast_int(dt, high - 1)
    if minus >= high:
        n = abs(high - 1).bit_length() - 1
        high = minus - (1 << (n - DIGITS[dt] + 1))
    return high


def _check_range(low: int, high_inclusive: int, dt: dtype) -> None:
    """PyTorch's check_from_to_in_range."""
    if dt.is_floating_point:
        lowest, highest = limits(dt)
        digits = DIGITS[dt]
        if not lowest <= low <= highest:
            raise RuntimeError(f"from is out of bounds for {dt.name}")
        if not lowest <= high_inclusive <= highest:
            raise RuntimeError(f"to - 1 is out of bounds for {dt.name}")
        for name, value in (("from", low), ("to - 1", high_inclusive)):
            if not -(1 << digits) <= value <= 1 << digits:
                warnings.warn(
                    f"{name} is out of bounds [-(2^{digits}), 2^{digits}]. Due to precision "
                    f"limitations {dt.name} can support discrete uniform distribution only "
                    "within this range.",
                    UserWarning,
                    stacklevel=4,
                )
        return
    if dt is bool_:
        lowest, highest = 0, 1
    else:
        info = np.iinfo(dt.np)
        lowest, highest = int(info.min), int(info.max)
    if not lowest <= low <= highest:
        raise RuntimeError(f"from is out of bounds for {dt.name}")
    if not lowest <= high_inclusive <= highest:
        raise RuntimeError(f"to - 1 is out of bounds for {dt.name}")


def _bits(span: int) -> str:
    """The sampler of ``random_(from, to)``: 64-bit values from a span of 2**28 up (PyTorch's
    rule: a 32-bit value's modulo would skew larger spans by more than about 5%)."""
    return "bits64" if span == 0 or span >= 1 << 28 else "bits32"


def random_range(dt: dtype, low: Any, high: Any) -> tuple[str, int, int]:
    """(sampler, span, low) of ``random_(low, high)``; ``high`` None: up to ``dt``'s
    largest value (PyTorch's random_from_to_impl)."""
    if dt.is_complex:
        raise RuntimeError(
            "check_random_bounds handles only integral, floating-point and boolean types"
        )
    low = int_arg(low, "from", "random_")
    if not _INT64_MIN <= low <= _INT64_MAX:
        raise RuntimeError(f"from: {low} does not fit in int64")
    if high is not None:
        high = int_arg(high, "to", "random_")
        if not _INT64_MIN <= high <= _INT64_MAX:
            raise RuntimeError(f"to: {high} does not fit in int64")
        if low >= high:
            raise RuntimeError(
                f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
            )
        if dt.is_floating_point:
            low, high = _update_from(dt, low), _update_to(dt, high)
            if low >= high:
                raise RuntimeError(
                    "random_ expects 'from' casted to dtype to be less than 'to' casted to "
                    f"dtype, but got from={low} >= to={high}"
                )
        _check_range(low, high - 1, dt)
        span = (high - low) & _MASK64
        return _bits(span), span, low
    if low == _INT64_MIN:  # every int64: the 64 bits as they are
        if dt not in (int64, float64, float32, bfloat16):
            raise RuntimeError(
                "random_full_64_bits_range_kernel_cuda handles only int64, double, float and "
                "bfloat16"
            )
        return "bits64", 0, low
    if dt.is_floating_point:
        top = min(1 << DIGITS[dt], _INT64_MAX)
        low = _update_from(dt, low)
        if low >= top:
            raise RuntimeError(
                "random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' "
                f"casted to dtype, but got from={low} > to_inc={top}"
            )
    else:
        top = 1 if dt is bool_ else int(np.iinfo(dt.np).max)
    _check_range(low, top, dt)
    span = (top - low + 1) & _MASK64
    return _bits(span), span, low


def random_bits(dt: dtype) -> tuple[str, int]:
    """(sampler, span) of ``random_()``: PyTorch's uniform_int over [0, a dtype's range]."""
    if dt.is_complex:
        raise not_implemented("random_kernel_cuda", dt)
    if dt is bool_:
        return "bits32", 2
    if dt.is_floating_point:
        return ("bits64" if dt is float64 else "bits32"), (1 << DIGITS[dt]) + 1
    span = int(np.iinfo(dt.np).max) + 1
    return ("bits64" if dt is int64 else "bits32"), span


def randint_args(op: str, args: tuple, given: dict) -> dict:
    """torch.randint's arguments: (high, size), (low, high, size), or by keyword."""
    free = [name for name in given if given[name] is None]
    if len(args) < len(free) and "low" in free:
        free.remove("low")
    if len(args) != len(free):
        raise TypeError(f"{op}(): expected ([low,] high{', size' if 'size' in given else ''})")
    given.update(zip(free, args, strict=True))
    if given["low"] is None:
        given["low"] = 0
    return given


_RANDPERM_LIMITS = {  # largest n a floating dtype takes: its message names it as PyTorch's
    float16: (2049, "2049 for Half"),
    bfloat16: (257, "257 for BFloat16"),
    float32: ((1 << 24) + 1, "2^24+1 for Float"),
    float64: ((1 << 53) + 1, "2^53+1 for Double"),
}
_C_NAMES = {"uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int"}


def randperm_fits(n: int, dt: dtype) -> None:
    """PyTorch's checks that ``dt`` holds every value of ``randperm(n)``."""
    if dt is bool_ or dt.is_complex:
        raise not_implemented("randperm", dt)
    if dt.is_floating_point:
        limit, text = _RANDPERM_LIMITS[dt]
        if n > limit:
            raise RuntimeError(f"n cannot be greater than {text} type.")
    elif dt is not int64 and n - 1 > int(np.iinfo(dt.np).max):
        raise RuntimeError(
            f"value cannot be converted to type {_C_NAMES[dt.name]} without overflow"
        )


def probability(p: Any) -> float:
    """bernoulli_'s ``p`` as a number in [0, 1]."""
    p = real_arg(p, "p")
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={_g(p)}")
    return p


def probabilities(p: Tensor) -> None:
    """bernoulli_'s probabilities tensor: a floating one."""
    if not p.dtype.is_floating_point:
        raise RuntimeError(
            f"expected probabilities tensor to have floating type, got {_torch_name(p.dtype)}"
        )


def expanded(p: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``p`` broadcast to ``shape`` (PyTorch's expand_inplace message when it cannot be)."""
    lead = len(shape) - p.ndim
    for i, size in enumerate(p.shape):
        if size not in (1, shape[lead + i]) or lead < 0:
            raise RuntimeError(
                f"The expanded size of the tensor ({shape[lead + i]}) must match the existing "
                f"size ({size}) at non-singleton dimension {lead + i}.  Target sizes: "
                f"{list(shape)}.  Tensor sizes: {list(p.shape)}"
            )
    return p.expand(*shape)
