"""Advanced indexing: reading and writing through tensors, arrays and lists in ``t[...]``,
and index_put_ (PyTorch's index and index_put kernels).

- ``t[index]``: the basic items (ints, slices, None, ...) make a view (vram._views); the
  advanced items (integer tensors, boolean masks, lists, arrays) index dimensions of that
  view. A mask becomes its ``nonzero`` columns (a synchronization, as in PyTorch); the index
  tensors broadcast together; their result dimensions go where the first indexed dimension
  was when the indexed dimensions are adjacent, else first (PyTorch's and NumPy's rule).
  A mask over every dimension reads as ``masked_select``.
- ``t[index] = value``: a single mask with a one-element value is ``masked_fill_`` (no
  synchronization); anything else is ``index_put_`` with the value cast to ``t``'s dtype.
- Index values known on the host (lists, arrays, cpu tensors) are checked before anything
  is queued; device index tensors are checked by the kernels (see vram/ops/_gather.py).
- Repeated indices: one of the values wins (which one is not defined on a GPU, as in
  PyTorch); ``accumulate=True`` adds atomically, in no fixed order.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import numpy as np

from .._device import Device
from .._dtypes import bool_, int32, int64, uint8
from .._factories import tensor as _tensor_of
from .._tensor import Tensor, dispatch
from ._args import TORCH_NAMES, cached, check_no_overlap, require_tensor, same_device, signature
from ._gather import ADD, ASSIGN, GatherPlan, Geometry, ScatterPlan
from ._indexing import OUT_OF_BOUNDS, masked_fill_, scalar_of, value_tensor
from ._iterator import broadcast_shape, operand_strides
from ._nonzero import masked_select, nonzero
from ._plans import new_tensor

__all__ = ["getitem", "setitem", "index_put", "index_put_"]

_INDEX_DTYPES = (int32, int64)
_CPU = Device("cpu")


def _index_tensor(item: Any, view: Tensor, pos: int, k: int) -> Tensor:
    """An advanced item as an index tensor on ``view``'s device; host-known integer values
    (lists, arrays, cpu tensors) of the ``k``-th index are checked against ``view``'s size
    at ``pos`` first."""
    host = None
    if isinstance(item, np.ndarray):
        if item.dtype not in (np.bool_, np.uint8, np.int32, np.int64):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        host = item
        item = _tensor_of(item, device=view.device)
    elif item.device != view.device:
        if item.device.type == "cpu" and item.dtype in _INDEX_DTYPES:
            host = item.numpy()
        item = item.to(view.device)
    if item.dtype not in (int32, int64, bool_, uint8):
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    if host is not None and item.dtype in _INDEX_DTYPES and pos < view.ndim:
        size = view._shape[pos]
        values = np.asarray(host).astype(np.int64)
        bad = (values < -size) | (values >= size)
        if bad.any():
            raise IndexError(
                f"index {int(values[bad].flat[0])} is out of bounds for dimension {k} with "
                f"size {size}"
            )
    return item


def _resolve(
    view: Tensor, advanced: list[tuple[int, Any]]
) -> tuple[Tensor, list[tuple[int, Tensor]]]:
    """The view (a dimension added for each 0-dim mask) and its integer index tensors, one
    per indexed dimension; masks become their nonzero columns."""
    found: list[tuple[int, Tensor]] = []
    shift = 0
    for pos, item in advanced:
        pos += shift
        t = _index_tensor(item, view, pos, len(found))
        if t.dtype is uint8:
            warnings.warn(
                "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool "
                "instead.",
                UserWarning,
                stacklevel=4,
            )
        if t.dtype not in (bool_, uint8):
            found.append((pos, t))
            continue
        if t.ndim == 0:  # a 0-dim mask: a new dimension of one element (True) or none
            view = view.unsqueeze(pos)
            count = 1 if t.item() else 0
            found.append((pos, new_tensor((count,), (1,), int64, view.device, 8 * count).zero_()))
            shift += 1
            continue
        _check_mask(t, view, pos)
        columns = nonzero(t)
        found += [(pos + j, columns[:, j]) for j in range(t.ndim)]
    return view, found


def _check_mask(mask: Tensor, view: Tensor, pos: int) -> None:
    for j, n in enumerate(mask._shape):
        if pos + j >= view.ndim or view._shape[pos + j] != n:
            raise IndexError(
                f"The shape of the mask {list(mask._shape)} at index {j} does not match the "
                f"shape of the indexed tensor {list(view._shape)} at index {pos + j}"
            )


def _same_index_dtype(indices: list[tuple[int, Tensor]]) -> list[tuple[int, Tensor]]:
    if all(t.dtype is indices[0][1].dtype for _, t in indices):
        return indices
    return [(d, t if t.dtype is int64 else t.to(int64)) for d, t in indices]


def _geometry(view: Tensor, indices: list[tuple[int, Tensor]]) -> tuple[Geometry, list]:
    """Where ``view[indices]`` reads (PyTorch's index kernel): its geometry, and per index
    tensor its dtype and strides over the result's shape."""
    dims = [d for d, _ in indices]
    tensors = [t for _, t in indices]
    try:
        shape_b = broadcast_shape([t._shape for t in tensors])
    except RuntimeError:
        shapes = ", ".join(str(list(t._shape)) for t in tensors)
        raise IndexError(
            f"shape mismatch: indexing tensors could not be broadcast together with shapes {shapes}"
        ) from None
    kept = [d for d in range(view.ndim) if d not in dims]
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    before = [d for d in kept if d < dims[0]] if adjacent else []
    after = [d for d in kept if d not in before]
    shape = tuple(view._shape[d] for d in before) + shape_b + tuple(view._shape[d] for d in after)
    lead, tail = (0,) * len(before), (0,) * len(after)
    base = (
        tuple(view._stride[d] for d in before)
        + (0,) * len(shape_b)
        + tuple(view._stride[d] for d in after)
    )
    geometry = Geometry(
        shape,
        base,
        tuple(view._shape[d] for d in dims),
        tuple(view._stride[d] for d in dims),
        tuple(range(len(dims))),
        True,
        IndexError,
        OUT_OF_BOUNDS,
    )
    strides = [(t.dtype, lead + operand_strides(t, shape_b) + tail) for t in tensors]
    return geometry, strides


def _index_plan(view: Tensor, indices: list[tuple[int, Tensor]]) -> GatherPlan:
    geometry, strides = _geometry(view, indices)
    return GatherPlan("index", view, geometry, strides)


def _is_full_mask(view: Tensor, advanced: list[tuple[int, Any]]) -> bool:
    if len(advanced) != 1:
        return False
    pos, item = advanced[0]
    return (
        pos == 0
        and isinstance(item, Tensor)
        and item.dtype is bool_
        and item._shape == view._shape
        and item.device == view.device
        and item.ndim > 0
    )


def getitem(view: Tensor, advanced: list[tuple[int, Any]]) -> Tensor:
    """``t[index]`` with advanced items (vram._views.basic_index made ``view``): a copy."""
    if _is_full_mask(view, advanced):
        return masked_select(view, advanced[0][1])
    view, indices = _resolve(view, advanced)
    indices = _same_index_dtype(indices)
    key = ("index", signature(view), tuple((d, signature(t)) for d, t in indices))
    plan = cached(key, _index_plan, view, indices)
    return plan(view, tuple(t for _, t in indices))


def setitem(view: Tensor, advanced: list[tuple[int, Any]], value: Any) -> None:
    """``t[index] = value`` with advanced items: ``masked_fill_`` for one mask and a
    one-element value, else ``index_put_`` of ``value`` cast to ``view``'s dtype."""
    if not advanced:  # a list or array of values into a view
        view.copy_(_values_for(view, value))
        return
    if _fills_through_mask(view, advanced, value):
        pos, mask = advanced[0]
        if not isinstance(mask, Tensor):
            mask = _index_tensor(mask, view, pos, 0)
        _check_mask(mask, view, pos)
        mask = mask.view(mask._shape + (1,) * (view.ndim - pos - mask.ndim))
        if isinstance(value, Tensor):
            value = value.reshape(())
        masked_fill_(view, mask, value)
        return
    values = _values_for(view, value)
    view, indices = _resolve(view, advanced)
    _put(view, _same_index_dtype(indices), values, accumulate=False)


def _fills_through_mask(view: Tensor, advanced: list[tuple[int, Any]], value: Any) -> bool:
    if len(advanced) != 1:
        return False
    item = advanced[0][1]
    is_mask = (isinstance(item, Tensor) and item.dtype is bool_ and item.device == view.device) or (
        isinstance(item, np.ndarray) and item.dtype == np.bool_
    )
    if not is_mask or item.ndim == 0:
        return False
    if isinstance(value, Tensor):
        return value.numel() == 1 and value.device in (view.device, _CPU)
    return isinstance(value, (numbers.Number, np.generic))


def _values_for(view: Tensor, value: Any) -> Tensor:
    """What ``t[index] = value`` writes: a tensor of ``view``'s dtype on its device, leading
    size-1 dimensions dropped (as PyTorch's setitem)."""
    if isinstance(value, Tensor):
        if value.device != view.device or value.dtype is not view.dtype:
            value = value.to(view.device, view.dtype)
    elif isinstance(value, (numbers.Number, np.generic)):
        value = value_tensor(scalar_of(value, view.dtype), view)
    else:
        value = _tensor_of(value, dtype=view.dtype, device=view.device)
    shape = value._shape
    while shape and shape[0] == 1:
        shape = shape[1:]
    return value.view(shape) if shape != value._shape else value


def _put(view: Tensor, indices: list[tuple[int, Tensor]], values: Tensor, accumulate: bool) -> None:
    mode = ADD if accumulate else ASSIGN
    if values._storage is view._storage:
        values = values.clone()
    check_no_overlap(view, *(t for _, t in indices))
    key = (
        "index_put",
        mode,
        signature(view),
        tuple((d, signature(t)) for d, t in indices),
        signature(values),
    )
    plan = cached(key, _put_plan, view, indices, values, mode)
    plan(view, values, tuple(t for _, t in indices))


def _put_plan(
    view: Tensor, indices: list[tuple[int, Tensor]], values: Tensor, mode: int
) -> ScatterPlan:
    geometry, strides = _geometry(view, indices)
    shape = geometry.shape
    try:
        fits = broadcast_shape([values._shape, shape]) == shape
    except RuntimeError:
        fits = False
    if not fits:
        raise RuntimeError(
            f"shape mismatch: value tensor of shape {list(values._shape)} cannot be broadcast to "
            f"indexing result of shape {list(shape)}"
        )
    source = (values.dtype, operand_strides(values, shape))
    return ScatterPlan("index_put", mode, view, geometry, source, strides)


def index_put_(
    input: Tensor,  # noqa: A002
    indices: tuple[Tensor | None, ...],
    values: Tensor,
    accumulate: bool = False,
) -> Tensor:
    """Tensor.index_put_: ``input[indices] = values`` (``+=`` when ``accumulate``, atomically);
    ``indices`` a tuple of index tensors or masks, None for a whole dimension. In place."""
    advanced = _put_arguments("index_put_", input, indices, values)
    return _index_put(input, advanced, values, accumulate)


def index_put(
    input: Tensor,  # noqa: A002
    indices: tuple[Tensor | None, ...],
    values: Tensor,
    accumulate: bool = False,
) -> Tensor:
    """torch.index_put: ``index_put_`` into a copy of ``input``."""
    advanced = _put_arguments("index_put", input, indices, values)
    return _index_put(input.clone(), advanced, values, accumulate)


def _index_put(
    input: Tensor,  # noqa: A002
    advanced: list[tuple[int, Tensor]],
    values: Tensor,
    accumulate: bool,
) -> Tensor:
    if not advanced:
        return input.copy_(values)
    view, found = _resolve(input, advanced)
    _put(view, _same_index_dtype(found), values, accumulate=bool(accumulate))
    return input


def _put_arguments(
    name: str,
    input: Tensor,  # noqa: A002
    indices: Any,
    values: Any,
) -> list[tuple[int, Tensor]]:
    """PyTorch's checks of index_put's arguments; the index tensors with the dimension of
    ``input`` each starts at."""
    require_tensor(name, "input", input)
    require_tensor(name, "values", values)
    if not isinstance(indices, (tuple, list)):
        raise TypeError(
            f"{name}(): argument 'indices' must be a tuple of Tensors, not {type(indices).__name__}"
        )
    if values.dtype is not input.dtype:
        raise RuntimeError(
            "Index put requires the source and destination dtypes match, got "
            f"{TORCH_NAMES[input.dtype.name]} for the destination and "
            f"{TORCH_NAMES[values.dtype.name]} for the source."
        )
    same_device(input, values)
    advanced: list[tuple[int, Tensor]] = []
    pos = 0
    for i, item in enumerate(indices):
        if item is None:
            pos += 1
            continue
        if not isinstance(item, Tensor):
            raise TypeError(
                f"{name}(): expected Tensor or None as element {i} of 'indices', but got "
                f"{type(item).__name__}"
            )
        advanced.append((pos, item))
        pos += item.ndim if item.dtype in (bool_, uint8) else 1
    if pos > input.ndim:
        raise IndexError(f"too many indices for tensor of dimension {input.ndim}")
    return advanced


dispatch.update(
    index_put=index_put,
    index_put_=index_put_,
    __getitem__=getitem,
    __setitem__=setitem,
)
