"""The GEMM on a GPU: the cuda halves of the declarations in ``_ops`` (cuBLASLt with a plan
made once per problem, or cuBLAS).

A library *plan* (``plan``, the answer to ``_ops.GEMM_PLAN``) is everything one problem
needs that does not change between calls: the column-major call (``_layout``), and for
cuBLASLt its matmul descriptor, matrix layouts and chosen algorithm; for cuBLAS the math
mode. ``_ops`` makes it once per problem and thread (its descriptors hold per-call state
such as the bias pointer, so threads never share one), keyed by everything that decides it
(shapes, strides, dtype, pointer alignment, bias form, activation, algorithm, and the
generations of the ``vram.backends.cuda`` settings and of TunableOp). A repeated call is
then ``run``: ``cublasLtMatmul`` on the stream, no descriptor creation, no heuristic query,
no setting read.

Which library (``vram.backends.cuda.preferred_blas_library()``, read when a plan is made):
- "cublaslt" (vram's default): cuBLASLt, the first algorithm of its heuristic.
- "cublas": PyTorch's default route, ``cublasGemmEx`` / ``cublasGemmStridedBatchedEx``
  with ``cublasSetStream``, ``cublasSetWorkspace`` and the math mode set on each call.
- Either way, ``addmm`` with a bias row vector and beta == 1 runs as one cuBLASLt call with
  a BIAS (RELU_BIAS, GELU_BIAS) epilogue, as PyTorch's gemm_and_bias; an activation
  without it is cuBLASLt's RELU/GELU epilogue. ``addmm(input, ..., bias=row)`` (a residual
  ``input`` of out's layout and a bias row, ROW_C) is one cuBLASLt call too: C is ``input``,
  read where it is, D the new result, the row the BIAS epilogue's. What a plan does not do
  itself it says (``takes_bias``, ``applies_activation``), and ``_ops`` does it around the
  call: the bias copied into out first, a residual's row added after, the activation last
  (cuBLAS has no epilogue).
- With TunableOp enabled, the problem's remembered candidate (``_ops`` tunes; ``candidates``
  and ``time_ms`` are this library's answers).

Precision: fp32, fp16 and bf16 accumulate in fp32 (``CUBLAS_COMPUTE_32F``); fp32 uses TF32
only when ``matmul.allow_tf32``; fp16/bf16 split-K reductions stay in fp32 unless the
``allow_*_reduced_precision_reduction`` flag allows otherwise; fp64 is ``COMPUTE_64F``.

Workspaces (``workspace``: bytes and library, asked of ``vram.memory.get_workspace`` by
``_ops`` before each call) are sized as PyTorch sizes them (``_workspace``): cuBLAS's is set
on the handle at each call; cuBLASLt's is the cuBLAS one of the stream (PyTorch's unified
workspace; a buffer of its own with ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=0``), asked for only
when the plan's algorithm needs workspace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._dtypes import bfloat16, float16, float32, float64
from .._errors import CudaError
from .._streams import Event
from ..backends import cuda as _backends
from ..driver import _cublas
from . import _tunable
from ._layout import OP_N, GemmCall
from ._workspace import (
    cublas_workspace_size,
    cublaslt_workspace_library,
    cublaslt_workspace_size,
)

if TYPE_CHECKING:
    from ._ops import GemmSpec

__all__ = [
    "plan", "run", "bind", "candidates", "time_ms", "library", "flag",
    "NO_BETA", "BETA", "ROW", "ROW_C",
]  # fmt: skip

# a spec's beta term: none, beta times out, a row fused as BIAS, or beta times C (a matrix of
# out's layout, read where it is) with a row fused as BIAS (addmm's ``bias=``)
NO_BETA, BETA, ROW, ROW_C = 0, 1, 2, 3
_SCALE = {  # dtype -> (NumPy scale type, compute type name, cudaDataType of the scale)
    float32: (np.float32, "32F", "float32"),
    float16: (np.float32, "32F", "float32"),
    bfloat16: (np.float32, "32F", "float32"),
    float64: (np.float64, "64F", "float64"),
}
_MAX_ALIGN = 256  # bytes: the largest alignment cuBLASLt asks about
_NOT_SUPPORTED = "CUBLAS_STATUS_NOT_SUPPORTED"
_LT_EPILOGUES = {  # (fused bias, activation) -> cublasLtEpilogue_t name
    (False, 0): "DEFAULT",
    (False, 1): "RELU",
    (False, 2): "GELU",
    (True, 0): "BIAS",
    (True, 1): "RELU_BIAS",
    (True, 2): "GELU_BIAS",
}


def flag(dt: Any) -> bool:
    """The backends flag that governs ``dt``'s products."""
    matmul = _backends.matmul
    if dt is float32:
        return matmul.allow_tf32
    if dt is float16:
        return matmul.allow_fp16_reduced_precision_reduction
    if dt is bfloat16:
        return matmul.allow_bf16_reduced_precision_reduction
    return False


