"""Joining, repeating and triangles with torch's names, arguments and errors: cat (concat,
concatenate), stack, repeat, tile, tril, triu; and torch's function forms of the view
methods (permute, transpose, squeeze, split, ...).

- cat: the result's dtype is PyTorch's promotion of every input's; 1-D empty inputs are
  skipped, as PyTorch does. When every input is contiguous and of the result's dtype (the
  common case), one launch copies them all (``cat_rows``: up to 64 inputs a launch, 16-byte
  units where sizes and addresses allow); otherwise each input is copied into its slice of
  the result by the pointwise engine (any strides, any dtype).
- repeat: one strided copy from the input viewed with stride 0 along the repeats.
- tril / triu: one kernel over any strides (in place for ``tril_`` / ``triu_``).
"""

from __future__ import annotations

import functools
import math
import operator
from functools import cache
from typing import Any

import numpy as np

from .._dtypes import dtype
from .._streams import this_thread
from .._tensor import Tensor, contiguous_strides, dispatch
from .._views import int_sequence, wrap_dim
from ..driver._work import Arg, Kernel, Launch, View
from ._args import TORCH_NAMES, cached, overlaps, require_tensor, same_device, signature
from ._index_kernels import BLOCK, bits_type, fits_int32, grid, offsets_struct, source
from ._iterator import has_internal_overlap
from ._plans import launcher, new_tensor
from ._pointwise import copy_into
from ._promotion import can_cast, promote_types

__all__ = [
    "cat",
    "concat",
    "concatenate",
    "stack",
    "repeat",
    "tile",
    "tril",
    "triu",
    "tril_",
    "triu_",
    "CatPlan",
    "permute",
    "transpose",
    "swapaxes",
    "swapdims",
    "t",
    "flatten",
    "unflatten",
    "squeeze",
    "unsqueeze",
    "narrow",
    "select",
    "movedim",
    "moveaxis",
    "split",
    "chunk",
    "unbind",
    "reshape",
]

_MAX_INPUTS = 64  # inputs one cat_rows launch takes (its parameters: 64 pointers, 128 sizes)
_UNITS = {16: "uint4", 8: "unsigned long long", 4: "unsigned int", 2: "unsigned short"}
_UNITS[1] = "unsigned char"


# ---- cat ----------------------------------------------------------------------------------------


def _cat_reference(*args: Any) -> None:
    """Each input's [rows, len] block into the output's rows at its column."""
    *arrays, cols = args
    out, inputs = arrays[0], arrays[1:]
    for block, col in zip(inputs, cols, strict=False):
        if block is not None:
            out[:, col : col + block.shape[1]] = block


_CAT = Kernel("cat", source(), _cat_reference)


