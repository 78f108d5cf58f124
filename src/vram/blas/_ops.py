"""The GEMM op in the operator registry: one declaration, a kernel per backend.

    gemm(out, self, mat2, bias, beta, alpha, activation, algo)
        out = act(alpha * (self @ mat2) + beta * bias)

- ``self`` [.., M, K] and ``mat2`` [.., K, N] (2-D, or 3-D with one batch dimension that
  may be 1 in either), ``bias`` broadcastable to ``out``; ``beta == 0`` means ``bias`` is
  not read (so ``mm`` passes ``out`` itself). ``activation``: 0 none, 1 relu, 2 gelu (tanh
  approximation, as cuBLASLt's GELU epilogue). All four tensors share one float dtype.
- ``algo`` names the algorithm: -1 lets vram choose (TunableOp's result when enabled, else
  the preferred library's default), 0 is TunableOp's "Default", i >= 1 its i-th other
  candidate (see ``_tunable``).
- cpu (and sim, queued on the stream): NumPy in fp32 (fp64 for fp64), inputs widened
  exactly from bf16/fp16 (ml_dtypes), the result rounded once to the output dtype, as
  cuBLAS with CUBLAS_COMPUTE_32F. Candidate i >= 1 splits K into 2**i chunks whose fp32
  partial products are summed in order, as a split-K kernel reduces them.
- cuda: cuBLAS/cuBLASLt (``_cuda``).

The public functions (``vram.mm`` ...) check PyTorch's contract first, with errors naming
the argument, then call ``gemm`` below, which reaches the kernels without re-checking.
``product_plan`` gives ``mm`` the plan of a plain product to keep (see ``_functions``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._dtypes import bfloat16, float16, float32, float64
from .._streams import current_stream
from .._tensor import Tensor
from ..ops._registry import declare
from . import _cuda, _tunable

__all__ = ["gemm", "product_plan", "gemm_op", "GEMM_DTYPES", "ACTIVATIONS", "numpy_gemm"]

GEMM_DTYPES = (float16, bfloat16, float32, float64)
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2}
_GELU_BETA = np.sqrt(2.0 / np.pi)
_GELU_KAPPA = 0.044715

gemm_op = declare(
    "gemm(Tensor(a!) out, Tensor self, Tensor mat2, Tensor bias, Scalar beta, Scalar alpha, "
    "int activation=0, int algo=-1)",
    elementwise=False,
)


def numpy_gemm(
    out: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    bias: np.ndarray,
    beta: float,
    alpha: float,
    activation: int = 0,
    algo: int = 0,
) -> None:
    """The cpu kernel: ``out[...] = act(alpha * a @ b + beta * bias)`` in fp32 (fp64)."""
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
        if activation == 1:
            np.maximum(result, acc(0), out=result)
        elif activation == 2:
            inner = acc(_GELU_BETA) * (result + acc(_GELU_KAPPA) * result**3)
            result = acc(0.5) * result * (acc(1) + np.tanh(inner))
    out[...] = result.astype(out.dtype)


gemm_op.impl("cpu", dtypes=GEMM_DTYPES)(numpy_gemm)


@gemm_op.impl("cuda", dtypes=GEMM_DTYPES)
def _gemm_cuda(
    stream: Any,
    out: Tensor,
    a: Tensor,
    b: Tensor,
    bias: Tensor,
    beta: Any,
    alpha: Any,
    activation: int = 0,
    algo: int = -1,
) -> None:
    _cuda.gemm(stream, out, a, b, bias, beta, alpha, activation, algo)


def gemm(
    out: Tensor,
    a: Tensor,
    b: Tensor,
    bias: Tensor | None,
    beta: float,
    alpha: float,
    activation: int,
) -> Tensor:
    """Queue ``out = act(alpha * a @ b + beta * bias)`` on the current stream of out's device.

    The arguments are checked already (``_checks``); K may be 0 (then only the bias term is
    computed), but not M or N."""
    if bias is None:
        bias, beta = out, 0.0
    device = out.device
    if device.type == "cuda":
        _cuda.gemm(current_stream(device), out, a, b, bias, beta, alpha, activation, -1)
        return out
    algo = _tunable.sim_algorithm(out, a, b, bias, beta, alpha, activation)
    gemm_op(out, a, b, bias, beta, alpha, activation, algo)
    return out


class _RegistryPlan:
    """A plain product on the simulated GPU or the cpu: the registry's kernel, queued on the
    current stream, with the algorithm chosen once (TunableOp's on sim when enabled)."""

    __slots__ = ("algo",)

    def __init__(self, algo: int) -> None:
        self.algo = algo

    def run(
        self,
        stream: Any,
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
        gemm_op(out, a, b, bias, beta, alpha, 0, self.algo)

    def product(
        self, stream: Any, out: Tensor, a: Tensor, b: Tensor, pa: int, pb: int, po: int
    ) -> None:
        """``out = a @ b`` (mm's form of ``run``)."""
        gemm_op(out, a, b, out, 0.0, 1.0, 0, self.algo)


def product_plan(out: Tensor, a: Tensor, b: Tensor, pointers: int) -> Any:
    """The plan of ``out = a @ b`` (checked; M, N and K > 0; ``pointers`` the bitwise or of
    the three data pointers), as ``gemm`` would run it. Its ``product(stream, out, a, b, pa,
    pb, po)`` queues the product on ``stream`` (the current one of the device) for any
    tensors of the same shapes, strides, dtype, device and alignment, until a
    ``vram.backends.cuda`` setting or TunableOp's state changes."""
    device = out.device
    if device.type == "cuda":
        stream = current_stream(device)
        return _cuda.plan(stream, out, a, b, out, 0.0, 0, -1, pointers)
    return _RegistryPlan(_tunable.sim_algorithm(out, a, b, out, 0.0, 1.0, 0))
