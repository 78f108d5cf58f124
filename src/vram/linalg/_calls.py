"""vram.linalg's device work, each piece declared once (``driver._work``) with its CUDA half and
its NumPy reference side by side: the helper kernels of kernels/linalg.cu, the blocked LU's
kernels of kernels/lu.cu (``_blocked``), cuBLAS's batched LU and GEMM, cuSOLVER's getrf and
getrs, and the workspace sizes cuSOLVER asks for. ``_libs`` prepares and runs them.

The references compute with LAPACK's semantics (``_reference``) over what the GPU reads and
writes: the workspace (which must be allocated and large enough, or the queued call fails as
a bad access would), the device array of matrix pointers (which must name the matrices
given beside it), the pivots and info arrays, and the page-locked host memory the kernels
write (the zero-pivot flag, first_nonzero's answer).

Arguments: pointers are ints; ``dtype`` is a vram dtype name ("float32", "float64",
"complex64", "complex128"); a kernel's struct argument (kernels/lu.cu) is given field by
field, in its order (``PANEL_FIELDS`` ...), every field 8 bytes.
"""

from __future__ import annotations

import struct
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import CudaError
from ..driver import _cublas, _cusolver
from ..driver._work import Kernel, LibraryCall, Query
from . import _reference
from ._blocked import (
    CLUSTER_PANELS,
    PANELS,
    SOLVE_RHS,
    SWAP_TILES,
    SWAP_WIDTH,
    TALL_PANELS,
    WARP_PANEL,
    PanelConfig,
)

__all__ = [
    "KERNEL_SOURCE",
    "LU_SOURCE",
    "NP",
    "PANEL_FIELDS",
    "SWAP_FIELDS",
    "SOLVE_FIELDS",
    "POINTERS",
    "PIVOTS_TO_INT32",
    "PIVOTS_TO_INT64",
    "TRIVIAL_PIVOTS",
    "FIRST_NONZERO",
    "CONJ",
    "DET",
    "SLOGDET",
    "PANEL",
    "SWAP_TRSM",
    "SOLVE",
    "LU_UPDATE",
    "GETRF_BATCHED",
    "GETRS_BATCHED",
    "GETRF",
    "XGETRF",
    "GETRS",
    "GETRF_WORKSPACE",
    "XGETRF_WORKSPACE",
    "kernel_names",
    "lu_kernel_names",
    "panel_name",
    "swap_name",
    "solve_name",
    "solve_columns_name",
    "solve_warp_name",
    "C_TYPES",
    "NS",
    "LU_NS",
]

KERNEL_SOURCE = Path(__file__).parent / "kernels" / "linalg.cu"
LU_SOURCE = Path(__file__).parent / "kernels" / "lu.cu"
NS = "vram_linalg::"
LU_NS = "vram_lu::"
NP = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "complex64": np.dtype(np.complex64),
    "complex128": np.dtype(np.complex128),
}
C_TYPES = {
    "float32": "float",
    "float64": "double",
    "complex64": "vram_linalg::c64",
    "complex128": "vram_linalg::c128",
}
_LU_TYPES = {"float32": "float", "float64": "double"}
_TRANS = {0: "N", 1: "T", 2: "C"}  # cublasOperation_t -> LAPACK's trans
_SIM_PANEL = 64  # columns the simulated getrf's workspace holds (its size is what it asks)

_LINALG = KERNEL_SOURCE.read_text()
_LU = LU_SOURCE.read_text()


def _fields(*names: str) -> struct.Struct:
    """A kernel's argument struct (kernels/lu.cu): 8-byte fields, pointers as integers, in
    the order of ``names`` (the struct's fields there); its format, given per call as one
    ``Arg``, and its ``pack`` (what the CPU emulation of the kernels takes)."""
    return struct.Struct(f"<{'q' * len(names)}")


PANEL_FIELDS = _fields("lu", "lu_stride", "src", "src_batch", "src_row", "src_col", "ipiv",
                       "ipiv_stride", "info", "m", "k0", "jb", "pivot", "update",
                       "failed")  # fmt: skip
SWAP_FIELDS = _fields("lu", "lu_stride", "ipiv", "ipiv_stride", "m", "k0", "jb", "pivot",
                      "c0", "c1", "d0", "d1")  # fmt: skip
