"""TensorIterator: the shape, dtypes and memory layout of one pointwise call (PyTorch's
aten/native/TensorIterator.cpp), worked out once per new signature and kept in its plan.

- Shape: the inputs broadcast (PyTorch's rules and message). A given output must have it.
- Dtypes: the op's rule over ``result_type`` (ops/_promotion.py); inputs keep their dtypes
  and are converted in the kernel as they are loaded.
- Layout: each operand's strides over the broadcast shape (0 where broadcast). A new output
  takes the inputs' layout (PyTorch's fast setup, then its stride-ordered permutation), so
  ``a.t() + b.t()`` is a transposed result, as in PyTorch. The dimensions are put in memory
  order (innermost first) and coalesced where every operand allows it; then the launch is
  ``flat`` (every operand contiguous in one order) or ``strided`` (at most MAX_DIMS
  dimensions, 32-bit offsets where they fit).
- Overlap: an output with several elements at one address is refused; so is an input that
  partly overlaps the output (``check_overlap``, per call, since it depends on addresses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._tensor import Tensor

__all__ = [
    "MAX_DIMS",
    "Layout",
    "broadcast_shape",
    "operand_strides",
    "output_strides",
    "plan_layout",
    "has_internal_overlap",
    "check_overlap",
    "strided_dtype",
]

MAX_DIMS = 16  # dimensions of a strided launch after coalescing (kMaxDims in loops.cuh)
_OPERANDS = 4  # kOperands in loops.cuh: the output and three inputs
_INT32_MAX = (1 << 31) - 1

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """How a launch walks its operands: ``flat`` or ``strided``; ``sizes`` innermost first
    and per operand (output first) its ``strides`` in elements along them."""

    kind: str
    numel: int
    sizes: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]
    index32: bool


def broadcast_shape(shapes: list[Shape]) -> Shape:
    """The shape every one of ``shapes`` broadcasts to; RuntimeError as PyTorch words it."""
    ndim = max((len(s) for s in shapes), default=0)
    result = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for i, n in enumerate(shape):
            have = result[offset + i]
            if n == have or n == 1:
                continue
            if have == 1:
                result[offset + i] = n
                continue
            raise RuntimeError(
                f"The size of tensor a ({have}) must match the size of tensor b ({n}) at "
                f"non-singleton dimension {offset + i}"
            )
    return tuple(result)


def operand_strides(t: Tensor, shape: Shape) -> tuple[int, ...]:
    """``t``'s strides in elements over broadcast ``shape`` (0 along broadcast dimensions)."""
    lead = len(shape) - len(t._shape)
    strides = [0] * lead
    for n, s in zip(t._shape, t._stride, strict=True):
        strides.append(0 if n == 1 else s)
    return tuple(strides)


def _contiguous(shape: Shape) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def is_contiguous(shape: Shape, strides: tuple[int, ...]) -> bool:
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


def non_overlapping_and_dense(shape: Shape, strides: tuple[int, ...]) -> bool:
    """Every element at its own address and no gaps (in some order of the dimensions)."""
    if math.prod(shape) == 0:
        return True
    dims = sorted((s, n) for n, s in zip(shape, strides, strict=True) if n != 1)
    expected = 1
    for s, n in dims:
        if s != expected:
            return False
        expected *= n
    return True