def library(driver: Any, device: int, index: int) -> _tunable.Library:
    """The BLAS library's identity for TunableOp (``_ops.BLAS_LIBRARY``): cuBLAS's and
    cuBLASLt's versions, and the device's ordinal (PyTorch's file names)."""
    return _tunable.Library(tuple(_cublas.versions().items()), str(index))


def run(
    driver: Any,
    device: int,
    stream: int,
    po: int,
    pa: int,
    pb: int,
    pbias: int,
    prow: int,
    alpha: Any,
    beta: Any,
    workspace: int,
    activation: int,
    found: Any,
) -> None:
    """``_ops.GEMM`` on a GPU: the plan ``found`` (``plan``'s) queued on ``stream``."""
    found.run(stream, po, pa, pb, pbias, prow, alpha, beta, workspace)


def bind(driver: Any, device: int, activation: int, found: Any) -> Any:
    """``run`` bound once (``LibraryCall.bind``): the plan's own ``run``."""
    return found.run


# ---- making a plan ---------------------------------------------------------------------------


def plan(driver: Any, device: int, spec: GemmSpec) -> _LtPlan | _BlasPlan:
    """``_ops.GEMM_PLAN`` on a GPU: the library plan of ``spec`` (its algorithm -1: the
    preferred library's default; 0: cuBLAS (or, for a fused bias, cuBLASLt's first
    heuristic); i >= 1: cuBLASLt's i-th)."""
    call, dt, algo = spec.call, spec.dtype, spec.algo
    fused = spec.bias >= ROW
    tf32 = flag(dt)
    if algo == -1:
        algo = 1 if fused or _backends.preferred_blas_library() == "cublaslt" else 0
    beta = NO_BETA if spec.bias == NO_BETA else BETA
    if algo == 0 and not fused:
        return _BlasPlan(call, dt, driver, device, beta, tf32)
    lt = _lt_plan(call, dt, driver, device, spec.bias, spec.activation, max(algo - 1, 0), tf32,
                  spec.align)  # fmt: skip
    if lt is not None:
        return lt
    if spec.bias == ROW_C:  # no fused algorithm: input copied into out, the product, then
        return _BlasPlan(call, dt, driver, device, BETA, tf32)  # the row and act (``_ops``)
    if fused:  # no fused algorithm: the bias copied into out, then the product
        lt = _lt_plan(call, dt, driver, device, BETA, spec.activation, 0, tf32, spec.align)
        return lt or _BlasPlan(call, dt, driver, device, BETA, tf32)
    return _BlasPlan(call, dt, driver, device, beta, tf32)


def _reduced_precision_ok(dt: Any, allowed: bool) -> bool:
    """May cuBLASLt reduce split-K partial sums in the output type? (fp16/bf16: the flag)"""
    return allowed if dt in (float16, bfloat16) else True


def _lt_plan(
    call: GemmCall,
    dt: Any,
    driver: Any,
    device: int,
    bias: int,
    activation: int,
    index: int,
    tf32: bool,
    align: int,
) -> _LtPlan | None:
    """A cuBLASLt plan with the ``index``-th heuristic algorithm; None if there is none."""
    props = driver.properties(device)
    max_workspace = cublaslt_workspace_size(props.major, props.minor)
    _cublas.use_device(device)
    lt = _cublas.lt_handle(device)
    desc, layouts = _lt_descriptors(call, dt, bias >= ROW, activation, tf32)
    count = 1 if index == 0 else _tunable.LT_CANDIDATES
    pref = _cublas.matmul_preference(
        max_workspace, (align, align, align, align), _reduced_precision_ok(dt, tf32)
    )
    try:
        found = _cublas.heuristics(lt, desc, *layouts, layouts[2], pref, count)
    except CudaError as exc:
        _destroy(desc, layouts)
        if exc.name == _NOT_SUPPORTED:  # no algorithm for this problem (an epilogue, fp64)
            return None
        raise
    if index >= len(found):
        _destroy(desc, layouts)
        return None
    algo, needed = found[index]
    library_ = cublaslt_workspace_library()
    if library_ == "cublas":  # the stream's cuBLAS workspace, at the size cuBLAS asks for
        request = max(cublas_workspace_size(props.major, props.minor), needed)
    else:
        request = max(max_workspace, needed)
    workspace = (needed, request, library_)
    return _LtPlan(call, dt, lt, desc, layouts, algo, workspace, bias, activation)


