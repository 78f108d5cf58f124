"""The index kernels' program (kernels/index.cu) and what launching them takes: the source,
the ``Offsets`` struct that tells a kernel its operands' strides over an iteration shape, and
grid sizes. The kernels' NumPy references live with the ops that launch them.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .._device import Device
from .._dtypes import dtype
from ._kernels import KERNEL_DIR
from ._tiled import BITS_TYPES

__all__ = [
    "BLOCK",
    "MAX_DIMS",
    "source",
    "bits_type",
    "offsets_struct",
    "grid",
    "fits_int32",
    "element_offsets",
]

BLOCK = 256  # threads per block (kBlock in index.cu)
MAX_DIMS = 16  # dimensions of an iteration shape (kMaxDims in index.cu)
_WAVES = 8  # blocks per multiprocessor a grid-stride launch takes at most
_INT32_MAX = (1 << 31) - 1


@cache
def source() -> str:
    """common.cuh and index.cu: one NVRTC program."""
    return "".join((KERNEL_DIR / name).read_text() for name in ("common.cuh", "index.cu"))


def bits_type(dt: dtype) -> str:
    """The C type a kernel moves ``dt``'s elements as, without looking at their values."""
    return BITS_TYPES[dt.itemsize]


@cache
def _offsets_dtype(operands: int, index32: bool) -> np.dtype:
    index = np.int32 if index32 else np.int64
    return np.dtype(
        [
            ("sizes", index, (MAX_DIMS,)),
            ("strides", index, (MAX_DIMS, operands)),
            ("ndim", np.int32),
        ],
        align=True,
    )


def offsets_struct(
    sizes: tuple[int, ...], strides: tuple[tuple[int, ...], ...], index32: bool
) -> np.void:
    """``Offsets<Index, N>``: ``sizes`` innermost first, and per operand its strides along
    them (in elements)."""
    if len(sizes) > MAX_DIMS:
        raise RuntimeError(
            f"an indexing operation over {len(sizes)} dimensions is not supported (at most "
            f"{MAX_DIMS})"
        )
    packed = np.zeros((), dtype=_offsets_dtype(len(strides), index32))
    packed["ndim"] = len(sizes)
    packed["sizes"][: len(sizes)] = sizes
    for k, st in enumerate(strides):
        packed["strides"][: len(sizes), k] = st
    return packed[()]


def fits_int32(numel: int, shape: tuple[int, ...], strides: list[tuple[int, ...]]) -> bool:
    """True when every offset a launch over ``shape`` computes fits a 32-bit int."""
    span = max(
        (sum((n - 1) * abs(s) for n, s in zip(shape, st, strict=True)) for st in strides),
        default=0,
    )
    return numel <= _INT32_MAX and span <= _INT32_MAX


def grid(device: Device, work: int, per_block: int = BLOCK) -> int:
    """Blocks for a grid-stride launch over ``work`` items (at least one)."""
    blocks = max(-(-work // per_block), 1)
    if device.type != "cpu":
        blocks = min(blocks, device.driver.properties(device.index).multi_processor_count * _WAVES)
    return blocks


def element_offsets(shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """The offset (in elements) of every element of a layout, as an int64 array of ``shape``
    (what the kernels' ``offsets`` computes, for the NumPy references)."""
    at = np.zeros(shape, np.int64)
    for d, (n, s) in enumerate(zip(shape, strides, strict=True)):
        if s and n > 1:
            at += (np.arange(n, dtype=np.int64) * s).reshape((n,) + (1,) * (len(shape) - d - 1))
    return at
