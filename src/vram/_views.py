"""The arithmetic of views: the shape, strides and offset of a tensor that shares another's
memory (``view``, ``permute``, ``squeeze``, ``expand``, ``narrow``, basic indexing ...), with
PyTorch's rules and error messages. Pure functions of shapes and strides (in elements); the
Tensor methods in ``_tensor.py`` make the views.

Basic indexing (``t[0, 1:3, None, ...]``) is a view. An index that holds tensors, NumPy
arrays or lists (advanced indexing) is split here into the view its basic items make and the
advanced items with the view dimensions they index; the ops layer reads or writes through
them (vram/ops/_indexing.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "wrap_dim",
    "dim_list",
    "infer_shape",
    "unflatten_shape",
    "view_strides",
    "expand_layout",
    "permute_order",
    "squeeze_layout",
    "unsqueeze_layout",
    "movedim_order",
    "narrow_offset",
    "split_sizes",
    "chunk_sizes",
    "int_sequence",
    "Layout",
    "Advanced",
    "basic_index",
    "is_advanced",
]

Layout = tuple[tuple[int, ...], tuple[int, ...], int]  # shape, strides, offset (elements)
Advanced = list[tuple[int, Any]]  # (view dimension, tensor or NumPy array) per advanced item
_SEQUENCE_AS_TUPLE = 32  # PyTorch reads a shorter list holding slices, lists ... as a tuple


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def wrap_dim(dim: Any, ndim: int) -> int:
    """``dim`` in [0, ndim) (PyTorch's maybe_wrap_dim: a 0-dim tensor takes -1 and 0)."""
    top = ndim if ndim > 0 else 1
    if type(dim) is int and -top <= dim < top:  # the common case, cheaply
        return dim + top if dim < 0 else dim
    if not _is_int(dim):
        raise TypeError(f"dim: expected an int, got {dim!r}")
    top = max(ndim, 1)
    if not -top <= dim < top:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-top}, {top - 1}], "
            f"but got {dim})"
        )
    return int(dim) % top


def int_sequence(values: tuple[Any, ...], argument: str) -> tuple[int, ...]:
    """``f(1, 2)``, ``f((1, 2))`` or ``f([1, 2])`` -> (1, 2); TypeError naming ``argument``."""
    if len(values) == 1 and isinstance(values[0], (tuple, list)):
        values = tuple(values[0])
    if all(type(v) is int for v in values):  # the common case, cheaply
        return values
    for v in values:
        if not _is_int(v):
            raise TypeError(f"{argument}: expected a sequence of ints, got {tuple(values)}")
    return tuple(int(v) for v in values)


def dim_list(dims: Any, ndim: int, op: str) -> tuple[int, ...]:
    """An int or a sequence of dims wrapped into [0, ndim); a repeated dim is an error."""
    items = (dims,) if _is_int(dims) else int_sequence((dims,), "dim")
    wrapped = tuple(wrap_dim(d, ndim) for d in items)
    for i, d in enumerate(wrapped):
        if d in wrapped[:i]:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return wrapped


