"""The pointwise ops PyTorch users reach for first, with torch's names, arguments and dtypes:
arithmetic, unary math, comparisons, logical and bitwise ops, where, clamp, addcmul,
addcdiv, lerp, nan_to_num, fill and copy. Each is a ``PointwiseOp`` (its functor in
kernels/pointwise.cu and its NumPy reference); the functions here check torch's contract
and call the engine (``_pointwise.run``).
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any

import numpy as np

from .._dtypes import bool_, dtype, float32, float64, int64
from .._tensor import Tensor, dispatch
from ._iterator import broadcast_shape
from ._pointwise import (
    COPY,
    FILL,
    PointwiseOp,
    binary_operator,
    inplace_operator,
    run,
    ternary_operator,
    unary_operator,
)
from ._promotion import get_default_dtype, kind, result_type

__all__ = [
    "BINARY",
    "FUNCTIONS",
    "ISCLOSE",
    "LOGIT",
    "UNARY",
    "abs",
    "acos",
    "acosh",
    "add",
    "addcdiv",
    "addcmul",
    "allclose",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctanh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "binary",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "ceil",
    "clamp",
    "clamp_max",
    "clamp_min",
    "clip",
    "copy_",
    "copysign",
    "cos",
    "cosh",
    "deg2rad",
    "digamma",
    "div",
    "eq",
    "equal",
    "erf",
    "erfc",
    "erfinv",
    "exp",
    "exp2",
    "expm1",
    "fill_",
    "floor",
    "floor_divide",
    "fmod",
    "frac",
    "ge",
    "gt",
    "heaviside",
    "hypot",
    "isclose",
    "isfinite",
    "isinf",
    "isnan",
    "le",
    "lerp",
    "lgamma",
    "log",
    "log10",
    "log1p",
    "log2",
    "logaddexp",
    "logaddexp2",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logit",
    "lt",
    "maximum",
    "minimum",
    "mul",
    "nan_to_num",
    "ne",
    "neg",
    "positive",
    "pow",
    "rad2deg",
    "reciprocal",
    "relu",
    "remainder",
    "round",
    "rsqrt",
    "rsub",
    "sgn",
    "sigmoid",
    "sign",
    "sin",
    "sinc",
    "sinh",
    "sqrt",
    "square",
    "sub",
    "tan",
    "tanh",
    "true_divide",
    "trunc",
    "unary",
    "unary_fast",
    "where",
    "xlogy",
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


def _elementwise(function: Any, x: Any) -> np.ndarray:
    """A Python math function over an array, in float64, back in the array's dtype."""
    x = np.asarray(x)
    out = np.frompyfunc(function, 1, 1)(x.astype(np.float64))
    return np.asarray(out, dtype=np.float64).astype(x.dtype)


def _lgamma_one(v: float) -> float:
    if math.isnan(v):
        return v
    if math.isinf(v) or (v <= 0 and v == math.floor(v)):
        return math.inf  # the poles, as lgamma in C
    return math.lgamma(v)


