"""The GEMM op on a GPU: cuBLASLt with a plan cached per problem, or cuBLAS.

A *plan* is everything one problem needs that does not change between calls: the
column-major call (``_layout``), and for cuBLASLt its matmul descriptor, matrix layouts and
chosen algorithm; for cuBLAS the math mode. Plans are cached per thread (their descriptors
hold per-call state such as the bias pointer, so threads never share one), keyed by
(device, dtype, shapes, strides, pointer alignment, bias form, activation, algorithm, and
the generations of the ``vram.backends.cuda`` settings and of TunableOp, which change
whenever a flag, the preferred library or a tuning result does). A repeated call is then a
dict lookup, and ``cublasLtMatmul`` on the current stream: no descriptor creation, no
heuristic query, no setting read.

Which library (``vram.backends.cuda.preferred_blas_library()``, read when a plan is made):
- "cublaslt" (vram's default): cuBLASLt, the first algorithm of its heuristic.
- "cublas": PyTorch's default route, ``cublasGemmEx`` / ``cublasGemmStridedBatchedEx``
  with ``cublasSetStream``, ``cublasSetWorkspace`` and the math mode set on each call.
- Either way, ``addmm`` with a bias row vector and beta == 1 runs as one cuBLASLt call with
  a BIAS (RELU_BIAS, GELU_BIAS) epilogue, as PyTorch's gemm_and_bias; an activation
  without it is cuBLASLt's RELU/GELU epilogue, or a separate kernel after cuBLAS.
- With TunableOp enabled, the problem's remembered candidate (tuned on first sight when
  tuning is on; see ``_tunable``).

Precision: fp32, fp16 and bf16 accumulate in fp32 (``CUBLAS_COMPUTE_32F``); fp32 uses TF32
only when ``matmul.allow_tf32``; fp16/bf16 split-K reductions stay in fp32 unless the
``allow_*_reduced_precision_reduction`` flag allows otherwise; fp64 is ``COMPUTE_64F``.

Workspaces come from ``vram.memory.get_workspace`` (per library, device, stream, thread),
sized as PyTorch sizes them (``_workspace``): cuBLAS's is set on the handle at each call;
cuBLASLt's is the cuBLAS one of the stream (PyTorch's unified workspace; a buffer of its own
with ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=0``), asked for only when the plan's algorithm
needs workspace.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .. import memory as _memory
from .._dtypes import bfloat16, float16, float32, float64
from .._errors import CudaError
from .._streams import Event, Stream
from .._tensor import Tensor
from ..backends import cuda as _backends
from ..driver import _cublas
from ..ops import _launch
from ..ops._math import copy_, fill_, mul
from . import _tunable
from ._layout import OP_N, GemmCall, plan_call
from ._workspace import (
    cublas_workspace_size,
    cublaslt_workspace_library,
    cublaslt_workspace_size,
)

__all__ = ["gemm", "plan", "activate", "clear_plans"]

_SCALE = {  # dtype -> (NumPy scale type, compute type name, cudaDataType of the scale)
    float32: (np.float32, "32F", "float32"),
    float16: (np.float32, "32F", "float32"),
    bfloat16: (np.float32, "32F", "float32"),
    float64: (np.float64, "64F", "float64"),
}
_MAX_PLANS = 512  # per thread; the oldest is dropped (and its descriptors destroyed) beyond
_MAX_ALIGN = 256  # bytes: the largest alignment cuBLASLt asks about
_NO_BIAS, _BIAS_IS_OUT, _BIAS = 0, 1, 2  # how the beta term is formed
_NOT_SUPPORTED = "CUBLAS_STATUS_NOT_SUPPORTED"
_LT_EPILOGUES = {  # (fused bias, activation) -> cublasLtEpilogue_t name
    (False, 0): "DEFAULT",
    (False, 1): "RELU",
    (False, 2): "GELU",
    (True, 0): "BIAS",
    (True, 1): "RELU_BIAS",
    (True, 2): "GELU_BIAS",
}


class _Local(threading.local):
    def __init__(self) -> None:
        self.plans: dict[tuple, Any] = {}


_local = _Local()


def clear_plans() -> None:
    """Drop this thread's cached plans (their descriptors are destroyed)."""
    _local.plans.clear()


def _flag(dt: Any) -> bool:
    """The backends flag that governs ``dt``'s products."""
    matmul = _backends.matmul
    if dt is float32:
        return matmul.allow_tf32
    if dt is float16:
        return matmul.allow_fp16_reduced_precision_reduction
    if dt is bfloat16:
        return matmul.allow_bf16_reduced_precision_reduction
    return False


