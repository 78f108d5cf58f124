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
from collections.abc import Callable
from typing import Any

import numpy as np

from ..._device import Device, as_device, current_device_obj
from ..._dtypes import as_dtype, complex64, complex128, dtype, float32, float64, int64
from ..._tensor import Tensor, as_shape, dispatch
from .._iterator import has_internal_overlap
from .._plans import new_tensor
from .._promotion import get_default_dtype
from ._checks import (
    DIGITS,
    expanded,
    from_to_args,
    int_arg,
    normal_fields,
    not_implemented,
    probabilities,
    probability,
    randint_args,
    random_bits,
    random_range,
    randperm_fits,
    real_arg,
    uniform_fields,
)
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
    "fused_dropout",
]

_FLOATING = frozenset(DIGITS)
_REAL = {complex64: float32, complex128: float64}
_OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)


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
def uniform_(t: Tensor, *args: Any, generator: Generator | None = None, **kwargs: Any) -> Tensor:
    """Fill ``t`` with numbers uniform in [from, to): ``t.uniform_(from=0, to=1)``."""
    low, high = from_to_args("uniform_", args, kwargs, 0.0, 1.0)
    low, high = real_arg(low, "from"), real_arg(high, "to")
    if t.dtype not in _FLOATING:
        if t.dtype.is_complex:
            return _real_view_then(t, lambda r: uniform_(r, low, high, generator=generator))
        raise not_implemented("check_uniform_bounds", t.dtype)
    fields = uniform_fields(t.dtype, low, high)
    sampler = "uniform64" if t.dtype is float64 else "uniform32"
    return _fill(t, UNIFORM, sampler, generator, fields)


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
def normal_(
    t: Tensor,
    mean: Any = 0.0,
    std: Any = 1.0,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """Fill ``t`` with normal numbers (Box-Muller, as PyTorch's CUDA kernel)."""
    mean, std = real_arg(mean, "mean"), real_arg(std, "std")
    if t.dtype not in _FLOATING:
        if not t.dtype.is_complex:
            raise not_implemented("normal_kernel_cuda", t.dtype)
        fields = normal_fields(_REAL[t.dtype], mean, std)  # each part: std / sqrt(2)
        return _real_view_then(
            t, lambda r: normal_(r, mean, fields[1] / math.sqrt(2), generator=generator)
        )
    fields = normal_fields(t.dtype, mean, std)
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
    key = None
    if (
        generator is None
        and out is None
        and dtype is None
        and (device is None or type(device) is Device)
        and {*map(type, size)} <= _INTS
    ):  # the common call: a plan remembered (Note [randn's common call])
        where = current_device_obj() if device is None else device
        key = (size, where, get_default_dtype())
        kept = _randn_kept.get(key)
        if kept is not None:
            shape, stride, dt, nbytes, plan, fields = kept
            t = new_tensor(shape, stride, dt, where, nbytes)
            plan(default_generator(where), t._storage.ptr, *fields)
            return t
    t = _new(as_shape(size), dtype, device, out, get_default_dtype())
    normal_(t, 0.0, 1.0, generator=generator)
    n = math.prod(t._shape)
    if key is not None and n and t.device == where and t.is_contiguous():
        if len(_randn_kept) >= _MAX_KEPT:
            _randn_kept.clear()
        sampler = "normal64" if t.dtype is float64 else "normal32"
        plan = draw_plan(NORMAL, sampler, t.dtype, n, where)
        fields = normal_fields(t.dtype, 0.0, 1.0)
        _randn_kept[key] = (t._shape, t._stride, t.dtype, n * t.dtype.itemsize, plan, fields)
    return t


# Note [randn's common call]
# ``randn(*ints)`` with no generator, out or dtype, on the current device or a Device, is
# what models call every step. Its answer follows from the sizes, the device and the
# default dtype alone, so the general path's result (the shape, strides and bytes of a new
# contiguous tensor, its draw plan and the normal's fields) is kept under those: the next
# such call is one lookup, a new tensor and the draw, which takes the default generator's
# offset as the general path does. Sizes of any other type (bool and float compare equal
# to ints) are not keys. Bounded; cleared when full.
_randn_kept: dict[tuple, tuple] = {}
_MAX_KEPT = 1024
_INTS = frozenset((int,))


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
        normal_fields(mean.dtype if mean.dtype.is_floating_point else float32, 0.0, float(std))
    first = mean if tensors[0] else std
    shape = np.broadcast_shapes(*(v.shape for v in (mean, std) if isinstance(v, Tensor)))
    t = _new(tuple(shape), first.dtype, None, out, first.dtype)
    if tensors[1]:
        normal_(t, 0.0, 1.0, generator=generator).mul_(std)
    else:
        normal_(t, 0.0, std, generator=generator)
    return t.add_(mean)


# ---- integers ----------------------------------------------------------------------------
def random_(t: Tensor, *args: Any, generator: Generator | None = None, **kwargs: Any) -> Tensor:
    """``t.random_()``, ``t.random_(to)``, ``t.random_(from, to)`` (``to`` None: up to
    the dtype's largest value): integers uniform in the range, as PyTorch's."""
    if not args and not kwargs:
        sampler, span = random_bits(t.dtype)
        return _fill(t, FROM_TO, sampler, generator, (span, 0))
    if len(args) == 1 and not kwargs:
        low, high = 0, args[0]
        if high is None:
            raise TypeError("random_(): 'to' must be an int when it is the only argument")
    else:
        low, high = from_to_args("random_", args, kwargs, 0, None)
    sampler, span, low = random_range(t.dtype, low, high)
    return _fill(t, FROM_TO, sampler, generator, (span, low))


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
    given = randint_args("randint", args, {"low": low, "high": high, "size": size})
    if not isinstance(given["size"], (tuple, list)):
        raise TypeError(
            f"randint(): argument 'size' must be tuple of ints, not {type(given['size']).__name__}"
        )
    low, high = int_arg(given["low"], "low", "randint"), int_arg(given["high"], "high", "randint")
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
    given = randint_args("randint_like", args, {"low": low, "high": high})
    low = int_arg(given["low"], "low", "randint_like")
    high = int_arg(given["high"], "high", "randint_like")
    return random_(_like(input, dtype, device), low, high, generator=generator)


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
    n = int_arg(n, "n", "randperm")
    if n < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {n}: [{n}]")
    t = _new((n,), dtype, device, out, int64)
    randperm_fits(n, t.dtype)
    if n:
        randperm_plan(t.dtype, n, t.device)(_generator(generator, t), t.data_ptr())
    return t


# ---- Bernoulli ---------------------------------------------------------------------------
def bernoulli_(t: Tensor, p: Any = 0.5, *, generator: Generator | None = None) -> Tensor:
    """Fill ``t`` with 1 (probability ``p``) or 0; ``p`` a number or a tensor of
    probabilities broadcast to ``t`` (values outside [0, 1] are not checked on the device:
    below 0 they never draw 1, above 1 always)."""
    if t.dtype.is_complex:
        raise not_implemented("bernoulli_scalar_cuda_", t.dtype)
    sampler = "uniform64" if t.dtype is float64 else "uniform32"
    acc = float64 if t.dtype is float64 else float32
    if not isinstance(p, Tensor):
        fields = (float(acc.np.type(probability(p))),)
        return _fill(t, BERNOULLI, sampler, generator, fields)
    probabilities(p)  # a floating tensor
    n = t.numel()
    if n == 0:
        return t
    if p.device != t.device:
        p = p.to(t.device)
    p = expanded(p, t._shape)
    found = _generator(generator, t)
    if _dense(t):
        target, order = t, None
    else:
        if has_internal_overlap(t):
            raise RuntimeError(_OVERLAP)
        order = _memory_order(t)
        target = Tensor._empty(tuple(t._shape[d] for d in order), t.dtype, t.device)
        p = p.permute(*order)
    arranged = _arranged(p, target, acc)
    plan = draw_plan(BERNOULLI_TENSOR, sampler, t.dtype, n, t.device)
    plan(found, target.data_ptr(), arranged.data_ptr())
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


def fused_dropout(
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
