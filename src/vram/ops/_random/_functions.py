"""The random ops with torch's names, arguments, dtypes and errors: rand, randn, randint,
randperm, the ``*_like`` forms, normal, bernoulli, and the in-place ``normal_``,
``uniform_``, ``random_``, ``bernoulli_`` (Tensor methods, through ``dispatch``).

Numbers are PyTorch's CUDA kernels' for the same (seed, offset): uniform, normal, random_
and scalar bernoulli draws follow its element layout and transforms (see _philox.py).
A tensor is filled in memory order (PyTorch's TensorIterator order for a nullary op); one
with gaps between its elements is drawn into a dense temporary and copied.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import ml_dtypes
import numpy as np

from ..._device import as_device
from ..._dtypes import (
    as_dtype,
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
from ..._tensor import Tensor, as_shape, dispatch
from .._iterator import has_internal_overlap
from .._plans import new_tensor
from .._promotion import get_default_dtype
from ._draw import (
    BERNOULLI,
    BERNOULLI_TENSOR,
    DROPOUT,
    FROM_TO,
    NORMAL,
    UNIFORM,
    draw_plan,
    randperm_plan,
)
from ._generator import Generator, default_generator

__all__ = [
    "FUNCTIONS",
    "rand",
    "randn",
    "randint",
    "randperm",
    "rand_like",
    "randn_like",
    "randint_like",
    "normal",
    "bernoulli",
    "normal_",
    "uniform_",
    "random_",
    "bernoulli_",
    "native_dropout",
]

_MASK64 = (1 << 64) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_TORCH_NAMES = {  # PyTorch's ScalarType names, for its messages
    "float16": "Half",
    "bfloat16": "BFloat16",
    "float32": "Float",
    "float64": "Double",
    "int8": "Char",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "uint8": "Byte",
    "bool": "Bool",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
}
_DIGITS = {float16: 11, bfloat16: 8, float32: 24, float64: 53}  # significand bits
_FLOATING = frozenset(_DIGITS)
_REAL = {complex64: float32, complex128: float64}
_OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)


def _not_implemented(op: str, dt: dtype) -> NotImplementedError:
    return NotImplementedError(f"\"{op}\" not implemented for '{_TORCH_NAMES[dt.name]}'")


def _limits(dt: dtype) -> tuple[float, float]:
    """The lowest and largest finite values of a floating dtype."""
    info = ml_dtypes.finfo(dt.np)
    return float(info.min), float(info.max)


def _g(value: float) -> str:
    """A number as PyTorch's messages print it (C++ streams: 6 significant digits)."""
    return f"{value:g}"


# ---- arguments ---------------------------------------------------------------------------
def _generator(generator: Any, t: Tensor) -> Generator:
    """The generator a draw into ``t`` uses: ``generator``, or its device's default."""
    if generator is None:
        return default_generator(t.device)
    if not isinstance(generator, Generator):
        raise TypeError(f"generator: expected a vram.Generator, got {type(generator).__name__}")
    if generator._device.type != t.device.type:
        raise RuntimeError(
            f"Expected a '{t.device.type}' device type for generator but found "
            f"'{generator._device.type}'"
        )
    return generator


def _tensor(value: Any, argument: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{argument}: expected a vram.Tensor, got {type(value).__name__}")
    return value


def _int(value: Any, argument: str, op: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}(): argument '{argument}' must be int, not {type(value).__name__}")
    return int(value)


def _real(value: Any, argument: str) -> float:
    if type(value) is float:  # the common case, without the ABC's isinstance
        return value
    if isinstance(value, Tensor) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argument}: expected a real number, got {type(value).__name__}")
    return float(value)


def _new(shape: tuple[int, ...], dt: Any, device: Any, out: Any, default: dtype) -> Tensor:
    """The output of a factory: ``out`` (of ``shape``), or a new contiguous tensor."""
    if out is None:
        return Tensor._empty(shape, default if dt is None else as_dtype(dt), as_device(device))
    out = _tensor(out, "out")
    if out._shape != shape:
        raise RuntimeError(f"out: expected a tensor of shape {list(shape)}, got {list(out.shape)}")
    if dt is not None and as_dtype(dt) is not out.dtype:
        raise RuntimeError(f"out: expected dtype {as_dtype(dt)}, got {out.dtype}")
    if device is not None and as_device(device) != out.device:
        raise RuntimeError(f"out: expected a tensor on {as_device(device)}, got {out.device}")
    return out


