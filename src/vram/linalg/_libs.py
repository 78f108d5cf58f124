"""The library calls vram.linalg makes, one interface for every device: ``LIBS``.

Each method runs one declaration of ``_calls`` (a kernel of kernels/linalg.cu or
kernels/lu.cu, a cuBLAS or cuSOLVER call) on a stream: the launch is prepared once per
signature (the device's driver compiles the kernel and packs its constants, or queues the
reference on the simulated GPU: ``ops._plans.launcher``) and kept in ``PREPARED``; a call is
a key, a lookup and the launcher's run. So the dispatch above (``_lu``, ``_solve``,
``_blocked``) is one piece of code for every device: its workspaces, streams, events and
pointer arrays are exercised in CI exactly as on a GPU.

The interface: every method takes the vram Stream to run on; pointers are ints; ``dtype`` is
a vram dtype name ("float32", "float64", "complex64", "complex128"); everything is queued on
the stream, nothing synchronizes (but ``first_nonzero``, which says so). ``PinnedArray`` and
``per_thread`` are the page-locked buffers the kernels write for the host.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

import numpy as np

from .. import memory
from .._device import Device
from .._streams import Stream
from ..blas import cublas_workspace_size
from ..driver._work import Arg, Launch, Launcher, View
from ..ops._plans import PlanCache, ask, launcher
from . import _calls
from ._blocked import PanelConfig, Source, Spans, outside, solve_columns, solve_tile, solve_warp
from ._blocked import swap_tile as _swap_tile
from ._calls import NP, PANEL_FIELDS, SOLVE_FIELDS, SWAP_FIELDS

__all__ = ["LIBS", "Libs", "PREPARED", "PinnedArray", "per_thread"]

T = TypeVar("T")

_BLOCK = 256  # threads per block of the helper kernels
_MAX_BLOCKS = 4096  # the helper kernels loop over the rest (grid-stride)
_INT32, _INT64, _UINT64 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint64)
_BYTES = np.dtype(np.uint8)
_PANEL = (Arg(PANEL_FIELDS.format[1:]),)  # the struct, one kernel parameter
_SWAP = (Arg(SWAP_FIELDS.format[1:]),)
_SOLVE = (Arg(SOLVE_FIELDS.format[1:]),)

PREPARED = PlanCache()  # signature -> the launcher its device's driver prepared


class PinnedArray:
    """``count`` values of ``dtype`` in page-locked host memory, which kernels write at the
    same address (unified addressing) and the host reads once the stream is synchronized;
    given back when dropped."""

    def __init__(self, driver: Any, count: int, dtype: type) -> None:
        nbytes = count * np.dtype(dtype).itemsize
        self.ptr = driver.host_alloc(nbytes)
        self.values = driver.host_view(self.ptr, nbytes).view(dtype)
        weakref.finalize(self, driver.host_free, self.ptr)


_threads = threading.local()  # .objects: (driver, name) -> this thread's object


def per_thread(driver: Any, name: str, make: Callable[[Any], T]) -> T:
    """This thread's ``name`` object for ``driver``, made by ``make(driver)`` the first time
    (a buffer the device writes for the host: one a thread, reused call after call)."""
    objects = _threads.__dict__.setdefault("objects", {})
    found = objects.get((driver, name))
    if found is None:
        found = objects[(driver, name)] = make(driver)
    return found


def _prepared(device: Device, key: tuple, make: Callable[[], Launch]) -> Launcher:
    """The launcher of ``key`` (its declaration first, then what its views depend on), made
    by ``make()`` and prepared on ``device`` the first time."""
    found = PREPARED.get(key)
    if found is None:
        found = PREPARED.add(key, launcher(device, make()))
    return found


def _vector(count: int, dt: np.dtype) -> View:
    return View((count,), (dt.itemsize,), dt)


def _matrix(m: int, n: int, ld: int, dt: np.dtype) -> View:
    """A column-major m x n matrix of leading dimension ``ld``."""
    return View((m, n), (dt.itemsize, ld * dt.itemsize), dt)


def _matrices(batch: int, m: int, n: int, strides: tuple[int, int, int], dt: np.dtype) -> View:
    """``batch`` m x n matrices; ``strides`` in elements (batch, row, column)."""
    item = dt.itemsize
    return View((batch, m, n), tuple(s * item for s in strides), dt)


def _helper_grid(count: int) -> tuple[int, int, int]:
    return (min(-(-count // _BLOCK), _MAX_BLOCKS), 1, 1)


def _cublas_size(device: Device) -> int:
    """Bytes of cuBLAS workspace on ``device`` (vram.blas's size, by compute capability)."""
    props = device.driver.properties(device.index)
    return cublas_workspace_size(props.major, props.minor)


class Libs:
    """cuSOLVER, cuBLAS and vram's kernels, on whichever device a stream belongs to."""

    # ---- cuSOLVER ------------------------------------------------------------------------
    def getrf_workspace(self, s: Stream, dtype: str, m: int, n: int, a: int, lda: int) -> int:
        return ask(s.device, _calls.GETRF_WORKSPACE, s.cuda_stream, dtype, m, n, a, lda)

    def getrf(
        self,
        s: Stream,
        dtype: str,
        m: int,
        n: int,
        a: int,
        lda: int,
        ws: int,
        ws_bytes: int,
        ipiv: int,
        info: int,
    ) -> None:
        device = s.device
        key = (_calls.GETRF, device, dtype, m, n, lda, ws_bytes, bool(ipiv))

        def make() -> Launch:
            dt = NP[dtype]
            pivots = _vector(min(m, n), _INT32) if ipiv else None
            views = (_matrix(m, n, lda, dt), _vector(ws_bytes, _BYTES), pivots, _vector(1, _INT32))
            return Launch(_calls.GETRF, views=views, values=(dtype, m, n, lda, ws_bytes))

        _prepared(device, key, make)(s.cuda_stream, a, ws, ipiv, info)

    def xgetrf_workspace(
        self, s: Stream, dtype: str, m: int, n: int, a: int, lda: int, algo: int
    ) -> tuple[int, int]:
        return ask(s.device, _calls.XGETRF_WORKSPACE, s.cuda_stream, dtype, m, n, a, lda, algo)

    def xgetrf(
        self,
        s: Stream,
        dtype: str,
        m: int,
        n: int,
        a: int,
        lda: int,
        ipiv64: int,
        ws: int,
        ws_bytes: int,
        host_bytes: int,
        info: int,
        algo: int,
    ) -> None:
        device = s.device
        key = (_calls.XGETRF, device, dtype, m, n, lda, ws_bytes, host_bytes, algo, bool(ipiv64))

        def make() -> Launch:
            dt = NP[dtype]
            pivots = _vector(min(m, n), _INT64) if ipiv64 else None
            views = (_matrix(m, n, lda, dt), _vector(ws_bytes, _BYTES), pivots, _vector(1, _INT32))
            values = (dtype, m, n, lda, ws_bytes, host_bytes, algo)
            return Launch(_calls.XGETRF, views=views, values=values)

        _prepared(device, key, make)(s.cuda_stream, a, ws, ipiv64, info)

    def getrs(
        self,
        s: Stream,
        dtype: str,
        trans: int,
        n: int,
        nrhs: int,
        a: int,
        lda: int,
        ipiv: int,
        b: int,
        ldb: int,
        info: int,
        wide: bool = False,
    ) -> None:
        """getrs; with ``wide``, the 64-bit API's Xgetrs (``ipiv``: int64 pivots)."""
        device = s.device
        key = (_calls.GETRS, device, dtype, trans, n, nrhs, lda, ldb, wide)

        def make() -> Launch:
            dt = NP[dtype]
            views = (
                _matrix(n, n, lda, dt),
                _vector(n, _INT64 if wide else _INT32),
                _matrix(n, nrhs, ldb, dt),
                _vector(1, _INT32),
            )
            return Launch(_calls.GETRS, views=views, values=(dtype, trans, n, nrhs, lda, ldb, wide))

        _prepared(device, key, make)(s.cuda_stream, a, ipiv, b, info)

    # ---- cuBLAS --------------------------------------------------------------------------
    def _cublas_workspace(self, s: Stream) -> int:
        """The cuBLAS workspace of stream ``s``, of vram.blas's size (a cuBLAS handle is the
        thread's, shared with vram.blas: each call sets its stream and workspace)."""
        size = _cublas_size(s.device)
        return memory.get_workspace(size, library="cublas", device=s.device, stream=s)

    def getrf_batched(
        self,
        s: Stream,
        dtype: str,
        n: int,
        arrays: int,
        base: int,
        step: int,
        lda: int,
        pivots: int,
        info: int,
        batch: int,
    ) -> None:
        """getrfBatched over the device array ``arrays`` of pointers to the ``batch``
        matrices ``step`` bytes apart from ``base`` (``pointers`` made it)."""
        device = s.device
        size = _cublas_size(device)
        key = (_calls.GETRF_BATCHED, device, dtype, n, lda, step, batch, bool(pivots))

        def make() -> Launch:
            dt = NP[dtype]
            item = dt.itemsize
            views = (
                _vector(batch, _UINT64),
                View((batch, n, n), (step, item, lda * item), dt),
                None,
                View((batch, n), (4 * n, 4), _INT32) if pivots else None,
                _vector(batch, _INT32),
                None,
            )
            values = (dtype, n, lda, step, batch, size)
            return Launch(_calls.GETRF_BATCHED, views=views, values=values)

        run = _prepared(device, key, make)
        run(s.cuda_stream, arrays, base, base, pivots, info, self._cublas_workspace(s))

    def getrs_batched(
        self,
        s: Stream,
        dtype: str,
        trans: int,
        n: int,
        nrhs: int,
        a_arrays: int,
        a_base: int,
        a_step: int,
        pivots: int,
        b_arrays: int,
        b_base: int,
        b_step: int,
        batch: int,
    ) -> None:
        """getrsBatched over pointer arrays to packed factors (n x n, ``a_step`` bytes apart)
        and right-hand sides (n x nrhs column-major, ``b_step`` bytes apart)."""
        device = s.device
        size = _cublas_size(device)
        key = (_calls.GETRS_BATCHED, device, dtype, trans, n, nrhs, a_step, b_step, batch)

        def make() -> Launch:
            dt = NP[dtype]
            item = dt.itemsize
            views = (
                _vector(batch, _UINT64),
                View((batch, n, n), (a_step, item, n * item), dt),
                None,
                View((batch, n), (4 * n, 4), _INT32),
                _vector(batch, _UINT64),
                View((batch, n, nrhs), (b_step, item, n * item), dt),
                None,
                None,
            )
            values = (dtype, trans, n, nrhs, a_step, b_step, batch, size)
            return Launch(_calls.GETRS_BATCHED, views=views, values=values)

        run = _prepared(device, key, make)
        ws = self._cublas_workspace(s)
        run(s.cuda_stream, a_arrays, a_base, a_base, pivots, b_arrays, b_base, b_base, ws)

    # ---- helper kernels (kernels/linalg.cu) ------------------------------------------------
    def _helper(
        self,
        s: Stream,
        kernel: Any,
        entry: str,
        count: int,
        formats: str,
        views: Callable[[], tuple],
        constants: tuple,
        args: tuple,
        values: tuple = (),
        blocks: int | None = None,
    ) -> None:
        """Kernel ``entry`` over ``count`` items: per call ``args`` (``formats``, one
        struct character each; ``views()`` says how the reference sees them, asked when
        the launch is first prepared), then the kernel's ``constants`` (Python ints: 8
        bytes, the kernels' ``long long``; none is negative, and they and the entry decide
        the views); the reference takes ``values`` after the arguments."""
        device = s.device
        key = (kernel, device, entry, count, constants)

        def make() -> Launch:
            grid = (blocks, 1, 1) if blocks is not None else _helper_grid(count)
            params = (*(Arg(f) for f in formats), *constants)
            entry_ = _calls.NS + entry
            return Launch(kernel, entry_, grid, (_BLOCK, 1, 1), params, views(), values)

        _prepared(device, key, make)(s.cuda_stream, *args)

    def pointers(self, s: Stream, out: int, base: int, stride_bytes: int, count: int) -> None:
        if count > 0:
            self._helper(s, _calls.POINTERS, "pointers", count, "PQq",
                         lambda: (_vector(count, _UINT64),), (count,),
                         (out, base, stride_bytes))  # fmt: skip

    def pivots_to_int32(self, s: Stream, dst: int, src: int, count: int) -> None:
        if count > 0:
            self._helper(s, _calls.PIVOTS_TO_INT32, "pivots_to_int32", count, "PP",
                         lambda: (_vector(count, _INT32), _vector(count, _INT64)), (count,),
                         (dst, src))  # fmt: skip

    def pivots_to_int64(self, s: Stream, dst: int, src: int, count: int) -> None:
        if count > 0:
            self._helper(s, _calls.PIVOTS_TO_INT64, "pivots_to_int64", count, "PP",
                         lambda: (_vector(count, _INT64), _vector(count, _INT32)), (count,),
                         (dst, src))  # fmt: skip

    def trivial_pivots(self, s: Stream, dst: int, k: int, count: int) -> None:
        if count > 0:
            self._helper(s, _calls.TRIVIAL_PIVOTS, "trivial_pivots", count, "P",
                         lambda: (_vector(count, _INT32),), (k, count), (dst,),
                         (k,))  # fmt: skip

    def first_nonzero(self, s: Stream, info: int, count: int) -> tuple[int, int] | None:
        """(index, value) of the first nonzero of the ``count`` int32 at ``info``, or None:
        found by one block on the device, which writes the two numbers to pinned memory.
        Synchronizes ``s``."""
        if count <= 0:
            return None
        found = per_thread(s.device.driver, "first_nonzero", lambda d: PinnedArray(d, 2, np.int64))
        self._helper(s, _calls.FIRST_NONZERO, "first_nonzero", count, "PP",
                     lambda: (_vector(2, _INT64), _vector(count, _INT32)), (count,),
                     (found.ptr, info), blocks=1)  # fmt: skip
        s.synchronize()
        index, value = found.values.tolist()
        return None if index < 0 else (index, value)

    def conj(self, s: Stream, dtype: str, ptr: int, count: int) -> None:
        if count > 0:
            entry = f"conj<{_calls.C_TYPES[dtype]}>"
            self._helper(s, _calls.CONJ, entry, count, "P",
                         lambda: (_vector(count, NP[dtype]),), (count,), (ptr,))  # fmt: skip

    def _diagonals(self, dtype: str, n: int, batch: int) -> tuple[View, View]:
        """The diagonals of ``batch`` packed n x n factors, and their pivots."""
        item = NP[dtype].itemsize
        return View((batch, n), (n * n * item, (n + 1) * item), NP[dtype]), View(
            (batch, n), (4 * n, 4), _INT32
        )

    def det(self, s: Stream, dtype: str, out: int, lu: int, piv: int, n: int, batch: int) -> None:
        if batch > 0:
            entry = f"det<{_calls.C_TYPES[dtype]}>"
            self._helper(s, _calls.DET, entry, batch, "PPP",
                         lambda: (_vector(batch, NP[dtype]), *self._diagonals(dtype, n, batch)),
                         (n, batch), (out, lu, piv))  # fmt: skip

    def slogdet(
        self, s: Stream, dtype: str, sign: int, logabs: int, lu: int, piv: int, n: int, batch: int
    ) -> None:
        if batch > 0:
            dt = NP[dtype]
            real = np.dtype(dt.char.lower()) if dt.kind == "c" else dt
            entry = f"slogdet<{_calls.C_TYPES[dtype]}>"
            self._helper(s, _calls.SLOGDET, entry, batch, "PPPP",
                         lambda: (_vector(batch, dt), _vector(batch, real),
                                  *self._diagonals(dtype, n, batch)),
                         (n, batch), (sign, logabs, lu, piv))  # fmt: skip

    # ---- the blocked LU (kernels/lu.cu, ``_blocked``) --------------------------------------
    def lu_panel(
        self,
        s: Stream,
        dtype: str,
        config: PanelConfig,
        lu: int,
        stride: int,
        m: int,
        batch: int,
        source: Source,
        k0: int,
        jb: int,
        pivots: int,
        k: int,
        info: int,
        pivot: bool,
        update: int = 0,
        failed: int = 0,
    ) -> None:
        src, src_batch, src_row, src_col = source
        device = s.device
        key = (_calls.PANEL, device, dtype, config, m, stride, batch, src_batch, src_row,
               src_col, k, bool(failed))  # fmt: skip

        def make() -> Launch:
            dt = NP[dtype]
            n = stride // m
            views = [None] * 15
            views[0] = _matrices(batch, m, n, (stride, 1, m), dt)
            views[2] = _matrices(batch, m, n, (src_batch, src_row, src_col), dt)
            views[6] = View((batch, k), (4 * k, 4), _INT32)
            views[8] = _vector(batch, _INT32)
            views[14] = _vector(1, _INT32) if failed else None
            grid = (batch * config.blocks, 1, 1)
            return Launch(_calls.PANEL, _calls.panel_name(dtype, config), grid,
                          (config.threads, 1, 1), _PANEL, tuple(views),
                          cluster=config.blocks)  # fmt: skip

        _prepared(device, key, make)(
            s.cuda_stream, lu, stride, src, src_batch, src_row, src_col, pivots, k, info, m, k0,
            jb, int(pivot), update, failed,
        )  # fmt: skip

    def lu_swap_trsm(
        self,
        s: Stream,
        dtype: str,
        lu: int,
        stride: int,
        m: int,
        n: int,
        batch: int,
        k0: int,
        jb: int,
        pivots: int,
        k: int,
        pivot: bool,
        spans: Spans | None = None,
    ) -> None:
        (c0, c1), (d0, d1) = spans or outside(k0, jb, n)
        device = s.device
        count = c1 - c0 + d1 - d0
        warps, columns = _swap_tile(batch, count, _multiprocessors(device))
        tiles = -(-count // columns)
        key = (_calls.SWAP_TRSM, device, dtype, m, n, batch, k, warps, columns, tiles)

        def make() -> Launch:
            views = [None] * 12
            views[0] = _matrices(batch, m, n, (stride, 1, m), NP[dtype])
            views[2] = View((batch, k), (4 * k, 4), _INT32)
            return Launch(_calls.SWAP_TRSM, _calls.swap_name(dtype, warps, columns),
                          (batch, tiles, 1), (32 * warps, 1, 1), _SWAP, tuple(views))  # fmt: skip

        _prepared(device, key, make)(
            s.cuda_stream, lu, stride, pivots, k, m, k0, jb, int(pivot), c0, c1, d0, d1
        )

    def lu_update_workspace(self, s: Stream) -> int:
        """The workspace of ``lu_update``'s GEMMs on ``s``: its cuBLAS workspace."""
        return self._cublas_workspace(s)

    def lu_update_context(self, s: Stream, dtype: str) -> tuple[Stream, int]:
        """What every ``lu_update`` on ``s`` of one call uses: the stream and its cuBLAS
        workspace."""
        return s, self._cublas_workspace(s)

    def lu_update(
        self,
        context: tuple[Stream, int],
        dtype: str,
        lu: int,
        stride: int,
        m: int,
        n: int,
        batch: int,
        k0: int,
        jb: int,
        columns: tuple[int, int] | None = None,
    ) -> None:
        """A22 -= L21 U12: rows k0 + jb.. and ``columns`` (start, stop; all of k0 + jb..
        when None) of every matrix (cuBLAS strided GEMM, in full precision). The handle is
        bound to the context's stream first: the look-ahead alternates two streams on it."""
        s, workspace = context
        rest = k0 + jb
        start, stop = columns or (rest, n)
        device = s.device
        key = (_calls.LU_UPDATE, device, dtype, m, n, batch)

        def make() -> Launch:
            dt = NP[dtype]
            scalars = np.array([-1, 1], dtype=np.float32 if dtype == "float32" else np.float64)
            views = (_matrices(batch, m, n, (stride, 1, m), dt),)
            values = (dtype, m, n, batch, _cublas_size(device), scalars)
            return Launch(_calls.LU_UPDATE, views=views + (None,) * 5, values=values)

        _prepared(device, key, make)(s.cuda_stream, lu, workspace, k0, jb, start, stop)

    def lu_solve(
        self,
        s: Stream,
        dtype: str,
        transposed: bool,
        n: int,
        nrhs: int,
        batch: int,
        lu: int,
        pivots: int,
        source: Source,
        x: int,
    ) -> None:
        b, b_batch, b_row, b_col = source
        rhs = solve_tile(n, nrhs)
        device = s.device
        key = (_calls.SOLVE, device, dtype, n, nrhs, batch, b_batch, b_row, b_col)

        def make() -> Launch:
            dt = NP[dtype]
            if solve_warp(n, nrhs):  # a warp per matrix
                entry, threads = _calls.solve_warp_name(dtype, rhs), 32
            elif solve_columns(n, nrhs):  # a thread per right-hand side
                entry, threads = _calls.solve_columns_name(dtype), rhs
            else:  # a thread per row
                entry, threads = _calls.solve_name(dtype, rhs), -(-n // 32) * 32
            views = [None] * 13
            views[0] = _matrices(batch, n, n, (n * n, 1, n), dt)
            views[2] = View((batch, n), (4 * n, 4), _INT32)
            views[4] = _matrices(batch, n, nrhs, (b_batch, b_row, b_col), dt)
            views[8] = _matrices(batch, n, nrhs, (n * nrhs, 1, n), dt)
            grid = (batch * -(-nrhs // rhs), 1, 1)  # a matrix's tiles adjacent (kernels/lu.cu)
            return Launch(_calls.SOLVE, entry, grid, (threads, 1, 1), _SOLVE, tuple(views))

        _prepared(device, key, make)(
            s.cuda_stream, lu, n * n, pivots, n, b, b_batch, b_row, b_col, x, n * nrhs, n, nrhs,
            int(transposed),
        )  # fmt: skip


@cache
def _multiprocessors(device: Device) -> int:
    return device.driver.properties(device.index).multi_processor_count


LIBS = Libs()
