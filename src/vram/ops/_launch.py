"""Launching vram's NVRTC kernels: kernel sources, C type names, strided layouts, grid sizes.

A strided kernel takes a ``Layout`` struct by value (see kernels/elementwise.cu): the shape
and each operand's strides in elements, after merging dimensions that every operand walks
contiguously, so that contiguous tensors run as one flat loop.
"""

from __future__ import annotations

from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._dtypes import dtype

if TYPE_CHECKING:
    from .._streams import Stream
    from .._tensor import Tensor

__all__ = [
    "MAX_DIMS",
    "LAYOUT_DTYPE",
    "KERNEL_DIR",
    "C_TYPES",
    "kernel_source",
    "c_type",
    "layout",
    "launch",
    "tiled_dims",
    "launch_tiled",
    "BITS_TYPES",
]

MAX_DIMS = 8  # dimensions a kernel takes after coalescing (kMaxDims in the .cu)
_MAX_OPERANDS = 3  # kMaxOperands in the .cu
_BLOCK = 256  # threads per block
_MAX_BLOCKS = 65536  # blocks per launch; the kernels loop over the rest (grid-stride)
_TILE = 32  # copy_tiled's tiles are _TILE x _TILE elements, a block (_TILE, _TILE_ROWS)
_TILE_ROWS = 8
BITS_TYPES = {  # element size -> a type of that size that copy_tiled moves as bits
    1: "unsigned char",
    2: "unsigned short",
    4: "unsigned int",
    8: "unsigned long long",
    16: "vram::complex128",
}
KERNEL_DIR = Path(__file__).parent / "kernels"

# struct Layout { long long ndim, numel, shape[8], stride[3][8]; }
LAYOUT_DTYPE = np.dtype(
    [
        ("ndim", np.int64),
        ("numel", np.int64),
        ("shape", np.int64, (MAX_DIMS,)),
        ("stride", np.int64, (_MAX_OPERANDS, MAX_DIMS)),
    ]
)

C_TYPES = {  # vram dtype name -> the element type the kernels use
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float",
    "float64": "double",
    "int8": "signed char",
    "int16": "short",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "bool": "bool",
    "complex64": "vram::complex64",
    "complex128": "vram::complex128",
}


@cache
def kernel_source(name: str) -> str:
    """The text of ``kernels/<name>.cu``."""
    return (KERNEL_DIR / f"{name}.cu").read_text()


def c_type(dt: dtype) -> str:
    """The CUDA C element type of a vram dtype."""
    return C_TYPES[dt.name]


def _coalesce(
    shape: tuple[int, ...], strides: list[tuple[int, ...]]
) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dimensions and merge neighbours that every operand walks contiguously."""
    dims = [d for d, n in enumerate(shape) if n != 1]
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d in dims:
        n = shape[d]
        mergeable = out_shape and all(
            s[-1] == st[d] * n for s, st in zip(out_strides, strides, strict=True)
        )
        if mergeable:
            out_shape[-1] *= n
            for s, st in zip(out_strides, strides, strict=True):
                s[-1] = st[d]
        else:
            out_shape.append(n)
            for s, st in zip(out_strides, strides, strict=True):
                s.append(st[d])
    return out_shape, out_strides


def layout(tensors: list[Tensor]) -> np.void:
    """The Layout struct for operands of one shape (the first is the output), as a NumPy
    scalar that ``Driver.launch`` passes by value. ValueError beyond 8 coalesced dims."""
    return _layout(tuple(tensors[0].shape), tuple(t.stride() for t in tensors))


@lru_cache(maxsize=1024)
def _layout(shape: tuple[int, ...], operand_strides: tuple[tuple[int, ...], ...]) -> np.void:
    """The Layout of one shape and operands' strides (cached: the same come back at every
    step of a loop, and building the struct costs more than the launch)."""
    shape_list, strides = _coalesce(shape, list(operand_strides))
    if len(shape_list) > MAX_DIMS:
        raise ValueError(
            f"tensors with {len(shape_list)} non-mergeable dimensions are not supported "
            f"(at most {MAX_DIMS}); make them contiguous first"
        )
    packed = np.zeros((), dtype=LAYOUT_DTYPE)
    packed["ndim"] = len(shape_list)
    packed["numel"] = int(np.prod(shape, dtype=np.int64))
    packed["shape"][: len(shape_list)] = shape_list
    for k, s in enumerate(strides):
        packed["stride"][k, : len(s)] = s
    return packed[()]


def launch(source: str, name: str, tensors: list[Tensor], values: tuple, stream: Stream) -> None:
    """Compile (once per device and instance) and launch strided kernel ``name``.

    Arguments are the operands' data pointers, then ``values``, then the Layout.
    """
    numel = tensors[0].numel()
    if numel == 0:
        return
    device = stream.device
    driver = device.driver
    kernel = driver.compile(device.index, source, name)
    blocks = min(-(-numel // _BLOCK), _MAX_BLOCKS)
    args = (*(t.data_ptr() for t in tensors), *values, layout(tensors))
    driver.launch(kernel, (blocks, 1, 1), (_BLOCK, 1, 1), args, stream.cuda_stream)


def tiled_dims(out: Tensor, src: Tensor) -> tuple[int, int] | None:
    """(p, q): the coalesced dimensions along which ``out`` and ``src`` (one shape) are
    contiguous, when they differ and both span at least a tile's quarter: a batch of
    transposes, which ``copy_tiled`` runs coalesced on both sides. None otherwise."""
    return _tiled_dims(tuple(out.shape), (out.stride(), src.stride()))


@lru_cache(maxsize=1024)
def _tiled_dims(
    shape: tuple[int, ...], operand_strides: tuple[tuple[int, ...], ...]
) -> tuple[int, int] | None:
    shape_list, (out_strides, src_strides) = _coalesce(shape, list(operand_strides))
    if len(shape_list) > MAX_DIMS:
        return None
    p = out_strides.index(1) if 1 in out_strides else None
    q = src_strides.index(1) if 1 in src_strides else None
    if p is None or q is None or p == q:
        return None
    if min(shape_list[p], shape_list[q]) < _TILE // 4:
        return None
    return p, q


def launch_tiled(
    source: str, out: Tensor, src: Tensor, dims: tuple[int, int], stream: Stream
) -> None:
    """``out`` <- ``src`` (one dtype) by ``copy_tiled``, with ``dims`` from ``tiled_dims``."""
    p, q = dims
    packed = layout([out, src])
    shape = packed["shape"]
    tiles = -(-int(shape[p]) // _TILE) * -(-int(shape[q]) // _TILE)
    tiles *= out.numel() // (int(shape[p]) * int(shape[q]))
    if tiles == 0:
        return
    device = stream.device
    name = f"vram::copy_tiled<{BITS_TYPES[out.dtype.itemsize]}>"
    kernel = device.driver.compile(device.index, source, name)
    args = (out.data_ptr(), src.data_ptr(), np.int32(p), np.int32(q), packed)
    grid = (min(tiles, _MAX_BLOCKS), 1, 1)
    device.driver.launch(kernel, grid, (_TILE, _TILE_ROWS, 1), args, stream.cuda_stream)
