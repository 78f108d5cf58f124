"""Reading and writing through index tensors: one plan for every gather and scatter
(PyTorch's index, index_select, gather, scatter, index_put kernels share one too).

A call is described as an iteration shape and, over it, the strides of each operand: the
output (or destination), the source, and K index tensors (0 along broadcast dimensions).
Gather: ``out[i] = src[base(i) + sum_k idx_k[i] * stride_k]``; scatter: ``dst[base(i) +
sum_k idx_k[i] * stride_k] (=, +=, *=) src[i]``, where ``base`` is the indexed operand's
strides with the indexed dimensions taken out (``Geometry``). The ops (vram/ops/_indexing.py)
restride their tensors into this form once per signature; a plan keeps the launch.

Index values are checked on the device: one out of range stops the kernel with a
device-side assert on a GPU (the error surfaces at the next synchronization, as PyTorch's);
the references raise PyTorch's CPU error before they write anything, at once on the cpu
device and at the next synchronization on sim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import numpy as np

from .._device import Device
from .._dtypes import dtype
from .._errors import CudaError
from .._streams import this_thread
from .._tensor import Tensor, contiguous_strides
from ..driver._work import Arg, Kernel, Launch, View
from ._index_kernels import BLOCK, bits_type, element_offsets, grid, offsets_struct, source
from ._iterator import plan_layout
from ._kernels import c_type
from ._plans import launcher, new_tensor

__all__ = ["Geometry", "GatherPlan", "ScatterPlan", "ASSIGN", "ADD", "MULTIPLY", "extent"]

ASSIGN, ADD, MULTIPLY = 0, 1, 2  # scatter modes (kAssign, kAdd, kMultiply in index.cu)
_INDEX_C = {"int64": "long long", "int32": "int"}


@dataclass(frozen=True)
class Geometry:
    """How the indexed operand is reached: ``base`` its strides over ``shape`` (0 along the
    dimensions the indices take), per index the ``sizes`` and ``strides`` of the dimension it
    indexes and that dimension (``dims``, for messages); negative indices count from the end
    when ``wrap``. A bad index raises ``error(message)`` in the references of the cpu device,
    and, where ``assert_in`` names the kernel (a GPU or sim device), the CudaError of a
    device-side assert (CUDA_ERROR_ASSERT) that a GPU reports at the next synchronization."""

    shape: tuple[int, ...]
    base: tuple[int, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    dims: tuple[int, ...]
    wrap: bool
    error: type[Exception]
    message: str  # formatted with value, dim and size
    assert_in: str = ""

    def positions(self, indices: tuple[np.ndarray, ...]) -> np.ndarray:
        """The element offset each position of ``shape`` reaches; the error for the first
        bad index value."""
        at = element_offsets(self.shape, self.base)
        for k, idx in enumerate(indices):
            values = np.broadcast_to(np.asarray(idx).astype(np.int64), self.shape)
            size = self.sizes[k]
            wrapped = np.where(values < 0, values + size, values) if self.wrap else values
            bad = (wrapped < 0) | (wrapped >= size)
            if bad.any():
                value = int(values[bad].flat[0])
                message = self.message.format(value=value, dim=self.dims[k], size=size)
                if self.assert_in:
                    raise CudaError(
                        self.assert_in, "CUDA_ERROR_ASSERT", f"device-side assert: {message}"
                    )
                raise self.error(message)
            at = at + wrapped * self.strides[k]
        return at


def _gather_reference(*args: Any) -> None:
    """out[i] = src[positions(i)] (``src`` a flat view of the source's span)."""
    *arrays, geometry = args
    out, src, indices = arrays[0], arrays[1], arrays[2:]
    out[...] = src[geometry.positions(tuple(indices))]


def _scatter_reference(*args: Any) -> None:
    """dst[positions(i)] (=, +=, *=) src[i] (``dst`` a flat view of the destination's span);
    where positions repeat, assignment keeps the last value (a GPU keeps any one)."""
    *arrays, geometry, mode = args
    dst, src, indices = arrays[0], arrays[1], arrays[2:]
    at = geometry.positions(tuple(indices)).reshape(-1)
    values = np.broadcast_to(np.asarray(src), geometry.shape).reshape(-1)
    if mode == ASSIGN:
        dst[at] = values
    elif mode == ADD:
        np.add.at(dst, at, values)
    else:
        np.multiply.at(dst, at, values)


@cache
def _kernel(name: str, scatter: bool) -> Kernel:
    return Kernel(name, source(), _scatter_reference if scatter else _gather_reference)


def extent(t: Tensor) -> int:
    """Elements from ``t``'s first element to its last (0 when it has none)."""
    if 0 in t._shape:
        return 0
    return sum((n - 1) * s for n, s in zip(t._shape, t._stride, strict=True)) + 1


def _indexed_struct(geometry: Geometry) -> np.void:
    k = len(geometry.sizes)
    packed = np.zeros((), np.dtype([("sizes", np.int64, (k,)), ("strides", np.int64, (k,))]))
    packed["sizes"] = geometry.sizes
    packed["strides"] = geometry.strides
    return packed[()]


def _launch(
    kernel: Kernel,
    entry: str,
    device: Device,
    operands: list[tuple[int, ...]],
    geometry: Geometry,
    views: tuple[View, ...],
    values: tuple[Any, ...],
) -> Any:
    """The launcher of one gather or scatter: ``operands`` the strides over the shape of the
    written operand, the read one and the index tensors."""
    shape = geometry.shape
    numel = math.prod(shape)
    layout = plan_layout(shape, operands)
    index = "int" if layout.index32 else "long long"
    entry = entry.format(index=index)
    k = len(operands) - 2
    params = (
        Arg("P"),
        Arg("P"),
        Arg("P" * k),
        np.int64(numel),
        offsets_struct(layout.sizes, layout.strides, layout.index32),
        _indexed_struct(geometry),
    )
    return launcher(
        device,
        Launch(kernel, entry, (grid(device, numel), 1, 1), (BLOCK, 1, 1), params, views, values),
    )


def _for_device(geometry: Geometry, name: str, device: Device) -> Geometry:
    """``geometry`` as the references of ``device`` report a bad index (see Geometry)."""
    return geometry if device.type == "cpu" else replace(geometry, assert_in=name)


def _bytes(strides: tuple[int, ...], dt: dtype) -> tuple[int, ...]:
    return tuple(s * dt.itemsize for s in strides)


def _index_type(indices: list[tuple[dtype, tuple[int, ...]]]) -> str:
    return _INDEX_C[indices[0][0].name]


class GatherPlan:
    """``out = src[...]`` of one signature: the output it makes and the launcher."""

    __slots__ = ("device", "shape", "stride", "dtype", "nbytes", "numel", "run")

    def __init__(
        self,
        name: str,
        src: Tensor,
        geometry: Geometry,
        indices: list[tuple[dtype, tuple[int, ...]]],
    ) -> None:
        """``indices``: per index tensor its dtype and strides over ``geometry.shape`` (all
        of one dtype, int32 or int64)."""
        shape = geometry.shape
        self.device = src.device
        self.shape = shape
        self.stride = contiguous_strides(shape)
        self.dtype = src.dtype
        self.numel = math.prod(shape)
        self.nbytes = self.numel * src.dtype.itemsize
        self.run = None
        if not self.numel:
            return
        dt = src.dtype
        entry = (
            f"vram::index::gather<{bits_type(dt)}, {_index_type(indices)}, {len(indices)}, "
            f"{{index}}, {'true' if geometry.wrap else 'false'}>"
        )
        views = (
            View(shape, _bytes(self.stride, dt), dt.np),
            View((extent(src),), (dt.itemsize,), dt.np),
            *(View(shape, _bytes(st, it), it.np) for it, st in indices),
        )
        operands = [self.stride, geometry.base, *(st for _, st in indices)]
        geometry = _for_device(geometry, name, src.device)
        self.run = _launch(
            _kernel(name, False), entry, src.device, operands, geometry, views, (geometry,)
        )

    def __call__(self, src: Tensor, indices: tuple[Tensor, ...]) -> Tensor:
        device = self.device
        out = new_tensor(self.shape, self.stride, self.dtype, device, self.nbytes)
        if self.run is not None:
            stream = this_thread.handles[device]
            self.run(stream, out._storage.ptr, src.data_ptr(), *(t.data_ptr() for t in indices))
        return out


class ScatterPlan:
    """``dst[...] (=, +=, *=) src`` of one signature: the launcher."""

    __slots__ = ("device", "run")

    def __init__(
        self,
        name: str,
        mode: int,
        dst: Tensor,
        geometry: Geometry,
        src: tuple[dtype, tuple[int, ...]],
        indices: list[tuple[dtype, tuple[int, ...]]],
    ) -> None:
        """``src``: the source's dtype (``dst``'s) and strides over ``geometry.shape``."""
        self.device = dst.device
        self.run = None
        shape = geometry.shape
        if not math.prod(shape):
            return
        dt, src_strides = src
        element = bits_type(dt) if mode == ASSIGN else c_type(dt)
        entry = (
            f"vram::index::scatter<{element}, {_index_type(indices)}, {len(indices)}, "
            f"{{index}}, {mode}, {'true' if geometry.wrap else 'false'}>"
        )
        views = (
            View((extent(dst),), (dt.itemsize,), dt.np),
            View(shape, _bytes(src_strides, dt), dt.np),
            *(View(shape, _bytes(st, it), it.np) for it, st in indices),
        )
        operands = [geometry.base, src_strides, *(st for _, st in indices)]
        geometry = _for_device(geometry, name, dst.device)
        kernel = _kernel(name, True)
        self.run = _launch(kernel, entry, dst.device, operands, geometry, views, (geometry, mode))

    def __call__(self, dst: Tensor, src: Tensor, indices: tuple[Tensor, ...]) -> None:
        if self.run is not None:
            device = self.device
            stream = this_thread.handles[device]
            self.run(stream, dst.data_ptr(), src.data_ptr(), *(t.data_ptr() for t in indices))
