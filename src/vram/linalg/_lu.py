"""LU factorization: lu_factor_ex and lu_factor (torch.linalg's), and ``factor``, the step that
solve, inv, det and slogdet share.

Layout (PyTorch's): LU is a (*, m, n) tensor whose matrices are column-major, one after
another (``LU.mT`` is contiguous: strides (m*n, 1, m)); pivots (*, min(m, n)) int32 1-based
(LAPACK's); info (*,) int32 (pivots and info share one allocation). The input is copied
into LU by one strided copy on the device, then factored in place by the plan
``_dispatch.plan_lu`` picks:

- "blocked": vram's blocked LU (``_blocked``); a matrix that one panel covers (at most 32
  columns) is read where it lies by the one kernel that factors it: no copy; one large
  matrix or a few look ahead, on this thread's two look-ahead streams, replayed as a CUDA
  graph when the same call comes again (``_replay``);
- "cublas": getrfBatched over a device array of matrix pointers, made by a kernel into the
  "linalg" workspace (no host copy);
- "cusolver" / "streams": getrf for each matrix with the workspace size queried ONCE and
  ONE workspace per stream (``_workspace``: vram.memory.get_workspace's; pytorch#181997's fix).
  Xgetrf (the 64-bit API) where the matrix is too large for the legacy one, or where the
  table names an algorithm: its int64 pivots go to the "linalg" workspace, and one kernel
  turns them into PyTorch's int32 pivots at the end.

Device allocations per call, whatever the batch: LU, and pivots with info (two: info,
which a caller may keep, holds no LU); one for lu_factor, whose info goes nowhere, and for
the factors solve, inv, det and slogdet make for themselves (``factors_empty``); and
the workspaces the first time a (library, stream, thread) needs them, or needs more (the
blocked LU needs none).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .._dtypes import dtype, int32
from .._streams import Stream, current_stream
from .._tensor import Tensor, contiguous_strides, device_storage
from ..driver._cusolver import X_API_ELEMENTS
from . import _blocked, _checks
from ._batch import ahead_events, ahead_streams, run_batch
from ._blocked import PanelConfig
from ._dispatch import Plan, plan_lu_for
from ._libs import LIBS
from ._replay import replayed
from ._workspace import CallWorkspaces

__all__ = [
    "lu_factor_ex",
    "lu_factor",
    "factor",
    "column_major_empty",
    "column_major",
    "pivots_and_info",
    "int_views",
    "batch_stride",
    "LUFactor",
    "LUFactorEx",
]


class LUFactor(NamedTuple):
    LU: Tensor
    pivots: Tensor


class LUFactorEx(NamedTuple):
    LU: Tensor
    pivots: Tensor
    info: Tensor


def column_major_empty(batch: tuple[int, ...], m: int, n: int, like: Tensor) -> Tensor:
    """An uninitialized (*batch, m, n) tensor whose matrices are column-major, packed."""
    storage = device_storage(math.prod(batch) * m * n * like.dtype.itemsize, like.device)
    return column_major(storage, batch, m, n, like.dtype)


def column_major(storage, batch: tuple[int, ...], m: int, n: int, dt: dtype) -> Tensor:
    """The (*batch, m, n) tensor of packed column-major matrices at the start of ``storage``."""
    strides = (*contiguous_strides((*batch, n, m))[:-2], 1, m)
    return Tensor._make(storage, (*batch, m, n), strides, 0, dt)


def factors_empty(
    batch: tuple[int, ...], m: int, n: int, like: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Uninitialized LU (as ``column_major_empty``), pivots and info (as
    ``pivots_and_info``) in ONE allocation, in that order: for factors that live and die
    together (any one of them keeps the whole allocation alive)."""
    lu_bytes = math.prod(batch) * m * n * like.dtype.itemsize  # (a multiple of 4)
    storage = device_storage(lu_bytes + 4 * math.prod(batch) * (min(m, n) + 1), like.device)
    lu = column_major(storage, batch, m, n, like.dtype)
    return (lu, *int_views(storage, lu_bytes // 4, batch, min(m, n)))


def pivots_and_info(batch: tuple[int, ...], k: int, device) -> tuple[Tensor, Tensor]:
    """Uninitialized contiguous int32 pivots (*batch, k) and info (*batch,), in ONE
    allocation (info right after the pivots)."""
    storage = device_storage(4 * math.prod(batch) * (k + 1), device)
    return int_views(storage, 0, batch, k)


def int_views(storage, first: int, batch: tuple[int, ...], k: int) -> tuple[Tensor, Tensor]:
    """Contiguous int32 pivots (*batch, k) at element ``first`` of ``storage`` (counted in
    int32s), and info (*batch,) right after them."""
    pivots = Tensor._make(storage, (*batch, k), contiguous_strides((*batch, k)), first, int32)
    after = first + math.prod(batch) * k
    info = Tensor._make(storage, batch, contiguous_strides(batch), after, int32)
    return pivots, info


def batch_stride(t: Tensor) -> int | None:
    """The one stride between the matrices of ``t`` (*, r, c) taken as a flat batch, or None
    when its batch dimensions cannot be flattened (0 for a broadcast or single matrix)."""
    shape, strides = t.shape, t.stride()
    step, expected = 0, None  # the innermost batch dimension's stride; the next one's if packed
    for i in range(len(shape) - 3, -1, -1):  # innermost first; dimensions of size 1 do not count
        size = shape[i]
        if size != 1:
            found = strides[i]
            if expected is None:
                step = found
            elif found != expected:
                return None
            expected = found * size
    return step


def factor(
    lu: Tensor,
    pivots: Tensor,
    info: Tensor,
    pivot: bool = True,
    source: Tensor | None = None,
    flag: _checks.ZeroPivotFlag | None = None,
) -> Plan:
    """Factor in place the packed column-major matrices of ``lu`` (*, m, n), writing
    ``pivots`` (*, min(m, n)) int32 and ``info`` (*,) int32 (all contiguous, one device).
    ``source`` (*, m, n): the input, not yet copied into ``lu``: this copies it, unless the
    plan reads it where it lies (the blocked LU of a matrix one panel covers). ``flag``
    (armed): the blocked LU raises it for a zero pivot, and marks it watched.

    Queued on the current stream; returns the plan it ran (``plan_lu``'s). Nothing
    synchronizes.
    """
    *batch_dims, m, n = lu.shape
    batch = math.prod(batch_dims)
    k = min(m, n)
    if batch == 0:
        return Plan("cusolver")
    if k == 0:
        info.zero_()
        return Plan("cusolver")
    dtype = lu.dtype.name
    clusters = _blocked.clusters_on(lu.device)
    first = _blocked.first_panel(dtype, m, batch, clusters)  # None: no blocked LU here
    plan = plan_lu_for(m, n, batch, dtype, first is not None)
    if plan.path == "blocked":  # (so ``first`` is a config)
        failed = 0
        if flag is not None:
            failed, flag.watched = flag.ptr, True
        _factor_blocked(lu, pivots, info, pivot, source, dtype, m, n, batch, clusters, first,
                        failed)  # fmt: skip
        return plan
    if source is not None:
        lu.copy_(source)
    stream = current_stream(lu.device)
    libs = LIBS
    item = lu.dtype.itemsize
    base, stride = lu.data_ptr(), m * n * item
    ipiv, infos = pivots.data_ptr(), info.data_ptr()
    spaces = CallWorkspaces()
    if plan.path == "cublas":
        arrays = spaces.get(8 * batch, "linalg", stream)
        libs.pointers(stream, arrays, base, stride, batch)
        libs.getrf_batched(stream, dtype, n, arrays, base, stride, m, ipiv if pivot else 0, infos,
                           batch)  # fmt: skip
    elif plan.algo is None and m * n < X_API_ELEMENTS:
        args = (dtype, m, n, batch, base, stride, ipiv, infos, pivot)
        _getrf_legacy(libs, spaces, stream, plan, *args)
    else:
        args = (dtype, m, n, batch, base, stride, ipiv, infos, pivot)
        _getrf_x(libs, spaces, stream, plan, *args)
    if not pivot:  # PyTorch returns the trivial permutation
        libs.trivial_pivots(stream, ipiv, k, batch * k)
    return plan


def _factor_blocked(
    lu: Tensor,
    pivots: Tensor,
    info: Tensor,
    pivot: bool,
    source: Tensor | None,
    dtype: str,
    m: int,
    n: int,
    batch: int,
    clusters: bool,
    first: PanelConfig,
    failed: int,
) -> None:
    """vram's blocked LU (``_blocked``): the input read where it lies when one panel covers
    it and its batch is one stride, else copied into ``lu`` first. ``clusters``: whether
    the device runs cluster panels; ``first``: the first panel's config (``first_panel``);
    ``failed``: the zero-pivot flag's address, or 0."""
    read = None
    if source is not None:
        step = batch_stride(source) if _blocked.covers(first, m, n) else None
        if step is None:
            lu.copy_(source)
        else:
            rows, cols = source.stride()[-2:]
            read = (source.data_ptr(), step, rows, cols)
    device = lu.device
    stream = current_stream(device)
    libs = LIBS
    ipiv = pivots.data_ptr()
    if read is None and _blocked.look_ahead(m, n, batch, clusters):  # (plan: supported)
        _factor_ahead(libs, stream, lu, ipiv, info, pivot, dtype, m, n, batch, clusters, failed)
    else:
        _blocked.factor(libs, stream, dtype, m, n, batch, lu.data_ptr(), ipiv, info.data_ptr(),
                        pivot, read, clusters, first=first, failed=failed)  # fmt: skip
    if not pivot:  # PyTorch returns the trivial permutation
        k = min(m, n)
        libs.trivial_pivots(stream, ipiv, k, batch * k)


def _factor_ahead(
    libs,
    stream: Stream,
    lu: Tensor,
    ipiv: int,
    info: Tensor,
    pivot: bool,
    dtype: str,
    m: int,
    n: int,
    batch: int,
    clusters: bool,
    failed: int,
) -> None:
    """The blocked LU with look-ahead (``_blocked.factor``), on this thread's two streams for
    it, joined to ``stream`` by events; replayed as a graph when the same call comes again
    (``_replay``: the key names the call's memory, its workspaces, the zero-pivot flag and
    the tables)."""
    device = lu.device
    panels, side = ahead_streams(device)
    enter, leave, *steps = ahead_events(device)
    ptr, infos = lu.data_ptr(), info.data_ptr()
    enter.record(stream)
    panels.wait_event(enter)
    side.wait_event(enter)  # both join a capture of the caller's before taking workspaces
    spaces = (libs.lu_update_workspace(panels), libs.lu_update_workspace(side))
    key = (device, panels.cuda_stream, dtype, m, n, batch, pivot, ptr, ipiv, infos, spaces,
           failed, _blocked.tables(dtype))  # fmt: skip
    ahead = _blocked.Ahead(side, *steps)

    def queue() -> None:
        _blocked.factor(libs, panels, dtype, m, n, batch, ptr, ipiv, infos, pivot, None,
                        clusters, ahead, failed=failed)  # fmt: skip

    replayed(panels, key, queue)
    leave.record(panels)
    stream.wait_event(leave)
    enter.record(side)  # (a capture of the caller's takes the side stream back, too)
    stream.wait_event(enter)


def _getrf_legacy(
    libs,
    spaces: CallWorkspaces,
    stream: Stream,
    plan: Plan,
    dtype: str,
    m: int,
    n: int,
    batch: int,
    base: int,
    stride: int,
    ipiv: int,
    infos: int,
    pivot: bool,
) -> None:
    """cusolverDn<t>getrf per matrix: int32 pivots straight into ``pivots``."""
    k = min(m, n)
    lwork = libs.getrf_workspace(stream, dtype, m, n, base, m)  # once for the whole batch

    def workspace(s: Stream) -> int:
        return spaces.get(lwork, "cusolver", s)

    def call(s: Stream, ws: int, i: int) -> None:
        piv = ipiv + 4 * k * i if pivot else 0
        libs.getrf(s, dtype, m, n, base + stride * i, m, ws, lwork, piv, infos + 4 * i)

    run_batch(stream, batch, plan.streams, workspace, call)


def _getrf_x(
    libs,
    spaces: CallWorkspaces,
    stream: Stream,
    plan: Plan,
    dtype: str,
    m: int,
    n: int,
    batch: int,
    base: int,
    stride: int,
    ipiv: int,
    infos: int,
    pivot: bool,
) -> None:
    """cusolverDnXgetrf per matrix: int64 pivots into the "linalg" workspace of ``stream``,
    turned into ``pivots`` (int32) by one kernel when every matrix is done."""
    k = min(m, n)
    algo = plan.algo or 0
    lwork, host = libs.xgetrf_workspace(stream, dtype, m, n, base, m, algo)
    pivots64 = 0
    if pivot:
        pivots64 = spaces.get(8 * k * batch, "linalg", stream)

    def workspace(s: Stream) -> int:
        return spaces.get(lwork, "cusolver", s)

    def call(s: Stream, ws: int, i: int) -> None:
        piv = pivots64 + 8 * k * i if pivot else 0
        libs.xgetrf(s, dtype, m, n, base + stride * i, m, piv, ws, lwork, host, infos + 4 * i, algo)

    run_batch(stream, batch, plan.streams, workspace, call)
    if pivot:
        libs.pivots_to_int32(stream, ipiv, pivots64, k * batch)


def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False) -> LUFactorEx:
    """LU factorization with partial pivoting of (batches of) matrices: (LU, pivots, info).

    As torch.linalg.lu_factor_ex: ``A`` (*, m, n) float32, float64, complex64 or complex128;
    LU (*, m, n) with column-major matrices, L's unit diagonal implicit; pivots (*, min(m, n))
    int32, 1-based; info (*,) int32: 0, or i for a zero pivot U[i-1, i-1] (the factorization
    still completes). ``pivot=False`` factors without row interchanges (pivots are then
    1..k). ``check_errors=True`` raises LinAlgError for a nonzero info (synchronizes).
    Queued on the current stream.
    """
    api = "vram.linalg.lu_factor_ex"
    _checks.check_matrix(api, A, square=False)
    flag = _checks.ZeroPivotFlag.armed(A.device) if check_errors else None
    LU, pivots, info = _factor_new(A, pivot, one_allocation=False, flag=flag)
    if check_errors:
        _checks.check_errors(info, api, A.ndim == 2, flag)
    return LUFactorEx(LU, pivots, info)


def _factor_new(
    A: Tensor, pivot: bool, one_allocation: bool, flag: _checks.ZeroPivotFlag | None
) -> tuple[Tensor, Tensor, Tensor]:
    """(LU, pivots, info) of ``A``, queued. ``one_allocation``: the three share one
    allocation (``factors_empty``); else LU has its own, apart from pivots and info: info,
    which a caller may keep to look at later, then does not keep LU's memory alive.
    ``flag``: see ``factor``."""
    *batch, m, n = A.shape
    if one_allocation:
        LU, pivots, info = factors_empty(tuple(batch), m, n, A)
    else:
        LU = column_major_empty(tuple(batch), m, n, A)
        pivots, info = pivots_and_info(tuple(batch), min(m, n), A.device)
    factor(LU, pivots, info, pivot, source=A if A.numel() else None, flag=flag)
    return LU, pivots, info


def lu_factor(A: Tensor, *, pivot: bool = True) -> LUFactor:
    """(LU, pivots) of ``A``, as torch.linalg.lu_factor: lu_factor_ex's, and LinAlgError
    naming the batch element and the zero pivot where ``A`` is singular. Synchronizes (to
    read info). LU and pivots share one allocation, freed when both are gone."""
    api = "vram.linalg.lu_factor"
    _checks.check_matrix(api, A, square=False)
    flag = _checks.ZeroPivotFlag.armed(A.device)
    LU, pivots, info = _factor_new(A, pivot, one_allocation=True, flag=flag)
    _checks.check_errors(info, api, A.ndim == 2, flag)
    return LUFactor(LU, pivots)
