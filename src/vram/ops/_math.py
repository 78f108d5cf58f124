"""The pointwise ops PyTorch users reach for first, with torch's names, arguments and dtypes:
arithmetic, unary math, comparisons, logical and bitwise ops, where, clamp, addcmul,
addcdiv, lerp, nan_to_num, fill and copy. Each is a ``PointwiseOp`` (its functor in
kernels/pointwise.cu and its NumPy reference); the functions here check torch's contract
and call the engine (``_pointwise.run``).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .._dtypes import bool_, dtype
from .._tensor import Tensor, dispatch
from ._iterator import broadcast_shape
from ._pointwise import (
    COPY,
    FILL,
    PointwiseOp,
    binary_operator,
    inplace_operator,
    run,
    unary_operator,
)
from ._promotion import kind, result_type

__all__ = [
    "BINARY",
    "FUNCTIONS",
    "UNARY",
    "abs",
    "add",
    "addcdiv",
    "addcmul",
    "atan2",
    "binary",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "ceil",
    "clamp",
    "clip",
    "copy_",
    "cos",
    "div",
    "eq",
    "erf",
    "exp",
    "exp2",
    "expm1",
    "fill_",
    "floor",
    "floor_divide",
    "fmod",
    "ge",
    "gt",
    "isfinite",
    "isinf",
    "isnan",
    "le",
    "lerp",
    "log",
    "log10",
    "log1p",
    "log2",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "lt",
    "maximum",
    "minimum",
    "mul",
    "nan_to_num",
    "ne",
    "neg",
    "pow",
    "reciprocal",
    "relu",
    "remainder",
    "round",
    "rsqrt",
    "rsub",
    "sigmoid",
    "sign",
    "sin",
    "sqrt",
    "sub",
    "tan",
    "tanh",
    "true_divide",
    "trunc",
    "unary",
    "where",
]

_REAL = frozenset((0, 1, 2))  # bool, integers, floating point
_NUMERIC = frozenset((1, 2))
_FLOAT = frozenset((2,))
_ALL = frozenset((0, 1, 2, 3))
_ARITH = frozenset((0, 1, 2, 3))

_NEG_BOOL = (
    "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
    "invert a mask, use the `~` or `logical_not()` operator instead."
)
_SUB_BOOL = (
    "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
    "`logical_xor()` operator instead."
)


def _erf(x: np.ndarray) -> np.ndarray:
    out = np.frompyfunc(math.erf, 1, 1)(np.asarray(x, dtype=np.float64))
    return np.asarray(out, dtype=np.float64).astype(np.asarray(x).dtype)


def _sigmoid(x: Any) -> Any:
    return 1 / (1 + np.exp(-x))


def _div_trunc(a: Any, b: Any) -> Any:
    if np.asarray(a).dtype.kind == "f":
        return np.trunc(a / b)
    q = np.floor_divide(a, b)
    r = a - q * b
    return np.where((r != 0) & ((a < 0) != (b < 0)), q + 1, q)


def _div_floor(a: Any, b: Any) -> Any:
    """PyTorch's div_floor_floating / div_floor_integer."""
    if np.asarray(a).dtype.kind != "f":
        return np.floor_divide(a, b)
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    mod = np.fmod(a, b)
    div = (a - mod) / b
    div = np.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floordiv = np.floor(div)
    floordiv = np.where(div - floordiv > 0.5, floordiv + 1, floordiv)
    floordiv = np.where(div == 0, np.copysign(np.zeros_like(div), a / b), floordiv)
    return np.where(b == 0, a / b, floordiv)


def _remainder(a: Any, b: Any) -> Any:
    if np.asarray(a).dtype.kind != "f":
        return np.remainder(a, b)
    mod = np.fmod(a, b)
    return np.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)


def _pow(a: Any, b: Any) -> Any:
    if np.asarray(a).dtype.kind not in "iub":
        return np.power(a, b)
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    result = np.power(a, np.maximum(b, 0).astype(a.dtype))
    negative = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
    return np.where(b < 0, negative.astype(a.dtype), result)