def _like(input: Tensor, dt: Any, device: Any) -> Tensor:  # noqa: A002 - torch's name
    """A new tensor shaped as ``input``, with its strides where it is dense (torch's
    preserve_format), of ``dt`` on ``device`` (``input``'s when None)."""
    input = _tensor(input, "input")
    found_dtype = input.dtype if dt is None else as_dtype(dt)
    found = input.device if device is None else as_device(device)
    if found == input.device and input.numel() and _dense(input):
        nbytes = input.numel() * found_dtype.itemsize
        return new_tensor(input._shape, input._stride, found_dtype, found, nbytes)
    return Tensor._empty(input._shape, found_dtype, found)


def _dense(t: Tensor) -> bool:
    """True when ``t``'s elements tile its memory with neither gaps nor overlap (any
    order of dimensions): a draw then writes straight into it."""
    expected = 1
    for stride, size in sorted((s, n) for n, s in zip(t._shape, t._stride, strict=True) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _memory_order(t: Tensor) -> list[int]:
    """``t``'s dimensions from the largest stride to the smallest."""
    return sorted(range(t.ndim), key=lambda d: -t._stride[d])


def _as_real(t: Tensor) -> Tensor:
    """A complex tensor's real and imaginary parts as a real tensor (torch.view_as_real)."""
    stride = (*(2 * s for s in t._stride), 1)
    return Tensor._make(t._storage, (*t._shape, 2), stride, 2 * t._offset, _REAL[t.dtype])


def _fill(t: Tensor, kind: Any, sampler: str, generator: Any, fields: tuple) -> Tensor:
    """Draw ``kind`` into every element of ``t``, in memory order."""
    n = math.prod(t._shape)
    if n == 0:
        return t
    found = _generator(generator, t)
    if t.is_contiguous() or _dense(t):
        draw_plan(kind, sampler, t.dtype, n, t.device)(found, t.data_ptr(), *fields)
        return t
    if has_internal_overlap(t):
        raise RuntimeError(_OVERLAP)
    order = _memory_order(t)
    dense = Tensor._empty(tuple(t._shape[d] for d in order), t.dtype, t.device)
    draw_plan(kind, sampler, t.dtype, n, t.device)(found, dense.data_ptr(), *fields)
    t.permute(*order).copy_(dense)
    return t


def _arranged(src: Tensor, like: Tensor, dt: dtype) -> Tensor:
    """``src`` (of ``like``'s shape) as ``dt`` laid out in memory as dense ``like``, so
    that element i of one's memory goes with element i of the other's."""
    out = new_tensor(like._shape, like._stride, dt, like.device, like.numel() * dt.itemsize)
    out.copy_(src)
    return out


# ---- uniform -----------------------------------------------------------------------------
@lru_cache(maxsize=256)
def _uniform_fields(dt: dtype, low: float, high: float) -> tuple[float, float, float]:
    """(low, high - low, high) as the kernel takes them, after PyTorch's checks."""
    lowest, highest = _limits(dt)
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
            f"uniform_ expects to-from <= std::numeric_limits<{_TORCH_NAMES[dt.name]}>::max(), "
            f"but found to={_g(high)} and from={_g(low)} which result in to-from to exceed the "
            "limit"
        )
    cast = dt.np.type
    lo, hi = (cast(np.float32(v)) if dt.itemsize == 2 else cast(v) for v in (low, high))
    return float(lo), float(hi - lo), float(hi)


def uniform_(t: Tensor, *args: Any, generator: Generator | None = None, **kwargs: Any) -> Tensor:
    """Fill ``t`` with numbers uniform in [from, to): ``t.uniform_(from=0, to=1)``."""
    low, high = _from_to_args("uniform_", args, kwargs, 0.0, 1.0)
    low, high = _real(low, "from"), _real(high, "to")
    if t.dtype not in _FLOATING:
        if t.dtype.is_complex:
            return _real_view_then(t, lambda r: uniform_(r, low, high, generator=generator))
        raise _not_implemented("check_uniform_bounds", t.dtype)
    fields = _uniform_fields(t.dtype, low, high)
    sampler = "uniform64" if t.dtype is float64 else "uniform32"
    return _fill(t, UNIFORM, sampler, generator, fields)


def _from_to_args(op: str, args: tuple, kwargs: dict, low: Any, high: Any) -> tuple[Any, Any]:
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


def _real_view_then(t: Tensor, fill: Callable[[Tensor], Any]) -> Tensor:
    fill(_as_real(t))
    return t


