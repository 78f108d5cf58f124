"""index_select, gather, scatter, scatter_add and masked_fill with torch's names, arguments
and errors (the reading and writing through index tensors of vram/ops/_gather.py).

- Index values are checked by the kernels (see vram/ops/_gather.py): PyTorch's CPU error at
  once on the cpu device, at the next synchronization on sim, a device-side assert on a GPU.
- scatter with repeated indices: one of the values wins (which one is not defined on a GPU,
  as in PyTorch); ``scatter_add`` and ``reduce=`` add (or multiply) atomically, in no fixed
  order.
- masked_fill is ``where(mask, value, input)`` through the pointwise engine.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .._dtypes import bool_, complex128, dtype, int32, int64
from .._tensor import Tensor, contiguous_strides, dispatch
from .._views import wrap_dim
from ._args import cached, check_no_overlap, require_tensor, same_device, signature
from ._gather import ADD, ASSIGN, MULTIPLY, GatherPlan, Geometry, ScatterPlan
from ._iterator import broadcast_shape, has_internal_overlap
from ._math import WHERE, fill_
from ._plans import new_tensor
from ._pointwise import run

__all__ = [
    "index_select",
    "gather",
    "scatter",
    "scatter_",
    "scatter_add",
    "scatter_add_",
    "masked_fill",
    "masked_fill_",
    "scalar_of",
    "value_tensor",
]

_INDEX_DTYPES = (int32, int64)
OUT_OF_BOUNDS = "index {value} is out of bounds for dimension {dim} with size {size}"
_MODES = {None: ASSIGN, "add": ADD, "multiply": MULTIPLY}
_C_NAMES = {  # dtypes as PyTorch's C++ messages spell them
    "bool": "bool",
    "uint8": "unsigned char",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int",
    "int64": "long int",
    "float16": "c10::Half",
    "bfloat16": "c10::BFloat16",
    "float32": "float",
    "float64": "double",
    "complex64": "c10::complex<float>",
    "complex128": "c10::complex<double>",
}


def _without(strides: tuple[int, ...], d: int) -> tuple[int, ...]:
    """``strides`` with dimension ``d``'s set to 0 (the dimension an index takes)."""
    return strides[:d] + (0,) + strides[d + 1 :]


# ---- index_select and gather ------------------------------------------------------------------


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:  # noqa: A002
    """torch.index_select: the slices of ``input`` at ``index`` (int32 or int64, at most 1-D)
    along ``dim``, in a new tensor."""
    return _through("index_select", _index_select_plan, input, dim, index)


def _through(name: str, build: Any, input: Tensor, dim: int, index: Tensor) -> Tensor:  # noqa: A002
    """Run the gather plan ``build`` makes for ``input`` and ``index`` along ``dim``."""
    require_tensor(name, "input", input)
    require_tensor(name, "index", index)
    plan = cached((name, signature(input), dim, signature(index)), build, input, dim, index)
    return plan(input, (index,))


def _index_select_plan(input: Tensor, dim: int, index: Tensor) -> Any:  # noqa: A002
    if index.dtype not in _INDEX_DTYPES:
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    same_device(input, index)
    d = wrap_dim(dim, input.ndim)
    count = index.numel()
    if input.ndim == 0:
        if count != 1:
            raise RuntimeError(
                f"index_select(): Index to scalar can have only 1 value, got {count} value(s)"
            )
        shape, base, size, stride = (), (), 1, 0
        index_strides: tuple[int, ...] = ()
    else:
        shape = input._shape[:d] + (count,) + input._shape[d + 1 :]
        base = _without(input._stride, d)
        size, stride = input._shape[d], input._stride[d]
        along = index._stride[0] if index.ndim else 0
        index_strides = tuple(along if k == d else 0 for k in range(input.ndim))
    geometry = Geometry(
        shape, base, (size,), (stride,), (d,), False, IndexError, "index out of range in self"
    )
    return GatherPlan("index_select", input, geometry, [(index.dtype, index_strides)])


def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:  # noqa: A002
    """torch.gather: ``out[i][j][k] = input[index[i][j][k]][j][k]`` (for dim 0); the result
    has ``index``'s shape."""
    return _through("gather", _gather_plan, input, dim, index)


