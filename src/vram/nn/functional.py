"""torch.nn.functional: ``linear``."""

from __future__ import annotations

from .._tensor import Tensor
from ..blas import _checks, addmm, matmul

__all__ = ["linear"]


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input @ weight.T + bias`` (torch.nn.functional.linear): ``input`` [*, in_features],
    ``weight`` [out_features, in_features], ``bias`` [out_features] or None.

    With a bias the product and the bias are one GEMM (addmm, cuBLASLt's BIAS epilogue where
    it applies): leading dimensions of ``input`` are folded into the rows, as PyTorch does."""
    x = _checks.tensor_arg("linear", "input", input)
    w = _checks.tensor_arg("linear", "weight", weight)
    _checks.rank("linear", "weight", w, 2)
    if x.ndim == 0:
        raise RuntimeError("linear: 'input' must have at least 1 dimension, got a 0-D tensor")
    if x.shape[-1] != w.shape[1]:
        raise RuntimeError(
            f"linear: 'input' has {x.shape[-1]} features in its last dimension, but 'weight' "
            f"of shape {tuple(w.shape)} expects {w.shape[1]}"
        )
    if bias is None:
        return matmul(x, w.t())
    b = _checks.tensor_arg("linear", "bias", bias)
    rows = x.reshape(-1, x.shape[-1])
    return addmm(b, rows, w.t()).view(*x.shape[:-1], w.shape[0])