def rand(
    *size: Any,
    generator: Generator | None = None,
    out: Tensor | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """A tensor of numbers uniform in [0, 1) (torch.rand): the default float dtype."""
    t = _new(as_shape(size), dtype, device, out, get_default_dtype())
    return uniform_(t, 0.0, 1.0, generator=generator)


def rand_like(
    input: Tensor,  # noqa: A002 - torch's name
    *,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """``rand`` shaped as ``input`` (its dtype and device unless given)."""
    return uniform_(_like(input, dtype, device), 0.0, 1.0, generator=generator)


# ---- normal ------------------------------------------------------------------------------
@lru_cache(maxsize=256)
def _normal_fields(dt: dtype, mean: float, std: float) -> tuple[float, float]:
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {_g(std)}")
    acc = np.float64 if dt is float64 else np.float32
    return float(acc(mean)), float(acc(std))


def normal_(
    t: Tensor,
    mean: Any = 0.0,
    std: Any = 1.0,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """Fill ``t`` with normal numbers (Box-Muller, as PyTorch's CUDA kernel)."""
    mean, std = _real(mean, "mean"), _real(std, "std")
    if t.dtype not in _FLOATING:
        if not t.dtype.is_complex:
            raise _not_implemented("normal_kernel_cuda", t.dtype)
        fields = _normal_fields(_REAL[t.dtype], mean, std)  # each part: std / sqrt(2)
        return _real_view_then(
            t, lambda r: normal_(r, mean, fields[1] / math.sqrt(2), generator=generator)
        )
    fields = _normal_fields(t.dtype, mean, std)
    sampler = "normal64" if t.dtype is float64 else "normal32"
    return _fill(t, NORMAL, sampler, generator, fields)


def randn(
    *size: Any,
    generator: Generator | None = None,
    out: Tensor | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """A tensor of standard normal numbers (torch.randn): the default float dtype."""
    t = _new(as_shape(size), dtype, device, out, get_default_dtype())
    return normal_(t, 0.0, 1.0, generator=generator)


def randn_like(
    input: Tensor,  # noqa: A002 - torch's name
    *,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """``randn`` shaped as ``input`` (its dtype and device unless given)."""
    return normal_(_like(input, dtype, device), 0.0, 1.0, generator=generator)


def normal(
    mean: Any,
    std: Any = 1.0,
    size: Any = None,
    *,
    generator: Generator | None = None,
    out: Tensor | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """torch.normal: ``normal(mean, std, size)`` of numbers; of tensors (broadcast
    together), ``normal(mean, std)`` draws standard normals, then ``* std + mean``.

    With a ``std`` tensor this checks that no element is negative, which synchronizes (as
    PyTorch's does)."""
    tensors = isinstance(mean, Tensor), isinstance(std, Tensor)
    if not any(tensors):
        if size is None:
            raise TypeError("normal(): with a number mean and std, 'size' is required")
        shape = as_shape(size if isinstance(size, (tuple, list)) else (size,))
        t = _new(shape, dtype, device, out, get_default_dtype())
        return normal_(t, mean, std, generator=generator)
    if size is not None or dtype is not None or device is not None:
        raise TypeError("normal(): size, dtype and device go with a number mean and std only")
    if tensors[1]:
        if std.numel() and bool((std.numpy() < 0).any()):
            raise RuntimeError("normal expects all elements of std >= 0.0")
    else:
        _normal_fields(mean.dtype if mean.dtype.is_floating_point else float32, 0.0, float(std))
    first = mean if tensors[0] else std
    shape = np.broadcast_shapes(*(v.shape for v in (mean, std) if isinstance(v, Tensor)))
    t = _new(tuple(shape), first.dtype, None, out, first.dtype)
    if tensors[1]:
        normal_(t, 0.0, 1.0, generator=generator).mul_(std)
    else:
        normal_(t, 0.0, std, generator=generator)
    return t.add_(mean)


# ---- integers ----------------------------------------------------------------------------
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
        low = plus + (1 << (n - _DIGITS[dt] + 1))
    return low


def _update_to(dt: dtype, high: int) -> int:
    """PyTorch's update_to: the largest ``high`` that ``dt`` holds exactly."""
    minus = _cast_int(dt, high - 1)
    if minus >= high:
        n = abs(high - 1).bit_length() - 1
        high = minus - (1 << (n - _DIGITS[dt] + 1))
    return high


def _check_range(low: int, high_inclusive: int, dt: dtype) -> None:
    """PyTorch's check_from_to_in_range."""
    if dt.is_floating_point:
        lowest, highest = _limits(dt)
        digits = _DIGITS[dt]
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


def _random_range(dt: dtype, low: Any, high: Any) -> tuple[str, int, int]:
    """(sampler, span, low) of ``random_(low, high)``; ``high`` None: up to ``dt``'s
    largest value (PyTorch's random_from_to_impl)."""
    if dt.is_complex:
        raise RuntimeError(
            "check_random_bounds handles only integral, floating-point and boolean types"
        )
    low = _int(low, "from", "random_")
    if not _INT64_MIN <= low <= _INT64_MAX:
        raise RuntimeError(f"from: {low} does not fit in int64")
    if high is not None:
        high = _int(high, "to", "random_")
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
        top = min(1 << _DIGITS[dt], _INT64_MAX)
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


def _random_bits(dt: dtype) -> tuple[str, int]:
    """(sampler, span) of ``random_()``: PyTorch's uniform_int over [0, a dtype's range]."""
    if dt.is_complex:
        raise _not_implemented("random_kernel_cuda", dt)
    if dt is bool_:
        return "bits32", 2
    if dt.is_floating_point:
        return ("bits64" if dt is float64 else "bits32"), (1 << _DIGITS[dt]) + 1
    span = int(np.iinfo(dt.np).max) + 1
    return ("bits64" if dt is int64 else "bits32"), span


def random_(t: Tensor, *args: Any, generator: Generator | None = None, **kwargs: Any) -> Tensor:
    """``t.random_()``, ``t.random_(to)``, ``t.random_(from, to)`` (``to`` None: up to
    the dtype's largest value): integers uniform in the range, as PyTorch's."""
    if not args and not kwargs:
        sampler, span = _random_bits(t.dtype)
        return _fill(t, FROM_TO, sampler, generator, (span, 0))
    if len(args) == 1 and not kwargs:
        low, high = 0, args[0]
        if high is None:
            raise TypeError("random_(): 'to' must be an int when it is the only argument")
    else:
        low, high = _from_to_args("random_", args, kwargs, 0, None)
    sampler, span, low = _random_range(t.dtype, low, high)
    return _fill(t, FROM_TO, sampler, generator, (span, low))


def _randint_args(op: str, args: tuple, given: dict) -> dict:
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


def randint(
    *args: Any,
    low: Any = None,
    high: Any = None,
    size: Any = None,
    generator: Generator | None = None,
    out: Tensor | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """Integers uniform in [low, high) (torch.randint): ``randint(high, size)`` or
    ``randint(low, high, size)``; int64 unless ``dtype`` says otherwise."""
    given = _randint_args("randint", args, {"low": low, "high": high, "size": size})
    if not isinstance(given["size"], (tuple, list)):
        raise TypeError(
            f"randint(): argument 'size' must be tuple of ints, not {type(given['size']).__name__}"
        )
    low, high = _int(given["low"], "low", "randint"), _int(given["high"], "high", "randint")
    t = _new(as_shape(tuple(given["size"])), dtype, device, out, int64)
    return random_(t, low, high, generator=generator)


def randint_like(
    input: Tensor,  # noqa: A002 - torch's name
    *args: Any,
    low: Any = None,
    high: Any = None,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """``randint`` shaped as ``input``: ``randint_like(input, high)`` or
    ``randint_like(input, low, high)`` (``input``'s dtype and device unless given)."""
    given = _randint_args("randint_like", args, {"low": low, "high": high})
    low = _int(given["low"], "low", "randint_like")
    high = _int(given["high"], "high", "randint_like")
    return random_(_like(input, dtype, device), low, high, generator=generator)


_RANDPERM_LIMITS = {  # largest n a floating dtype takes: its message names it as PyTorch's
    float16: (2049, "2049 for Half"),
    bfloat16: (257, "257 for BFloat16"),
    float32: ((1 << 24) + 1, "2^24+1 for Float"),
    float64: ((1 << 53) + 1, "2^53+1 for Double"),
}
_C_NAMES = {"uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int"}


def randperm(
    n: Any,
    *,
    generator: Generator | None = None,
    out: Tensor | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """A random permutation of 0 .. n-1 (torch.randperm), int64 unless ``dtype`` says
    otherwise. One kernel: each element walks a Feistel bijection to its value (Note
    [randperm] in kernels/random.cu), so no sort; PyTorch's CUDA randperm sorts random
    keys, so the permutations differ from PyTorch's for the same seed."""
    n = _int(n, "n", "randperm")
    if n < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {n}: [{n}]")
    t = _new((n,), dtype, device, out, int64)
    dt = t.dtype
    if dt is bool_ or dt.is_complex:
        raise _not_implemented("randperm", dt)
    if dt.is_floating_point:
        limit, text = _RANDPERM_LIMITS[dt]
        if n > limit:
            raise RuntimeError(f"n cannot be greater than {text} type.")
    elif dt is not int64 and n - 1 > int(np.iinfo(dt.np).max):
        raise RuntimeError(
            f"value cannot be converted to type {_C_NAMES[dt.name]} without overflow"
        )
    if n:
        randperm_plan(dt, n, t.device)(_generator(generator, t), t.data_ptr())
    return t


# ---- Bernoulli ---------------------------------------------------------------------------
def _expanded(p: Tensor, shape: tuple[int, ...]) -> Tensor:
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


def bernoulli_(t: Tensor, p: Any = 0.5, *, generator: Generator | None = None) -> Tensor:
    """Fill ``t`` with 1 (probability ``p``) or 0; ``p`` a number or a tensor of
    probabilities broadcast to ``t`` (values outside [0, 1] are not checked on the device:
    below 0 they never draw 1, above 1 always)."""
    if t.dtype.is_complex:
        raise _not_implemented("bernoulli_scalar_cuda_", t.dtype)
    sampler = "uniform64" if t.dtype is float64 else "uniform32"
    acc = float64 if t.dtype is float64 else float32
    if not isinstance(p, Tensor):
        p = _real(p, "p")
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={_g(p)}")
        return _fill(t, BERNOULLI, sampler, generator, (float(acc.np.type(p)),))
    if not p.dtype.is_floating_point:
        raise RuntimeError(
            f"expected probabilities tensor to have floating type, got {_TORCH_NAMES[p.dtype.name]}"
        )
    n = t.numel()
    if n == 0:
        return t
    if p.device != t.device:
        p = p.to(t.device)
    p = _expanded(p, t._shape)
    found = _generator(generator, t)
    if _dense(t):
        target, order = t, None
    else:
        if has_internal_overlap(t):
            raise RuntimeError(_OVERLAP)
        order = _memory_order(t)
        target = Tensor._empty(tuple(t._shape[d] for d in order), t.dtype, t.device)
        p = p.permute(*order)
    probabilities = _arranged(p, target, acc)
    plan = draw_plan(BERNOULLI_TENSOR, sampler, t.dtype, n, t.device)
    plan(found, target.data_ptr(), probabilities.data_ptr())
    if order is not None:
        t.permute(*order).copy_(target)
    return t


def bernoulli(
    input: Tensor,  # noqa: A002 - torch's name
    p: Any = None,
    *,
    generator: Generator | None = None,
    out: Tensor | None = None,
) -> Tensor:
    """torch.bernoulli: 1 with the probability in each element of ``input`` (a floating
    tensor), else 0, in ``input``'s dtype; with ``p``, every element's probability is
    ``p``."""
    input = _tensor(input, "input")
    t = (
        _like(input, None, None)
        if out is None
        else _new(input._shape, None, None, out, input.dtype)
    )
    return bernoulli_(t, input if p is None else p, generator=generator)


def native_dropout(
    input: Tensor,  # noqa: A002 - torch's name
    p: float,
    generator: Generator | None,
    inplace: bool,
) -> Tensor:
    """Dropout's kernel for 0 < p < 1: each element kept with probability 1 - p and scaled
    by 1 / (1 - p), else zeroed (``input * mask * scale``: a NaN stays NaN), into a new
    tensor laid out as ``input`` (into ``input`` itself when ``inplace``)."""
    acc = np.float64 if input.dtype is float64 else np.float32
    keep = acc(1.0 - p)
    scale = acc(1.0 / float(keep))
    x = input if _dense(input) else input.contiguous()
    out = x if inplace else _like(x, None, None)
    plan = draw_plan(DROPOUT, "uniform32", x.dtype, x.numel(), x.device)
    plan(_generator(generator, x), out.data_ptr(), x.data_ptr(), float(keep), float(scale))
    if inplace and out is not input:
        input.copy_(out)
        return input
    return out


FUNCTIONS: dict[str, Any] = {
    "rand": rand,
    "randn": randn,
    "randint": randint,
    "randperm": randperm,
    "rand_like": rand_like,
    "randn_like": randn_like,
    "randint_like": randint_like,
    "normal": normal,
    "bernoulli": bernoulli,
}

# Tensor methods reach these through the tensor layer's dispatch table.
dispatch.update(
    normal_=normal_,
    uniform_=uniform_,
    random_=random_,
    bernoulli_=bernoulli_,
    bernoulli=lambda t, p=None, *, generator=None: bernoulli(t, p, generator=generator),
)
