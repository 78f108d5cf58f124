"""Solves from an LU factorization: lu_solve, solve(_ex), inv(_ex), det and slogdet.

- ``solve_in_place(lu, pivots, x, trans)`` runs getrs on packed column-major matrices by the
  plan ``_dispatch.plan_solve`` picks: vram's blocked solve (one kernel, ``_blocked``, which
  reads B where it lies: no copy of it), cuBLAS getrsBatched over device pointer arrays,
  or cuSOLVER getrs per matrix on the current stream or over side streams.
- solve and inv factor A by the LU table; where they solve with vram's blocked solve, that
  table factors blocked too (the pair measured in Note [Solve crossovers]).
- det and slogdet factor A^T when A is contiguous (row-major A's memory read column-major
  *is* A^T), which saves the transposing copy: det(A^T) = det(A). solve and inv factor A
  itself, so that their info (and errors) name A's zero pivot, as PyTorch's do.
- ``XA = B`` (``left=False``) is solved as ``A^T X^T = B^T``: X^T is column-major exactly
  where X is row-major, so the result needs no copy; only ``lu_solve(..., left=False,
  adjoint=True)`` of complex matrices conjugates (twice, in place).
All of it is queued on the current stream; only the functions that check for singular
inputs (solve, inv, and the _ex forms with check_errors=True) synchronize, to read info.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .._dtypes import complex64, complex128, float32, float64, int32
from .._streams import Stream, current_stream
from .._tensor import Tensor, contiguous_strides
from ..driver._cusolver import OP_C, OP_N, OP_T, X_API_ELEMENTS
from . import _blocked, _checks
from ._batch import run_batch
from ._dispatch import Plan, plan_solve
from ._libs import LIBS
from ._lu import batch_stride, column_major_empty, factor, factors_empty
from ._workspace import CallWorkspaces

__all__ = [
    "lu_solve",
    "solve",
    "solve_ex",
    "inv",
    "inv_ex",
    "det",
    "slogdet",
    "solve_in_place",
    "SolveEx",
    "InvEx",
    "Slogdet",
]


_REAL = {complex64: float32, complex128: float64}  # logabsdet's dtype


class SolveEx(NamedTuple):
    result: Tensor
    info: Tensor


class InvEx(NamedTuple):
    inverse: Tensor
    info: Tensor


class Slogdet(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


def solve_in_place(
    lu: Tensor,
    pivots: Tensor,
    x: Tensor,
    trans: int,
    plan: Plan | None = None,
    source: Tensor | None = None,
) -> Plan:
    """Solve op(A) X = B in place of ``x`` (*, n, nrhs), packed column-major, from ``lu``
    (*, n, n) packed column-major and ``pivots`` (*, n) contiguous, one batch for all three.
    ``trans``: OP_N, OP_T or OP_C. ``source`` (*, n, nrhs): B, not yet copied into ``x``:
    this copies it, unless the plan reads it where it lies (the blocked solve).
    Queued on the current stream; returns the plan it ran."""
    *batch_dims, n, nrhs = x.shape
    batch = math.prod(batch_dims)
    if batch == 0 or n == 0 or nrhs == 0:
        return Plan("cusolver")
    dtype = x.dtype.name
    stream = current_stream(x.device)
    libs = LIBS
    plan = plan or plan_solve(n, nrhs, batch, dtype)
    if plan.path == "blocked":
        _solve_blocked(libs, stream, lu, pivots, x, trans, source)
        return plan
    if source is not None:
        x.copy_(source)
    item = x.dtype.itemsize
    a, a_step = lu.data_ptr(), n * n * item
    b, b_step = x.data_ptr(), n * nrhs * item
    ipiv = pivots.data_ptr()
    spaces = CallWorkspaces()
    if plan.path == "cublas":
        arrays = spaces.get(16 * batch, "linalg", stream)
        libs.pointers(stream, arrays, a, a_step, batch)
        libs.pointers(stream, arrays + 8 * batch, b, b_step, batch)
        libs.getrs_batched(stream, dtype, trans, n, nrhs, arrays, a, a_step, ipiv,
                           arrays + 8 * batch, b, b_step, batch)  # fmt: skip
        return plan
    wide = n * n >= X_API_ELEMENTS or n * nrhs >= X_API_ELEMENTS
    # per matrix: an info slot (getrs reports bad arguments there), and for Xgetrs the
    # pivots as int64
    infos_bytes = -(-4 * batch // 256) * 256
    scratch = spaces.get(infos_bytes + (8 * n * batch if wide else 0), "linalg", stream)
    pivots64 = scratch + infos_bytes
    if wide:
        libs.pivots_to_int64(stream, pivots64, ipiv, n * batch)

    def no_workspace(s: Stream) -> None:
        return None

    def call(s: Stream, ws: None, i: int) -> None:
        info = scratch + 4 * i
        piv = pivots64 + 8 * n * i if wide else ipiv + 4 * n * i
        libs.getrs(s, dtype, trans, n, nrhs, a + a_step * i, n, piv, b + b_step * i, n, info, wide)

    run_batch(stream, batch, plan.streams, no_workspace, call)
    return plan


def _solve_blocked(
    libs, stream: Stream, lu: Tensor, pivots: Tensor, x: Tensor, trans: int, source: Tensor | None
) -> None:
    """vram's blocked solve (``_blocked``; real dtypes, where OP_C is OP_T): B read where it
    lies when its batch is one stride, else copied into ``x`` first."""
    *batch_dims, n, nrhs = x.shape
    read = None
    if source is not None:
        step = batch_stride(source)
        if step is None:
            x.copy_(source)
        else:
            rows, cols = source.stride()[-2:]
            read = (source.data_ptr(), step, rows, cols)
    out = x.data_ptr()
    if read is None:
        rows, cols = x.stride()[-2:]
        read = (out, n * nrhs, rows, cols)
    _blocked.solve(libs, stream, x.dtype.name, trans != OP_N, n, nrhs, math.prod(batch_dims),
                   lu.data_ptr(), pivots.data_ptr(), read, out)  # fmt: skip


# ---- lu_solve ------------------------------------------------------------------------------


def _check_pivots(api: str, LU: Tensor, pivots: object) -> Tensor:
    if not isinstance(pivots, Tensor):
        raise TypeError(
            f"{api}: argument 'pivots' must be a vram.Tensor, got {type(pivots).__name__}"
        )
    if pivots.dtype != int32:
        raise RuntimeError(
            f"{api}: pivots should be a Tensor of scalar type vram.int32, got {pivots.dtype.name}"
        )
    if pivots.device != LU.device:
        raise ValueError(
            f"{api}: argument 'pivots' is on {pivots.device}, but 'LU' is on {LU.device}; "
            "all tensors must be on one device"
        )
    if pivots.ndim >= 1 and pivots.shape[-1] != LU.shape[-1] and pivots.ndim == LU.ndim - 1:
        raise RuntimeError(
            f"{api}: Number of pivots per batch should be same as the dimension of the matrix"
        )
    if tuple(pivots.shape) != tuple(LU.shape[:-1]):
        raise RuntimeError(
            f"{api}: Expected LU.shape[:-1] and pivots.shape to be the same, but got pivots "
            f"with shape {list(pivots.shape)} instead"
        )
    return pivots


def _check_rhs(api: str, n: int, B: Tensor, left: bool) -> None:
    rows, cols = B.shape[-2], B.shape[-1]
    if (rows if left else cols) != n:
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(
            f"{api}: Incompatible shapes of A and B for the equation {equation} "
            f"({n}x{n} and {rows}x{cols})"
        )


def _packed_factors(lu: Tensor, pivots: Tensor, batch: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """``lu`` and ``pivots`` with ``batch`` batch dims, packed (column-major matrices,
    contiguous pivots): as they are when they already are, else copied."""
    n = lu.shape[-1]
    if tuple(lu.shape[:-2]) != batch or not lu.transpose(-2, -1).is_contiguous():
        packed = column_major_empty(batch, n, n, lu)
        packed.copy_(lu.expand(*batch, n, n))
        lu = packed
    if tuple(pivots.shape[:-1]) != batch or not pivots.is_contiguous():
        packed = Tensor._empty((*batch, n), int32, pivots.device)
        packed.copy_(pivots.expand(*batch, n))
        pivots = packed
    return lu, pivots


def _solve_packed(
    lu: Tensor,
    pivots: Tensor,
    B: Tensor,
    left: bool,
    trans: int,
    conjugate: bool,
    plan: Plan | None = None,
) -> Tensor:
    """X for ``lu`` (packed, with the batch dims of the result) and any ``B``: with ``left``,
    op(A) X = B; else op(A) X^T = B^T (or X^H, B^H when ``conjugate``) and X is returned."""
    batch = tuple(lu.shape[:-2])
    n = lu.shape[-1]
    if left:
        nrhs = B.shape[-1]
        x = column_major_empty(batch, n, nrhs, B)
        source = B if _checks.batch_shape(B) == batch else B.expand(*batch, n, nrhs)
        solve_in_place(lu, pivots, x, trans, plan, source=source)
        return x
    nrhs = B.shape[-2]
    out = Tensor._empty((*batch, nrhs, n), B.dtype, B.device)  # X, row-major: X^T column-major
    if conjugate:
        out.copy_(B.expand(*batch, nrhs, n))
        stream = current_stream(B.device)
        LIBS.conj(stream, B.dtype.name, out.data_ptr(), out.numel())
        solve_in_place(lu, pivots, out.transpose(-2, -1), trans, plan)
    else:
        source = B.expand(*batch, nrhs, n).transpose(-2, -1)
        solve_in_place(lu, pivots, out.transpose(-2, -1), trans, plan, source=source)
    if conjugate:
        LIBS.conj(stream, B.dtype.name, out.data_ptr(), out.numel())
    return out


def lu_solve(
    LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True, adjoint: bool = False
) -> Tensor:
    """X with A X = B (``left``) or X A = B, from lu_factor's (LU, pivots) of A; ``adjoint``
    solves with A^H instead of A. As torch.linalg.lu_solve: batch dims of LU and B broadcast.
    Queued on the current stream; singular factors give Inf/NaN, not an error."""
    api = "vram.linalg.lu_solve"
    _checks.check_matrix(api, LU, "LU")
    _check_pivots(api, LU, pivots)
    _checks.check_same(api, ("LU", LU), ("B", B))
    if B.ndim < 2:
        raise RuntimeError(f"{api}: The input tensor B must have at least 2 dimensions.")
    n = LU.shape[-1]
    _check_rhs(api, n, B, left)
    batch = _checks.broadcast_batch(api, ("LU", LU), ("B", B))
    lu, piv = _packed_factors(LU, pivots, batch)
    complex_ = LU.dtype.is_complex
    if left:
        trans = (OP_C if complex_ else OP_T) if adjoint else OP_N
        return _solve_packed(lu, piv, B, True, trans, False)
    # X A = B: A^T X^T = B^T; X A^H = B: A X^H = B^H
    trans = OP_N if adjoint else OP_T
    return _solve_packed(lu, piv, B, False, trans, adjoint and complex_)


# ---- solve ---------------------------------------------------------------------------------


def _factor_for_solve(
    A: Tensor,
    transpose: bool = False,
    own_info: bool = False,
    flag: _checks.ZeroPivotFlag | None = None,
) -> tuple[Tensor, Tensor, Tensor, bool]:
    """(lu, pivots, info, transposed): the LU factors of A; with ``transpose``, of A^T
    (``transposed``) when A is contiguous, which saves the transposing copy. The LU table
    picks the way.

    The factors are the call's own, so LU, pivots and info share ONE allocation (an
    allocation less a call); ``own_info``: info apart, for a caller that returns it (it
    must not hold the factors' memory). ``flag``: the zero-pivot flag (``factor``'s)."""
    *batch_dims, n, _ = A.shape
    batch = tuple(batch_dims)
    transposed = transpose and A.is_contiguous()
    lu, pivots, info = factors_empty(batch, n, n, A)  # (info's room unused where ``own_info``)
    source = A.transpose(-2, -1) if transposed else A  # A^T packed column-major: A's layout
    if own_info:
        info = Tensor._empty(batch, int32, A.device)
    factor(lu, pivots, info, source=source if A.numel() else None, flag=flag)
    return lu, pivots, info, transposed


def _is_vector_rhs(A: Tensor, B: Tensor) -> bool:
    """PyTorch's rule: B is a (batch of) vector(s) when 1-D, or shaped like A without its
    last dimension."""
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


def _solve_ex(
    api: str, A: Tensor, B: Tensor, left: bool, own_info: bool, checked: bool
) -> tuple[Tensor, Tensor, _checks.ZeroPivotFlag | None]:
    """(X, info, the zero-pivot flag the factorization watched where ``checked``)."""
    _checks.check_matrix(api, A)
    _checks.check_same(api, ("A", A), ("B", B))
    if B.ndim < 1:
        raise RuntimeError(f"{api}: The input tensor B must have at least 1 dimensions.")
    vector = _is_vector_rhs(A, B)
    rhs = B.reshape(*B.shape, 1) if vector else B
    n = A.shape[-1]
    _check_rhs(api, n, rhs, left)
    batch = _checks.broadcast_batch(api, ("A", A), ("B", rhs))
    plan = plan_solve(n, rhs.shape[-1] if left else rhs.shape[-2], math.prod(batch), A.dtype.name)
    flag = _checks.ZeroPivotFlag.armed(A.device) if checked else None
    lu, pivots, info, _ = _factor_for_solve(A, own_info=own_info, flag=flag)
    if batch != _checks.batch_shape(A):  # A's factors broadcast to B's batch
        lu, pivots = _packed_factors(lu, pivots, batch)
    trans = OP_N if left else OP_T  # right: A^T X^T = B^T
    x = _solve_packed(lu, pivots, rhs, left, trans, False, plan)
    return (x[..., 0] if vector else x), info, flag


def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False) -> SolveEx:
    """(X, info) with A X = B (``left``) or X A = B, as torch.linalg.solve_ex: B may be a
    (batch of) vector(s); batch dims broadcast; info (A's batch) as lu_factor_ex's.
    ``check_errors=True`` raises LinAlgError for a singular A (synchronizes)."""
    api = "vram.linalg.solve_ex"
    x, info, flag = _solve_ex(api, A, B, left, own_info=True, checked=check_errors)
    if check_errors:
        _checks.check_errors(info, api, A.ndim == 2, flag)
    return SolveEx(x, info)


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    """X with A X = B (``left``) or X A = B, as torch.linalg.solve; LinAlgError naming the
    batch element where A is singular. Synchronizes (to read info)."""
    api = "vram.linalg.solve"
    x, info, flag = _solve_ex(api, A, B, left, own_info=False, checked=True)
    _checks.check_errors(info, api, A.ndim == 2, flag)
    return x


# ---- inv -----------------------------------------------------------------------------------


def _inv_ex(
    api: str, A: Tensor, own_info: bool, checked: bool
) -> tuple[Tensor, Tensor, _checks.ZeroPivotFlag | None]:
    """(A^-1, info, the zero-pivot flag the factorization watched where ``checked``)."""
    _checks.check_matrix(api, A)
    *batch, n, _ = A.shape
    plan = plan_solve(n, n, math.prod(batch), A.dtype.name)
    flag = _checks.ZeroPivotFlag.armed(A.device) if checked else None
    lu, pivots, info, _ = _factor_for_solve(A, own_info=own_info, flag=flag)
    x = column_major_empty(tuple(batch), n, n, A)
    x.zero_()
    if x.numel():  # the identity: ones on the diagonal of every matrix
        batch_strides = tuple(s * n * n for s in contiguous_strides(tuple(batch)))
        x._view((*batch, n), (*batch_strides, n + 1), 0).fill_(1)
    solve_in_place(lu, pivots, x, OP_N, plan)
    return x, info, flag


def inv_ex(A: Tensor, *, check_errors: bool = False) -> InvEx:
    """(A^-1, info), as torch.linalg.inv_ex; ``check_errors=True`` raises LinAlgError for a
    singular A (synchronizes)."""
    api = "vram.linalg.inv_ex"
    x, info, flag = _inv_ex(api, A, own_info=True, checked=check_errors)
    if check_errors:
        _checks.check_errors(info, api, A.ndim == 2, flag)
    return InvEx(x, info)


def inv(A: Tensor) -> Tensor:
    """A^-1 (column-major matrices, as PyTorch's), as torch.linalg.inv; LinAlgError naming
    the batch element and the zero pivot where A is singular. Synchronizes."""
    api = "vram.linalg.inv"
    x, info, flag = _inv_ex(api, A, own_info=False, checked=True)
    _checks.check_errors(info, api, A.ndim == 2, flag)
    return x


# ---- determinants --------------------------------------------------------------------------


def _factored(api: str, A: Tensor) -> tuple[Tensor, Tensor, tuple[int, ...], int]:
    _checks.check_matrix(api, A)
    *batch, n, _ = A.shape
    lu, pivots, _info, _ = _factor_for_solve(A, transpose=True)  # det(A^T) = det(A)
    return lu, pivots, tuple(batch), n


def det(A: Tensor) -> Tensor:
    """det(A) for (batches of) square matrices, as torch.linalg.det (0 for a singular A).
    Queued on the current stream."""
    lu, pivots, batch, n = _factored("vram.linalg.det", A)
    out = Tensor._empty(batch, A.dtype, A.device)
    if n == 0:
        return out.fill_(1)
    count = math.prod(batch)
    if count:
        stream = current_stream(A.device)
        LIBS.det(stream, A.dtype.name, out.data_ptr(), lu.data_ptr(), pivots.data_ptr(), n, count)
    return out


def slogdet(A: Tensor) -> Slogdet:
    """(sign, logabsdet) with det(A) = sign * exp(logabsdet), as torch.linalg.slogdet: sign
    is 0 and logabsdet -inf for a singular A; logabsdet is real for complex A.
    Queued on the current stream."""
    lu, pivots, batch, n = _factored("vram.linalg.slogdet", A)
    real = _REAL.get(A.dtype, A.dtype)
    sign = Tensor._empty(batch, A.dtype, A.device)
    logabs = Tensor._empty(batch, real, A.device)
    if n == 0:
        return Slogdet(sign.fill_(1), logabs.fill_(0))
    count = math.prod(batch)
    if count:
        stream = current_stream(A.device)
        LIBS.slogdet(
            stream,
            A.dtype.name,
            sign.data_ptr(),
            logabs.data_ptr(),
            lu.data_ptr(),
            pivots.data_ptr(),
            n,
            count,
        )
    return Slogdet(sign, logabs)