def _lerp(start: Any, end: Any, weight: Any) -> Any:
    diff = end - start
    return np.where(np.abs(weight) < 0.5, start + weight * diff, end - diff * (1 - weight))


def _clamp(x: Any, lo: Any, hi: Any) -> Any:
    return _clamp_max(_clamp_min(x, lo), hi)


def _clamp_min(x: Any, lo: Any) -> Any:
    return np.where(np.isnan(x), x, np.where(np.isnan(lo), lo, np.maximum(x, lo)))


def _clamp_max(x: Any, hi: Any) -> Any:
    return np.where(np.isnan(x), x, np.where(np.isnan(hi), hi, np.minimum(x, hi)))


def _nan_to_num(x: Any, nan: Any, posinf: Any, neginf: Any) -> Any:
    return np.where(
        np.isnan(x), nan, np.where(np.isposinf(x), posinf, np.where(np.isneginf(x), neginf, x))
    )


def _op(name: str, functor: str, arity: int, numpy: Any, **options: Any) -> PointwiseOp:
    return PointwiseOp(name, functor, arity, numpy, **options)


UNARY: dict[str, PointwiseOp] = {
    op.name: op
    for op in (
        _op("neg", "Neg", 1, np.negative, kinds=_NUMERIC | {3}, unsupported=_NEG_BOOL),
        _op("abs", "Abs", 1, np.abs, kinds=_NUMERIC),
        _op("sign", "Sign", 1, np.sign, kinds=_REAL),
        _op("exp", "Exp", 1, np.exp, rule="float", kinds=_REAL),
        _op("exp2", "Exp2", 1, np.exp2, rule="float", kinds=_REAL),
        _op("expm1", "Expm1", 1, np.expm1, rule="float", kinds=_REAL),
        _op("log", "Log", 1, np.log, rule="float", kinds=_REAL),
        _op("log2", "Log2", 1, np.log2, rule="float", kinds=_REAL),
        _op("log10", "Log10", 1, np.log10, rule="float", kinds=_REAL),
        _op("log1p", "Log1p", 1, np.log1p, rule="float", kinds=_REAL),
        _op("sqrt", "Sqrt", 1, np.sqrt, rule="float", kinds=_REAL),
        _op("rsqrt", "Rsqrt", 1, lambda x: 1 / np.sqrt(x), rule="float", kinds=_REAL),
        _op("reciprocal", "Reciprocal", 1, lambda x: 1 / x, rule="float", kinds=_REAL),
        _op("sin", "Sin", 1, np.sin, rule="float", kinds=_REAL),
        _op("cos", "Cos", 1, np.cos, rule="float", kinds=_REAL),
        _op("tan", "Tan", 1, np.tan, rule="float", kinds=_REAL),
        _op("tanh", "Tanh", 1, np.tanh, rule="float", kinds=_REAL),
        _op("sigmoid", "Sigmoid", 1, _sigmoid, rule="float", kinds=_REAL),
        _op("erf", "Erf", 1, _erf, rule="float", kinds=_REAL),
        _op("floor", "Floor", 1, np.floor, kinds=_NUMERIC),
        _op("ceil", "Ceil", 1, np.ceil, kinds=_NUMERIC),
        _op("round", "Round", 1, np.rint, kinds=_NUMERIC),
        _op("trunc", "Trunc", 1, np.trunc, kinds=_NUMERIC),
        _op("logical_not", "LogicalNot", 1, np.logical_not, rule="logical", kinds=_ALL),
        _op("bitwise_not", "BitwiseNot", 1, np.invert, rule="integral", kinds=frozenset((0, 1))),
        _op("isnan", "IsNan", 1, np.isnan, rule="compare", kinds=_REAL),
        _op("isinf", "IsInf", 1, np.isinf, rule="compare", kinds=_REAL),
        _op("isfinite", "IsFinite", 1, np.isfinite, rule="compare", kinds=_REAL),
        _op(
            "relu",
            "Relu",
            1,
            lambda x: np.where(x > 0, x, np.where(np.isnan(x), x, 0)),
            kinds=_NUMERIC,
        ),
        _op("silu", "Silu", 1, lambda x: x * _sigmoid(x), kinds=_FLOAT),
        _op(
            "gelu", "Gelu", 1, lambda x: x * 0.5 * (1 + _erf(x * 0.7071067811865476)), kinds=_FLOAT
        ),
        _op(
            "gelu_tanh",
            "GeluTanh",
            1,
            lambda x: 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3))),
            kinds=_FLOAT,
        ),
    )
}
NAN_TO_NUM = _op(
    "nan_to_num", "NanToNum", 1, _nan_to_num, fields=("nan", "posinf", "neginf"), kinds=_REAL
)

