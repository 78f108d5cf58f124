"""vram.linalg's library calls on a GPU: cuSOLVER (``vram.driver._cusolver``), cuBLAS's
batched LU (``vram.driver._cublas``) and the helper kernels of kernels/linalg.cu (NVRTC).

The interface (shared with ``_sim_libs.SimLibs``): every method takes the vram Stream to
run on; pointers are ints; ``dtype`` is a vram dtype name ("float32", "float64",
"complex64", "complex128"); everything is queued on the stream, nothing synchronizes.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .. import memory
from .._streams import Stream
from ..blas import cublas_workspace_size

__all__ = ["CudaLibs", "kernel_names", "KERNEL_SOURCE"]

KERNEL_SOURCE = Path(__file__).parent / "kernels" / "linalg.cu"
_NS = "vram_linalg::"
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


def kernel_names() -> list[str]:
    """Every kernel instance of kernels/linalg.cu that vram.linalg may launch."""
    plain = ["pointers", "pivots_to_int32", "pivots_to_int64", "trivial_pivots"]
    names = [_NS + name for name in plain]
    names += [f"{_NS}{k}<{c}>" for k in ("det", "slogdet") for c in _C_TYPES.values()]
    names += [f"{_NS}conj<{_C_TYPES[d]}>" for d in ("complex64", "complex128")]
    return names


class CudaLibs:
    """cuSOLVER, cuBLAS and vram's helper kernels on a GPU."""

    def __init__(self) -> None:
        from ..driver import _cublas, _cusolver

        self.solver = _cusolver
        self.blas = _cublas
        self._kernels: dict[tuple[int, str], Any] = {}  # (device, name) -> compiled kernel

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
        props = s.device.driver.properties(index)
        size = cublas_workspace_size(props.major, props.minor)
        workspace = memory.get_workspace(size, library="cublas", device=s.device, stream=s)
        self.blas.set_workspace(handle, workspace, size)
        return handle

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
    def _launch(self, s: Stream, name: str, count: int, args: tuple) -> None:
        if count <= 0:
            return
        driver = s.device.driver
        key = (s.device.index, name)
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = self._kernels[key] = driver.compile(s.device.index, _source(), _NS + name)
        blocks = min(-(-count // _BLOCK), _MAX_BLOCKS)
        driver.launch(kernel, (blocks, 1, 1), (_BLOCK, 1, 1), args, s.cuda_stream)

    def pointers(self, s: Stream, out: int, base: int, stride_bytes: int, count: int) -> None:
        self._launch(s, "pointers", count, (out, base, np.int64(stride_bytes), np.int64(count)))

    def pivots_to_int32(self, s: Stream, dst: int, src: int, count: int) -> None:
        self._launch(s, "pivots_to_int32", count, (dst, src, np.int64(count)))

    def pivots_to_int64(self, s: Stream, dst: int, src: int, count: int) -> None:
        self._launch(s, "pivots_to_int64", count, (dst, src, np.int64(count)))

    def trivial_pivots(self, s: Stream, dst: int, k: int, count: int) -> None:
        self._launch(s, "trivial_pivots", count, (dst, np.int64(k), np.int64(count)))

    def conj(self, s: Stream, dtype: str, ptr: int, count: int) -> None:
        self._launch(s, f"conj<{_C_TYPES[dtype]}>", count, (ptr, np.int64(count)))

    def det(self, s: Stream, dtype: str, out: int, lu: int, piv: int, n: int, batch: int) -> None:
        name = f"det<{_C_TYPES[dtype]}>"
        self._launch(s, name, batch, (out, lu, piv, np.int64(n), np.int64(batch)))

    def slogdet(
        self, s: Stream, dtype: str, sign: int, logabs: int, lu: int, piv: int, n: int, batch: int
    ) -> None:
        name = f"slogdet<{_C_TYPES[dtype]}>"
        self._launch(s, name, batch, (sign, logabs, lu, piv, np.int64(n), np.int64(batch)))
