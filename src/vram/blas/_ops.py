"""The GEMM, declared once: ``out = act(alpha * (a @ b) + beta * bias + row)`` through the
kernel seam, and the plans that run it on every device.

- ``a`` [.., M, K] and ``b`` [.., K, N] (2-D, or 3-D with one batch dimension that may be 1
  in either), ``bias`` broadcastable to ``out``; ``beta == 0`` means ``bias`` is not read
  (so ``mm`` passes ``out`` itself). ``row`` (addmm's ``bias=``, usually None) broadcasts
  to ``out`` too: with ``bias`` a residual of out's layout and ``row`` one row of N, both
  are one cuBLASLt call (C read where it is, the row the BIAS epilogue's).
  ``activation``: 0 none, 1 relu, 2 gelu (tanh approximation, as cuBLASLt's GELU
  epilogue). All the tensors share one float dtype.
- ``algo`` names the algorithm: -1 lets vram choose (TunableOp's result when enabled, else
  the preferred library's default), 0 is TunableOp's "Default", i >= 1 its i-th other
  candidate (see ``_tunable``).

The declarations, each with its CUDA half (``_cuda``: cuBLAS and cuBLASLt) and its
reference (the simulated GPU's library):
- ``GEMM`` (a ``LibraryCall``): the product. Reference: NumPy in fp32 (fp64 for fp64),
  inputs widened exactly from bf16/fp16 (ml_dtypes), the result rounded once to the output
  dtype, as cuBLAS with CUBLAS_COMPUTE_32F. Candidate i >= 1 splits K into 2**i chunks whose
  fp32 partial products are summed in order, as a split-K kernel reduces them.
- ``GEMM_PLAN`` (a ``Query``): the library's plan of one problem (cuBLASLt's descriptors and
  algorithm; the sim's: the candidate), kept with the prepared launch. It says what the
  call does not do itself: a bias that is not a fused row is then copied into out first,
  an activation cuBLAS has no epilogue for applied after (the pointwise ops).
- ``GEMM_CANDIDATES``, ``GEMM_TIME``, ``BLAS_LIBRARY`` (queries): what TunableOp asks of the
  device's library (``_tunable.choose`` tunes, the same for every device).

A *plan* here is everything one problem needs that does not change between calls, kept per
thread under (device, dtype, shapes, strides, pointer alignment, bias form, activation,
algorithm, and the generations of the ``vram.backends.cuda`` settings and of TunableOp):
operands cuBLAS cannot read as they are copied first (``_layout``, as PyTorch), or the
library plan and the launcher the device's driver prepared. A repeated call is a dict
lookup and the launcher's call. The cpu device runs the reference at once (no library, no
TunableOp).

The public functions (``vram.mm`` ...) check PyTorch's contract first, with errors naming
the argument, then call ``gemm`` below, which reaches the plans without re-checking.
``product_plan`` gives ``mm`` the plan of a plain product to keep (see ``_functions``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._dtypes import bfloat16, dtype, float16, float32, float64
from .._streams import current_stream
from .._tensor import Tensor
from ..backends import cuda as _backends
from ..driver._work import Launch, LibraryCall, Query, View
from ..memory import current_workspace
from ..ops._math import UNARY, add, copy_, fill_, mul
from ..ops._plans import ask, launcher, stream_handle
from ..ops._pointwise import run as pointwise
from . import _cuda, _tunable
from ._cuda import BETA, NO_BETA, ROW, ROW_C
from ._layout import GemmCall, plan_call

__all__ = [
    "gemm",
    "product_plan",
    "clear_plans",
    "GemmSpec",
    "GEMM",
    "GEMM_PLAN",
    "GEMM_CANDIDATES",
    "GEMM_TIME",
    "BLAS_LIBRARY",
    "GEMM_DTYPES",
    "ACTIVATIONS",
    "numpy_gemm",
]

GEMM_DTYPES = (float16, bfloat16, float32, float64)
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2}
_ACTIVATION_OPS = {1: UNARY["relu"], 2: UNARY["gelu_tanh"]}
_GELU_BETA = np.sqrt(2.0 / np.pi)
_GELU_KAPPA = 0.044715
_MAX_PLANS = 512  # per thread; the oldest is dropped beyond
_MAX_ALIGN = 256  # bytes: the largest alignment a plan asks about
# how the beta term is formed: none, out itself, a tensor copied into out first (or fused as
# a row), a residual of out's layout read where it is with a row fused (addmm's ``bias=``)
_NO_BIAS, _BIAS_IS_OUT, _BIAS, _RESIDUAL = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class GemmSpec:
    """One problem as the library plans it: the column-major ``call``, the ``dtype``, the
    beta term (``_cuda``: NO_BETA, BETA times out, or a bias ROW to fuse), the
    ``activation``, the algorithm (-1: the library's default) and the pointers' alignment
    in bytes (at most 256)."""

    call: GemmCall
    dtype: dtype
    bias: int
    activation: int
    algo: int
    align: int


# ---- the reference: the simulated GPU's library ----------------------------------------------


def numpy_gemm(
    out: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    bias: np.ndarray,
    beta: float,
    alpha: float,
    activation: int = 0,
    algo: int = 0,
    row: np.ndarray | None = None,
) -> None:
    """``out[...] = act(alpha * a @ b + beta * bias + row)`` in fp32 (fp64), as candidate
    ``algo``."""
    acc = np.float64 if out.dtype == np.float64 else np.float32
    a_acc, b_acc = a.astype(acc, copy=False), b.astype(acc, copy=False)
    k = a.shape[-1]
    splits = 1 if algo <= 0 else min(2**algo, max(k, 1))
    if splits == 1:
        result = np.matmul(a_acc, b_acc)
    else:
        bounds = np.linspace(0, k, splits + 1).astype(int)
        result = np.matmul(a_acc[..., :, : bounds[1]], b_acc[..., : bounds[1], :])
        for lo, hi in zip(bounds[1:-1], bounds[2:], strict=True):
            result += np.matmul(a_acc[..., :, lo:hi], b_acc[..., lo:hi, :])
    result = np.asarray(result, dtype=acc)
    with np.errstate(all="ignore"):
        if alpha != 1:
            result *= acc(alpha)
        if beta != 0:
            result += acc(beta) * bias.astype(acc, copy=False)
        if row is not None:
            result += row.astype(acc, copy=False)
        if activation == 1:
            np.maximum(result, acc(0), out=result)
        elif activation == 2:
            inner = acc(_GELU_BETA) * (result + acc(_GELU_KAPPA) * result**3)
            result = acc(0.5) * result * (acc(1) + np.tanh(inner))
    out[...] = result.astype(out.dtype)


@dataclass(frozen=True, slots=True)
class _ReferencePlan:
    """The reference's plan of a problem: the candidate it computes. It takes any bias and
    applies the activation itself, and needs no workspace."""

    algo: int
    takes_bias: bool = True
    applies_activation: bool = True
    workspace: None = None


def _reference_plan(spec: GemmSpec) -> _ReferencePlan:
    return _ReferencePlan(max(spec.algo, 0))


def _reference(
    out: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    bias: np.ndarray,
    row: np.ndarray | int,
    alpha: Any,
    beta: Any,
    workspace: int,
    activation: int,
    found: _ReferencePlan,
) -> None:
    """(``row``: the row's array, or the pointer 0 of a plan without one)"""
    row = None if type(row) is int else row
    numpy_gemm(out, a, b, bias, beta, alpha, activation, found.algo, row)


GEMM = LibraryCall("gemm", _cuda.run, _reference, _cuda.bind)
GEMM_PLAN = Query("gemm plan", _cuda.plan, _reference_plan)
GEMM_CANDIDATES = Query("gemm candidates", _cuda.candidates, lambda spec: _tunable.sim_candidates())
GEMM_TIME = Query(
    "gemm time", _cuda.time_ms, lambda spec, tuning, algo: _tunable.sim_ms(spec.call, algo)
)
BLAS_LIBRARY = Query("blas library", _cuda.library, _tunable.sim_library)


# ---- plans -----------------------------------------------------------------------------------


class _Local(threading.local):
    def __init__(self) -> None:
        self.plans: dict[tuple, Any] = {}


_local = _Local()


def clear_plans() -> None:
    """Drop this thread's cached plans (a library's descriptors are destroyed with them)."""
    _local.plans.clear()


def gemm(
    out: Tensor,
    a: Tensor,
    b: Tensor,
    bias: Tensor | None,
    beta: float,
    alpha: float,
    activation: int,
    algo: int = -1,
    row: Tensor | None = None,
) -> Tensor:
    """Queue ``out = act(alpha * a @ b + beta * bias + row)`` on the current stream of out's
    device.

    The arguments are checked already (``_checks``); K may be 0 (then only the bias term is
    computed), but not M or N. ``row`` broadcasts to out (None: no row)."""
    if bias is None:
        bias, beta = out, 0.0
    if 0 in out.shape:
        return out
    if row is not None:
        if beta == 0:  # the row is the only bias (linear's problem)
            bias, beta, row = row, 1.0, None
        elif not fuses_residual(out, bias, row):  # the product, then the row, then act
            gemm(out, a, b, bias, beta, alpha, 0, algo)
            add(out, row, out=out)
            if activation:
                _activate(out, activation)
            return out
    if a.shape[-1] == 0:
        _bias_only(out, bias, beta, activation, row)
        return out
    pa, pb, po = a.data_ptr(), b.data_ptr(), out.data_ptr()
    pc = po if bias is out else bias.data_ptr()
    pr = 0 if row is None else row.data_ptr()
    found = plan_for(out, a, b, bias, beta, activation, algo, pa | pb | po, row)
    found.run(out, a, b, bias, beta, alpha, pa, pb, pc, po, stream_handle(out.device), row, pr)
    return out


def fuses_residual(out: Tensor, bias: Tensor, row: Tensor) -> bool:
    """May ``act(alpha * a @ b + beta * bias + row)`` be one library call? ``bias`` a
    residual of out's shape and strides (not out itself), ``row`` one contiguous row of N
    values, out a matrix."""
    return (
        bias is not out
        and out.ndim == 2
        and bias.shape == out.shape
        and bias.stride() == out.stride()
        and _is_bias_row(row, out.shape[-1])
    )


def product_plan(out: Tensor, a: Tensor, b: Tensor, pointers: int) -> Any:
    """The plan of ``out = a @ b`` (checked; M, N and K > 0; ``pointers`` the bitwise or of
    the three data pointers), as ``gemm`` would run it. Its ``product(out, a, b, pa, pb,
    po, handle)`` queues the product on the stream ``handle`` (the current one's: the
    callers ask for it once) for any tensors of the same shapes,
    strides, dtype, device and alignment, until a ``vram.backends.cuda`` setting or
    TunableOp's state changes."""
    return plan_for(out, a, b, out, 0.0, 0, -1, pointers)


def plan_for(
    out: Tensor,
    a: Tensor,
    b: Tensor,
    bias: Tensor,
    beta: Any,
    activation: int,
    algo: int,
    pointers: int,
    row: Tensor | None = None,
) -> Any:
    """This thread's cached plan of the problem (made on first sight; M, N and K > 0).

    ``pointers`` is the bitwise or of a's, b's and out's data pointers (their alignment is
    part of the problem). The plan's ``run(out, a, b, bias, beta, alpha, pa, pb, pc, po,
    handle)`` queues the product on the stream ``handle`` (the current one's), ``pa`` to
    ``po`` the data pointers of a, b, bias and out; with a ``row`` (``fuses_residual``
    holds, beta != 0), ``run(..., handle, row, prow)``."""
    if row is not None:
        mode, bias_key = _RESIDUAL, (row.shape, row.stride())
        pointers |= bias.data_ptr() | row.data_ptr()
    elif beta == 0:
        mode, bias_key = _NO_BIAS, None
    elif bias is out:
        mode, bias_key = _BIAS_IS_OUT, None
    else:
        mode, bias_key = _BIAS, (bias.shape, bias.stride(), beta == 1)
        pointers |= bias.data_ptr()
    key = (
        out.device,
        out.dtype.name,  # a str's hash is cached; the dtype's is computed
        a.shape,
        a.stride(),
        b.shape,
        b.stride(),
        out.shape,
        out.stride(),
        mode,
        bias_key,
        activation,
        algo,
        pointers & (_MAX_ALIGN - 1),
        _backends.generation,
        _tunable.state.generation,
    )
    plans = _local.plans
    found = plans.get(key)
    if found is None:
        align = (pointers | _MAX_ALIGN) & -(pointers | _MAX_ALIGN)
        found = _build(out, a, b, bias, beta, mode, activation, algo, align, row)
        if len(plans) >= _MAX_PLANS:
            del plans[next(iter(plans))]
        plans[key] = found
    return found


def _strides3(t: Tensor) -> tuple[int, int, int]:
    """(batch, row, column) strides; a batch of one has batch stride 0."""
    s = t.stride()
    if t.ndim == 2:
        return 0, s[0], s[1]
    return (s[0] if t.shape[0] > 1 else 0), s[1], s[2]


def _is_bias_row(bias: Tensor, n: int) -> bool:
    """True when ``bias`` broadcast to [M, N] is one contiguous row of N values: what
    cuBLASLt's BIAS epilogue adds to every row of a row-major result."""
    shape, strides = bias.shape, bias.stride()
    if not shape or shape[-1] != n or (n > 1 and strides[-1] != 1):
        return False
    return all(size == 1 or st == 0 for size, st in zip(shape[:-1], strides[:-1], strict=True))


def _build(
    out: Tensor,
    a: Tensor,
    b: Tensor,
    bias: Tensor,
    beta: Any,
    mode: int,
    activation: int,
    algo: int,
    align: int,
    row: Tensor | None,
) -> Any:
    m, n, k = out.shape[-2], out.shape[-1], a.shape[-1]
    batch = out.shape[0] if out.ndim == 3 else 1
    call, copy_a, copy_b, temp = plan_call(
        batch, m, k, n, _strides3(a), _strides3(b), _strides3(out)
    )
    if call is None:
        return _StagedPlan(copy_a, copy_b, temp, activation, algo)
    fits_row = call.swap and batch == 1 and m > 1  # (cuBLASLt's BIAS: a row of the result)
    if mode == _RESIDUAL:
        # a residual is fused with its row where cuBLASLt's epilogue can add the row; else
        # input is copied into out, the product accumulates, then the row and act (``run``)
        beta_term = ROW_C if fits_row else BETA
        spec = GemmSpec(call, out.dtype, beta_term, activation if fits_row else 0, algo, align)
        return _DirectPlan(spec, out, a, b, bias, mode, row, activation)
    row_fused = mode == _BIAS and beta == 1 and fits_row and _is_bias_row(bias, n)
    spec = GemmSpec(
        call,
        out.dtype,
        ROW if row_fused else NO_BETA if mode == _NO_BIAS else BETA,
        activation,
        algo,
        align,
    )
    if algo == -1 and _tunable.state.is_enabled():
        spec = replace(spec, algo=_tuned(spec, out, a, b, bias, beta, mode))
    return _DirectPlan(spec, out, a, b, bias, mode, None, activation)


class _DirectPlan:
    """Operands the library reads as they are: the library's plan (``GEMM_PLAN``) and the
    launcher of ``GEMM`` the device's driver prepared, with what the library does not do
    itself around it (the bias copied into out first, a residual's row added after the
    product, the activation last)."""

    __slots__ = (
        "device", "library", "run_gemm", "copy_bias", "add_row", "activation", "workspace",
    )  # fmt: skip

    reads_pointers_only = True  # (run reads a and b by their pointers alone)

    def __init__(
        self,
        spec: GemmSpec,
        out: Tensor,
        a: Tensor,
        b: Tensor,
        bias: Tensor,
        mode: int,
        row: Tensor | None,
        activation: int,
    ) -> None:
        device = out.device
        self.device = device
        found = ask(device, GEMM_PLAN, spec) or _reference_plan(spec)
        self.library = found  # the library's plan (_cuda's, or the reference's)
        self.copy_bias = mode in (_BIAS, _RESIDUAL) and not found.takes_bias
        self.add_row = mode == _RESIDUAL and not found.takes_bias
        # (the activation is the library's only where the spec asked it of the epilogue)
        applied = found.applies_activation and spec.activation == activation
        self.activation = 0 if applied else activation
        self.workspace = found.workspace  # (bytes, library) to ask of get_workspace, or None
        views = (
            _view(out, out),
            _view(a, a),
            _view(b, b),
            _view(out, out if mode == _NO_BIAS else bias.expand(out.shape)),
            None if row is None else _view(out, row.expand(out.shape)),
            None,
            None,
            None,
        )
        self.run_gemm = launcher(device, Launch(GEMM, views=views, values=(spec.activation, found)))

    def run(
        self,
        out: Tensor,
        a: Tensor,
        b: Tensor,
        bias: Tensor,
        beta: Any,
        alpha: Any,
        pa: int,
        pb: int,
        pc: int,
        po: int,
        handle: int,
        row: Tensor | None = None,
        prow: int = 0,
    ) -> None:
        """``out = act(alpha * a @ b + beta * bias + row)`` on the stream ``handle`` (the
        current one's); ``pa``, ``pb``, ``pc``, ``po``, ``prow``: the data pointers of a, b,
        bias, out and row (the callers have them: the plan is looked up by their alignment;
        ``row`` and ``prow`` only for a plan made with a row)."""
        if self.copy_bias:  # PyTorch's: out = bias, then the product accumulates
            copy_(out, bias.expand(out.shape))
            pc = po
        space = self.workspace
        workspace = current_workspace(space[0], space[1], self.device, handle) if space else 0
        self.run_gemm(handle, po, pa, pb, pc, prow, alpha, beta, workspace)
        if self.add_row:
            add(out, row, out=out)
        if self.activation:
            _activate(out, self.activation)

    def product(
        self, out: Tensor, a: Tensor, b: Tensor, pa: int, pb: int, po: int, handle: int
    ) -> None:
        """``out = a @ b`` (mm's form of ``run``: alpha 1, no bias, no activation)."""
        space = self.workspace
        workspace = current_workspace(space[0], space[1], self.device, handle) if space else 0
        self.run_gemm(handle, po, pa, pb, po, 0, 1.0, 0.0, workspace)


def _view(t: Tensor, like: Tensor) -> View:
    """How the reference sees ``like`` (of ``t``'s dtype): its shape and byte strides."""
    item = t.element_size()
    return View(tuple(like.shape), tuple(s * item for s in like.stride()), t.dtype.np)


class _StagedPlan:
    """Operands cuBLAS cannot read as they are: copied once (as PyTorch does), or a result
    computed into a contiguous tensor and copied into ``out``."""

    __slots__ = ("copy_a", "copy_b", "temp", "activation", "algo")

    reads_pointers_only = False  # (run copies or reads a and b as tensors)

    def __init__(self, copy_a: bool, copy_b: bool, temp: bool, activation: int, algo: int):
        self.copy_a, self.copy_b, self.temp = copy_a, copy_b, temp
        self.activation, self.algo = activation, algo

    def run(
        self,
        out: Tensor,
        a: Tensor,
        b: Tensor,
        bias: Tensor,
        beta: Any,
        alpha: Any,
        pa: int,
        pb: int,
        pc: int,
        po: int,
        handle: int,
        row: Tensor | None = None,
        prow: int = 0,
    ) -> None:
        """(the pointers and ``handle`` unused: the copies and ``gemm`` ask again)"""
        a = a.contiguous() if self.copy_a else a
        b = b.contiguous() if self.copy_b else b
        if not self.temp:
            gemm(out, a, b, bias, beta, alpha, self.activation, self.algo, row)
            return
        target = Tensor._empty(out.shape, out.dtype, out.device)
        if bias is out and beta != 0:
            copy_(target, out)
            bias = target
        gemm(target, a, b, bias, beta, alpha, self.activation, self.algo, row)
        copy_(out, target)

    def product(
        self,
        out: Tensor,
        a: Tensor,
        b: Tensor,
        pa: int,
        pb: int,
        po: int,
        handle: int,
    ) -> None:
        """``out = a @ b`` (mm's form of ``run``)."""
        self.run(out, a, b, out, 0.0, 1.0, pa, pb, po, po, handle)


# ---- K == 0 and unfused activations --------------------------------------------------------


def _bias_only(
    out: Tensor, bias: Tensor, beta: Any, activation: int, row: Tensor | None = None
) -> None:
    """K == 0: ``out = act(beta * bias + row)``, with no library call (as PyTorch)."""
    if beta == 0:
        fill_(out, 0)
    else:
        if bias is not out:
            copy_(out, bias.expand(out.shape))
        if beta != 1:
            mul(out, beta, out=out)
    if row is not None:
        add(out, row, out=out)
    if activation:
        _activate(out, activation)


def _activate(out: Tensor, activation: int) -> None:
    """relu (1) or tanh-gelu (2) of ``out`` in place (the pointwise ops)."""
    pointwise(_ACTIVATION_OPS[activation], (out,), out=out)


# ---- TunableOp -------------------------------------------------------------------------------


def _tuned(
    spec: GemmSpec, out: Tensor, a: Tensor, b: Tensor, bias: Tensor, beta: Any, mode: int
) -> int:
    """TunableOp's candidate for this problem: remembered, or tuned now (synchronizes);
    Default (0) on a device without a library (cpu). Candidates run with alpha 1: the
    choice is the problem's, whatever the scale."""
    device = out.device
    library = ask(device, BLAS_LIBRARY, device.index)
    if library is None:
        return 0
    call = spec.call
    problem = _tunable.make_problem(
        out.dtype.name, call.transa, call.transb, call.m, call.n, call.k,
        (call.lda, call.ldb, call.ldc), call.batch, spec.bias == ROW, spec.activation, library,
    )  # fmt: skip
    tuning = _Tuning(out, a, b, bias, beta, mode, spec.activation)
    tf32 = out.dtype is float32 and _cuda.flag(out.dtype)
    return _tunable.choose(
        problem,
        lambda: ask(device, GEMM_CANDIDATES, spec),
        tuning.run,
        lambda algo: ask(device, GEMM_TIME, spec, tuning, algo),
        _tunable.tolerance(out.dtype.name, tf32),
    )


class _Tuning:
    """A problem's candidates run into a scratch output of ``out``'s layout and alignment,
    on the current stream: ``run(algo)`` (its result, on the host: synchronizes) and
    ``queue(algo)`` (for timing)."""

    def __init__(
        self, out: Tensor, a: Tensor, b: Tensor, bias: Tensor, beta: Any, mode: int, act: int
    ) -> None:
        self.out, self.a, self.b, self.beta, self.mode, self.activation = out, a, b, beta, mode, act
        self.scratch = _scratch_like(out)
        self.bias = self.scratch if mode == _BIAS_IS_OUT else bias
        self.stream = current_stream(out.device)

    def run(self, algo: int) -> np.ndarray:
        if self.mode == _BIAS_IS_OUT:
            copy_(self.scratch, self.out)
        self.queue(algo)
        return self.scratch.numpy()

    def queue(self, algo: int) -> None:
        gemm(self.scratch, self.a, self.b, self.bias, self.beta, 1.0, self.activation, algo)


def _scratch_like(out: Tensor) -> Tensor:
    """A new tensor with ``out``'s shape, strides and pointer alignment (so that the
    candidates run as they will on ``out``)."""
    item = out.element_size()
    extent = sum((n - 1) * s for n, s in zip(out.shape, out.stride(), strict=True)) + 1
    shift = (out.data_ptr() % _MAX_ALIGN) // item
    flat = Tensor._empty((extent + _MAX_ALIGN // item,), out.dtype, out.device)
    base = flat.data_ptr() % _MAX_ALIGN // item
    offset = (shift - base) % (_MAX_ALIGN // item)
    return flat._view(out.shape, out.stride(), flat.storage_offset() + offset)