def infer_shape(shape: tuple[Any, ...], numel: int) -> tuple[int, ...]:
    """A view's shape with at most one -1 filled in (PyTorch's infer_size)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    dims = shape if all(type(n) is int for n in shape) else tuple(_as_dim(n, shape) for n in shape)
    inferred = None
    known = 1
    for i, n in enumerate(dims):
        if n >= 0:
            known *= n
        elif n == -1 and inferred is None:
            inferred = i
        elif n == -1:
            raise RuntimeError("only one dimension can be inferred")
        else:
            raise RuntimeError(f"invalid shape dimension {n} at index {i} of shape {list(dims)}")
    if inferred is None:
        if known != numel:
            raise RuntimeError(f"shape '{list(dims)}' is invalid for input of size {numel}")
        return dims
    if known == 0:
        raise RuntimeError(
            f"cannot reshape tensor of {numel} elements into shape {list(dims)} because the "
            "unspecified dimension size -1 can be any value and is ambiguous"
        )
    if numel % known:
        raise RuntimeError(f"shape '{list(dims)}' is invalid for input of size {numel}")
    return dims[:inferred] + (numel // known,) + dims[inferred + 1 :]


def _as_dim(n: Any, shape: tuple[Any, ...]) -> int:
    if not _is_int(n):
        raise TypeError(f"shape: dimensions must be ints, got {tuple(shape)}")
    return int(n)


def unflatten_shape(shape: tuple[int, ...], dim: Any, sizes: Any) -> tuple[int, ...]:
    """The shape ``unflatten(dim, sizes)`` makes: dimension ``dim`` split into ``sizes``."""
    d = wrap_dim(dim, len(shape))
    sizes = int_sequence((sizes,), "sizes")
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    n = shape[d] if shape else 1
    if sizes.count(-1) > 1:
        raise RuntimeError("unflatten: only one dimension can be inferred")
    known = math.prod(s for s in sizes if s != -1)
    fits = n % known == 0 if known and -1 in sizes else known == n
    if not fits or any(s < -1 for s in sizes):
        raise RuntimeError(
            f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim "
            f"{dim} ({n}) in the input tensor"
        )
    return shape[:d] + tuple(n // known if s == -1 else s for s in sizes) + shape[d + 1 :]


def view_strides(
    old_shape: tuple[int, ...], old_stride: tuple[int, ...], new_shape: tuple[int, ...]
) -> tuple[int, ...] | None:
    """Strides that view ``old`` memory as ``new_shape``, or None (PyTorch's computeStride):
    each run of old dimensions that is contiguous in memory can be re-split freely."""
    if math.prod(old_shape) == 0 or not old_shape:
        return old_stride if old_shape == new_shape else _contiguous(new_shape)
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = old_stride[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        chunk_ends = tensor_d == 0 or (
            old_shape[tensor_d - 1] != 1 and old_stride[tensor_d - 1] != tensor_numel * chunk_base
        )
        if chunk_ends:
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_stride[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base = old_stride[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(new_stride) if view_d == -1 else None


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def expand_layout(
    shape: tuple[int, ...], stride: tuple[int, ...], sizes: tuple[Any, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``expand(*sizes)``: -1 keeps a dimension, new ones go in front (stride 0)."""
    sizes = int_sequence(sizes, "size")
    if len(sizes) < len(shape):
        raise RuntimeError(
            f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal to "
            f"the number of dimensions in the tensor ({len(shape)})"
        )
    if sizes == shape:
        return shape, stride
    lead = len(sizes) - len(shape)
    new_shape, new_stride = [], []
    for i, n in enumerate(sizes):
        if i < lead:
            if n < 0:
                raise RuntimeError(
                    f"The expanded size of the tensor ({n}) isn't allowed in a leading, "
                    f"non-existing dimension {i}"
                )
            new_shape.append(n)
            new_stride.append(0)
            continue
        old_n, old_s = shape[i - lead], stride[i - lead]
        if n == -1:
            n = old_n
        if n == old_n:
            new_shape.append(n)
            new_stride.append(old_s)
        elif old_n == 1 and n >= 0:
            new_shape.append(n)
            new_stride.append(0)
        else:
            raise RuntimeError(
                f"The expanded size of the tensor ({n}) must match the existing size ({old_n}) "
                f"at non-singleton dimension {i}.  Target sizes: {list(sizes)}.  Tensor sizes: "
                f"{list(shape)}"
            )
    return tuple(new_shape), tuple(new_stride)


def permute_order(dims: tuple[Any, ...], ndim: int) -> tuple[int, ...]:
    """``permute(*dims)`` as dims in [0, ndim) (PyTorch's checks and messages)."""
    order = int_sequence(dims, "dims")
    if len(order) != ndim:
        raise RuntimeError(
            "permute(): number of dimensions in the tensor input does not match the length of "
            f"the desired ordering of dimensions i.e. input.dim() = {ndim} is not equal to "
            f"len(dims) = {len(order)}"
        )
    wrapped = tuple(wrap_dim(d, ndim) for d in order)
    if len(set(wrapped)) != len(wrapped):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return wrapped


def squeeze_layout(
    shape: tuple[int, ...], stride: tuple[int, ...], dims: Any
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``squeeze(dim)``: drop the size-1 dimensions among ``dims`` (None: all of them)."""
    if dims is None:
        chosen = set(range(len(shape)))
    else:
        chosen = set(dim_list(dims, len(shape), "squeeze"))
    keep = [d for d in range(len(shape)) if not (d in chosen and shape[d] == 1)]
    return tuple(shape[d] for d in keep), tuple(stride[d] for d in keep)


def unsqueeze_layout(
    shape: tuple[int, ...], stride: tuple[int, ...], dim: Any
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``unsqueeze(dim)``: a size-1 dimension at ``dim`` of the result."""
    d = wrap_dim(dim, len(shape) + 1)
    step = shape[d] * stride[d] if d < len(shape) else 1
    return shape[:d] + (1,) + shape[d:], stride[:d] + (step,) + stride[d:]


def movedim_order(source: Any, destination: Any, ndim: int) -> tuple[int, ...]:
    """The permutation ``movedim(source, destination)`` makes."""
    src = (source,) if _is_int(source) else int_sequence((source,), "source")
    dst = (destination,) if _is_int(destination) else int_sequence((destination,), "destination")
    if len(src) != len(dst):
        raise RuntimeError(
            f"movedim: Invalid source or destination dims: source ({list(src)} dims) should "
            f"contain the same number of dims as destination ({list(dst)} dims)"
        )
    src_w = [wrap_dim(d, ndim) for d in src]
    dst_w = [wrap_dim(d, ndim) for d in dst]
    for name, given, wrapped in (("source", src, src_w), ("destination", dst, dst_w)):
        if len(set(wrapped)) != len(wrapped):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({list(given)})")
    order = [-1] * ndim
    for s, d in zip(src_w, dst_w, strict=True):
        order[d] = s
    rest = iter(d for d in range(ndim) if d not in src_w)
    return tuple(next(rest) if o == -1 else o for o in order)


def narrow_offset(size: int, start: Any, length: Any) -> int:
    """The first index ``narrow(dim, start, length)`` keeps along a dimension of ``size``."""
    if not _is_int(start):
        raise TypeError(f"start: expected an int, got {start!r}")
    if not _is_int(length):
        raise TypeError(f"length: expected an int, got {length!r}")
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if not -size <= start <= size:
        raise IndexError(
            f"start out of range (expected to be in range of [{-size}, {size}], but got {start})"
        )
    first = int(start) + size if start < 0 else int(start)
    if first + length > size:
        raise RuntimeError(f"start ({first}) + length ({length}) exceeds dimension size ({size}).")
    return first


def split_sizes(size: int, split_size_or_sections: Any, dim: int = 0) -> list[int]:
    """The sizes of ``split(split_size_or_sections)``'s pieces of dimension ``dim`` (of
    ``size``)."""
    if _is_int(split_size_or_sections):
        step = int(split_size_or_sections)
        if step < 0:
            raise RuntimeError(
                f"split expects split_size be non-negative, but got split_size={step}"
            )
        if step == 0 and size != 0:
            raise RuntimeError(
                f"split_size can only be 0 if dimension size is 0, but got dimension size of {size}"
            )
        if step == 0:
            return [0]
        count = max(-(-size // step), 1)
        return [min(step, size - i * step) for i in range(count)]
    sections = list(int_sequence((split_size_or_sections,), "split_size_or_sections"))
    if any(n < 0 for n in sections):
        raise RuntimeError(
            "split_with_sizes expects split_sizes have only non-negative entries, but got "
            f"split_sizes={sections}"
        )
    if sum(sections) != size:
        raise RuntimeError(
            f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's "
            f"size at dimension {dim}), but got split_sizes={sections}"
        )
    return sections


def chunk_sizes(size: int, chunks: Any) -> list[int]:
    """The sizes of ``chunk(chunks)``'s pieces (PyTorch's: at most ``chunks``, all but the
    last of ceil(size / chunks))."""
    if not _is_int(chunks):
        raise TypeError(f"chunks: expected an int, got {chunks!r}")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    step = -(-size // chunks)
    if step == 0:
        return [0] * int(chunks)
    return split_sizes(size, step)


# ---- indexing ----------------------------------------------------------------------------


def is_advanced(item: Any) -> bool:
    """True for an index item that selects by values: a tensor, a NumPy array, a list."""
    return isinstance(item, (list, np.ndarray)) or hasattr(item, "_storage")


def _as_tuple(index: Any) -> tuple[Any, ...]:
    """The index as PyTorch reads it: a tuple, or a short list holding slices, None, ...,
    tensors or sequences (treated as a tuple), or one item."""
    if isinstance(index, tuple):
        return index
    if isinstance(index, list) and len(index) < _SEQUENCE_AS_TUPLE:
        for item in index:
            if item is None or item is Ellipsis or isinstance(item, (slice, Sequence)):
                return tuple(index)
            if is_advanced(item):
                return tuple(index)
    return (index,)


def _advanced_item(item: Any) -> tuple[Any, int]:
    """An advanced item as a tensor or NumPy array, and how many dimensions it indexes."""
    if isinstance(item, list):
        item = np.asarray(item)
        if item.dtype.kind == "f" and item.size == 0:
            item = item.astype(np.int64)
    if isinstance(item, np.ndarray):
        if item.dtype.kind not in "biu":
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        return item, (item.ndim if item.dtype == np.bool_ else 1)
    byte_mask = item.dtype.name in ("bool", "uint8")
    return item, (item.ndim if byte_mask else 1)


def basic_index(
    shape: tuple[int, ...], stride: tuple[int, ...], offset: int, index: Any
) -> tuple[Layout, Advanced]:
    """The view ``t[index]``'s basic items make (ints, slices with step > 0, None, ...,
    True/False), and the advanced items (tensors, arrays, lists) with the dimension of that
    view each starts at. PyTorch's order: an int selects (its dimension goes), so
    ``t[0, :, idx]`` indexes the view's dimension 1."""
    if type(index) is int and shape:  # t[i], the commonest
        n = shape[0]
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of bounds for dimension 0 with size {n}")
        at = offset + (index + n if index < 0 else index) * stride[0]
        return (shape[1:], stride[1:], at), []
    items = _as_tuple(index)
    prepared: list[tuple[Any, int]] = []  # (item, dimensions of the tensor it consumes)
    for item in items:
        kind = type(item)
        if kind is slice or kind is int:
            prepared.append((item, 1))
        elif item is None or item is Ellipsis or kind is bool or kind is np.bool_:
            prepared.append((item, 0))
        elif _is_int(item):
            prepared.append((item, 1))
        elif is_advanced(item):
            prepared.append(_advanced_item(item))
        else:
            raise TypeError(
                "index: only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                f"tensors are valid indices (got {type(item).__name__})"
            )
    ndim = len(shape)
    used = sum(n for _, n in prepared)
    if used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    out_shape: list[int] = []
    out_stride: list[int] = []
    advanced: Advanced = []
    dim = 0
    ellipsis_seen = False
    for item, consumes in prepared:
        kind = type(item)
        if kind is slice:
            n = shape[dim]
            start, stop, step = _slice(item, n)
            length = len(range(start, stop, step))
            out_shape.append(length)
            out_stride.append(stride[dim] * step)
            offset += start * stride[dim] if length else 0
            dim += 1
        elif kind is int or (consumes == 1 and _is_int(item)):
            n = shape[dim]
            if not -n <= item < n:
                raise IndexError(f"index {item} is out of bounds for dimension {dim} with size {n}")
            offset += (int(item) % n) * stride[dim]
            dim += 1
        elif item is Ellipsis:
            skip = 0 if ellipsis_seen else ndim - used
            ellipsis_seen = True
            out_shape += shape[dim : dim + skip]
            out_stride += stride[dim : dim + skip]
            dim += skip
        elif item is None or isinstance(item, (bool, np.bool_)):
            out_shape.append(1 if item is None or item else 0)
            out_stride.append(shape[dim] * stride[dim] if dim < ndim else 1)
        else:
            advanced.append((len(out_shape), item))
            out_shape += shape[dim : dim + consumes]
            out_stride += stride[dim : dim + consumes]
            dim += consumes
    out_shape += shape[dim:]
    out_stride += stride[dim:]
    return (tuple(out_shape), tuple(out_stride), offset), advanced


def _slice(item: slice, n: int) -> tuple[int, int, int]:
    if item.step is not None:
        if item.step == 0:
            raise ValueError("slice step cannot be zero")
        if item.step < 0:
            raise ValueError("step must be greater than zero")
    return item.indices(n)
