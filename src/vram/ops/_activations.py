"""The activations of torch.nn.functional beyond relu, gelu and silu, as pointwise ops (their
functors in kernels/pointwise.cu, PyTorch's CUDA formulas): hardtanh and relu6, leaky_relu,
elu, selu and celu, softplus, threshold, hardswish, hardsigmoid, mish and logsigmoid; softsign
and glu are compositions, as in PyTorch. ``vram.nn.functional`` gives them torch's names and
arguments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._dtypes import bool_, uint8
from .._tensor import Tensor
from . import _math
from ._pointwise import PointwiseOp, run

__all__ = [
    "ACTIVATIONS",
    "celu",
    "elu",
    "glu",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "leaky_relu",
    "logsigmoid",
    "mish",
    "relu6",
    "selu",
    "softplus",
    "softsign",
    "threshold",
]

_FLOAT = frozenset((2,))
_NUMERIC = frozenset((1, 2))
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _sixth(x: Any) -> Any:
    """``1 / 6`` as PyTorch's kernels hold it (a float, widened for double)."""
    return np.asarray(x).dtype.type(np.float32(1 / 6))


def _hard(x: Any) -> Any:
    """``min(max(x + 3, 0), 6)`` with NaN kept."""
    t = x + 3
    low = np.where(t < 0, 0, t)
    return np.where(low > 6, 6, low).astype(np.asarray(x).dtype)


ACTIVATIONS: dict[str, PointwiseOp] = {
    op.name: op
    for op in (
        PointwiseOp(
            "hardtanh",
            "Hardtanh",
            1,
            lambda x, lo, hi: np.where(x < lo, lo, np.where(x > hi, hi, x)),
            fields=("min_val", "max_val"),
            kinds=_NUMERIC,
        ),
        PointwiseOp(
            "leaky_relu",
            "LeakyRelu",
            1,
            lambda x, slope: np.where(x > 0, x, x * slope),
            fields=("negative_slope",),
            kinds=_FLOAT,
        ),
        PointwiseOp(
            "elu",
            "Elu",
            1,
            lambda x, alpha, scale, input_scale: np.where(
                x > 0, x * scale, np.expm1(x * input_scale) * (alpha * scale)
            ),
            fields=("alpha", "scale", "input_scale"),
            kinds=_FLOAT,
        ),
        PointwiseOp(
            "softplus",
            "Softplus",
            1,
            lambda x, beta, threshold: np.where(
                x * beta > threshold, x, np.log1p(np.exp(x * beta)) / beta
            ),
            fields=("beta", "threshold"),
            kinds=_FLOAT,
        ),
        PointwiseOp(
            "threshold",
            "Threshold",
            1,
            lambda x, threshold, value: np.where(x <= threshold, value, x),
            fields=("threshold", "value"),
            kinds=_NUMERIC,
        ),
        PointwiseOp("hardswish", "Hardswish", 1, lambda x: x * _hard(x) * _sixth(x), kinds=_FLOAT),
        PointwiseOp("hardsigmoid", "Hardsigmoid", 1, lambda x: _hard(x) * _sixth(x), kinds=_FLOAT),
        PointwiseOp("mish", "Mish", 1, lambda x: x * np.tanh(np.log1p(np.exp(x))), kinds=_FLOAT),
        PointwiseOp(
            "logsigmoid",
            "LogSigmoid",
            1,
            lambda x: np.where(x < 0, x, 0) - np.log1p(np.exp(-np.abs(x))),
            kinds=_FLOAT,
        ),
    )
}


def _input(name: str, input: Any) -> Tensor:  # noqa: A002
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(input).__name__}")
    return input


def _number(name: str, argument: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"{name}(): argument '{argument}' must be a number, not {type(value).__name__}"
        )
    return value


def _as_input_dtype(value: Any, input: Tensor) -> Any:  # noqa: A002
    """A bound as PyTorch's kernels take it (``Scalar.to<scalar_t>()``): truncated for
    integers, rounded for float16 and bfloat16; RuntimeError where it does not fit."""
    _math._check_fill(value, input.dtype)
    if input.dtype.is_floating_point:
        return float(np.asarray(float(value)).astype(input.dtype.np))
    return int(value)