SOLVE_FIELDS = _fields("lu", "lu_stride", "ipiv", "ipiv_stride", "b", "b_batch", "b_row",
                       "b_col", "x", "x_stride", "n", "nrhs", "trans")  # fmt: skip


# ---- kernels/linalg.cu: the helpers -------------------------------------------------------------


def _pointers(out: np.ndarray, base: int, stride_bytes: int) -> None:
    out[:] = np.uint64(base) + np.uint64(stride_bytes) * np.arange(out.size, dtype=np.uint64)


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    dst[:] = src


def _trivial_pivots(dst: np.ndarray, k: int) -> None:
    dst[:] = np.arange(dst.size) % k + 1


def _first_nonzero(out: np.ndarray, info: np.ndarray) -> None:
    nonzero = np.flatnonzero(info)
    first = int(nonzero[0]) if nonzero.size else -1
    out[0] = first
    out[1] = int(info[first]) if nonzero.size else 0


def _conj(x: np.ndarray) -> None:
    np.conjugate(x, out=x)


def _odd(pivots: np.ndarray) -> np.ndarray:
    """Whether each row of 1-based pivots (batch, n) is an odd permutation."""
    return (pivots != np.arange(1, pivots.shape[1] + 1)).sum(axis=1) % 2 == 1


def _det(out: np.ndarray, diagonal: np.ndarray, pivots: np.ndarray) -> None:
    with np.errstate(all="ignore"):
        value = np.prod(diagonal, axis=1)
    out[:] = np.where(_odd(pivots), -value, value)


def _slogdet(
    sign: np.ndarray, logabs: np.ndarray, diagonal: np.ndarray, pivots: np.ndarray
) -> None:
    with np.errstate(all="ignore"):
        size = np.abs(diagonal)
        unit = np.where(size == 0, 0, diagonal / np.where(size == 0, 1, size))
        value = np.prod(unit, axis=1)
        total = np.log(size).sum(axis=1)
    sign[:] = np.where(_odd(pivots), -value, value)
    logabs[:] = total


POINTERS = Kernel("pointers", _LINALG, _pointers)
PIVOTS_TO_INT32 = Kernel("pivots_to_int32", _LINALG, _copy)
PIVOTS_TO_INT64 = Kernel("pivots_to_int64", _LINALG, _copy)
TRIVIAL_PIVOTS = Kernel("trivial_pivots", _LINALG, _trivial_pivots)
FIRST_NONZERO = Kernel("first_nonzero", _LINALG, _first_nonzero)
CONJ = Kernel("conj", _LINALG, _conj)
DET = Kernel("det", _LINALG, _det)
SLOGDET = Kernel("slogdet", _LINALG, _slogdet)


def kernel_names() -> list[str]:
    """Every kernel instance of kernels/linalg.cu that vram.linalg may launch."""
    plain = ["pointers", "pivots_to_int32", "pivots_to_int64", "trivial_pivots", "first_nonzero"]
    names = [NS + name for name in plain]
    names += [f"{NS}{k}<{c}>" for k in ("det", "slogdet") for c in C_TYPES.values()]
    names += [f"{NS}conj<{C_TYPES[d]}>" for d in ("complex64", "complex128")]
    return names


# ---- kernels/lu.cu: the blocked LU ---------------------------------------------------------------


@cache  # (a launch asks for its kernel's name: a lookup, not a format)
def panel_name(dtype: str, config: PanelConfig) -> str:
    t = _LU_TYPES[dtype]
    if config == WARP_PANEL:
        return f"{LU_NS}panel_warp<{t}>"
    if config.sub:
        return f"{LU_NS}panel_tall<{t}, {config.threads}, {config.rows}, {config.sub}>"
    return f"{LU_NS}panel<{t}, {config.blocks}, {config.threads}, {config.rows}, {config.width}>"


@cache
def swap_name(dtype: str, warps: int, columns: int) -> str:
    return f"{LU_NS}swap_trsm<{_LU_TYPES[dtype]}, {SWAP_WIDTH}, {warps}, {columns}>"


@cache
def solve_name(dtype: str, rhs: int) -> str:
    return f"{LU_NS}getrs<{_LU_TYPES[dtype]}, {rhs}>"


@cache
def solve_columns_name(dtype: str) -> str:
    return f"{LU_NS}getrs_columns<{_LU_TYPES[dtype]}>"


@cache
def solve_warp_name(dtype: str, rhs: int) -> str:
    return f"{LU_NS}getrs_warp<{_LU_TYPES[dtype]}, {rhs}>"