class CatPlan:
    """One signature of cat: the checks done, the result's layout, and the launches."""

    __slots__ = ("device", "shape", "dtype", "dim", "used", "offsets", "fast", "units", "out")

    def __init__(self, tensors: tuple[Tensor, ...], dim: int, out: Tensor | None) -> None:
        for i, t in enumerate(tensors):
            if t.ndim == 0:
                raise RuntimeError(
                    f"zero-dimensional tensor (at position {i}) cannot be concatenated"
                )
        same_device(*tensors, *((out,) if out is not None else ()))
        result = tensors[0].dtype
        for t in tensors[1:]:
            result = promote_types(result, t.dtype)
        # 1-D empty tensors take no part, as in PyTorch (legacy behaviour)
        used = [i for i, t in enumerate(tensors) if t._shape != (0,)]
        first = tensors[used[0]] if used else tensors[0]
        d = wrap_dim(dim, first.ndim)
        for i in used:
            t = tensors[i]
            if t.ndim != first.ndim:
                raise RuntimeError(
                    f"Tensors must have same number of dimensions: got {first.ndim} and {t.ndim}"
                )
            for k in range(first.ndim):
                if k != d and t._shape[k] != first._shape[k]:
                    raise RuntimeError(
                        f"Sizes of tensors must match except in dimension {d}. Expected size "
                        f"{first._shape[k]} but got size {t._shape[k]} for tensor number {i} in "
                        "the list."
                    )
        total = sum(tensors[i]._shape[d] for i in used)
        shape = first._shape[:d] + (total,) + first._shape[d + 1 :] if used else (0,)
        if out is not None:
            if not can_cast(result, out.dtype):
                raise TypeError(
                    "torch.cat(): input types can't be cast to the desired output type "
                    f"{TORCH_NAMES[out.dtype.name]}"
                )
            if out._shape != shape:
                raise RuntimeError(
                    f"cat(): expected out of shape {list(shape)}, got {list(out._shape)}"
                )
            if has_internal_overlap(out):
                raise RuntimeError(
                    "unsupported operation: more than one element of the written-to tensor "
                    "refers to a single memory location. Please clone() the tensor before "
                    "performing the operation."
                )
            result = out.dtype
        self.device = first.device
        self.shape = shape
        self.dtype = result
        self.dim = d
        self.used = tuple(i for i in used if tensors[i].numel())
        starts, at = [], 0
        for i in used:
            starts.append(at)
            at += tensors[i]._shape[d]
        self.offsets = dict(zip(used, starts, strict=True))
        self.out = out is not None
        self.fast = None
        self.units: tuple[int, ...] = ()
        one_launch = all(
            tensors[i].dtype is result and tensors[i].is_contiguous() for i in self.used
        ) and (out is None or out.is_contiguous())
        if one_launch and self.used:
            self._plan_rows(tensors)

    def _plan_rows(self, tensors: tuple[Tensor, ...]) -> None:
        """The cat_rows launches: per unit size (the widest the sizes allow, and the element
        size for addresses that are not aligned to it), per group of up to 64 inputs."""
        d, shape, item = self.dim, self.shape, self.dtype.itemsize
        rows = math.prod(shape[:d])
        inner = math.prod(shape[d + 1 :])
        row = shape[d] * inner * item  # bytes
        lens = [tensors[i]._shape[d] * inner * item for i in self.used]
        cols = [self.offsets[i] * inner * item for i in self.used]
        widest = item
        for unit in (16, 8, 4, 2):
            if unit > item and all(v % unit == 0 for v in (row, *lens, *cols)):
                widest = unit
                break
        self.units = tuple(sorted({widest, item}, reverse=True))
        self.fast = {}
        for unit in self.units:
            groups = []
            for g in range(0, len(self.used), _MAX_INPUTS):
                part = slice(g, g + _MAX_INPUTS)
                groups.append(
                    _rows_launch(
                        self.device,
                        unit,
                        rows,
                        row // unit,
                        [v // unit for v in lens[part]],
                        [v // unit for v in cols[part]],
                    )
                )
            self.fast[unit] = groups

    def __call__(self, tensors: tuple[Tensor, ...], out: Tensor | None) -> Tensor:
        device = self.device
        if out is None:
            nbytes = math.prod(self.shape) * self.dtype.itemsize
            out = new_tensor(self.shape, contiguous_strides(self.shape), self.dtype, device, nbytes)
        else:
            _check_out_overlap(out, tensors)
        if self.fast is not None:
            ptrs = [tensors[i].data_ptr() for i in self.used]
            base = out.data_ptr()
            aligned = self.units[0]
            if functools.reduce(operator.or_, ptrs, base) % aligned:
                aligned = self.units[-1]
            stream = this_thread.handles[device]
            for g, (run, slots) in enumerate(self.fast[aligned]):
                group = ptrs[g * _MAX_INPUTS : (g + 1) * _MAX_INPUTS]
                run(stream, base, *group, *(0,) * (slots - len(group)))
            return out
        for i in self.used:
            t = tensors[i]
            copy_into(out.narrow(self.dim, self.offsets[i], t._shape[self.dim]), t)
        return out


def _rows_launch(
    device: Any, unit: int, rows: int, row: int, lens: list[int], cols: list[int]
) -> Any:
    """One cat_rows launch over len(lens) inputs, sizes in units of ``unit`` bytes, and the
    pointer slots it takes (a power of two: fewer kernel instances; unused slots null)."""
    count = len(lens)
    slots = 1 << max(count - 1, 0).bit_length()
    places = np.zeros((), np.dtype([("len", np.int64, (slots,)), ("col", np.int64, (slots,))]))
    places["len"][:count] = lens
    places["col"][:count] = cols
    unit_np = np.dtype(f"u{unit}") if unit <= 8 else np.dtype((np.void, unit))
    views = [View((rows, row), (row * unit, unit), unit_np)]
    views += [View((rows, n), (n * unit, unit), unit_np) for n in lens]
    views += [None] * (slots - count)
    params = (Arg("P"), Arg("P" * slots), np.int64(rows))
    params += (np.int64(row), places[()])
    blocks = grid(device, max(rows * max(lens), 1), BLOCK) if lens else 1
    entry = f"vram::index::cat_rows<{_UNITS[unit]}, {slots}>"
    launch = Launch(_CAT, entry, (blocks, count, 1), (BLOCK, 1, 1), params, tuple(views), (cols,))
    return launcher(device, launch), slots


def _check_out_overlap(out: Tensor, tensors: tuple[Tensor, ...]) -> None:
    for i, t in enumerate(tensors):
        if overlaps(out, t):
            raise RuntimeError(
                "unsupported operation: the input tensors cannot refer to any of the output "
                f"memory locations. Found overlap in input tensor {i}"
            )


def cat(tensors: Any, dim: int = 0, *, out: Tensor | None = None) -> Tensor:
    """torch.cat: ``tensors`` joined along ``dim`` (dtypes promoted; 1-D empty tensors
    skipped); into ``out`` when given."""
    tensors = _tensor_list("cat", tensors)
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    key = ("cat", dim, tuple(map(signature, tensors)), signature(out) if out is not None else None)
    plan = cached(key, CatPlan, tensors, dim, out)
    return plan(tensors, out)


concat = concatenate = cat


def _tensor_list(name: str, tensors: Any) -> tuple[Tensor, ...]:
    """``tensors`` as a tuple; PyTorch's TypeError for anything but a sequence of tensors."""
    if not isinstance(tensors, (tuple, list)):
        raise TypeError(
            f"{name}(): argument 'tensors' must be tuple of Tensors, not {type(tensors).__name__}"
        )
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"expected Tensor as element {i} in argument 0, but got {type(t).__name__}"
            )
    return tuple(tensors)


def stack(tensors: Any, dim: int = 0, *, out: Tensor | None = None) -> Tensor:
    """torch.stack: ``tensors`` (all of one shape) joined along a new dimension ``dim``."""
    tensors = _tensor_list("stack", tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    first = tensors[0]
    for i, t in enumerate(tensors[1:], 1):
        if t._shape != first._shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(first._shape)} at "
                f"entry 0 and {list(t._shape)} at entry {i}"
            )
    d = wrap_dim(dim, first.ndim + 1)
    return cat([t.unsqueeze(d) for t in tensors], d, out=out)