def _lt_descriptors(
    call: GemmCall, dt: Any, fused: bool, activation: int, tf32: bool
) -> tuple[int, tuple[int, int, int]]:
    scale_np, compute, scale_name = _SCALE[dt]
    if dt is float32 and tf32:
        compute = "32F_FAST_TF32"
    data = _cublas.DATA_TYPES[dt.name]
    desc = _cublas.matmul_desc(
        _cublas.COMPUTE_TYPES[compute], _cublas.DATA_TYPES[scale_name], call.transa, call.transb
    )
    epilogue = _LT_EPILOGUES[(fused, activation)]
    if epilogue != "DEFAULT":
        _cublas.set_matmul_desc(desc, "EPILOGUE", _cublas.EPILOGUES[epilogue])
    if fused:
        _cublas.set_matmul_desc(desc, "BIAS_DATA_TYPE", data)
    a_rows, a_cols = (call.m, call.k) if call.transa == OP_N else (call.k, call.m)
    b_rows, b_cols = (call.k, call.n) if call.transb == OP_N else (call.n, call.k)
    layouts = (
        _cublas.matrix_layout(data, a_rows, a_cols, call.lda, call.batch, call.stride_a),
        _cublas.matrix_layout(data, b_rows, b_cols, call.ldb, call.batch, call.stride_b),
        _cublas.matrix_layout(data, call.m, call.n, call.ldc, call.batch, call.stride_c),
    )
    return desc, layouts


def _destroy(desc: int, layouts: tuple[int, int, int]) -> None:
    _cublas.destroy_matmul_desc(desc)
    for layout in layouts:
        _cublas.destroy_matrix_layout(layout)


# ---- the plans -------------------------------------------------------------------------------


class _LtPlan:
    """One cuBLASLt problem: descriptor, layouts, algorithm, scalars (per thread)."""

    __slots__ = (
        "swap", "lt", "desc", "layouts", "la", "lb", "lc", "algo", "algo_ptr",
        "ws_bytes", "workspace", "scalars", "alpha_ptr", "beta_ptr", "scales_c", "fused",
        "bias_ptr", "bias_attr", "alpha", "beta", "takes_bias", "reads_c",
    )  # fmt: skip

    applies_activation = True  # (the epilogue)

    def __init__(
        self,
        call: GemmCall,
        dt: Any,
        lt: int,
        desc: int,
        layouts: tuple[int, int, int],
        algo: np.ndarray,
        workspace: tuple[int, int, str],
        bias: int,
        activation: int,
    ) -> None:
        self.swap = call.swap
        self.lt = lt
        self.desc = desc
        self.layouts = layouts
        self.la, self.lb, self.lc = layouts
        self.algo = algo  # holds the cublasLtMatmulAlgo_t that algo_ptr points at
        self.algo_ptr = algo.ctypes.data
        # bytes the algorithm needs (0: no workspace is asked for); what ``_ops`` asks of
        # get_workspace (the stream's whole workspace, so that it is never regrown)
        needed, request, library_ = workspace
        self.ws_bytes = needed
        self.workspace = (request, library_) if needed else None
        self.scalars = np.zeros(2, dtype=_SCALE[dt][0])  # alpha, beta (host pointer mode)
        self.alpha = self.beta = 0.0  # what ``scalars`` holds (beta stays 0 unless used)
        self.alpha_ptr = self.scalars.ctypes.data
        self.beta_ptr = self.alpha_ptr + self.scalars.itemsize
        self.scales_c = bias in (BETA, ROW_C)  # (beta times C; a fused row alone: C unread)
        self.fused = bias >= ROW
        self.reads_c = bias == ROW_C  # (C is the input where it is, the row the epilogue's)
        self.takes_bias = self.fused
        self.bias_ptr = 0
        self.bias_attr = _cublas.PointerAttribute(desc, "BIAS_POINTER") if self.fused else None

    def run(
        self,
        stream: int,
        po: int,
        pa: int,
        pb: int,
        pbias: int,
        prow: int,
        alpha: Any,
        beta: Any,
        workspace: int,
    ) -> None:
        """cublasLtMatmul: ``out = act(alpha * a @ b + beta * out)``, or with the bias row
        ``pbias`` added by the epilogue when fused; ROW_C: ``act(alpha * a @ b + beta * C +
        row)``, C at ``pbias``, the row at ``prow``."""
        if alpha != self.alpha:
            self.scalars[0] = self.alpha = alpha
        pc = po
        if self.reads_c:
            pc, pbias = pbias, prow
        if self.fused and pbias != self.bias_ptr:
            self.bias_attr.set(pbias)
            self.bias_ptr = pbias
        if self.scales_c and beta != self.beta:
            self.scalars[1] = self.beta = beta
        lc = self.lc
        if self.swap:
            pa, pb = pb, pa
        _cublas.lt_matmul(
            self.lt, self.desc, self.alpha_ptr, pa, self.la, pb, self.lb, self.beta_ptr, pc, lc,
            po, lc, self.algo_ptr, workspace, self.ws_bytes, stream,
        )  # fmt: skip

    def __del__(self) -> None:
        try:
            _destroy(self.desc, self.layouts)
        except Exception:  # finalizers never raise
            pass


