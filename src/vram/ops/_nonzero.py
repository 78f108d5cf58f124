"""nonzero, argwhere and masked_select: the set elements of a tensor (or mask), in row-major
order. How many there are decides the result's size, so these synchronize, as PyTorch's do.

Three launches and one read (kernels/index.cu): each block counts the set elements of its
chunk, one block turns the counts into each block's start and the total, the host reads the
total (the synchronization) and allocates the result, then each block writes its chunk's
hits in order (coordinates for nonzero, values for masked_select).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._dtypes import bool_, int64
from .._streams import this_thread
from .._tensor import Tensor, dispatch
from ..driver._work import Arg, Kernel, Launch, View
from ._args import cached, require_tensor, same_device, signature
from ._index_kernels import BLOCK, bits_type, fits_int32, grid, offsets_struct, source
from ._iterator import broadcast_shape, operand_strides
from ._kernels import c_type
from ._plans import launcher, new_tensor

__all__ = ["nonzero", "argwhere", "masked_select", "count_nonzero_plan"]

_SCAN_BLOCK = 1024  # threads of scan_counts (kScanBlock in index.cu)
_MAX_CHUNKS = 2048  # blocks of the counting and writing launches at most


def _hits(mask: np.ndarray) -> np.ndarray:
    """The set elements of ``mask`` in row-major order, as bools."""
    return np.asarray(mask != 0).reshape(-1)


def _count_reference(mask: np.ndarray, counts: np.ndarray, chunk: int, blocks: int) -> None:
    hits = _hits(mask)
    owner = np.arange(hits.size) // chunk
    counts[:blocks] = np.bincount(owner, weights=hits, minlength=blocks)[:blocks]


def _scan_reference(counts: np.ndarray, blocks: int) -> None:
    sizes = counts[:blocks].copy()
    counts[blocks] = sizes.sum()
    counts[:blocks] = np.cumsum(sizes) - sizes


def _nonzero_reference(values: np.ndarray, starts: np.ndarray, out: np.ndarray) -> None:
    out[...] = np.argwhere(np.asarray(values != 0))


def _masked_select_reference(
    mask: np.ndarray, values: np.ndarray, starts: np.ndarray, out: np.ndarray
) -> None:
    out[...] = values.reshape(-1)[_hits(mask)]


_COUNT = Kernel("count_nonzero", source(), _count_reference)
_SCAN = Kernel("count_nonzero", source(), _scan_reference)
_NONZERO = Kernel("nonzero", source(), _nonzero_reference)
_MASKED_SELECT = Kernel("masked_select", source(), _masked_select_reference)


class CompactPlan:
    """The launches of one signature: ``mask`` (and ``values``) over ``shape``."""

    __slots__ = ("device", "shape", "numel", "blocks", "chunk", "params", "views", "entry")
    __slots__ += ("count", "scan", "ndim", "values_dtype", "grid")

    def __init__(self, mask: Tensor, values: Tensor | None, shape: tuple[int, ...]) -> None:
        device = mask.device
        self.device = device
        self.shape = shape
        self.ndim = len(shape)
        self.numel = numel = math.prod(shape)
        self.values_dtype = values.dtype if values is not None else None
        operands = [operand_strides(mask, shape)]
        operands.append(operand_strides(values, shape) if values is not None else operands[0])
        # row-major order, innermost dimension first, no dimensions merged (see index.cu)
        sizes = tuple(reversed(shape)) or (1,)
        strides = tuple(tuple(reversed(st)) or (0,) for st in operands)
        index32 = fits_int32(numel, shape, operands)
        index = "int" if index32 else "long long"
        blocks = min(max(-(-numel // BLOCK), 1), grid(device, numel) * 4, _MAX_CHUNKS)
        self.chunk = chunk = -(-max(numel, 1) // blocks // BLOCK) * BLOCK
        self.blocks = blocks = max(-(-numel // chunk), 1)
        self.grid = (blocks, 1, 1)
        layout = offsets_struct(sizes, strides, index32)
        self.params = (np.int64(numel), np.int64(chunk), layout)
        mask_view = View(shape, _bytes(operands[0], mask), mask.dtype.np)
        counts_view = View((blocks + 1,), (8,), np.dtype(np.int64))
        entry = f"vram::index::count_blocks<{c_type(mask.dtype)}, {index}>"
        self.count = launcher(
            device,
            Launch(
                _COUNT,
                entry,
                self.grid,
                (BLOCK, 1, 1),
                (Arg("P"), *self.params, Arg("P")),
                (mask_view, counts_view),
                (chunk, blocks),
            ),
        )
        self.scan = launcher(
            device,
            Launch(
                _SCAN,
                "vram::index::scan_counts",
                (1, 1, 1),
                (_SCAN_BLOCK, 1, 1),
                (Arg("P"), np.int64(blocks)),
                (counts_view,),
                (blocks,),
            ),
        )
        if values is None:
            self.entry = f"vram::index::nonzero<{c_type(mask.dtype)}, {index}>"
            self.views = (mask_view, counts_view)
        else:
            self.entry = f"vram::index::masked_select<{bits_type(values.dtype)}, {index}>"
            values_view = View(shape, _bytes(operands[1], values), values.dtype.np)
            self.views = (mask_view, values_view, counts_view)

    def __call__(self, mask: Tensor, values: Tensor | None) -> Tensor:
        """Count, read the total (synchronizes), write the hits into a new tensor."""
        device = self.device
        stream = this_thread.handles[device]
        counts = new_tensor((self.blocks + 1,), (1,), int64, device, (self.blocks + 1) * 8)
        if self.numel:
            self.count(stream, mask.data_ptr(), counts.data_ptr())
            self.scan(stream, counts.data_ptr())
            total = int(counts[self.blocks].item())
        else:
            total = 0
        if values is None:
            shape = (total, self.ndim)
            out = new_tensor(shape, (self.ndim, 1), int64, device, total * self.ndim * 8)
            out_view = View(shape, (self.ndim * 8, 8), np.dtype(np.int64))
            kernel, pointers = _NONZERO, (mask.data_ptr(),)
        else:
            dt = self.values_dtype
            out = new_tensor((total,), (1,), dt, device, total * dt.itemsize)
            out_view = View((total,), (dt.itemsize,), dt.np)
            kernel, pointers = _MASKED_SELECT, (mask.data_ptr(), values.data_ptr())
        if out.numel():
            params = (*(Arg("P") for _ in pointers), *self.params, Arg("P"), Arg("P"))
            write = launcher(
                device,
                Launch(
                    kernel, self.entry, self.grid, (BLOCK, 1, 1), params, (*self.views, out_view)
                ),
            )
            write(stream, *pointers, counts.data_ptr(), out.data_ptr())
        return out


def _bytes(strides: tuple[int, ...], t: Tensor) -> tuple[int, ...]:
    return tuple(s * t.dtype.itemsize for s in strides)


def count_nonzero_plan(mask: Tensor, values: Tensor | None, shape: tuple[int, ...]) -> CompactPlan:
    """The plan of one signature (built on first sight)."""
    key = ("compact", signature(mask), signature(values) if values is not None else None, shape)
    return cached(key, CompactPlan, mask, values, shape)


def nonzero(input: Tensor, *, as_tuple: bool = False) -> Any:  # noqa: A002
    """torch.nonzero: the indices of the nonzero elements, [count, ndim] int64 in row-major
    order (a tuple of 1-D index tensors, one per dimension, with ``as_tuple=True``).
    Synchronizes (the count decides the result's size)."""
    require_tensor("nonzero", "input", input)
    found = count_nonzero_plan(input, None, input._shape)(input, None)
    if not as_tuple:
        return found
    if input.ndim == 0:
        return (_scalar_hits(found),)
    return found.unbind(1)


def _scalar_hits(found: Tensor) -> Tensor:
    """nonzero(as_tuple=True) of a 0-dim tensor: one 1-D tensor of zeros, one per hit."""
    return new_tensor((found.shape[0],), (1,), int64, found.device, found.shape[0] * 8).zero_()


def argwhere(input: Tensor) -> Tensor:  # noqa: A002
    """torch.argwhere: ``nonzero(input)``. Synchronizes."""
    return nonzero(input)


def masked_select(input: Tensor, mask: Tensor) -> Tensor:  # noqa: A002
    """torch.masked_select: the elements of ``input`` where ``mask`` (broadcast together) is
    True, as a 1-D tensor in row-major order. Synchronizes."""
    require_tensor("masked_select", "input", input)
    require_tensor("masked_select", "mask", mask)
    if mask.dtype is not bool_:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    same_device(input, mask)
    shape = broadcast_shape([input._shape, mask._shape])
    return count_nonzero_plan(mask, input, shape)(mask, input)


dispatch.update(nonzero=nonzero, argwhere=argwhere, masked_select=masked_select)