def gemm(
    stream: Stream,
    out: Tensor,
    a: Tensor,
    b: Tensor,
    bias: Tensor,
    beta: Any,
    alpha: Any,
    activation: int = 0,
    algo: int = -1,
) -> None:
    """``out = act(alpha * a @ b + beta * bias)`` on ``stream`` (see ``_ops`` for the forms)."""
    if 0 in out.shape:
        return
    if a.shape[-1] == 0:
        _bias_only(out, bias, beta, activation, stream)
        return
    pa, pb, po = a.data_ptr(), b.data_ptr(), out.data_ptr()
    found = plan(stream, out, a, b, bias, beta, activation, algo, pa | pb | po)
    found.run(stream, out, a, b, bias, beta, alpha, pa, pb, po)


def plan(
    stream: Stream,
    out: Tensor,
    a: Tensor,
    b: Tensor,
    bias: Tensor,
    beta: Any,
    activation: int,
    algo: int,
    pointers: int,
) -> Any:
    """This thread's cached plan of the problem (made on first sight; M, N and K > 0).

    ``pointers`` is the bitwise or of a's, b's and out's data pointers (their alignment is
    part of the problem). The plan's ``run(stream, out, a, b, bias, beta, alpha, pa, pb,
    po)`` queues the product on ``stream``.
    """
    if beta == 0:
        mode, bias_key = _NO_BIAS, None
    elif bias is out:
        mode, bias_key = _BIAS_IS_OUT, None
    else:
        mode, bias_key = _BIAS, (bias.shape, bias.stride(), beta == 1)
        pointers |= bias.data_ptr()
    key = (
        stream.device.index,
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
        found = _build(stream, out, a, b, bias, beta, mode, activation, algo, align)
        if len(plans) >= _MAX_PLANS:
            del plans[next(iter(plans))]
        plans[key] = found
    return found


# ---- building a plan -----------------------------------------------------------------------


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


def _reduced_precision_ok(dt: Any, flag: bool) -> bool:
    """May cuBLASLt reduce split-K partial sums in the output type? (fp16/bf16: the flag)"""
    return flag if dt in (float16, bfloat16) else True


def _build(
    stream: Stream,
    out: Tensor,
    a: Tensor,
    b: Tensor,
    bias: Tensor,
    beta: Any,
    mode: int,
    activation: int,
    algo: int,
    align: int,
) -> Any:
    m, n, k = out.shape[-2], out.shape[-1], a.shape[-1]
    batch = out.shape[0] if out.ndim == 3 else 1
    call, copy_a, copy_b, temp = plan_call(
        batch, m, k, n, _strides3(a), _strides3(b), _strides3(out)
    )
    if call is None:
        return _StagedPlan(copy_a, copy_b, temp, activation, algo)
    dt = out.dtype
    flag = _flag(dt)
    fused = (
        mode == _BIAS and beta == 1 and call.swap and batch == 1 and m > 1 and _is_bias_row(bias, n)
    )
    if algo == -1:
        if _tunable.state.is_enabled():
            algo = _tuned(call, stream, out, a, b, bias, beta, mode, activation, fused)
        elif fused or _backends.preferred_blas_library() == "cublaslt":
            algo = 1
        else:
            algo = 0
    device = stream.device
    if algo == 0 and not fused:
        return _BlasPlan(call, dt, device, mode, activation, flag)
    lt = _lt_plan(call, dt, device, mode, activation, fused, max(algo - 1, 0), flag, align)
    if lt is not None:
        return lt
    if fused:  # no fused algorithm: the bias copied into out, then the product
        return _lt_plan(call, dt, device, _BIAS, activation, False, 0, flag, align) or _BlasPlan(
            call, dt, device, _BIAS, activation, flag
        )
    return _BlasPlan(call, dt, device, mode, activation, flag)


def _lt_plan(
    call: GemmCall,
    dt: Any,
    device: Any,
    mode: int,
    activation: int,
    fused: bool,
    index: int,
    flag: bool,
    align: int,
) -> _LtPlan | None:
    """A cuBLASLt plan with the ``index``-th heuristic algorithm; None if there is none."""
    props = device.driver.properties(device.index)
    max_workspace = cublaslt_workspace_size(props.major, props.minor)
    _cublas.use_device(device.index)
    lt = _cublas.lt_handle(device.index)
    desc, layouts = _lt_descriptors(call, dt, fused, activation, flag)
    count = 1 if index == 0 else _tunable.LT_CANDIDATES
    pref = _cublas.matmul_preference(
        max_workspace, (align, align, align, align), _reduced_precision_ok(dt, flag)
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
    library = cublaslt_workspace_library()
    if library == "cublas":  # the stream's cuBLAS workspace, at the size cuBLAS asks for
        request = max(cublas_workspace_size(props.major, props.minor), needed)
    else:
        request = max(max_workspace, needed)
    workspace = (needed, request, library)
    return _LtPlan(call, dt, device, lt, desc, layouts, algo, workspace, mode, fused, activation)


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
        "swap", "device", "index", "lt", "desc", "layouts", "la", "lb", "lc", "algo", "algo_ptr",
        "ws_bytes", "ws_request", "ws_library", "scalars", "alpha_ptr", "beta_ptr", "mode",
        "fused", "bias_ptr", "activation", "alpha", "beta",
    )  # fmt: skip

    def __init__(
        self,
        call: GemmCall,
        dt: Any,
        device: Any,
        lt: int,
        desc: int,
        layouts: tuple[int, int, int],
        algo: np.ndarray,
        workspace: tuple[int, int, str],
        mode: int,
        fused: bool,
        activation: int,
    ) -> None:
        self.swap = call.swap
        self.device = device
        self.index = device.index
        self.lt = lt
        self.desc = desc
        self.layouts = layouts
        self.la, self.lb, self.lc = layouts
        self.algo = algo  # holds the cublasLtMatmulAlgo_t that algo_ptr points at
        self.algo_ptr = algo.ctypes.data
        # bytes the algorithm needs (0: no workspace is asked for), bytes of the buffer
        # asked for (the stream's whole workspace, so that it is never regrown), whose buffer
        self.ws_bytes, self.ws_request, self.ws_library = workspace
        self.scalars = np.zeros(2, dtype=_SCALE[dt][0])  # alpha, beta (host pointer mode)
        self.alpha = self.beta = 0.0  # what ``scalars`` holds (beta stays 0 unless used)
        self.alpha_ptr = self.scalars.ctypes.data
        self.beta_ptr = self.alpha_ptr + self.scalars.itemsize
        self.mode = mode
        self.fused = fused
        self.bias_ptr = 0
        self.activation = activation

    def run(
        self,
        stream: Stream,
        out: Tensor,
        a: Tensor,
        b: Tensor,
        bias: Tensor,
        beta: Any,
        alpha: Any,
        pa: int,
        pb: int,
        po: int,
    ) -> None:
        if alpha != self.alpha:
            self.scalars[0] = self.alpha = alpha
        if self.fused:
            ptr = bias.data_ptr()
            if ptr != self.bias_ptr:
                _cublas.set_matmul_desc(self.desc, "BIAS_POINTER", ptr)
                self.bias_ptr = ptr
        elif self.mode:
            if beta != self.beta:
                self.scalars[1] = self.beta = beta
            if self.mode == _BIAS:  # PyTorch: out = bias, then the product accumulates
                copy_(out, bias.expand(out.shape))
        self._launch(stream, pa, pb, po)

    def product(
        self, stream: Stream, out: Tensor, a: Tensor, b: Tensor, pa: int, pb: int, po: int
    ) -> None:
        """``out = a @ b`` (mm's form of ``run``: alpha 1, no bias, no epilogue)."""
        if self.alpha != 1.0:
            self.scalars[0] = self.alpha = 1.0
        self._launch(stream, pa, pb, po)

    def _launch(self, stream: Stream, pa: int, pb: int, po: int) -> None:
        """cublasLtMatmul with the scalars, bias and workspace set up: ``out = op(a, b)``."""
        _cublas.use_device(self.index)
        size = self.ws_bytes
        workspace = (
            _memory.get_workspace(self.ws_request, library=self.ws_library, stream=stream)
            if size
            else 0
        )
        lc = self.lc
        if self.swap:
            pa, pb = pb, pa
        _cublas.lt_matmul(
            self.lt, self.desc, self.alpha_ptr, pa, self.la, pb, self.lb, self.beta_ptr, po, lc,
            po, lc, self.algo_ptr, workspace, size, stream.cuda_stream,
        )  # fmt: skip

    def __del__(self) -> None:
        try:
            _destroy(self.desc, self.layouts)
        except Exception:  # finalizers never raise
            pass


class _BlasPlan:
    """One cuBLAS problem (cublasGemmEx / cublasGemmStridedBatchedEx)."""

    __slots__ = (
        "call", "device", "data", "compute", "math", "scalars", "mode", "activation", "size",
    )  # fmt: skip

    def __init__(
        self, call: GemmCall, dt: Any, device: Any, mode: int, activation: int, flag: bool
    ) -> None:
        scale_np, compute, _ = _SCALE[dt]
        if dt is float32 and flag:
            compute = "32F_FAST_TF32"
        self.call = call
        self.device = device
        self.data = _cublas.DATA_TYPES[dt.name]
        self.compute = _cublas.COMPUTE_TYPES[compute]
        props = device.driver.properties(device.index)
        self.size = cublas_workspace_size(props.major, props.minor)  # bytes of workspace
        if dt in (float16, bfloat16) and not flag:
            self.math = _cublas.DISALLOW_REDUCED_PRECISION_REDUCTION
        else:
            self.math = _cublas.DEFAULT_MATH
        self.scalars = np.zeros(2, dtype=scale_np)
        self.mode = mode
        self.activation = activation

    def run(
        self,
        stream: Stream,
        out: Tensor,
        a: Tensor,
        b: Tensor,
        bias: Tensor,
        beta: Any,
        alpha: Any,
        pa: int,
        pb: int,
        po: int,
    ) -> None:
        if self.mode == _BIAS:
            copy_(out, bias.expand(out.shape))
        scalars = self.scalars
        scalars[0] = alpha
        scalars[1] = beta if self.mode else 0
        alpha_ptr = scalars.ctypes.data
        beta_ptr = alpha_ptr + scalars.itemsize
        device, size = self.device, self.size
        handle = _cublas.handle(device.index)
        _cublas.use_device(device.index)
        _cublas.set_stream(handle, stream.cuda_stream)
        workspace = _memory.get_workspace(size, library="cublas", stream=stream)
        _cublas.set_workspace(handle, workspace, size)
        _cublas.set_math_mode(handle, self.math)
        c = self.call
        p, q = (pb, pa) if c.swap else (pa, pb)
        x = po
        try:
            if c.batch == 1:
                _cublas.gemm_ex(
                    handle, c.transa, c.transb, c.m, c.n, c.k, alpha_ptr, p, c.lda, q, c.ldb,
                    beta_ptr, x, c.ldc, self.data, self.compute,
                )  # fmt: skip
            else:
                _cublas.gemm_strided_batched_ex(
                    handle, c.transa, c.transb, c.m, c.n, c.k, alpha_ptr, p, c.lda, c.stride_a,
                    q, c.ldb, c.stride_b, beta_ptr, x, c.ldc, c.stride_c, c.batch, self.data,
                    self.compute,
                )  # fmt: skip
        finally:
            if self.math != _cublas.DEFAULT_MATH:
                _cublas.set_math_mode(handle, _cublas.DEFAULT_MATH)
        if self.activation:
            activate(out, self.activation, stream)

    def product(
        self, stream: Stream, out: Tensor, a: Tensor, b: Tensor, pa: int, pb: int, po: int
    ) -> None:
        """``out = a @ b`` (mm's form of ``run``)."""
        self.run(stream, out, a, b, out, 0.0, 1.0, pa, pb, po)


class _StagedPlan:
    """Operands cuBLAS cannot read as they are: copied once (as PyTorch does), or a result
    computed into a contiguous tensor and copied into ``out``."""

    __slots__ = ("copy_a", "copy_b", "temp", "activation", "algo")

    def __init__(self, copy_a: bool, copy_b: bool, temp: bool, activation: int, algo: int):
        self.copy_a, self.copy_b, self.temp = copy_a, copy_b, temp
        self.activation, self.algo = activation, algo

    def run(
        self,
        stream: Stream,
        out: Tensor,
        a: Tensor,
        b: Tensor,
        bias: Tensor,
        beta: Any,
        alpha: Any,
        pa: int,
        pb: int,
        po: int,
    ) -> None:
        a = a.contiguous() if self.copy_a else a
        b = b.contiguous() if self.copy_b else b
        if not self.temp:
            gemm(stream, out, a, b, bias, beta, alpha, self.activation, self.algo)
            return
        target = Tensor._empty(out.shape, out.dtype, out.device)
        if bias is out and beta != 0:
            copy_(target, out)
            bias = target
        gemm(stream, target, a, b, bias, beta, alpha, self.activation, self.algo)
        copy_(out, target)

    def product(
        self, stream: Stream, out: Tensor, a: Tensor, b: Tensor, pa: int, pb: int, po: int
    ) -> None:
        """``out = a @ b`` (mm's form of ``run``)."""
        self.run(stream, out, a, b, out, 0.0, 1.0, pa, pb, po)


# ---- K == 0 and unfused activations --------------------------------------------------------


def _bias_only(out: Tensor, bias: Tensor, beta: Any, activation: int, stream: Stream) -> None:
    """K == 0: ``out = act(beta * bias)``, with no cuBLAS call (as PyTorch)."""
    if beta == 0:
        fill_(out, 0)
        return
    if bias is not out:
        copy_(out, bias.expand(out.shape))
    if beta != 1:
        mul(out, beta, out=out)
    if activation:
        activate(out, activation, stream)


def activate(out: Tensor, activation: int, stream: Stream) -> None:
    """relu (1) or tanh-gelu (2) of ``out`` in place (kernels/activation.cu)."""
    op = "vram_blas::Relu" if activation == 1 else "vram_blas::GeluTanh"
    name = f"vram_blas::activation<{_launch.c_type(out.dtype)}, {op}>"
    _launch.launch(_activation_source(), name, [out], (), stream)


_source: list[str] = []


def _activation_source() -> str:
    if not _source:
        from pathlib import Path

        _source.append((Path(__file__).parent / "kernels" / "activation.cu").read_text())
    return _source[0]


# ---- TunableOp -------------------------------------------------------------------------------


def _tuned(
    call: GemmCall,
    stream: Stream,
    out: Tensor,
    a: Tensor,
    b: Tensor,
    bias: Tensor,
    beta: Any,
    mode: int,
    activation: int,
    fused: bool,
) -> int:
    """TunableOp's candidate for this problem: remembered, or tuned now (synchronizes).
    Candidates run with alpha 1: the choice is the problem's, whatever the scale."""
    alpha = 1.0
    device = stream.device
    problem = _tunable.make_problem(
        out.dtype.name, call.transa, call.transb, call.m, call.n, call.k,
        (call.lda, call.ldb, call.ldc), call.batch, fused, activation, "cuda", device.index,
    )  # fmt: skip
    found = _tunable.lookup(problem)
    if found is not None:
        return found
    if not _tunable.state.is_tuning():
        return 0
    scratch = _scratch_like(out)
    scratch_bias = scratch if mode == _BIAS_IS_OUT else bias

    def prepare() -> None:
        if mode == _BIAS_IS_OUT:
            copy_(scratch, out)

    def run(algo: int) -> np.ndarray | None:
        prepare()
        gemm(stream, scratch, a, b, scratch_bias, beta, alpha, activation, algo)
        return scratch.numpy()

    def time_ms(algo: int) -> float:
        start, end = Event(enable_timing=True), Event(enable_timing=True)
        start.record(stream)
        gemm(stream, scratch, a, b, scratch_bias, beta, alpha, activation, algo)
        end.record(stream)
        end.synchronize()
        repeat = _tunable.iterations_for(start.elapsed_time(end))
        start.record(stream)
        for _ in range(repeat):
            gemm(stream, scratch, a, b, scratch_bias, beta, alpha, activation, algo)
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) / repeat

    count = _lt_candidates(call, out.dtype, device, fused, activation, _flag(out.dtype), out)
    candidates = [0] + list(range(1, count + 1))
    tf32 = out.dtype is float32 and _flag(out.dtype)
    return _tunable.tune(
        problem, candidates, run, time_ms, _tunable.tolerance(out.dtype.name, tf32)
    )


def _lt_candidates(
    call: GemmCall, dt: Any, device: Any, fused: bool, activation: int, flag: bool, out: Tensor
) -> int:
    """How many algorithms cuBLASLt's heuristic proposes (at most LT_CANDIDATES)."""
    props = device.driver.properties(device.index)
    _cublas.use_device(device.index)
    lt = _cublas.lt_handle(device.index)
    desc, layouts = _lt_descriptors(call, dt, fused, activation, flag)
    ptr = out.data_ptr() | _MAX_ALIGN
    align = ptr & -ptr
    pref = _cublas.matmul_preference(
        cublaslt_workspace_size(props.major, props.minor),
        (align, align, align, align),
        _reduced_precision_ok(dt, flag),
    )
    try:
        found = _cublas.heuristics(lt, desc, *layouts, layouts[2], pref, _tunable.LT_CANDIDATES)
    except CudaError as exc:
        if exc.name != _NOT_SUPPORTED:
            raise
        found = []
    finally:
        _destroy(desc, layouts)
    return len(found)


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
