"""vram.linalg's library calls on the simulated GPU: cuSOLVER's and cuBLAS's calls, and the
blocked LU's steps (``_blocked``), each queued on its stream as a kernel is, computed in
NumPy by ``_reference`` (LAPACK's semantics) over the sim's device memory.

They read what the GPU libraries read: the device array of matrix pointers, the workspace
(which must be allocated and large enough, or the queued call fails as a bad access would),
the pivots and info arrays. The interface is ``_cuda_libs.CudaLibs``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._streams import Stream
from .._tensor import ndarray_view
from . import _reference
from ._blocked import Spans, outside

__all__ = ["SimLibs"]

_NP = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "complex64": np.dtype(np.complex64),
    "complex128": np.dtype(np.complex128),
}
_TRANS = {0: "N", 1: "T", 2: "C"}  # cublasOperation_t -> LAPACK's trans


class SimLibs:
    """The same calls on the simulated GPU: NumPy over sim memory, queued on the stream."""

    PANEL = 64  # columns the simulated getrf's workspace holds (its size is what it asks for)

    # ---- memory views --------------------------------------------------------------------
    @staticmethod
    def _matrix(s: Stream, ptr: int, m: int, n: int, ld: int, dtype: str) -> np.ndarray:
        """The column-major m x n matrix at ``ptr`` (leading dimension ``ld``), a view."""
        item = _NP[dtype].itemsize
        return ndarray_view(s.device.driver.view, ptr, (1, m, n), (0, item, ld * item), _NP[dtype])

    @staticmethod
    def _array(s: Stream, ptr: int, count: int, np_dtype: Any) -> np.ndarray:
        item = np.dtype(np_dtype).itemsize
        return ndarray_view(s.device.driver.view, ptr, (count,), (item,), np.dtype(np_dtype))

    def _matrices(
        self, s: Stream, array: int, batch: int, m: int, n: int, ld: int, dtype: str
    ) -> tuple[np.ndarray, list[np.ndarray] | None]:
        """The matrices a device pointer array names: one strided view when they lie evenly
        apart (then ``None``), else copies and the views to write them back to."""
        ptrs = [int(p) for p in self._array(s, array, batch, np.uint64)]
        item = _NP[dtype].itemsize
        steps = {b - a for a, b in zip(ptrs, ptrs[1:], strict=False)}
        if len(steps) <= 1 and (not steps or next(iter(steps)) > 0):
            step = next(iter(steps)) if steps else 0
            strides = (step, item, ld * item)
            view = ndarray_view(s.device.driver.view, ptrs[0], (batch, m, n), strides, _NP[dtype])
            return view, None
        views = [self._matrix(s, p, m, n, ld, dtype)[0] for p in ptrs]
        return np.stack(views), views

    @staticmethod
    def _queue(s: Stream, fn: Any) -> None:
        s.device.driver.enqueue(s.cuda_stream, fn)

    # ---- cuSOLVER ------------------------------------------------------------------------
    def _lwork(self, dtype: str, m: int, n: int) -> int:
        return max(m, n, 1) * self.PANEL * _NP[dtype].itemsize

    def getrf_workspace(self, s: Stream, dtype: str, m: int, n: int, a: int, lda: int) -> int:
        return self._lwork(dtype, m, n)

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
        self._getrf(s, dtype, m, n, a, lda, ws, ipiv, np.int32, info)

    def xgetrf_workspace(
        self, s: Stream, dtype: str, m: int, n: int, a: int, lda: int, algo: int
    ) -> tuple[int, int]:
        return self._lwork(dtype, m, n), 0

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
        self._getrf(s, dtype, m, n, a, lda, ws, ipiv64, np.int64, info)

    def _getrf(
        self,
        s: Stream,
        dtype: str,
        m: int,
        n: int,
        a: int,
        lda: int,
        ws: int,
        ipiv: int,
        ipiv_type: Any,
        info: int,
    ) -> None:
        """getrf and Xgetrf: the same factorization, with int32 or int64 pivots."""
        need = self._lwork(dtype, m, n)

        def run() -> None:
            s.device.driver.view(ws, need)  # the workspace must be there, and large enough
            matrix = self._matrix(s, a, m, n, lda, dtype)
            found, infos = _reference.getrf(matrix, pivot=bool(ipiv))
            if ipiv:
                self._array(s, ipiv, min(m, n), ipiv_type)[:] = found[0]
            self._array(s, info, 1, np.int32)[:] = infos

        self._queue(s, run)

    def _getrs(
        self,
        s: Stream,
        dtype: str,
        trans: int,
        n: int,
        nrhs: int,
        a: int,
        lda: int,
        ipiv: int,
        ipiv_type: Any,
        b: int,
        ldb: int,
        info: int,
    ) -> None:
        def run() -> None:
            lu = self._matrix(s, a, n, n, lda, dtype)
            rhs = self._matrix(s, b, n, nrhs, ldb, dtype)
            pivots = self._array(s, ipiv, n, ipiv_type)[None, :]
            _reference.getrs(lu, pivots, rhs, _TRANS[trans])
            self._array(s, info, 1, np.int32)[:] = 0

        self._queue(s, run)

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
        self._getrs(s, dtype, trans, n, nrhs, a, lda, ipiv, np.int32, b, ldb, info)

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
        self._getrs(s, dtype, trans, n, nrhs, a, lda, ipiv64, np.int64, b, ldb, info)

    # ---- cuBLAS --------------------------------------------------------------------------
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
        def run() -> None:
            matrices, back = self._matrices(s, a_array, batch, n, n, lda, dtype)
            # cuBLAS picks complex pivots by their modulus |z| (cuSOLVER: |re| + |im|)
            found, infos = _reference.getrf(matrices, pivot=bool(pivots), modulus=True)
            if back is not None:
                for view, done in zip(back, matrices, strict=True):
                    view[...] = done
            if pivots:
                self._array(s, pivots, batch * n, np.int32)[:] = found.reshape(-1)
            self._array(s, info, batch, np.int32)[:] = infos

        self._queue(s, run)

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
        def run() -> None:
            lu, _ = self._matrices(s, a_array, batch, n, n, lda, dtype)
            rhs, back = self._matrices(s, b_array, batch, n, nrhs, ldb, dtype)
            piv = self._array(s, pivots, batch * n, np.int32).reshape(batch, n)
            _reference.getrs(lu, piv, rhs, _TRANS[trans])
            if back is not None:
                for view, done in zip(back, rhs, strict=True):
                    view[...] = done

        self._queue(s, run)

    # ---- helper kernels ------------------------------------------------------------------
    def pointers(self, s: Stream, out: int, base: int, stride_bytes: int, count: int) -> None:
        def run() -> None:
            values = base + stride_bytes * np.arange(count, dtype=np.uint64)
            self._array(s, out, count, np.uint64)[:] = values

        self._queue(s, run)

    def pivots_to_int32(self, s: Stream, dst: int, src: int, count: int) -> None:
        def run() -> None:
            self._array(s, dst, count, np.int32)[:] = self._array(s, src, count, np.int64)

        self._queue(s, run)

    def pivots_to_int64(self, s: Stream, dst: int, src: int, count: int) -> None:
        def run() -> None:
            self._array(s, dst, count, np.int64)[:] = self._array(s, src, count, np.int32)

        self._queue(s, run)

    def trivial_pivots(self, s: Stream, dst: int, k: int, count: int) -> None:
        def run() -> None:
            self._array(s, dst, count, np.int32)[:] = np.arange(count) % k + 1

        self._queue(s, run)

    def first_nonzero(self, s: Stream, info: int, count: int) -> tuple[int, int] | None:
        """(index, value) of the first nonzero of the ``count`` int32 at ``info``, or None:
        queued on ``s`` as the GPU's kernel is. Synchronizes ``s``."""
        found: list[tuple[int, int]] = []

        def run() -> None:
            values = self._array(s, info, count, np.int32)
            nonzero = np.flatnonzero(values)
            if nonzero.size:
                first = int(nonzero[0])
                found.append((first, int(values[first])))

        self._queue(s, run)
        s.device.driver.stream_synchronize(s.cuda_stream)
        return found[0] if found else None

    def conj(self, s: Stream, dtype: str, ptr: int, count: int) -> None:
        def run() -> None:
            values = self._array(s, ptr, count, _NP[dtype])
            np.conjugate(values, out=values)

        self._queue(s, run)

    def _diagonals(self, s: Stream, dtype: str, lu: int, piv: int, n: int, batch: int):
        item = _NP[dtype].itemsize
        matrices = ndarray_view(
            s.device.driver.view, lu, (batch, n), (n * n * item, (n + 1) * item), _NP[dtype]
        )
        pivots = self._array(s, piv, batch * n, np.int32).reshape(batch, n)
        odd = (pivots != np.arange(1, n + 1)).sum(axis=1) % 2 == 1
        return matrices, odd

    def det(self, s: Stream, dtype: str, out: int, lu: int, piv: int, n: int, batch: int) -> None:
        def run() -> None:
            diagonal, odd = self._diagonals(s, dtype, lu, piv, n, batch)
            with np.errstate(all="ignore"):
                value = np.prod(diagonal, axis=1)
            self._array(s, out, batch, _NP[dtype])[:] = np.where(odd, -value, value)

        self._queue(s, run)

    def slogdet(
        self, s: Stream, dtype: str, sign: int, logabs: int, lu: int, piv: int, n: int, batch: int
    ) -> None:
        def run() -> None:
            diagonal, odd = self._diagonals(s, dtype, lu, piv, n, batch)
            with np.errstate(all="ignore"):
                size = np.abs(diagonal)
                unit = np.where(size == 0, 0, diagonal / np.where(size == 0, 1, size))
                value = np.prod(unit, axis=1)
                total = np.log(size).sum(axis=1)
            self._array(s, sign, batch, _NP[dtype])[:] = np.where(odd, -value, value)
            real = np.dtype(_NP[dtype].char.lower()) if _NP[dtype].kind == "c" else _NP[dtype]
            self._array(s, logabs, batch, real)[:] = total

        self._queue(s, run)

    # ---- the blocked LU's steps (``_blocked``; kernels/lu.cu on a GPU) ---------------------
    @staticmethod
    def _strided(
        s: Stream, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: str
    ) -> np.ndarray:
        """A view of sim memory; ``strides`` in elements."""
        item = _NP[dtype].itemsize
        byte_strides = tuple(step * item for step in strides)
        return ndarray_view(s.device.driver.view, ptr, shape, byte_strides, _NP[dtype])

    def _factors(
        self, s: Stream, lu: int, stride: int, m: int, n: int, batch: int, dtype: str
    ) -> np.ndarray:
        return self._strided(s, lu, (batch, m, n), (stride, 1, m), dtype)

    def lu_panel(
        self,
        s: Stream,
        dtype: str,
        config: Any,
        lu: int,
        stride: int,
        m: int,
        batch: int,
        source: tuple[int, int, int, int],
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

        def run() -> None:
            h = m - k0
            read = self._strided(s, src, (batch, m, k0 + jb), (src_batch, src_row, src_col), dtype)
            if update:  # the previous step on these columns first (see the kernel)
                first = k0 - update
                a = self._factors(s, lu, stride, m, k0 + jb, batch, dtype)
                columns = np.arange(k0, k0 + jb)
                _swap_solve(a, self._pivots(s, pivots, batch, k), first, update, columns, pivot)
                with np.errstate(all="ignore"):
                    a[:, k0:, k0:] -= np.matmul(a[:, k0:, first:k0], a[:, first:k0, k0:])
            panel = np.array(read[:, k0:, k0:])
            found, infos = _reference.getrf(panel, pivot=pivot)
            out = self._strided(s, lu, (batch, m, k0 + jb), (stride, 1, m), dtype)
            out[:, k0:, k0:] = panel[:, :h, :jb]
            if pivot:
                self._pivots(s, pivots, batch, k)[:, k0 : k0 + jb] = found + k0
            slots = self._array(s, info, batch, np.int32)
            shifted = np.where(infos != 0, infos + k0, 0)
            slots[:] = shifted if k0 == 0 else np.where(slots != 0, slots, shifted)
            if failed and infos.any():  # the kernel's flag, in pinned host memory
                s.device.driver.host_view(failed, 4).view(np.int32)[0] = 1

        self._queue(s, run)

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

        def run() -> None:
            a = self._factors(s, lu, stride, m, n, batch, dtype)
            others = np.r_[c0:c1, d0:d1]
            _swap_solve(a, self._pivots(s, pivots, batch, k), k0, jb, others, pivot)

        self._queue(s, run)

    def _pivots(self, s: Stream, pivots: int, batch: int, k: int) -> np.ndarray:
        return self._array(s, pivots, batch * k, np.int32).reshape(batch, k)

    def lu_update_context(self, s: Stream, dtype: str) -> Stream:
        return s

    def lu_update_workspace(self, s: Stream) -> int:
        return 0  # (NumPy's matmul needs none)

    def lu_update(
        self,
        context: Stream,
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
        s = context
        rest = k0 + jb
        start, stop = columns or (rest, n)

        def run() -> None:
            a = self._factors(s, lu, stride, m, n, batch, dtype)
            with np.errstate(all="ignore"):
                product = np.matmul(a[:, rest:, k0:rest], a[:, k0:rest, start:stop])
                a[:, rest:, start:stop] -= product

        self._queue(s, run)

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
        source: tuple[int, int, int, int],
        x: int,
    ) -> None:
        b, b_batch, b_row, b_col = source

        def run() -> None:
            factors = self._factors(s, lu, n * n, n, n, batch, dtype)
            ipiv = self._array(s, pivots, batch * n, np.int32).reshape(batch, n)
            rhs = np.array(self._strided(s, b, (batch, n, nrhs), (b_batch, b_row, b_col), dtype))
            _reference.getrs(factors, ipiv, rhs, "T" if transposed else "N")
            self._factors(s, x, n * nrhs, n, nrhs, batch, dtype)[...] = rhs

        self._queue(s, run)


def _swap_solve(
    a: np.ndarray, ipiv: np.ndarray, k0: int, jb: int, others: np.ndarray, pivot: bool
) -> None:
    """swap_trsm on ``a`` (batch, m, n), in place: the interchanges of the panel [k0, k0 +
    jb) (``ipiv`` (batch, k), 1-based) applied to the columns ``others``, and those right
    of the panel solved with its unit lower triangle (rows [k0, k0 + jb) <- L11^-1 them)."""
    block = np.array(a[:, k0:, others])  # (batch, m - k0, columns), row-major
    if pivot:
        _reference._swap(block, ipiv[:, k0 : k0 + jb].astype(np.int64) - 1 - k0)
    right = others >= k0 + jb
    if right.any():
        lower = np.array(a[:, k0 : k0 + jb, k0 : k0 + jb])
        solved = np.array(block[:, :jb][:, :, right])
        with np.errstate(all="ignore"):
            _reference._solve_lower(lower, solved, unit=True)
        top = block[:, :jb]
        top[:, :, right] = solved
    a[:, k0:, others] = block