BINARY: dict[str, PointwiseOp] = {
    op.name: op
    for op in (
        _op("add", "Add", 2, lambda a, b, alpha: a + alpha * b, fields=("alpha",), kinds=_ARITH),
        _op(
            "sub",
            "Sub",
            2,
            lambda a, b, alpha: a - alpha * b,
            fields=("alpha",),
            kinds=_NUMERIC | {3},
            unsupported=_SUB_BOOL,
        ),
        _op("mul", "Mul", 2, np.multiply, kinds=_ARITH),
        _op("div", "Div", 2, np.true_divide, rule="float", kinds=_ARITH),
        _op("div_trunc", "DivTrunc", 2, _div_trunc, kinds=_NUMERIC),
        _op("div_floor", "DivFloor", 2, _div_floor, kinds=_NUMERIC),
        _op("remainder", "Remainder", 2, _remainder, kinds=_NUMERIC),
        _op("fmod", "Fmod", 2, np.fmod, kinds=_NUMERIC),
        _op("pow", "Pow", 2, _pow, kinds=_NUMERIC),
        _op("maximum", "Maximum", 2, np.maximum, kinds=_REAL),
        _op("minimum", "Minimum", 2, np.minimum, kinds=_REAL),
        _op("atan2", "Atan2", 2, np.arctan2, rule="float", kinds=_REAL),
        _op("logical_and", "LogicalAnd", 2, np.logical_and, rule="logical", kinds=_ALL),
        _op("logical_or", "LogicalOr", 2, np.logical_or, rule="logical", kinds=_ALL),
        _op("logical_xor", "LogicalXor", 2, np.logical_xor, rule="logical", kinds=_ALL),
        _op(
            "bitwise_and", "BitwiseAnd", 2, np.bitwise_and, rule="integral", kinds=frozenset((0, 1))
        ),
        _op("bitwise_or", "BitwiseOr", 2, np.bitwise_or, rule="integral", kinds=frozenset((0, 1))),
        _op(
            "bitwise_xor", "BitwiseXor", 2, np.bitwise_xor, rule="integral", kinds=frozenset((0, 1))
        ),
        _op("eq", "Eq", 2, np.equal, rule="compare", kinds=_ALL),
        _op("ne", "Ne", 2, np.not_equal, rule="compare", kinds=_ALL),
        _op("lt", "Lt", 2, np.less, rule="compare", kinds=_REAL),
        _op("le", "Le", 2, np.less_equal, rule="compare", kinds=_REAL),
        _op("gt", "Gt", 2, np.greater, rule="compare", kinds=_REAL),
        _op("ge", "Ge", 2, np.greater_equal, rule="compare", kinds=_REAL),
        _op("clamp_min", "ClampMin", 2, _clamp_min, kinds=_NUMERIC),
        _op("clamp_max", "ClampMax", 2, _clamp_max, kinds=_NUMERIC),
    )
}

WHERE = _op("where", "Where", 3, lambda c, a, b: np.where(c, a, b), rule="where")
CLAMP = _op("clamp", "Clamp", 3, _clamp, kinds=_NUMERIC)
ADDCMUL = _op("addcmul", "Addcmul", 3, lambda x, a, b, v: x + v * a * b, fields=("value",))
ADDCDIV = _op("addcdiv", "Addcdiv", 3, lambda x, a, b, v: x + v * (a / b), fields=("value",))
LERP = _op("lerp", "Lerp", 3, _lerp, kinds=frozenset((2,)))