class _BlasPlan:
    """One cuBLAS problem (cublasGemmEx / cublasGemmStridedBatchedEx)."""

    __slots__ = ("call", "index", "data", "compute", "math", "scalars", "beta_mode", "size",
                 "workspace")  # fmt: skip

    takes_bias = False  # (out holds it: beta times out)
    applies_activation = False  # (no epilogue)

    def __init__(
        self, call: GemmCall, dt: Any, driver: Any, device: int, bias: int, tf32: bool
    ) -> None:
        scale_np, compute, _ = _SCALE[dt]
        if dt is float32 and tf32:
            compute = "32F_FAST_TF32"
        self.call = call
        self.index = device
        self.data = _cublas.DATA_TYPES[dt.name]
        self.compute = _cublas.COMPUTE_TYPES[compute]
        props = driver.properties(device)
        self.size = cublas_workspace_size(props.major, props.minor)  # bytes of workspace
        self.workspace = (self.size, "cublas")
        if dt in (float16, bfloat16) and not tf32:
            self.math = _cublas.DISALLOW_REDUCED_PRECISION_REDUCTION
        else:
            self.math = _cublas.DEFAULT_MATH
        self.scalars = np.zeros(2, dtype=scale_np)
        self.beta_mode = bias

    def run(
        self,
        stream: int,
        po: int,
        pa: int,
        pb: int,
        pbias: int,
        prow: int,
        alpha: Any,
        beta: Any,
        workspace: int,
    ) -> None:
        """cublasGemmEx (strided batched for batches): ``out = alpha * a @ b + beta * out``."""
        scalars = self.scalars
        scalars[0] = alpha
        scalars[1] = beta if self.beta_mode else 0
        alpha_ptr = scalars.ctypes.data
        beta_ptr = alpha_ptr + scalars.itemsize
        index = self.index
        handle = _cublas.handle(index)
        _cublas.set_stream(handle, stream)
        _cublas.set_workspace(handle, workspace, self.size)
        _cublas.set_math_mode(handle, self.math)
        c = self.call
        p, q = (pb, pa) if c.swap else (pa, pb)
        try:
            if c.batch == 1:
                _cublas.gemm_ex(
                    handle, c.transa, c.transb, c.m, c.n, c.k, alpha_ptr, p, c.lda, q, c.ldb,
                    beta_ptr, po, c.ldc, self.data, self.compute,
                )  # fmt: skip
            else:
                _cublas.gemm_strided_batched_ex(
                    handle, c.transa, c.transb, c.m, c.n, c.k, alpha_ptr, p, c.lda, c.stride_a,
                    q, c.ldb, c.stride_b, beta_ptr, po, c.ldc, c.stride_c, c.batch, self.data,
                    self.compute,
                )  # fmt: skip
        finally:
            if self.math != _cublas.DEFAULT_MATH:
                _cublas.set_math_mode(handle, _cublas.DEFAULT_MATH)


# ---- TunableOp: this library's candidates and timing ----------------------------------------


def candidates(driver: Any, device: int, spec: GemmSpec) -> list[int]:
    """``_ops.GEMM_CANDIDATES`` on a GPU: Default (0) and cuBLASLt's heuristic algorithms
    (1..count, at most LT_CANDIDATES)."""
    props = driver.properties(device)
    _cublas.use_device(device)
    lt = _cublas.lt_handle(device)
    dt = spec.dtype
    tf32 = flag(dt)
    desc, layouts = _lt_descriptors(spec.call, dt, spec.bias >= ROW, spec.activation, tf32)
    align = spec.align
    pref = _cublas.matmul_preference(
        cublaslt_workspace_size(props.major, props.minor),
        (align, align, align, align),
        _reduced_precision_ok(dt, tf32),
    )
    try:
        found = _cublas.heuristics(lt, desc, *layouts, layouts[2], pref, _tunable.LT_CANDIDATES)
    except CudaError as exc:
        if exc.name != _NOT_SUPPORTED:
            raise
        found = []
    finally:
        _destroy(desc, layouts)
    return [0, *range(1, len(found) + 1)]


def time_ms(driver: Any, device: int, spec: GemmSpec, tuning: Any, algo: int) -> float:
    """``_ops.GEMM_TIME`` on a GPU: one call of candidate ``algo`` timed by CUDA events
    (one run to estimate, then as many as fit in the tuning duration). Synchronizes."""
    stream = tuning.stream
    start, end = Event(enable_timing=True), Event(enable_timing=True)
    start.record(stream)
    tuning.queue(algo)
    end.record(stream)
    end.synchronize()
    repeat = _tunable.iterations_for(start.elapsed_time(end))
    start.record(stream)
    for _ in range(repeat):
        tuning.queue(algo)
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / repeat
