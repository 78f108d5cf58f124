"""vram.linalg's library calls on a GPU: cuSOLVER (``vram.driver._cusolver``), cuBLAS's
batched LU and GEMM (``vram.driver._cublas``), the helper kernels of kernels/linalg.cu and
the blocked LU's kernels of kernels/lu.cu (``_blocked``), compiled by NVRTC.

The interface (shared with ``_sim_libs.SimLibs``): every method takes the vram Stream to
run on; pointers are ints; ``dtype`` is a vram dtype name ("float32", "float64",
"complex64", "complex128"); everything is queued on the stream, nothing synchronizes.
"""

from __future__ import annotations

import struct
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .. import memory
from .._streams import Stream
from ..blas import cublas_workspace_size
from ._blocked import (
    CLUSTER_PANELS,
    PANELS,
    SOLVE_RHS,
    SWAP_TILES,
    SWAP_WIDTH,
    TALL_PANELS,
    WARP_PANEL,
    PanelConfig,
    Source,
    Spans,
    outside,
    solve_columns,
    solve_tile,
    solve_warp,
    swap_tile,
)
from ._libs import PinnedArray, per_thread

__all__ = ["CudaLibs", "kernel_names", "lu_kernel_names", "KERNEL_SOURCE", "LU_SOURCE"]

KERNEL_SOURCE = Path(__file__).parent / "kernels" / "linalg.cu"
LU_SOURCE = Path(__file__).parent / "kernels" / "lu.cu"
_NS = "vram_linalg::"
_LU_NS = "vram_lu::"
_LU_TYPES = {"float32": "float", "float64": "double"}
_C_TYPES = {
    "float32": "float",
    "float64": "double",
    "complex64": "vram_linalg::c64",
    "complex128": "vram_linalg::c128",
}
_BLOCK = 256  # threads per block of the helper kernels
_MAX_BLOCKS = 4096  # the kernels loop over the rest (grid-stride)


@cache
def _source() -> str:
    return KERNEL_SOURCE.read_text()


@cache
def _lu_source() -> str:
    return LU_SOURCE.read_text()


def _fields(*names: str) -> struct.Struct:
    """A kernel's argument struct (kernels/lu.cu): 8-byte fields, pointers as integers, in
    the order of ``names`` (the struct's fields there); its ``pack`` gives the bytes a
    launch passes by value."""
    return struct.Struct(f"<{len(names)}q")


_PANEL_ARGS = _fields("lu", "lu_stride", "src", "src_batch", "src_row", "src_col", "ipiv",
                      "ipiv_stride", "info", "m", "k0", "jb", "pivot", "update",
                      "failed")  # fmt: skip
_SWAP_ARGS = _fields("lu", "lu_stride", "ipiv", "ipiv_stride", "m", "k0", "jb", "pivot", "c0",
                     "c1", "d0", "d1")  # fmt: skip
_SOLVE_ARGS = _fields("lu", "lu_stride", "ipiv", "ipiv_stride", "b", "b_batch", "b_row",
                      "b_col", "x", "x_stride", "n", "nrhs", "trans")  # fmt: skip


@cache  # (a launch asks for its kernel's name: a lookup, not a format)
def _panel_name(dtype: str, config: PanelConfig) -> str:
    t = _LU_TYPES[dtype]
    if config == WARP_PANEL:
        return f"panel_warp<{t}>"
    if config.sub:
        return f"panel_tall<{t}, {config.threads}, {config.rows}, {config.sub}>"
    return f"panel<{t}, {config.blocks}, {config.threads}, {config.rows}, {config.width}>"


@cache
def _swap_name(dtype: str, warps: int, columns: int) -> str:
    return f"swap_trsm<{_LU_TYPES[dtype]}, {SWAP_WIDTH}, {warps}, {columns}>"


@cache
def _solve_name(dtype: str, rhs: int) -> str:
    return f"getrs<{_LU_TYPES[dtype]}, {rhs}>"


@cache
def _solve_columns_name(dtype: str) -> str:
    return f"getrs_columns<{_LU_TYPES[dtype]}>"


@cache
def _solve_warp_name(dtype: str, rhs: int) -> str:
    return f"getrs_warp<{_LU_TYPES[dtype]}, {rhs}>"