def _erfinv_one(y: float) -> float:
    """PyTorch's calc_erfinv: a rational first guess, then two Newton steps."""
    if math.isnan(y) or math.fabs(y) > 1:
        return math.nan
    if math.fabs(y) == 1:
        return math.copysign(math.inf, y)
    if math.fabs(y) <= 0.7:
        z = y * y
        num = ((-0.140543331 * z + 0.914624893) * z - 1.645349621) * z + 0.886226899
        dem = (((0.012229801 * z - 0.329097515) * z + 1.442710462) * z - 2.118377725) * z + 1
        x = y * num / dem
    else:
        z = math.sqrt(-math.log((1 - math.fabs(y)) / 2))
        num = ((1.641345311 * z + 3.429567803) * z - 1.624906493) * z - 1.970840454
        dem = (1.637067800 * z + 3.543889200) * z + 1
        x = math.copysign(num, y) / dem
    for _ in range(2):
        x -= (math.erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


_DIGAMMA_SERIES = (
    8.33333333333333333333e-2,
    -2.10927960927960927961e-2,
    7.57575757575757575758e-3,
    -4.16666666666666666667e-3,
    3.96825396825396825397e-3,
    -8.33333333333333333333e-3,
    8.33333333333333333333e-2,
)


def _digamma(x: Any) -> np.ndarray:
    """PyTorch's calc_digamma in the array's dtype (the functor's m_digamma)."""
    x0 = x = np.asarray(x)
    t = x.dtype.type
    pole = (x < 0) & (x == np.trunc(x))
    negative = (x < 0) & ~pole
    r = np.modf(x.astype(np.float64))[0]
    result = np.where(negative, (-np.pi / np.tan(np.pi * r)).astype(x.dtype), t(0))
    x = np.where(negative, t(1) - x, x)
    for _ in range(10):  # x > 0 reaches 10 within ten steps
        below = x < 10
        result = np.where(below, result - t(1) / x, result)
        x = np.where(below, x + t(1), x)
    z = t(1) / (x * x)
    p = np.zeros_like(x)
    for a in _DIGAMMA_SERIES:
        p = p * z + t(a)
    y = np.where(x < t(1e17), z * p, t(0))
    value = np.where(
        x == 10, result + t(2.25175258906672110764), np.log(x) - t(0.5) / x - y + result
    )
    value = np.where(pole, t(np.nan), value)
    return np.where(x0 == 0, np.copysign(t(np.inf), -x0), value)


def _sgn(x: Any) -> Any:
    if np.iscomplexobj(x):
        magnitude = np.abs(x)
        return np.where(magnitude == 0, 0, x / np.where(magnitude == 0, 1, magnitude))
    if np.asarray(x).dtype == np.bool_:
        return x
    return (x > 0).astype(np.asarray(x).dtype) - (x < 0).astype(np.asarray(x).dtype)


def _sinc(x: Any) -> Any:
    product = np.asarray(x).dtype.type(np.pi) * x
    return np.where(x == 0, 1, np.sin(product) / np.where(x == 0, 1, product))


def _logit(x: Any, eps: Any) -> Any:
    if eps >= 0:
        x = np.where(x < eps, eps, np.where(x > 1 - eps, 1 - eps, x))
    return np.log(x / (1 - x))


def _logaddexp(a: Any, b: Any, exp: Any, scale: float) -> Any:
    m = np.where(a > b, a, b)
    value = m + np.log1p(exp(-np.abs(a - b))) * np.asarray(m).dtype.type(scale)
    return np.where(np.isinf(a) & (a == b), a, value)


def _xlogy(x: Any, y: Any) -> Any:
    return np.where(np.isnan(y), y, np.where(x == 0, 0, x * np.log(y)))


def _heaviside(x: Any, values: Any) -> Any:
    return np.where(x == 0, values, (x > 0).astype(np.asarray(values).dtype))


def _isclose(a: Any, b: Any, rtol: Any, atol: Any, equal_nan: Any) -> Any:
    actual = np.abs(a - b)
    close = (a == b) | (np.isfinite(actual) & (actual <= atol + np.abs(rtol * b)))
    if equal_nan:
        close |= np.isnan(a) & np.isnan(b)
    return close


def _op(name: str, functor: str, arity: int, numpy: Any, **options: Any) -> PointwiseOp:
    return PointwiseOp(name, functor, arity, numpy, **options)


UNARY: dict[str, PointwiseOp] = {
    op.name: op
    for op in (
        _op("neg", "Neg", 1, np.negative, kinds=_NUMERIC | {3}, unsupported=_NEG_BOOL),
        _op("abs", "Abs", 1, np.abs, kinds=_NUMERIC),
        _op("sign", "Sign", 1, _sgn, kinds=_REAL),
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
        _op("erfc", "Erfc", 1, lambda x: _elementwise(math.erfc, x), rule="float", kinds=_REAL),
        _op(
            "erfinv", "Erfinv", 1, lambda x: _elementwise(_erfinv_one, x), rule="float", kinds=_REAL
        ),
        _op(
            "lgamma", "Lgamma", 1, lambda x: _elementwise(_lgamma_one, x), rule="float", kinds=_REAL
        ),
        _op("digamma", "Digamma", 1, _digamma, rule="float", kinds=_REAL),
        _op("sinh", "Sinh", 1, np.sinh, rule="float", kinds=_REAL),
        _op("cosh", "Cosh", 1, np.cosh, rule="float", kinds=_REAL),
        _op("asin", "Asin", 1, np.arcsin, rule="float", kinds=_REAL),
        _op("acos", "Acos", 1, np.arccos, rule="float", kinds=_REAL),
        _op("atan", "Atan", 1, np.arctan, rule="float", kinds=_REAL),
        _op("asinh", "Asinh", 1, np.arcsinh, rule="float", kinds=_REAL),
        _op("acosh", "Acosh", 1, np.arccosh, rule="float", kinds=_REAL),
        _op("atanh", "Atanh", 1, np.arctanh, rule="float", kinds=_REAL),
        _op("sinc", "Sinc", 1, _sinc, rule="float", kinds=_REAL),
        _op(
            "deg2rad",
            "Deg2Rad",
            1,
            lambda x: x * x.dtype.type(math.pi / 180),
            rule="float",
            kinds=_REAL,
        ),
        _op(
            "rad2deg",
            "Rad2Deg",
            1,
            lambda x: x * x.dtype.type(180 / math.pi),
            rule="float",
            kinds=_REAL,
        ),
        _op("square", "Square", 1, lambda x: x * x, kinds=_NUMERIC),
        _op("frac", "Frac", 1, lambda x: x - np.trunc(x), kinds=_FLOAT),
        _op("sgn", "Sgn", 1, _sgn, kinds=_ALL),
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
LOGIT = _op("logit", "Logit", 1, _logit, rule="float", fields=("eps",), kinds=_REAL)

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
        _op("hypot", "Hypot", 2, np.hypot, kinds=_FLOAT),
        _op("copysign", "Copysign", 2, np.copysign, rule="float", kinds=_REAL),
        _op(
            "logaddexp",
            "LogAddExp",
            2,
            lambda a, b: _logaddexp(a, b, np.exp, 1.0),
            kinds=_FLOAT,
        ),
        _op(
            "logaddexp2",
            "LogAddExp2",
            2,
            lambda a, b: _logaddexp(a, b, np.exp2, 1.4426950408889634),
            kinds=_FLOAT,
        ),
        _op("xlogy", "Xlogy", 2, _xlogy, rule="float", kinds=_REAL),
        _op("heaviside", "Heaviside", 2, _heaviside, kinds=_REAL),
        _op("clamp_min", "ClampMin", 2, _clamp_min, kinds=_NUMERIC),
        _op("clamp_max", "ClampMax", 2, _clamp_max, kinds=_NUMERIC),
    )
}

ISCLOSE = _op(
    "isclose",
    "IsClose",
    2,
    _isclose,
    rule="compare",
    fields=("rtol", "atol", "equal_nan"),
    kinds=_FLOAT,
)
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
_WHERE = ternary_operator(WHERE)


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


def square(input: Tensor, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """torch.square: ``input * input``; bool inputs give int64, as PyTorch's pow(input, 2)."""
    _tensor_arg("square", "input", input)
    if input.dtype is bool_:
        input = input.to(int64)  # noqa: A001
    return run(UNARY["square"], (input,), out=out)


def positive(input: Tensor) -> Tensor:  # noqa: A002
    """torch.positive: ``input`` itself (bool tensors refused, as PyTorch)."""
    _tensor_arg("positive", "input", input)
    if input.dtype is bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


def logit(input: Tensor, eps: float | None = None, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """torch.logit: ``log(x / (1 - x))``, ``x`` clamped to [eps, 1 - eps] first unless eps is
    None."""
    _tensor_arg("logit", "input", input)
    if eps is not None and not isinstance(eps, numbers.Real):
        raise TypeError(f"logit(): argument 'eps' must be a number, not {type(eps).__name__}")
    return run(LOGIT, (input,), (-1.0 if eps is None else float(eps),), out)


def clamp_min(input: Tensor, min: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """torch.clamp_min: ``max(input, min)``, NaN kept (a tensor or a number)."""
    _tensor_arg("clamp_min", "input", input)
    return run(BINARY["clamp_min"], (input, min), out=out)


def clamp_max(input: Tensor, max: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """torch.clamp_max: ``min(input, max)``, NaN kept (a tensor or a number)."""
    _tensor_arg("clamp_max", "input", input)
    return run(BINARY["clamp_max"], (input, max), out=out)


def heaviside(input: Tensor, values: Tensor, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """torch.heaviside: ``values`` where ``input`` is zero, else ``input > 0``."""
    _tensor_arg("heaviside", "input", input)
    _tensor_arg("heaviside", "values", values)
    if input.dtype.is_complex or values.dtype.is_complex:
        raise RuntimeError("heaviside is not yet implemented for complex tensors.")
    if input.dtype is not values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    return run(BINARY["heaviside"], (input, values), out=out)


def isclose(
    input: Tensor,  # noqa: A002
    other: Tensor,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
) -> Tensor:
    """torch.isclose: ``|input - other| <= atol + rtol * |other|`` elementwise (equal values,
    infinities of one sign and, with ``equal_nan``, NaN pairs are close); bool result.

    float32 and float64 are one kernel (the same roundings as PyTorch's composite). The other
    dtypes take PyTorch's composite op by op: float16 and bfloat16 round each step to their
    own type, integers subtract in their type (wrapping) and compare with a tolerance in the
    default float dtype, bool is the default float dtype."""
    _tensor_arg("isclose", "input", input)
    _tensor_arg("isclose", "other", other)
    if input.dtype is not other.dtype:
        raise RuntimeError(f"{_torch_name(input.dtype)} did not match {_torch_name(other.dtype)}")
    if input.dtype.is_complex:
        raise NotImplementedError("isclose: not implemented for complex tensors")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not isinstance(value, numbers.Real):
            raise TypeError(
                f"isclose(): argument '{name}' must be a number, not {type(value).__name__}"
            )
        if value < 0:
            raise RuntimeError(f"{name} must be greater than or equal to zero, but got {value}")
    if input.dtype in (float32, float64):
        return run(ISCLOSE, (input, other), (rtol, atol, 1.0 if equal_nan else 0.0))
    close = eq(input, other)
    if equal_nan and input.dtype.is_floating_point:
        logical_or(close, logical_and(isnan(input), isnan(other)), out=close)
    if rtol == 0 and atol == 0:
        return close
    if input.dtype is bool_:
        input, other = input.to(get_default_dtype()), other.to(get_default_dtype())  # noqa: A001
    allowed = abs(mul(other, rtol)).add_(atol)
    actual = abs(sub(input, other))
    return logical_or(close, logical_and(isfinite(actual), le(actual, allowed)), out=close)


def allclose(
    input: Tensor,  # noqa: A002
    other: Tensor,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
) -> bool:
    """torch.allclose: every element ``isclose`` (a Python bool: waits for the device)."""
    return bool(isclose(input, other, rtol, atol, equal_nan).all().item())


def equal(input: Tensor, other: Tensor) -> bool:  # noqa: A002
    """torch.equal: the same shape and equal values (NaN is never equal; dtypes promote as
    ``==`` does); a Python bool, waiting for the device."""
    _tensor_arg("equal", "input", input)
    _tensor_arg("equal", "other", other)
    if input.device != other.device:
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{input.device} and {other.device}!"
        )
    if input._shape != other._shape:
        return False
    return bool(eq(input, other).all().item())


def where(condition: Tensor, input: Any, other: Any) -> Tensor:  # noqa: A002
    """torch.where(condition, input, other): ``input`` where ``condition``, else ``other``."""
    if type(condition) is Tensor and condition.dtype is bool_:
        return _WHERE(condition, input, other)
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


@functools.cache
def unary_fast(name: str) -> Any:
    """``name``'s cached path for a Tensor and no ``out`` (``unary_operator``), one per op."""
    return unary_operator(UNARY[name])


def _unary_function(name: str) -> Any:
    fast = unary_fast(name)

    def function(input: Tensor, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
        if out is None and type(input) is Tensor:
            return fast(input)
        return unary(name, input, out=out)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"torch.{name}(input, *, out=None): elementwise."
    return function


def _binary_function(name: str, tensors: tuple[str, ...] = ()) -> Any:
    """torch.<name>(input, other, *, out=None); ``tensors``: the arguments PyTorch takes
    only as tensors ("input", "other")."""
    fast = binary_operator(BINARY[name])
    input_tensor, other_tensor = "input" in tensors, "other" in tensors

    def function(input: Any, other: Any, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
        if input_tensor:
            _tensor_arg(name, "input", input)
        if other_tensor:
            _tensor_arg(name, "other", other)
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
erfc = _unary_function("erfc")
erfinv = _unary_function("erfinv")
lgamma = _unary_function("lgamma")
digamma = _unary_function("digamma")
sinh = _unary_function("sinh")
cosh = _unary_function("cosh")
asin = _unary_function("asin")
acos = _unary_function("acos")
atan = _unary_function("atan")
asinh = _unary_function("asinh")
acosh = _unary_function("acosh")
atanh = _unary_function("atanh")
sinc = _unary_function("sinc")
deg2rad = _unary_function("deg2rad")
rad2deg = _unary_function("rad2deg")
frac = _unary_function("frac")
sgn = _unary_function("sgn")

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
hypot = _binary_function("hypot", ("input", "other"))
copysign = _binary_function("copysign", ("input",))
logaddexp = _binary_function("logaddexp", ("input", "other"))
logaddexp2 = _binary_function("logaddexp2", ("input", "other"))
xlogy = _binary_function("xlogy")

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
    "erfc": erfc,
    "erfinv": erfinv,
    "lgamma": lgamma,
    "digamma": digamma,
    "sinh": sinh,
    "cosh": cosh,
    "asin": asin,
    "acos": acos,
    "atan": atan,
    "asinh": asinh,
    "acosh": acosh,
    "atanh": atanh,
    "sinc": sinc,
    "deg2rad": deg2rad,
    "rad2deg": rad2deg,
    "square": square,
    "frac": frac,
    "sgn": sgn,
    "positive": positive,
    "logit": logit,
    "clamp_min": clamp_min,
    "clamp_max": clamp_max,
    "hypot": hypot,
    "copysign": copysign,
    "logaddexp": logaddexp,
    "logaddexp2": logaddexp2,
    "xlogy": xlogy,
    "heaviside": heaviside,
    "isclose": isclose,
    "allclose": allclose,
    "equal": equal,
}

# torch's other names for some of them
arcsin, arccos, arctan = asin, acos, atan
arcsinh, arccosh, arctanh = asinh, acosh, atanh
FUNCTIONS.update(
    arcsin=arcsin,
    arccos=arccos,
    arctan=arctan,
    arcsinh=arcsinh,
    arccosh=arccosh,
    arctanh=arctanh,
)

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