# ---- repeat and tile ----------------------------------------------------------------------------


def repeat(input: Tensor, *sizes: Any) -> Tensor:  # noqa: A002
    """Tensor.repeat: ``input`` repeated ``sizes[i]`` times along each dimension (new
    leading dimensions for extra sizes), in a new tensor."""
    require_tensor("repeat", "input", input)
    if not sizes:
        raise TypeError('repeat() missing 1 required positional arguments: "repeats"')
    repeats = int_sequence(sizes, "repeats")
    if len(repeats) < input.ndim:
        raise RuntimeError(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions "
            "of tensor"
        )
    lead = len(repeats) - input.ndim
    shape = (1,) * lead + input._shape
    strides = (0,) * lead + input._stride
    target = tuple(n * r for n, r in zip(shape, repeats, strict=True))
    for n in target:
        if n < 0:
            raise RuntimeError(
                f"Trying to create tensor with negative dimension {n}: {list(target)}"
            )
    out_strides = contiguous_strides(target)
    nbytes = math.prod(target) * input.dtype.itemsize
    out = new_tensor(target, out_strides, input.dtype, input.device, nbytes)
    if not nbytes:
        return out
    # the result as [r0, n0, r1, n1, ...] and the input broadcast along each r
    pairs = tuple(x for r, n in zip(repeats, shape, strict=True) for x in (r, n))
    src = input._view(pairs, tuple(x for s in strides for x in (0, s)), input.storage_offset())
    dst = out._view(
        pairs,
        tuple(x for n, s in zip(shape, out_strides, strict=True) for x in (n * s, s)),
        0,
    )
    copy_into(dst, src)
    return out


def tile(input: Tensor, dims: Any) -> Tensor:  # noqa: A002
    """torch.tile: ``repeat`` with ``dims`` padded with leading ones to ``input``'s rank."""
    require_tensor("tile", "input", input)
    reps = int_sequence((dims,), "dims")
    reps = (1,) * (input.ndim - len(reps)) + reps
    return repeat(input, reps)


# ---- tril and triu ------------------------------------------------------------------------------


def _triangle_reference(out: np.ndarray, src: np.ndarray, diagonal: int, upper: bool) -> None:
    out[...] = np.triu(src, diagonal) if upper else np.tril(src, diagonal)


