"""torch.nn.functional: ``linear`` (with cuBLASLt's fused epilogues), the activations
(relu, gelu and silu here, the others from vram.ops._activations),
``softmax``, ``log_softmax``, ``layer_norm``, ``scaled_dot_product_attention`` and
``dropout``."""

from __future__ import annotations

import warnings
from typing import Any

from .._tensor import Tensor
from ..blas import _checks, addmm, matmul
from ..ops import _math, _random, _softmax
from ..ops._activations import (
    celu,
    elu,
    glu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    logsigmoid,
    mish,
    relu6,
    selu,
    softplus,
    softsign,
    threshold,
)
from ..ops._layer_norm import layer_norm
from ._attention import scaled_dot_product_attention

__all__ = [
    "linear",
    "relu",
    "gelu",
    "silu",
    "relu6",
    "leaky_relu",
    "elu",
    "selu",
    "celu",
    "softplus",
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "mish",
    "logsigmoid",
    "softsign",
    "threshold",
    "glu",
    "sigmoid",
    "tanh",
    "softmax",
    "log_softmax",
    "layer_norm",
    "scaled_dot_product_attention",
    "dropout",
]


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


def _activation(name: str, input: Any, inplace: bool) -> Tensor:  # noqa: A002
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(input).__name__}")
    return _math.unary(name, input, out=input if inplace else None)


def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """max(input, 0), NaN kept (torch.nn.functional.relu)."""
    return _activation("relu", input, inplace)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    """``x * Φ(x)`` with the erf form (``approximate="none"``) or the tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return _activation("gelu" if approximate == "none" else "gelu_tanh", input, False)


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x * sigmoid(x)`` (torch.nn.functional.silu)."""
    return _activation("silu", input, inplace)


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return _activation("sigmoid", input, False)


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    return _activation("tanh", input, False)


def _softmax_dim(name: str, ndim: int, stacklevel: int) -> int:
    """PyTorch's implicit softmax dim (deprecated, with its warning): 0 for 0, 1 and 3 dims."""
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include "
        "dim=X as an argument.",
        UserWarning,
        stacklevel=stacklevel,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(
    input: Tensor,  # noqa: A002
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: Any = None,
) -> Tensor:
    """torch.nn.functional.softmax: one fused kernel per call (a row is read once where it
    fits in registers); float16 and bfloat16 compute in float32."""
    if dim is None and isinstance(input, Tensor):
        dim = _softmax_dim("softmax", input.ndim, _stacklevel)
    return _softmax.softmax(input, dim, dtype)


def log_softmax(
    input: Tensor,  # noqa: A002
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: Any = None,
) -> Tensor:
    """torch.nn.functional.log_softmax: one fused kernel per call."""
    if dim is None and isinstance(input, Tensor):
        dim = _softmax_dim("log_softmax", input.ndim, _stacklevel)
    return _softmax.log_softmax(input, dim, dtype)


def dropout(
    input: Tensor,  # noqa: A002 - torch's name
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    generator: Any = None,
) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``
    (torch.nn.functional.dropout), drawing from ``generator`` (the device's default when
    None; vram's addition). Not ``training``, ``p == 0`` or no elements: ``input`` itself;
    ``p == 1``: ``input * 0``. Otherwise one fused kernel (new numbers at each replay of a
    captured graph); its mask is not PyTorch's for the same seed (PyTorch's fused dropout
    kernel lays out its draws differently)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"input: expected a vram.Tensor, got {type(input).__name__}")
    p = float(p)
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(
            "result type Float can't be cast to the desired output type "
            f"{_math._torch_name(input.dtype)}"
        )
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return input.mul_(0) if inplace else input * 0
    return _random.fused_dropout(input, p, generator, inplace)
