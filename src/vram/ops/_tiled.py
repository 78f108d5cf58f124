"""The pointwise engine's transposing copy: a copy without a dtype conversion whose output
and source are contiguous along different dimensions (kernels/copy_tiled.cu), as the
TensorIterator laid it out (``_iterator.plan_layout``). ``PointwisePlan`` takes it for
``copy`` where ``tiled_dims`` finds such a pair; every other copy is the engine's loops.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from .._dtypes import dtype
from .._tensor import Tensor
from ..driver._work import Arg, Kernel, Launch, View
from ._iterator import Layout, operand_strides, pack_strided, plan_layout
from ._kernels import KERNEL_DIR

__all__ = ["tiled_dims", "tiled_launch", "dims_of", "TILE", "BITS_TYPES", "COPY_TILED"]

TILE = 32  # a tile is TILE x TILE elements, a block (TILE, _ROWS) threads
_ROWS = 8
_MAX_BLOCKS = 65536  # blocks per launch; the kernel loops over the rest
BITS_TYPES = {  # element size -> a type of that size that copy_tiled moves as bits
    1: "unsigned char",
    2: "unsigned short",
    4: "unsigned int",
    8: "unsigned long long",
    16: "vram::Bits16",
}


@cache
def _source() -> str:
    return "".join(
        (KERNEL_DIR / name).read_text() for name in ("common.cuh", "loops.cuh", "copy_tiled.cu")
    )


def _copy(out: np.ndarray, src: np.ndarray) -> None:
    out[...] = src


COPY_TILED = Kernel("copy", _source(), _copy)


def tiled_dims(layout: Layout) -> tuple[int, int] | None:
    """(p, q): the layout's dimensions along which the output (p) and the source (q) are
    contiguous, when they differ and both span at least a quarter of a tile; None
    otherwise (the engine's loops do it)."""
    if layout.kind != "strided" or len(layout.strides) != 2:
        return None
    out, src = layout.strides
    p = out.index(1) if 1 in out else None
    q = src.index(1) if 1 in src else None
    if p is None or q is None or p == q:
        return None
    if min(layout.sizes[p], layout.sizes[q]) < TILE // 4:
        return None
    return p, q


def tiled_launch(layout: Layout, dt: dtype, views: tuple[View, View]) -> Launch | None:
    """The tiled copy of ``layout`` (output, source) of ``dt``, as the seam takes it (per
    call: the output's and the source's pointers); None where it does not apply."""
    dims = tiled_dims(layout)
    if dims is None:
        return None
    p, q = dims
    sizes = layout.sizes
    others = math.prod(n for d, n in enumerate(sizes) if d not in dims)
    tiles = -(-sizes[p] // TILE) * -(-sizes[q] // TILE) * others
    index = "int" if layout.index32 else "long long"
    entry = f"vram::copy_tiled<{BITS_TYPES[dt.itemsize]}, {index}>"
    params = (Arg("P"), Arg("P"), np.int32(p), np.int32(q), tiles, pack_strided(layout))
    grid = (min(tiles, _MAX_BLOCKS), 1, 1)
    return Launch(COPY_TILED, entry, grid, (TILE, _ROWS, 1), params, views)


def dims_of(out: Tensor, src: Tensor) -> tuple[int, int] | None:
    """``tiled_dims`` of a copy of ``src`` into ``out`` (of one shape): whether it is tiled."""
    shape = out._shape
    return tiled_dims(plan_layout(shape, [out._stride, operand_strides(src, shape)]))