_TRIANGLE = Kernel("tril", source(), _triangle_reference)


@cache
def _triangle_entry(dt: dtype, index32: bool, upper: bool) -> str:
    index = "int" if index32 else "long long"
    return f"vram::index::triangle<{bits_type(dt)}, {index}, {'true' if upper else 'false'}>"


class TrianglePlan:
    """tril or triu of one signature (``out`` and ``src`` layouts over one shape)."""

    __slots__ = ("run", "device")

    def __init__(self, src: Tensor, out_stride: tuple[int, ...], upper: bool) -> None:
        self.device = src.device
        shape = src._shape
        numel = math.prod(shape)
        self.run = None
        if not numel:
            return
        # innermost first: the columns, the rows, then the batch dimensions
        order = list(reversed(range(src.ndim)))
        sizes = tuple(shape[k] for k in order)
        operands = [out_stride, src._stride]
        strides = tuple(tuple(st[k] for k in order) for st in operands)
        index32 = fits_int32(numel, shape, operands)
        item = src.dtype.itemsize
        views = (
            View(shape, tuple(s * item for s in out_stride), src.dtype.np),
            View(shape, tuple(s * item for s in src._stride), src.dtype.np),
        )
        params = (
            Arg("P"),
            Arg("P"),
            np.int64(numel),
            Arg("q"),
            offsets_struct(sizes, strides, index32),
        )
        launch = Launch(
            _TRIANGLE,
            _triangle_entry(src.dtype, index32, upper),
            (grid(src.device, numel), 1, 1),
            (BLOCK, 1, 1),
            params,
            (*views, None),
            (upper,),
        )
        self.run = launcher(src.device, launch)

    def __call__(self, out: Tensor, src: Tensor, diagonal: int) -> Tensor:
        if self.run is not None:
            device = self.device
            stream = this_thread.handles[device]
            self.run(stream, out.data_ptr(), src.data_ptr(), diagonal)
        return out


def _triangle(name: str, input: Tensor, diagonal: Any, upper: bool, inplace: bool) -> Tensor:  # noqa: A002
    require_tensor(name, "input", input)
    if isinstance(diagonal, bool) or not isinstance(diagonal, (int, np.integer)):
        raise TypeError(f"{name}(): argument 'diagonal' must be int, not {type(diagonal).__name__}")
    if input.ndim < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    if inplace:
        if has_internal_overlap(input):
            raise RuntimeError(
                "unsupported operation: more than one element of the written-to tensor refers "
                "to a single memory location. Please clone() the tensor before performing the "
                "operation."
            )
        out = input
    else:
        nbytes = input.numel() * input.dtype.itemsize
        strides = contiguous_strides(input._shape)
        out = new_tensor(input._shape, strides, input.dtype, input.device, nbytes)
    key = ("triangle", upper, signature(input), out._stride)
    plan = cached(key, TrianglePlan, input, out._stride, upper)
    return plan(out, input, int(diagonal))


def tril(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """torch.tril: the lower triangle of the last two dimensions (elements with
    ``col - row <= diagonal``), the rest zero."""
    return _triangle("tril", input, diagonal, False, False)


def triu(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """torch.triu: the upper triangle (``col - row >= diagonal``), the rest zero."""
    return _triangle("triu", input, diagonal, True, False)


def tril_(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    return _triangle("tril", input, diagonal, False, True)


def triu_(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    return _triangle("triu", input, diagonal, True, True)


# ---- torch's function forms of the view methods -------------------------------------------------


def _view_function(name: str) -> Any:
    def function(input: Tensor, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
        require_tensor(name, "input", input)
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"torch.{name}(input, ...): ``input.{name}(...)`` (a view)."
    return function


permute = _view_function("permute")
transpose = _view_function("transpose")
swapaxes = _view_function("swapaxes")
swapdims = _view_function("swapdims")
t = _view_function("t")
flatten = _view_function("flatten")
unflatten = _view_function("unflatten")
squeeze = _view_function("squeeze")
unsqueeze = _view_function("unsqueeze")
narrow = _view_function("narrow")
select = _view_function("select")
movedim = _view_function("movedim")
moveaxis = _view_function("moveaxis")
split = _view_function("split")
chunk = _view_function("chunk")
unbind = _view_function("unbind")
reshape = _view_function("reshape")

dispatch.update(repeat=repeat, tile=tile, tril=tril, triu=triu, tril_=tril_, triu_=triu_)