def lu_kernel_names() -> list[str]:
    """Every kernel instance of kernels/lu.cu that the blocked LU may launch."""
    names = []
    for dtype, table in PANELS.items():
        panels = table + CLUSTER_PANELS[dtype] + TALL_PANELS[dtype]
        names += [panel_name(dtype, config) for _, config in panels]
        names += [swap_name(dtype, *tile) for tile in SWAP_TILES]
        names += [solve_name(dtype, rhs) for rhs in (1, SOLVE_RHS)]
        names.append(solve_columns_name(dtype))
        names += [solve_warp_name(dtype, rhs) for rhs in (1, SOLVE_RHS)]
    return names


def _panel(
    lu: np.ndarray,
    lu_stride: int,
    src: np.ndarray,
    src_batch: int,
    src_row: int,
    src_col: int,
    ipiv: np.ndarray,
    ipiv_stride: int,
    info: np.ndarray,
    m: int,
    k0: int,
    jb: int,
    pivot: int,
    update: int,
    failed: Any,
) -> None:
    """``panel``: rows k0.. of the panel [k0, k0 + jb) factored with partial pivoting (after
    the previous step's interchanges, U12 and update of its columns when ``update``); ``lu``
    and ``src`` (batch, m, n), ``ipiv`` (batch, k), ``info`` (batch,), ``failed`` a 1-element
    array (the zero-pivot flag) or 0."""
    h = m - k0
    if update:  # the previous step on these columns first (see the kernel)
        first = k0 - update
        a = lu[:, :, : k0 + jb]
        columns = np.arange(k0, k0 + jb)
        swap_solve(a, ipiv, first, update, columns, bool(pivot))
        with np.errstate(all="ignore"):
            a[:, k0:, k0:] -= np.matmul(a[:, k0:, first:k0], a[:, first:k0, k0:])
    panel = np.array(src[:, k0:, k0 : k0 + jb])
    found, infos = _reference.getrf(panel, pivot=bool(pivot))
    lu[:, k0:, k0 : k0 + jb] = panel[:, :h, :jb]
    if pivot:
        ipiv[:, k0 : k0 + jb] = found + k0
    shifted = np.where(infos != 0, infos + k0, 0)
    info[:] = shifted if k0 == 0 else np.where(info != 0, info, shifted)
    if not isinstance(failed, int) and infos.any():  # the kernel's flag, in pinned memory
        failed[0] = 1


def _swap_trsm(
    lu: np.ndarray,
    lu_stride: int,
    ipiv: np.ndarray,
    ipiv_stride: int,
    m: int,
    k0: int,
    jb: int,
    pivot: int,
    c0: int,
    c1: int,
    d0: int,
    d1: int,
) -> None:
    swap_solve(lu, ipiv, k0, jb, np.r_[c0:c1, d0:d1], bool(pivot))


