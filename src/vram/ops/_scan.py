"""cumsum and cumprod (kernels/scan.cu), one plan per signature.

The input is made contiguous (a copy only when it is not) and seen as [outer, n, inner]
around the scanned dim; the output is a new contiguous tensor. Dtypes as PyTorch's: bool
and integers accumulate to int64 unless ``dtype=`` says otherwise; float16 and bfloat16
accumulate in float32; ``dtype=`` converts the elements as they are loaded.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np

from .._dtypes import as_dtype, bool_, dtype, int64, uint8
from .._streams import this_thread
from .._tensor import Tensor, contiguous_strides, dispatch
from ..driver._work import Arg, Kernel, Launch, View
from ._kernels import KERNEL_DIR, c_type
from ._math import _torch_name
from ._plans import launcher, new_tensor
from ._pointwise import store as _put
from ._promotion import kind, opmath
from ._reduce import multiprocessors, next_pow2, plan_for
from ._reductions import one_dim

__all__ = ["cumsum", "cumprod", "ScanPlan"]

_ROW_THREADS = 1024  # threads of a row scan's block at most
_COLUMN_THREADS = 256
_TILE = 8192  # elements of a tile of a long row (a block of _ROW_THREADS scans one)


@cache
def source() -> str:
    folder = KERNEL_DIR
    return "".join((folder / name).read_text() for name in ("common.cuh", "group.cuh", "scan.cu"))


def _scan_np(prod: bool):
    return np.cumprod if prod else np.cumsum


@cache
def _kernels(prod: bool) -> tuple[Kernel, Kernel, Kernel]:
    """The scans' Kernels and NumPy references: a whole scan (x [outer, n, inner] along
    axis 1), the totals of a long row's tiles, and the tiles scanned on top of the running
    totals of the tiles before them (x [outer, n], totals [outer, tiles])."""
    scan = _scan_np(prod)
    identity = 1 if prod else 0

    def whole(x: np.ndarray, out: np.ndarray, d: np.dtype, a: np.dtype) -> None:
        with np.errstate(all="ignore"):
            values = np.asarray(x).astype(d).astype(a)
            _put(out, scan(values, axis=1, dtype=a))

    def tiled(x: np.ndarray, d: np.dtype, a: np.dtype, tile: int) -> np.ndarray:
        """x [outer, n] as [outer, tiles, tile] of a, the last tile padded with the identity."""
        values = np.asarray(x).astype(d).astype(a)
        outer, n = values.shape
        padded = np.full((outer, -(-n // tile) * tile), identity, a)
        padded[:, :n] = values
        return padded.reshape(outer, -1, tile)

    def totals(x: np.ndarray, out: np.ndarray, d: np.dtype, a: np.dtype, tile: int) -> None:
        with np.errstate(all="ignore"):
            tiles = tiled(x, d, a, tile)
            out[...] = tiles.prod(axis=2, dtype=a) if prod else tiles.sum(axis=2, dtype=a)

    def tiles(x, out, running, d: np.dtype, a: np.dtype, tile: int) -> None:
        with np.errstate(all="ignore"):
            scanned = scan(tiled(x, d, a, tile), axis=2, dtype=a)
            before = np.full(np.asarray(running).shape, identity, a)
            before[:, 1:] = np.asarray(running)[:, :-1]
            scanned = scanned * before[:, :, None] if prod else scanned + before[:, :, None]
            _put(out, scanned.reshape(scanned.shape[0], -1)[:, : out.shape[1]])

    name = "cumprod" if prod else "cumsum"
    return (
        Kernel(name, source(), whole),
        Kernel(name, source(), totals),
        Kernel(name, source(), tiles),
    )


def _rows_launch(kernel, types, outer, n, sms, views, values) -> Launch:
    """scan_rows over [outer, n]: up to _ROW_THREADS threads a row, small rows share blocks."""
    threads = min(_ROW_THREADS, next_pow2(n))
    rows = max(1, min(256 // threads, next_pow2(-(-outer // sms))), 32 // threads)
    grid = max(1, min(-(-outer // rows), sms * (2048 // (threads * rows)) * 8))
    params = (Arg("P"), Arg("P"), np.int64(outer), np.int64(n))
    entry = f"vram::scan_rows<{types}>"
    return Launch(kernel, entry, (grid, 1, 1), (threads, rows, 1), params, views, values)


def _strided(shape: tuple[int, ...], dt: dtype) -> View:
    strides, step = [], dt.itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return View(shape, tuple(reversed(strides)), dt.np)


class ScanPlan:
    """One signature of cumsum or cumprod: one launch, or three for long rows (few rows
    of more than two tiles: a block a row would leave the GPU idle)."""

    __slots__ = ("device", "shape", "stride", "out", "nbytes", "numel", "copy", "runs", "workspace")

    def __init__(self, x: Tensor, dim: int, d: dtype, prod: bool) -> None:
        device = x.device
        self.device = device
        self.shape = x._shape
        self.stride = contiguous_strides(x._shape)
        self.out = d
        self.numel = math.prod(x._shape)
        self.nbytes = self.numel * d.itemsize
        self.copy = not x.is_contiguous()
        shape = x._shape or (1,)
        outer, n, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1 :])
        a = opmath(d)
        flag = "true" if prod else "false"
        c_in, c_d, c_a = c_type(x.dtype), c_type(d), c_type(a)
        types = f"{c_in}, {c_d}, {c_a}, {c_d}, {flag}"
        whole, totals, tiles = _kernels(prod)
        sms = multiprocessors(device)
        self.workspace = 0
        if inner == 1 and outer < sms and n > 2 * _TILE:
            count = -(-n // _TILE)
            self.workspace = outer * count * a.itemsize  # the totals, then their running sums
            rows = (_strided((outer, n), x.dtype), _strided((outer, n), d))
            sums = _strided((outer, count), a)
            block, grid = (_ROW_THREADS, 1, 1), (count, outer, 1)
            tile = np.int64(_TILE)
            first = Launch(
                totals,
                f"vram::scan_tile_totals<{c_in}, {c_d}, {c_a}, {flag}>",
                grid,
                block,
                (Arg("P"), Arg("P"), np.int64(n), tile),
                (rows[0], sums),
                (d.np, a.np, _TILE),
            )
            running = _strided((outer, count, 1), a)
            second = _rows_launch(
                whole,
                f"{c_a}, {c_a}, {c_a}, {c_a}, {flag}",
                outer,
                count,
                sms,
                (running, running),
                (a.np, a.np),
            )
            third = Launch(
                tiles,
                f"vram::scan_tiles<{types}>",
                grid,
                block,
                (Arg("P"), Arg("P"), Arg("P"), np.int64(n), tile),
                (rows[0], rows[1], sums),
                (d.np, a.np, _TILE),
            )
            self.runs = tuple(launcher(device, launch) for launch in (first, second, third))
            return
        views = (_strided((outer, n, inner), x.dtype), _strided((outer, n, inner), d))
        if inner == 1:
            launch = _rows_launch(whole, types, outer, n, sms, views, (d.np, a.np))
        else:
            columns = outer * inner
            grid = max(1, min(-(-columns // _COLUMN_THREADS), sms * 8))
            entry = f"vram::scan_columns<{types}>"
            params = (Arg("P"), Arg("P"), np.int64(outer), np.int64(n), np.int64(inner))
            block = (_COLUMN_THREADS, 1, 1)
            launch = Launch(whole, entry, (grid, 1, 1), block, params, views, (d.np, a.np))
        self.runs = (launcher(device, launch),)

    def __call__(self, x: Tensor) -> Tensor:
        device = self.device
        result = new_tensor(self.shape, self.stride, self.out, device, self.nbytes)
        if not self.numel:
            return result
        if self.copy:
            x = x.contiguous()
        stream = this_thread.handles[device]
        ptr = x._storage.ptr + x._offset * x.dtype.itemsize
        if not self.workspace:
            self.runs[0](stream, ptr, result._storage.ptr)
            return result
        first, second, third = self.runs
        sums = new_tensor((self.workspace,), (1,), uint8, device, self.workspace)
        running = new_tensor((self.workspace,), (1,), uint8, device, self.workspace)
        first(stream, ptr, sums._storage.ptr)
        second(stream, sums._storage.ptr, running._storage.ptr)
        third(stream, ptr, result._storage.ptr, running._storage.ptr)
        return result


def _build(x: Any, dim: Any, dt: Any, prod: bool) -> ScanPlan:
    name = "cumprod" if prod else "cumsum"
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(x).__name__}")
    d = as_dtype(dt, f"{name}(): argument 'dtype'") if dt is not None else None
    if d is None:
        d = int64 if kind(x.dtype) <= 1 else x.dtype
    if d is bool_:
        raise NotImplementedError(f"\"{name}\" not implemented for '{_torch_name(d)}'")
    return ScanPlan(x, one_dim(name, dim, x.ndim), d, prod)


def _plan(x: Any, dim: Any, dt: Any, prod: bool) -> ScanPlan:
    name = "cumprod" if prod else "cumsum"
    if isinstance(x, Tensor):
        key = (name, x.dtype, x._shape, x._stride, x._storage.device, dim, dt)
        return plan_for(key, _build, x, dim, dt, prod)
    return _build(x, dim, dt, prod)


def cumsum(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """torch.cumsum: running sums along ``dim`` (bool and integers in int64)."""
    return _plan(input, dim, dtype, False)(input)


def cumprod(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """torch.cumprod: running products along ``dim`` (bool and integers in int64)."""
    return _plan(input, dim, dtype, True)(input)


dispatch.update(cumsum=cumsum, cumprod=cumprod)