def _permutation(shape: Shape, operands: list[tuple[int, ...]]) -> list[int]:
    """PyTorch's reorder_dimensions: the dimensions from innermost to outermost, ordered by
    the operands' strides (broadcast ones ignored; ties broken by size), by insertion sort."""
    ndim = len(shape)
    perm = list(reversed(range(ndim)))

    def should_swap(dim0: int, dim1: int) -> int:
        for strides in operands:
            s0, s1 = strides[dim0], strides[dim1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[dim0] > shape[dim1]:
                return 1
        return 0

    for i in range(1, ndim):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            comparison = should_swap(perm[dim0], perm[dim1])
            if comparison > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif comparison < 0:
                break
    return perm


def output_strides(shape: Shape, inputs: list[tuple[Shape, tuple[int, ...]]]) -> tuple[int, ...]:
    """The strides of a new output of ``shape`` for inputs given as (their own shape, their
    strides over ``shape``), as PyTorch's TensorIterator allocates it."""
    if not shape:
        return ()
    own = [(s, st) for s, st in inputs]
    if all(s == shape for s, _ in own):  # PyTorch's fast setup: every operand one shape
        natural = [st for _, st in own]
        if all(is_contiguous(shape, st) for st in natural):
            return _contiguous(shape)
        if natural and all(st == natural[0] for st in natural):
            if non_overlapping_and_dense(shape, natural[-1]):
                return natural[-1]
    perm = _permutation(shape, [st for _, st in own])
    if perm == list(reversed(range(len(shape)))):
        return _contiguous(shape)
    strides = [0] * len(shape)
    step = 1
    for dim in perm:
        strides[dim] = step
        step *= max(shape[dim], 1)
    return tuple(strides)


def plan_layout(shape: Shape, operands: list[tuple[int, ...]]) -> Layout:
    """The launch layout for operands (output first) with these strides over ``shape``."""
    numel = math.prod(shape)
    perm = _permutation(shape, operands)
    sizes = [shape[d] for d in perm]
    strides = [[st[d] for d in perm] for st in operands]
    sizes, strides = _coalesce(sizes, strides)
    flat = len(sizes) <= 1 and all(not st or st[0] == 1 for st in strides)
    if numel <= 1:
        flat = True
    if len(sizes) > MAX_DIMS:
        raise RuntimeError(
            f"an operation over {len(sizes)} dimensions that cannot be merged is not "
            f"supported (at most {MAX_DIMS}); make the operands contiguous first"
        )
    span = max(
        (sum((n - 1) * abs(s) for n, s in zip(sizes, st, strict=True)) for st in strides),
        default=0,
    )
    index32 = numel <= _INT32_MAX and span <= _INT32_MAX
    return Layout(
        "flat" if flat else "strided",
        numel,
        tuple(sizes),
        tuple(tuple(st) for st in strides),
        index32,
    )


def _coalesce(sizes: list[int], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """PyTorch's coalesce_dimensions over innermost-first dimensions."""
    if len(sizes) <= 1:
        return sizes, strides
    sizes = list(sizes)
    strides = [list(st) for st in strides]
    prev = 0
    for dim in range(1, len(sizes)):
        n0, n1 = sizes[prev], sizes[dim]
        mergeable = n0 == 1 or n1 == 1 or all(st[prev] * n0 == st[dim] for st in strides)
        if mergeable:
            if n0 == 1:
                for st in strides:
                    st[prev] = st[dim]
            sizes[prev] *= n1
        else:
            prev += 1
            if prev != dim:
                for st in strides:
                    st[prev] = st[dim]
                sizes[prev] = sizes[dim]
    count = prev + 1
    return sizes[:count], [st[:count] for st in strides]


def strided_dtype(index32: bool) -> np.dtype:
    """The NumPy layout of loops.cuh's ``Strided<Index>`` struct."""
    index = np.int32 if index32 else np.int64
    return np.dtype(
        [
            ("sizes", index, (MAX_DIMS,)),
            ("strides", index, (MAX_DIMS, _OPERANDS)),
            ("ndim", np.int32),
        ],
        align=True,
    )


def pack_strided(layout: Layout) -> np.void:
    """``layout`` as a ``Strided<Index>`` struct (unused operands' strides are 0)."""
    packed = np.zeros((), dtype=strided_dtype(layout.index32))
    ndim = len(layout.sizes)
    packed["ndim"] = ndim
    packed["sizes"][:ndim] = layout.sizes
    for k, st in enumerate(layout.strides):
        packed["strides"][:ndim, k] = st
    return packed[()]


def has_internal_overlap(t: Tensor) -> bool:
    """True when two elements of ``t`` share an address (PyTorch's has_internal_overlap:
    a stride of 0 along a dimension of more than one element)."""
    return any(s == 0 and n > 1 for n, s in zip(t._shape, t._stride, strict=True))


def _byte_range(t: Tensor) -> tuple[int, int]:
    item = t.dtype.itemsize
    start = t._storage.ptr + t._offset * item
    if 0 in t._shape:
        return start, start
    span = sum((n - 1) * s for n, s in zip(t._shape, t._stride, strict=True))
    return start, start + span * item + item


def check_overlap(out: Tensor, inputs: tuple[Tensor, ...]) -> None:
    """RuntimeError (PyTorch's) when an input shares memory with ``out`` without being it:
    the kernel would read what it has already written. Only tensors on ``out``'s storage
    are compared."""
    storage = out._storage
    for t in inputs:
        if t._storage is not storage:
            continue
        a_start, a_end = _byte_range(out)
        b_start, b_end = _byte_range(t)
        if a_start == b_start and a_end == b_end and t._stride == out._stride:
            continue  # the same elements: a pointwise op may read and write them
        if a_start < b_end and b_start < a_end:
            raise RuntimeError(
                "unsupported operation: some elements of the input tensor and the written-to "
                "tensor refer to a single memory location. Please clone() the tensor before "
                "performing the operation."
            )