def swap_solve(
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


def _solve(
    lu: np.ndarray,
    lu_stride: int,
    ipiv: np.ndarray,
    ipiv_stride: int,
    b: np.ndarray,
    b_batch: int,
    b_row: int,
    b_col: int,
    x: np.ndarray,
    x_stride: int,
    n: int,
    nrhs: int,
    trans: int,
) -> None:
    rhs = np.array(b)  # (b may be x)
    _reference.getrs(lu, ipiv, rhs, "T" if trans else "N")
    x[...] = rhs


PANEL = Kernel("lu panel", _LU, _panel)
SWAP_TRSM = Kernel("lu swap_trsm", _LU, _swap_trsm)
SOLVE = Kernel("lu solve", _LU, _solve)


# ---- cuBLAS: the blocked LU's update, the batched LU and solve -----------------------------------


def _use_handle(device: int, stream: int, workspace: int, size: int) -> int:
    """The thread's cuBLAS handle on ``device``, bound to ``stream`` and ``workspace`` (its
    last ones may be another stream's: the handle is the thread's, and vram.blas's)."""
    handle = _cublas.handle(device)
    _cublas.use_device(device)
    _cublas.set_stream(handle, stream)  # (it resets the workspace: set it after)
    _cublas.set_workspace(handle, workspace, size)
    return handle


def _update_cuda(
    driver: Any,
    device: int,
    stream: int,
    lu: int,
    workspace: int,
    k0: int,
    jb: int,
    start: int,
    stop: int,
    dtype: str,
    m: int,
    n: int,
    batch: int,
    size: int,
    scalars: np.ndarray,
) -> None:
    """A22 -= L21 U12 on rows k0 + jb.. and columns [start, stop) of every matrix: one
    cuBLAS strided-batched GEMM in full precision (no TF32); ``scalars`` holds -1 and 1."""
    handle = _use_handle(device, stream, workspace, size)
    _cublas.set_math_mode(handle, _cublas.DEFAULT_MATH)
    item = scalars.itemsize
    rest = k0 + jb
    stride = m * n
    a = lu + (rest + k0 * m) * item
    b = lu + (k0 + start * m) * item
    c = lu + (rest + start * m) * item
    alpha = scalars.ctypes.data
    data = _cublas.DATA_TYPES[dtype]
    compute = _cublas.COMPUTE_TYPES["32F" if dtype == "float32" else "64F"]
    _cublas.gemm_strided_batched_ex(
        handle, _cublas.OP_N, _cublas.OP_N, m - rest, stop - start, jb, alpha, a, m, stride,
        b, m, stride, alpha + item, c, m, stride, batch, data, compute,
    )  # fmt: skip


def _update_reference(
    lu: np.ndarray,
    workspace: int,
    k0: int,
    jb: int,
    start: int,
    stop: int,
    *values: Any,
) -> None:
    rest = k0 + jb
    with np.errstate(all="ignore"):
        lu[:, rest:, start:stop] -= np.matmul(lu[:, rest:, k0:rest], lu[:, k0:rest, start:stop])


def _named(array: np.ndarray, base: int, step: int, call: str) -> None:
    """The device array of matrix pointers names the ``len(array)`` matrices ``step``
    bytes apart from ``base`` (what the library reads), or the call fails as a bad access
    would."""
    expected = np.uint64(base) + np.uint64(step) * np.arange(array.size, dtype=np.uint64)
    if not np.array_equal(array, expected):
        raise CudaError(call, "CUDA_ERROR_ILLEGAL_ADDRESS", "a matrix pointer names no matrix")


def _getrf_batched_cuda(
    driver: Any,
    device: int,
    stream: int,
    arrays: int,
    matrices: int,
    base: int,
    pivots: int,
    info: int,
    workspace: int,
    dtype: str,
    n: int,
    lda: int,
    step: int,
    batch: int,
    size: int,
) -> None:
    handle = _use_handle(device, stream, workspace, size)
    _cublas.getrf_batched(handle, dtype, n, arrays, lda, pivots, info, batch)


def _getrf_batched_reference(
    arrays: np.ndarray,
    matrices: np.ndarray,
    base: int,
    pivots: Any,
    info: np.ndarray,
    workspace: int,
    dtype: str,
    n: int,
    lda: int,
    step: int,
    batch: int,
    size: int,
) -> None:
    _named(arrays, base, step, "cublasGetrfBatched")
    # cuBLAS picks complex pivots by their modulus |z| (cuSOLVER: |re| + |im|)
    found, infos = _reference.getrf(matrices, pivot=not isinstance(pivots, int), modulus=True)
    if not isinstance(pivots, int):
        pivots[...] = found
    info[:] = infos


def _getrs_batched_cuda(
    driver: Any,
    device: int,
    stream: int,
    a_arrays: int,
    lu: int,
    a_base: int,
    pivots: int,
    b_arrays: int,
    rhs: int,
    b_base: int,
    workspace: int,
    dtype: str,
    trans: int,
    n: int,
    nrhs: int,
    a_step: int,
    b_step: int,
    batch: int,
    size: int,
) -> None:
    handle = _use_handle(device, stream, workspace, size)
    _cublas.getrs_batched(handle, dtype, trans, n, nrhs, a_arrays, n, pivots, b_arrays, n, batch)


def _getrs_batched_reference(
    a_arrays: np.ndarray,
    lu: np.ndarray,
    a_base: int,
    pivots: np.ndarray,
    b_arrays: np.ndarray,
    rhs: np.ndarray,
    b_base: int,
    workspace: int,
    dtype: str,
    trans: int,
    n: int,
    nrhs: int,
    a_step: int,
    b_step: int,
    batch: int,
    size: int,
) -> None:
    _named(a_arrays, a_base, a_step, "cublasGetrsBatched")
    _named(b_arrays, b_base, b_step, "cublasGetrsBatched")
    _reference.getrs(lu, pivots, rhs, _TRANS[trans])


LU_UPDATE = LibraryCall("lu update", _update_cuda, _update_reference)
GETRF_BATCHED = LibraryCall("getrf batched", _getrf_batched_cuda, _getrf_batched_reference)
GETRS_BATCHED = LibraryCall("getrs batched", _getrs_batched_cuda, _getrs_batched_reference)


# ---- cuSOLVER ------------------------------------------------------------------------------------


def _lwork(dtype: str, m: int, n: int) -> int:
    """The simulated getrf's workspace: a panel of ``_SIM_PANEL`` columns."""
    return max(m, n, 1) * _SIM_PANEL * NP[dtype].itemsize


def _getrf_workspace_cuda(
    driver: Any, device: int, stream: int, dtype: str, m: int, n: int, a: int, lda: int
) -> int:
    return _cusolver.getrf_buffer_size(device, stream, dtype, m, n, a, lda)


def _xgetrf_workspace_cuda(
    driver: Any, device: int, stream: int, dtype: str, m: int, n: int, a: int, lda: int, algo: int
) -> tuple[int, int]:
    return _cusolver.xgetrf_buffer_size(device, stream, dtype, m, n, a, lda, algo)


GETRF_WORKSPACE = Query(
    "getrf workspace",
    _getrf_workspace_cuda,
    lambda stream, dtype, m, n, a, lda: _lwork(dtype, m, n),
)
XGETRF_WORKSPACE = Query(
    "xgetrf workspace",
    _xgetrf_workspace_cuda,
    lambda stream, dtype, m, n, a, lda, algo: (_lwork(dtype, m, n), 0),
)


def _getrf_cuda(
    driver: Any,
    device: int,
    stream: int,
    a: int,
    workspace: int,
    ipiv: int,
    info: int,
    dtype: str,
    m: int,
    n: int,
    lda: int,
    lwork: int,
) -> None:
    _cusolver.getrf(device, stream, dtype, m, n, a, lda, workspace, ipiv, info)


def _getrf_reference(
    a: np.ndarray, workspace: np.ndarray, ipiv: Any, info: np.ndarray, *values: Any
) -> None:
    """getrf and Xgetrf: the same factorization, with int32 or int64 pivots (``ipiv`` 0:
    none), reading the workspace as the library does (it must be there)."""
    found, infos = _reference.getrf(a[None], pivot=not isinstance(ipiv, int))
    if not isinstance(ipiv, int):
        ipiv[:] = found[0]
    info[:] = infos


def _xgetrf_cuda(
    driver: Any,
    device: int,
    stream: int,
    a: int,
    workspace: int,
    ipiv: int,
    info: int,
    dtype: str,
    m: int,
    n: int,
    lda: int,
    lwork: int,
    host_bytes: int,
    algo: int,
) -> None:
    host = np.empty(max(host_bytes, 1), dtype=np.uint8)  # used during the call only
    _cusolver.xgetrf(device, stream, dtype, m, n, a, lda, ipiv, workspace, lwork,
                     host.ctypes.data, host_bytes, info, algo)  # fmt: skip


def _getrs_cuda(
    driver: Any,
    device: int,
    stream: int,
    a: int,
    ipiv: int,
    b: int,
    info: int,
    dtype: str,
    trans: int,
    n: int,
    nrhs: int,
    lda: int,
    ldb: int,
    wide: bool,
) -> None:
    """getrs, or with ``wide`` the 64-bit API's Xgetrs (int64 pivots)."""
    solve = _cusolver.xgetrs if wide else _cusolver.getrs
    solve(device, stream, dtype, trans, n, nrhs, a, lda, ipiv, b, ldb, info)


def _getrs_reference(
    a: np.ndarray, ipiv: np.ndarray, b: np.ndarray, info: np.ndarray, dtype: str, trans: int,
    *values: Any,
) -> None:  # fmt: skip
    """getrs and Xgetrs: int32 or int64 pivots (the array's)."""
    _reference.getrs(a[None], ipiv[None, :], b[None], _TRANS[trans])
    info[:] = 0


GETRF = LibraryCall("cusolverDn getrf", _getrf_cuda, _getrf_reference)
XGETRF = LibraryCall("cusolverDnXgetrf", _xgetrf_cuda, _getrf_reference)
GETRS = LibraryCall("cusolverDn getrs", _getrs_cuda, _getrs_reference)