def _gather_plan(input: Tensor, dim: int, index: Tensor) -> Any:  # noqa: A002
    if index.dtype not in _INDEX_DTYPES:
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    same_device(input, index)
    d = wrap_dim(dim, input.ndim)
    if max(index.ndim, 1) != max(input.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for k in range(index.ndim):
        if k != d and index._shape[k] > input._shape[k]:
            raise RuntimeError(
                f"Size does not match at dimension {k} expected index {list(index._shape)} to "
                f"be no larger than self {list(input._shape)} apart from dimension {d}"
            )
    geometry = _along(input, d, index._shape, RuntimeError)
    return GatherPlan("gather", input, geometry, [(index.dtype, index._stride)])


def _along(t: Tensor, d: int, shape: tuple[int, ...], error: type[Exception]) -> Geometry:
    """Reaching ``t`` through one index along ``d`` at each position of ``shape`` (gather,
    scatter: the other dimensions at the position's own indices)."""
    if t.ndim == 0:
        return Geometry(shape, (0,) * len(shape), (1,), (0,), (d,), False, error, OUT_OF_BOUNDS)
    base = _without(t._stride, d) if shape else ()
    return Geometry(shape, base, (t._shape[d],), (t._stride[d],), (d,), False, error, OUT_OF_BOUNDS)


# ---- scatter -----------------------------------------------------------------------------------


def scatter_(
    input: Tensor,  # noqa: A002
    dim: int,
    index: Tensor,
    src: Any = None,
    value: Any = None,
    *,
    reduce: str | None = None,
) -> Tensor:
    """Tensor.scatter_: ``input[index[i][j]][j] = src[i][j]`` (for dim 0), or ``value``;
    ``reduce="add"`` or ``"multiply"`` combines instead of writing. In place."""
    return _scatter("scatter", input, dim, index, src, value, reduce, inplace=True)


def scatter(
    input: Tensor,  # noqa: A002
    dim: int,
    index: Tensor,
    src: Any = None,
    value: Any = None,
    *,
    reduce: str | None = None,
) -> Tensor:
    """torch.scatter: ``scatter_`` into a copy of ``input``."""
    return _scatter("scatter", input, dim, index, src, value, reduce, inplace=False)


def scatter_add_(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:  # noqa: A002
    """Tensor.scatter_add_: ``input[index[i][j]][j] += src[i][j]`` (for dim 0), atomically.
    In place."""
    require_tensor("scatter_add", "src", src)
    return _scatter("scatter_add", input, dim, index, src, None, "add", inplace=True)


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:  # noqa: A002
    """torch.scatter_add: ``scatter_add_`` into a copy of ``input``."""
    require_tensor("scatter_add", "src", src)
    return _scatter("scatter_add", input, dim, index, src, None, "add", inplace=False)


def _scatter(
    name: str,
    input: Tensor,  # noqa: A002
    dim: int,
    index: Tensor,
    src: Any,
    value: Any,
    reduce: Any,
    inplace: bool,
) -> Tensor:
    """Every check first (nothing is queued for a call that fails), then the copy of
    ``input`` when not ``inplace``, then the launch."""
    require_tensor(name, "input", input)
    require_tensor(name, "index", index)
    if reduce not in _MODES:
        raise RuntimeError("reduce argument must be either add or multiply.")
    mode = _MODES[reduce]
    if src is not None and value is not None:
        raise TypeError(f"{name}(): give 'src' or 'value', not both")
    src = value if src is None else src
    if src is None:
        raise TypeError(f"{name}(): missing the 'src' tensor or the 'value' number")
    if isinstance(src, Tensor):
        _scatter_checks(name, mode, input, dim, index, src)
    elif isinstance(src, (numbers.Number, np.generic)):
        _scatter_checks(name, mode, input, dim, index, None)
        src = value_tensor(scalar_of(src, input.dtype), input)
    else:
        raise TypeError(f"{name}(): argument 'value' must be a number, not {type(src).__name__}")
    if not inplace:
        input = input.clone()  # noqa: A001
    key = (name, mode, signature(input), dim, signature(index), signature(src))
    plan = cached(key, _scatter_plan, name, mode, input, dim, index, src)
    check_no_overlap(input, index, src)
    plan(input, src, (index,))
    return input


def _scatter_checks(
    name: str,
    mode: int,
    input: Tensor,  # noqa: A002
    dim: int,
    index: Tensor,
    src: Tensor | None,
) -> int:
    """PyTorch's checks of a scatter (``src`` None for a value); the dimension, wrapped."""
    if index.dtype not in _INDEX_DTYPES:
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if src is not None and src.dtype is not input.dtype:
        raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    same_device(input, index, *((src,) if src is not None else ()))
    d = wrap_dim(dim, input.ndim)
    if max(index.ndim, 1) != max(input.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if src is not None and max(index.ndim, 1) != max(src.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    for k in range(index.ndim):
        too_big = k != d and index._shape[k] > input._shape[k]
        if src is None and too_big:
            raise RuntimeError(
                f"Expected index {list(index._shape)} to be no larger than self "
                f"{list(input._shape)} apart from dimension {d}"
            )
        if src is not None and (too_big or index._shape[k] > _size(src, k)):
            raise RuntimeError(
                f"Expected index {list(index._shape)} to be no larger than self "
                f"{list(input._shape)} apart from dimension {d} and to be no larger size than "
                f"src {list(src._shape)}"
            )
    if has_internal_overlap(input):
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location. Please clone() the tensor before performing the operation."
        )
    if mode == MULTIPLY and input.dtype is complex128:
        raise NotImplementedError(f"{name}(): reduce='multiply' is not supported for complex128")
    return d


def _size(t: Tensor, k: int) -> int:
    """``t``'s size along ``k``, a 0-dim tensor's being 1 (PyTorch's ensure_nonempty_size)."""
    return t._shape[k] if t.ndim else 1


def _scatter_plan(
    name: str,
    mode: int,
    input: Tensor,  # noqa: A002
    dim: int,
    index: Tensor,
    src: Tensor,
) -> ScatterPlan:
    """The plan of a checked scatter; a 0-dim ``src`` (a value) is read at every position."""
    d = wrap_dim(dim, input.ndim)
    geometry = _along(input, d, index._shape, RuntimeError)
    src_strides = src._stride if src.ndim else (0,) * index.ndim
    return ScatterPlan(
        name,
        mode,
        input,
        geometry,
        (src.dtype, src_strides[: index.ndim]),
        [(index.dtype, index._stride)],
    )


def value_tensor(value: Any, like: Tensor) -> Tensor:
    """A 0-dim tensor of ``like``'s dtype and device holding ``value``."""
    t = new_tensor((), (), like.dtype, like.device, like.dtype.itemsize)
    return fill_(t, value)


# ---- masked_fill -------------------------------------------------------------------------------


def masked_fill_(input: Tensor, mask: Tensor, value: Any) -> Tensor:  # noqa: A002
    """Tensor.masked_fill_: ``value`` (a number or a 0-dim tensor) where ``mask`` (broadcast
    to ``input``'s shape) is True. In place; no synchronization."""
    operand = _masked_fill_checks(input, mask, value)
    return run(WHERE, (mask, operand, input), out=input)


def masked_fill(input: Tensor, mask: Tensor, value: Any) -> Tensor:  # noqa: A002
    """torch.masked_fill: ``input`` with ``value`` where ``mask`` is True; the shape is the
    broadcast of ``input``'s and ``mask``'s, the dtype ``input``'s."""
    operand = _masked_fill_checks(input, mask, value)
    shape = broadcast_shape([input._shape, mask._shape])
    out = new_tensor(
        shape, contiguous_strides(shape), input.dtype, input.device, _nbytes(shape, input.dtype)
    )
    return run(WHERE, (mask, operand, input), out=out)


def _nbytes(shape: tuple[int, ...], dt: dtype) -> int:
    return math.prod(shape) * dt.itemsize


def _masked_fill_checks(input: Tensor, mask: Tensor, value: Any) -> Any:  # noqa: A002
    """The checks PyTorch makes; the value as ``where`` takes it (a number of the kind of
    ``input``'s dtype, or a 0-dim tensor of that dtype)."""
    require_tensor("masked_fill_", "input", input)
    require_tensor("masked_fill_", "mask", mask)
    if mask.dtype is not bool_:
        raise RuntimeError(
            "masked_fill_ only supports boolean masks, but got mask with dtype "
            f"{_C_NAMES[mask.dtype.name]}"
        )
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError(
                "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                f"{value.ndim} dimension(s)."
            )
        if value.device != input.device and value.device.type != "cpu":
            same_device(input, value)
        return value if value.dtype is input.dtype else value.to(input.dtype)
    return scalar_of(value, input.dtype)


def scalar_of(value: Any, dt: dtype) -> Any:
    """A number as a value of dtype ``dt`` takes it (PyTorch's Scalar.to<T>: truncation toward
    zero for integers); RuntimeError when it cannot be converted without overflow."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, numbers.Number):
        raise TypeError(f"value: expected a number, got {type(value).__name__}")
    overflow = RuntimeError(
        f"value cannot be converted to type {_C_NAMES[dt.name]} without overflow"
    )
    if dt is bool_:
        return bool(value)
    if dt.is_complex:
        return complex(value)
    if isinstance(value, complex):
        if value.imag:
            raise overflow
        value = value.real
    if dt.is_floating_point:
        value = float(value)
        top = 3.3895313892515355e38 if dt.name == "bfloat16" else float(np.finfo(dt.np).max)
        if math.isfinite(value) and abs(value) > top:
            raise overflow
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise overflow
    number = int(value)
    info = np.iinfo(dt.np)
    if not info.min <= number <= info.max:
        raise overflow
    return number


dispatch.update(
    index_select=index_select,
    gather=gather,
    scatter=scatter,
    scatter_=scatter_,
    scatter_add=scatter_add,
    scatter_add_=scatter_add_,
    masked_fill=masked_fill,
    masked_fill_=masked_fill_,
)