# Python's operators and the plain calls, by signature id (``_pointwise.binary_operator``)
_ADD = binary_operator(BINARY["add"], (1,))
_SUB = binary_operator(BINARY["sub"], (1,))
_MUL = binary_operator(BINARY["mul"])
_DIV = binary_operator(BINARY["div"])
_IADD = inplace_operator(BINARY["add"], (1,))
_ISUB = inplace_operator(BINARY["sub"], (1,))
_IMUL = inplace_operator(BINARY["mul"])
_IDIV = inplace_operator(BINARY["div"])


# ---- the functions -------------------------------------------------------------------------


def unary(name: str, input: Tensor, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """torch.<name>(input, out=None) for a unary op in ``UNARY``."""
    _tensor_arg(name, "input", input)
    return run(UNARY[name], (input,), out=out)


def binary(name: str, input: Any, other: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """torch.<name>(input, other, out=None) for a binary op in ``BINARY`` (no fields)."""
    return run(BINARY[name], (input, other), out=out)


def _tensor_arg(name: str, argument: str, value: Any) -> None:
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{name}(): argument '{argument}' must be Tensor, not {type(value).__name__}"
        )


def _check_alpha(name: str, alpha: Any, operands: tuple) -> None:
    if not isinstance(alpha, (numbers.Number, np.generic)) or isinstance(alpha, Tensor):
        raise TypeError(f"{name}(): argument 'alpha' must be a number, got {type(alpha).__name__}")
    if alpha == 1 and not isinstance(alpha, bool):
        return
    common = result_type(*operands)
    if isinstance(alpha, bool | np.bool_) and common is not bool_:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if kind(common) <= 1 and not isinstance(alpha, numbers.Integral):
        raise RuntimeError(
            "For integral input tensors, argument alpha must not be a floating point number."
        )


def add(input: Any, other: Any, *, alpha: Any = 1, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """torch.add: ``input + alpha * other``."""
    if alpha == 1 and type(alpha) is int and type(input) is Tensor:
        if out is None:
            return _ADD(input, other)
        if out is input:
            return _IADD(input, other)
    _check_alpha("add", alpha, (input, other))
    return run(BINARY["add"], (input, other), (alpha,), out)


def sub(input: Any, other: Any, *, alpha: Any = 1, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """torch.sub: ``input - alpha * other``."""
    if alpha == 1 and type(alpha) is int and type(input) is Tensor:
        if out is None:
            return _SUB(input, other)
        if out is input:
            return _ISUB(input, other)
    _check_alpha("sub", alpha, (input, other))
    return run(BINARY["sub"], (input, other), (alpha,), out)


def rsub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:  # noqa: A002
    """torch.rsub: ``other - alpha * input``."""
    _check_alpha("rsub", alpha, (input, other))
    return run(BINARY["sub"], (other, input), (alpha,))


def mul(input: Any, other: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    if type(input) is Tensor:
        if out is None:
            return _MUL(input, other)
        if out is input:
            return _IMUL(input, other)
    return run(BINARY["mul"], (input, other), out=out)


def div(
    input: Any,  # noqa: A002
    other: Any,
    *,
    rounding_mode: str | None = None,
    out: Tensor | None = None,
) -> Tensor:
    """torch.div: true division, or rounded toward zero ("trunc") or down ("floor")."""
    names = {None: "div", "trunc": "div_trunc", "floor": "div_floor"}
    if rounding_mode not in names:
        raise ValueError(
            "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
            f"'{rounding_mode}'"
        )
    if rounding_mode is None and type(input) is Tensor:
        if out is None:
            return _DIV(input, other)
        if out is input:
            return _IDIV(input, other)
    return run(BINARY[names[rounding_mode]], (input, other), out=out)


def true_divide(input: Any, other: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    return div(input, other, out=out)


def floor_divide(input: Any, other: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    return div(input, other, rounding_mode="floor", out=out)


def remainder(input: Any, other: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    return run(BINARY["remainder"], (input, other), out=out)


def fmod(input: Any, other: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    return run(BINARY["fmod"], (input, other), out=out)


def pow(input: Any, exponent: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A001, A002
    """torch.pow: tensor or number bases and exponents."""
    if (
        isinstance(input, Tensor)
        and kind(input.dtype) <= 1
        and isinstance(exponent, numbers.Integral)
        and not isinstance(exponent, bool)
        and exponent < 0
    ):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    return run(BINARY["pow"], (input, exponent), out=out)


def maximum(input: Tensor, other: Tensor, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    _tensor_arg("maximum", "other", other)
    return run(BINARY["maximum"], (input, other), out=out)


def minimum(input: Tensor, other: Tensor, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    _tensor_arg("minimum", "other", other)
    return run(BINARY["minimum"], (input, other), out=out)


def atan2(input: Tensor, other: Tensor, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    return run(BINARY["atan2"], (input, other), out=out)


def where(condition: Tensor, input: Any, other: Any) -> Tensor:  # noqa: A002
    """torch.where(condition, input, other): ``input`` where ``condition``, else ``other``."""
    _tensor_arg("where", "condition", condition)
    if condition.dtype is not bool_:
        raise RuntimeError(
            "where expected condition to be a boolean tensor, but got a tensor with dtype "
            f"{_torch_name(condition.dtype)}"
        )
    return run(WHERE, (condition, input, other))


def clamp(
    input: Tensor,  # noqa: A002
    min: Any = None,  # noqa: A002
    max: Any = None,  # noqa: A002
    *,
    out: Tensor | None = None,
) -> Tensor:
    """torch.clamp: ``min(max(input, min), max)``; bounds are tensors or numbers; NaN in the
    input or a bound is the result."""
    _tensor_arg("clamp", "input", input)
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if max is None:
        return run(BINARY["clamp_min"], (input, min), out=out)
    if min is None:
        return run(BINARY["clamp_max"], (input, max), out=out)
    return run(CLAMP, (input, min, max), out=out)


clip = clamp


def addcmul(
    input: Tensor,  # noqa: A002
    tensor1: Tensor,
    tensor2: Tensor,
    *,
    value: Any = 1,
    out: Tensor | None = None,
) -> Tensor:
    """torch.addcmul: ``input + value * tensor1 * tensor2``."""
    for argument, t in (("input", input), ("tensor1", tensor1), ("tensor2", tensor2)):
        _tensor_arg("addcmul", argument, t)
    return run(ADDCMUL, (input, tensor1, tensor2), (value,), out)


def addcdiv(
    input: Tensor,  # noqa: A002
    tensor1: Tensor,
    tensor2: Tensor,
    *,
    value: Any = 1,
    out: Tensor | None = None,
) -> Tensor:
    """torch.addcdiv: ``input + value * tensor1 / tensor2``."""
    for argument, t in (("input", input), ("tensor1", tensor1), ("tensor2", tensor2)):
        _tensor_arg("addcdiv", argument, t)
    if kind(tensor1.dtype) <= 1 and kind(tensor2.dtype) <= 1:
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future release "
            "addcdiv will perform a true division of tensor1 and tensor2. Use "
            "(input + value * torch.true_divide(tensor1, tensor2)) instead."
        )
    return run(ADDCDIV, (input, tensor1, tensor2), (value,), out)


def lerp(
    input: Tensor,  # noqa: A002
    end: Tensor,
    weight: Any,
    *,
    out: Tensor | None = None,
) -> Tensor:
    """torch.lerp: ``input + weight * (end - input)`` (PyTorch's formula)."""
    _tensor_arg("lerp", "input", input)
    _tensor_arg("lerp", "end", end)
    if end.dtype is not input.dtype:
        raise RuntimeError(
            f"expected dtype {_torch_name(input.dtype)} for `end` but got dtype "
            f"{_torch_name(end.dtype)}"
        )
    return run(LERP, (input, end, weight), out=out)


def nan_to_num(
    input: Tensor,  # noqa: A002
    nan: float = 0.0,
    posinf: float | None = None,
    neginf: float | None = None,
    *,
    out: Tensor | None = None,
) -> Tensor:
    """torch.nan_to_num: NaN, +inf and -inf replaced (infinities by the dtype's largest and
    lowest finite values unless given); integer and bool tensors are copied."""
    _tensor_arg("nan_to_num", "input", input)
    if kind(input.dtype) <= 1:
        if out is None:
            return input.clone()
        return copy_(out, input)
    if input.dtype.is_complex:
        raise NotImplementedError("nan_to_num: not implemented for complex tensors")
    finfo = np.finfo(input.dtype.np) if input.dtype.np.kind == "f" else None
    big = float(finfo.max) if finfo is not None else float(np.finfo(np.float32).max)
    if input.dtype.name == "bfloat16":
        big = 3.3895313892515355e38
    posinf = big if posinf is None else posinf
    neginf = -big if neginf is None else neginf
    return run(NAN_TO_NUM, (input,), (nan, posinf, neginf), out)


def fill_(t: Tensor, value: Any) -> Tensor:
    """Set every element of ``t`` to ``value`` (RuntimeError when an integer does not fit
    ``t``'s dtype, as PyTorch)."""
    if isinstance(value, Tensor):
        if value.numel() != 1 or value.ndim:
            raise RuntimeError(
                "fill_ only supports 0-dimension value tensor but got tensor with "
                f"{value.ndim} dimensions."
            )
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    _check_fill(value, t.dtype)
    return run(FILL, (), (value,), t)


def copy_(dst: Tensor, src: Any) -> Tensor:
    """``dst.copy_(src)`` on one device: any strides, broadcasting, any dtype conversion."""
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
    if src._shape != dst._shape:
        shape = broadcast_shape([dst._shape, src._shape])
        if shape != dst._shape:
            raise RuntimeError(
                f"output with shape {list(dst._shape)} doesn't match the broadcast shape "
                f"{list(shape)}"
            )
        src = src.expand(dst._shape)
    return run(COPY, (src,), out=dst)


def _check_fill(value: Any, dt: dtype) -> None:
    if not isinstance(value, numbers.Number):
        raise TypeError(f"value: expected a number, got {type(value).__name__}")
    if isinstance(value, complex) and not dt.is_complex:
        raise TypeError(f"value: a complex value cannot be stored in {dt}")
    if dt.np.kind in "iu" and isinstance(value, numbers.Real):
        info = np.iinfo(dt.np)
        if isinstance(value, numbers.Integral):
            fits = info.min <= value <= info.max
        else:  # a float is truncated toward zero, as PyTorch does; NaN and inf never fit
            fits = math.isfinite(value) and info.min - 1 < value < info.max + 1
        if not fits:
            raise RuntimeError(f"value: value {value} cannot be converted to {dt} without overflow")
    if dt.np.kind == "f" and isinstance(value, numbers.Real) and math.isfinite(value):
        top = 3.3895313892515355e38 if dt.name == "bfloat16" else float(np.finfo(dt.np).max)
        if math.fabs(value) > top:
            raise RuntimeError(f"value: value {value} cannot be converted to {dt} without overflow")


_TORCH_NAMES = {
    "float16": "Half",
    "bfloat16": "BFloat16",
    "float32": "Float",
    "float64": "Double",
    "int8": "Char",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "uint8": "Byte",
    "bool": "Bool",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
}


def _torch_name(dt: dtype) -> str:
    """The dtype as PyTorch's messages spell it ("Float", "Long")."""
    return _TORCH_NAMES[dt.name]


def _unary_function(name: str) -> Any:
    fast = unary_operator(UNARY[name])

    def function(input: Tensor, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
        if out is None and type(input) is Tensor:
            return fast(input)
        return unary(name, input, out=out)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"torch.{name}(input, *, out=None): elementwise."
    return function


def _binary_function(name: str) -> Any:
    fast = binary_operator(BINARY[name])

    def function(input: Any, other: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
        if out is None and type(input) is Tensor:
            return fast(input, other)
        return binary(name, input, other, out=out)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"torch.{name}(input, other, *, out=None): elementwise."
    return function


# torch's functions of one tensor (builtins' names shadowed on purpose, as torch's)
abs = _unary_function("abs")  # noqa: A001
neg = _unary_function("neg")
sign = _unary_function("sign")
exp = _unary_function("exp")
exp2 = _unary_function("exp2")
expm1 = _unary_function("expm1")
log = _unary_function("log")
log2 = _unary_function("log2")
log10 = _unary_function("log10")
log1p = _unary_function("log1p")
sqrt = _unary_function("sqrt")
rsqrt = _unary_function("rsqrt")
reciprocal = _unary_function("reciprocal")
sin = _unary_function("sin")
cos = _unary_function("cos")
tan = _unary_function("tan")
tanh = _unary_function("tanh")
sigmoid = _unary_function("sigmoid")
erf = _unary_function("erf")
floor = _unary_function("floor")
ceil = _unary_function("ceil")
round = _unary_function("round")  # noqa: A001
trunc = _unary_function("trunc")
logical_not = _unary_function("logical_not")
bitwise_not = _unary_function("bitwise_not")
isnan = _unary_function("isnan")
isinf = _unary_function("isinf")
isfinite = _unary_function("isfinite")
relu = _unary_function("relu")

# and of two operands
logical_and = _binary_function("logical_and")
logical_or = _binary_function("logical_or")
logical_xor = _binary_function("logical_xor")
bitwise_and = _binary_function("bitwise_and")
bitwise_or = _binary_function("bitwise_or")
bitwise_xor = _binary_function("bitwise_xor")
eq = _binary_function("eq")
ne = _binary_function("ne")
lt = _binary_function("lt")
le = _binary_function("le")
gt = _binary_function("gt")
ge = _binary_function("ge")

FUNCTIONS: dict[str, Any] = {
    "abs": abs,
    "neg": neg,
    "sign": sign,
    "exp": exp,
    "exp2": exp2,
    "expm1": expm1,
    "log": log,
    "log2": log2,
    "log10": log10,
    "log1p": log1p,
    "sqrt": sqrt,
    "rsqrt": rsqrt,
    "reciprocal": reciprocal,
    "sin": sin,
    "cos": cos,
    "tan": tan,
    "tanh": tanh,
    "sigmoid": sigmoid,
    "erf": erf,
    "floor": floor,
    "ceil": ceil,
    "round": round,
    "trunc": trunc,
    "logical_not": logical_not,
    "bitwise_not": bitwise_not,
    "isnan": isnan,
    "isinf": isinf,
    "isfinite": isfinite,
    "relu": relu,
    "logical_and": logical_and,
    "logical_or": logical_or,
    "logical_xor": logical_xor,
    "bitwise_and": bitwise_and,
    "bitwise_or": bitwise_or,
    "bitwise_xor": bitwise_xor,
    "eq": eq,
    "ne": ne,
    "lt": lt,
    "le": le,
    "gt": gt,
    "ge": ge,
    "add": add,
    "sub": sub,
    "rsub": rsub,
    "mul": mul,
    "div": div,
    "true_divide": true_divide,
    "floor_divide": floor_divide,
    "remainder": remainder,
    "fmod": fmod,
    "pow": pow,
    "maximum": maximum,
    "minimum": minimum,
    "atan2": atan2,
    "where": where,
    "clamp": clamp,
    "clip": clip,
    "addcmul": addcmul,
    "addcdiv": addcdiv,
    "lerp": lerp,
    "nan_to_num": nan_to_num,
}

# Tensor methods reach these through the tensor layer's dispatch table.
dispatch.update(FUNCTIONS)
dispatch.update(
    fill_=fill_,
    copy_=copy_,
    __add__=_ADD,
    __sub__=_SUB,
    __mul__=_MUL,
    __truediv__=_DIV,
    __iadd__=_IADD,
    __isub__=_ISUB,
    __imul__=_IMUL,
    __itruediv__=_IDIV,
    __eq__=binary_operator(BINARY["eq"]),
    __ne__=binary_operator(BINARY["ne"]),
    __lt__=binary_operator(BINARY["lt"]),
    __le__=binary_operator(BINARY["le"]),
    __gt__=binary_operator(BINARY["gt"]),
    __ge__=binary_operator(BINARY["ge"]),
)