def lu_kernel_names() -> list[str]:
    """Every kernel instance of kernels/lu.cu that the blocked LU may launch."""
    names = []
    for dtype, table in PANELS.items():
        panels = table + CLUSTER_PANELS[dtype] + TALL_PANELS[dtype]
        names += [_LU_NS + _panel_name(dtype, config) for _, config in panels]
        names += [_LU_NS + _swap_name(dtype, *tile) for tile in SWAP_TILES]
        names += [_LU_NS + _solve_name(dtype, rhs) for rhs in (1, SOLVE_RHS)]
        names.append(_LU_NS + _solve_columns_name(dtype))
        names += [_LU_NS + _solve_warp_name(dtype, rhs) for rhs in (1, SOLVE_RHS)]
    return names


def kernel_names() -> list[str]:
    """Every kernel instance of kernels/linalg.cu that vram.linalg may launch."""
    plain = ["pointers", "pivots_to_int32", "pivots_to_int64", "trivial_pivots", "first_nonzero"]
    names = [_NS + name for name in plain]
    names += [f"{_NS}{k}<{c}>" for k in ("det", "slogdet") for c in _C_TYPES.values()]
    names += [f"{_NS}conj<{_C_TYPES[d]}>" for d in ("complex64", "complex128")]
    return names


class CudaLibs:
    """cuSOLVER, cuBLAS and vram's helper kernels on a GPU."""

    def __init__(self) -> None:
        from ..driver import _cublas, _cusolver, get_driver

        self.solver = _cusolver
        self.blas = _cublas
        self.driver = get_driver("cuda")  # (every stream's: a launch does not look it up)
        self._kernels: dict[tuple[int, str], Any] = {}  # (device, name) -> compiled kernel
        self._lu_kernels: dict[tuple[int, str], Any] = {}  # the same, of kernels/lu.cu

    # ---- cuSOLVER ------------------------------------------------------------------------
    def getrf_workspace(self, s: Stream, dtype: str, m: int, n: int, a: int, lda: int) -> int:
        return self.solver.getrf_buffer_size(s.device.index, s.cuda_stream, dtype, m, n, a, lda)

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
        self.solver.getrf(s.device.index, s.cuda_stream, dtype, m, n, a, lda, ws, ipiv, info)

    def xgetrf_workspace(
        self, s: Stream, dtype: str, m: int, n: int, a: int, lda: int, algo: int
    ) -> tuple[int, int]:
        index = s.device.index
        return self.solver.xgetrf_buffer_size(index, s.cuda_stream, dtype, m, n, a, lda, algo)

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
        host = np.empty(max(host_bytes, 1), dtype=np.uint8)  # used during the call only
        self.solver.xgetrf(
            s.device.index,
            s.cuda_stream,
            dtype,
            m,
            n,
            a,
            lda,
            ipiv64,
            ws,
            ws_bytes,
            host.ctypes.data,
            host_bytes,
            info,
            algo,
        )

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
    ) -> None:
        self.solver.getrs(
            s.device.index, s.cuda_stream, dtype, trans, n, nrhs, a, lda, ipiv, b, ldb, info
        )

    def xgetrs(
        self,
        s: Stream,
        dtype: str,
        trans: int,
        n: int,
        nrhs: int,
        a: int,
        lda: int,
        ipiv64: int,
        b: int,
        ldb: int,
        info: int,
    ) -> None:
        self.solver.xgetrs(
            s.device.index, s.cuda_stream, dtype, trans, n, nrhs, a, lda, ipiv64, b, ldb, info
        )

    # ---- cuBLAS --------------------------------------------------------------------------
    def _blas_handle(self, s: Stream) -> int:
        """The thread's cuBLAS handle on stream ``s``, with the cuBLAS workspace of ``s`` (as
        vram.blas sets it: the handle is shared, and its last workspace may be another
        stream's)."""
        index = s.device.index
        handle = self.blas.handle(index)
        self.blas.use_device(index)
        self.blas.set_stream(handle, s.cuda_stream)
        self.blas.set_workspace(handle, *self._cublas_workspace(s))
        return handle

    @staticmethod
    def _cublas_workspace(s: Stream) -> tuple[int, int]:
        """(pointer, bytes): the cuBLAS workspace of stream ``s``, of vram.blas's size."""
        props = s.device.driver.properties(s.device.index)
        size = cublas_workspace_size(props.major, props.minor)
        return memory.get_workspace(size, library="cublas", device=s.device, stream=s), size

    def getrf_batched(
        self,
        s: Stream,
        dtype: str,
        n: int,
        a_array: int,
        lda: int,
        pivots: int,
        info: int,
        batch: int,
    ) -> None:
        handle = self._blas_handle(s)
        self.blas.getrf_batched(handle, dtype, n, a_array, lda, pivots, info, batch)

    def getrs_batched(
        self,
        s: Stream,
        dtype: str,
        trans: int,
        n: int,
        nrhs: int,
        a_array: int,
        lda: int,
        pivots: int,
        b_array: int,
        ldb: int,
        batch: int,
    ) -> None:
        handle = self._blas_handle(s)
        self.blas.getrs_batched(
            handle, dtype, trans, n, nrhs, a_array, lda, pivots, b_array, ldb, batch
        )

    # ---- helper kernels ------------------------------------------------------------------
    def _launch(
        self, s: Stream, name: str, count: int, args: tuple, blocks: int | None = None
    ) -> None:
        """Kernel ``name`` of kernels/linalg.cu over ``count`` items: blocks enough for them
        (at most _MAX_BLOCKS), or ``blocks``. ``args``: pointers, and counts and sizes as
        Python ints too (each is 8 bytes, the kernels' ``long long``; none is negative)."""
        if count <= 0:
            return
        driver = self.driver
        key = (s.device.index, name)
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = self._kernels[key] = driver.compile(s.device.index, _source(), _NS + name)
        if blocks is None:
            blocks = min(-(-count // _BLOCK), _MAX_BLOCKS)
        driver.launch(kernel, (blocks, 1, 1), (_BLOCK, 1, 1), args, s.cuda_stream)

    def pointers(self, s: Stream, out: int, base: int, stride_bytes: int, count: int) -> None:
        self._launch(s, "pointers", count, (out, base, stride_bytes, count))

    def pivots_to_int32(self, s: Stream, dst: int, src: int, count: int) -> None:
        self._launch(s, "pivots_to_int32", count, (dst, src, count))

    def pivots_to_int64(self, s: Stream, dst: int, src: int, count: int) -> None:
        self._launch(s, "pivots_to_int64", count, (dst, src, count))

    def trivial_pivots(self, s: Stream, dst: int, k: int, count: int) -> None:
        self._launch(s, "trivial_pivots", count, (dst, k, count))

    def first_nonzero(self, s: Stream, info: int, count: int) -> tuple[int, int] | None:
        """(index, value) of the first nonzero of the ``count`` int32 at ``info``, or None:
        found by one block on the device, which writes the two numbers to pinned memory.
        Synchronizes ``s``."""
        if count <= 0:
            return None
        driver = self.driver
        found = per_thread(driver, "first_nonzero", lambda d: PinnedArray(d, 2, np.int64))
        self._launch(s, "first_nonzero", count, (found.ptr, info, count), blocks=1)
        driver.stream_synchronize(s.cuda_stream)
        index, value = found.values.tolist()
        return None if index < 0 else (index, value)

    def conj(self, s: Stream, dtype: str, ptr: int, count: int) -> None:
        self._launch(s, f"conj<{_C_TYPES[dtype]}>", count, (ptr, count))

    def det(self, s: Stream, dtype: str, out: int, lu: int, piv: int, n: int, batch: int) -> None:
        name = f"det<{_C_TYPES[dtype]}>"
        self._launch(s, name, batch, (out, lu, piv, n, batch))

    def slogdet(
        self, s: Stream, dtype: str, sign: int, logabs: int, lu: int, piv: int, n: int, batch: int
    ) -> None:
        name = f"slogdet<{_C_TYPES[dtype]}>"
        self._launch(s, name, batch, (sign, logabs, lu, piv, n, batch))

    # ---- the blocked LU (kernels/lu.cu, ``_blocked``) -------------------------------------
    def _lu_launch(
        self,
        s: Stream,
        name: str,
        grid: tuple[int, int],
        threads: int,
        args: bytes,
        cluster: int = 1,
    ) -> None:
        key = (s.device.index, name)
        kernel = self._lu_kernels.get(key)
        driver = self.driver
        if kernel is None:
            kernel = driver.compile(s.device.index, _lu_source(), _LU_NS + name)
            self._lu_kernels[key] = kernel
        grid3 = (grid[0], grid[1], 1)
        driver.launch(kernel, grid3, (threads, 1, 1), (args,), s.cuda_stream, cluster=cluster)

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
        args = _PANEL_ARGS.pack(lu, stride, src, src_batch, src_row, src_col, pivots, k,
                                info, m, k0, jb, int(pivot), update, failed)  # fmt: skip
        name = _panel_name(dtype, config)
        grid = (batch * config.blocks, 1)
        self._lu_launch(s, name, grid, config.threads, args, config.blocks)

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
        args = _SWAP_ARGS.pack(lu, stride, pivots, k, m, k0, jb, int(pivot), c0, c1, d0, d1)
        index = s.device.index
        multiprocessors = self.driver.properties(index).multi_processor_count
        count = c1 - c0 + d1 - d0
        warps, columns = swap_tile(batch, count, multiprocessors)
        tiles = -(-count // columns)
        self._lu_launch(s, _swap_name(dtype, warps, columns), (batch, tiles), 32 * warps, args)

    def lu_update_context(self, s: Stream, dtype: str) -> tuple:
        """What every ``lu_update`` on ``s`` of one call uses: the cuBLAS handle in full
        precision (no TF32), the stream and its cuBLAS workspace, and -1 and 1 as ``dtype``
        on the host for alpha and beta."""
        index = s.device.index
        handle = self.blas.handle(index)
        self.blas.use_device(index)
        self.blas.set_math_mode(handle, self.blas.DEFAULT_MATH)
        workspace, size = self._cublas_workspace(s)
        scalars = np.array([-1, 1], dtype=np.float32 if dtype == "float32" else np.float64)
        return handle, (s.cuda_stream, workspace, size), scalars, scalars.ctypes.data

    def lu_update_workspace(self, s: Stream) -> int:
        """The workspace of ``lu_update``'s GEMMs on ``s``: its cuBLAS workspace."""
        return self._cublas_workspace(s)[0]

    def lu_update(
        self,
        context: tuple,
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
        when None) of every matrix (cuBLAS strided GEMM). The handle is bound to the
        context's stream first: the look-ahead alternates two streams on it."""
        handle, (stream, workspace, size), _, alpha = context
        item = 4 if dtype == "float32" else 8
        blas = self.blas
        blas.set_stream(handle, stream)  # (it resets the workspace: set it after)
        blas.set_workspace(handle, workspace, size)
        rest = k0 + jb
        start, stop = columns or (rest, n)
        a = lu + (rest + k0 * m) * item
        b = lu + (k0 + start * m) * item
        c = lu + (rest + start * m) * item
        data = blas.DATA_TYPES[dtype]
        compute = blas.COMPUTE_TYPES["32F" if dtype == "float32" else "64F"]
        blas.gemm_strided_batched_ex(
            handle, blas.OP_N, blas.OP_N, m - rest, stop - start, jb, alpha, a, m, stride,
            b, m, stride, alpha + item, c, m, stride, batch, data, compute,
        )  # fmt: skip

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
        args = _SOLVE_ARGS.pack(lu, n * n, pivots, n, b, b_batch, b_row, b_col, x, n * nrhs,
                                n, nrhs, int(transposed))  # fmt: skip
        grid = (batch * -(-nrhs // rhs), 1)  # a matrix's tiles adjacent (kernels/lu.cu)
        if solve_warp(n, nrhs):  # a warp per matrix
            name, threads = _solve_warp_name(dtype, rhs), 32
        elif solve_columns(n, nrhs):  # a thread per right-hand side
            name, threads = _solve_columns_name(dtype), rhs
        else:  # a thread per row
            name, threads = _solve_name(dtype, rhs), -(-n // 32) * 32
        self._lu_launch(s, name, grid, threads, args)