def _apply(name: str, input: Tensor, fields: tuple, inplace: bool) -> Tensor:  # noqa: A002
    return run(ACTIVATIONS[name], (input,), fields, input if inplace else None)


def hardtanh(
    input: Tensor,  # noqa: A002
    min_val: float = -1.0,
    max_val: float = 1.0,
    inplace: bool = False,
) -> Tensor:
    """``clamp(input, min_val, max_val)`` with NaN kept (torch.nn.functional.hardtanh)."""
    x = _input("hardtanh", input)
    _number("hardtanh", "min_val", min_val)
    _number("hardtanh", "max_val", max_val)
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    if x.dtype is bool_:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    if x.dtype is uint8 and (int(min_val) < 0 or int(max_val) < 0):  # as truncated
        raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
    bounds = (_as_input_dtype(min_val, x), _as_input_dtype(max_val, x))
    return _apply("hardtanh", x, bounds, inplace)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``hardtanh(input, 0, 6)`` (torch.nn.functional.relu6)."""
    return hardtanh(input, 0.0, 6.0, inplace)


def leaky_relu(
    input: Tensor,  # noqa: A002
    negative_slope: float = 0.01,
    inplace: bool = False,
) -> Tensor:
    """``input`` where positive, else ``input * negative_slope``."""
    x = _input("leaky_relu", input)
    return _apply(
        "leaky_relu", x, (_number("leaky_relu", "negative_slope", negative_slope),), inplace
    )


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input`` where positive, else ``alpha * (exp(input) - 1)``."""
    x = _input("elu", input)
    return _apply("elu", x, (_number("elu", "alpha", alpha), 1.0, 1.0), inplace)


def selu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``scale * elu(input, alpha)`` with SELU's constants."""
    x = _input("selu", input)
    return _apply("elu", x, (_SELU_ALPHA, _SELU_SCALE, 1.0), inplace)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input`` where positive, else ``alpha * (exp(input / alpha) - 1)``."""
    x = _input("celu", input)
    _number("celu", "alpha", alpha)
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _apply("elu", x, (alpha, 1.0, 1.0 / alpha), inplace)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    """``log(1 + exp(beta * input)) / beta``, ``input`` itself where ``beta * input`` exceeds
    ``threshold``."""
    x = _input("softplus", input)
    fields = (_number("softplus", "beta", beta), _number("softplus", "threshold", threshold))
    return _apply("softplus", x, fields, False)


def threshold(
    input: Tensor,  # noqa: A002
    threshold: float,
    value: float,
    inplace: bool = False,
) -> Tensor:
    """``input`` where it is greater than ``threshold``, else ``value``."""
    x = _input("threshold", input)
    _number("threshold", "threshold", threshold)
    _number("threshold", "value", value)
    fields = (_as_input_dtype(threshold, x), _as_input_dtype(value, x))
    return _apply("threshold", x, fields, inplace)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input * relu6(input + 3) / 6``."""
    return _apply("hardswish", _input("hardswish", input), (), inplace)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``relu6(input + 3) / 6``."""
    return _apply("hardsigmoid", _input("hardsigmoid", input), (), inplace)


def mish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input * tanh(softplus(input))``."""
    return _apply("mish", _input("mish", input), (), inplace)


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """``log(sigmoid(input))``, computed as ``min(input, 0) - log1p(exp(-|input|))``."""
    return _apply("logsigmoid", _input("logsigmoid", input), (), False)


def softsign(input: Tensor) -> Tensor:  # noqa: A002
    """``input / (|input| + 1)`` (PyTorch's composite: integers give the default float)."""
    x = _input("softsign", input)
    return _math.div(x, _math.abs(x) + 1)


def glu(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    """``a * sigmoid(b)`` for ``a`` and ``b`` the two halves of ``input`` along ``dim``."""
    x = _input("glu", input)
    if x.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"glu(): argument 'dim' must be int, not {type(dim).__name__}")
    if not -x.ndim <= dim < x.ndim:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-x.ndim}, {x.ndim - 1}], "
            f"but got {dim})"
        )
    dim %= x.ndim
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"glu: not implemented for {x.dtype} tensors")
    size = x.shape[dim]
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim} is size {size}")
    half = size // 2
    return x.narrow(dim, 0, half) * _math.sigmoid(x.narrow(dim, half, half))
