"""The reductions: each C++ op of kernels/reduce.cu with the NumPy functions that compute the
same (the reference the simulated GPU and the cpu device run).

The NumPy side keeps the kernels' semantics: accumulators of the compute dtype (float32 for
float16 and bfloat16, int64 for integer sums), NaN propagation in max, min and the inf norms,
the first NaN or else the first extreme value for argmax and argmin, Welford's mean and sum
of squares for var and std (combined by Chan's formula), and logsumexp as (max, sum of
exp(x - max)). Every function works on rows: ``fold`` takes the D-typed elements
[rows, n], ``combine`` accumulators [rows, n], ``store`` accumulators [rows].
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .._dtypes import dtype
from . import _kernels
from ._pointwise import store as _put
from ._reduce import Reduction

__all__ = [
    "SUM",
    "PROD",
    "MEAN",
    "AMAX",
    "AMIN",
    "ARGMAX",
    "ARGMIN",
    "VAR",
    "STD",
    "NORMS",
    "ALL",
    "ANY",
    "LOGSUMEXP",
]

_NARROW = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _c(dt: dtype) -> str:
    return _kernels.c_type(dt)


def _real_c(dt: dtype) -> str:
    return {"complex64": "float", "complex128": "double"}.get(dt.name, _c(dt))


def _real_np(a: np.dtype) -> np.dtype:
    return np.empty(0, a).real.dtype


def _widen(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype in _NARROW else x


def _lowest(a: np.dtype) -> Any:
    if a.kind == "f":
        return a.type(-np.inf)
    if a.kind == "b":
        return False
    return np.iinfo(a).min


def _highest(a: np.dtype) -> Any:
    if a.kind == "f":
        return a.type(np.inf)
    if a.kind == "b":
        return True
    return np.iinfo(a).max


def _output(out: Any) -> np.ndarray | None:
    """The output array of a store, or None when the launch has no such output."""
    return out if isinstance(out, np.ndarray) else None


def _merge_columns(acc: np.ndarray, merge) -> np.ndarray:
    """Accumulators [rows, n] combined along each row, left to right, by ``merge``."""
    result = acc[:, 0]
    for s in range(1, acc.shape[1]):
        result = merge(result, acc[:, s])
    return result


def _plain_store(acc: np.ndarray, out: Any, out2: Any, fields: tuple) -> None:
    _put(out, acc)


def _same(a: np.dtype) -> np.dtype:
    return a


# ---- sum, prod, mean -------------------------------------------------------------------------


def _sum_fold(x: np.ndarray, first: int, a: np.dtype, fields: tuple) -> np.ndarray:
    return x.astype(a).sum(axis=1, dtype=a)


def _sum_combine(acc: np.ndarray, fields: tuple) -> np.ndarray:
    return acc.sum(axis=1, dtype=acc.dtype)


def _prod_fold(x: np.ndarray, first: int, a: np.dtype, fields: tuple) -> np.ndarray:
    return x.astype(a).prod(axis=1, dtype=a)


def _prod_combine(acc: np.ndarray, fields: tuple) -> np.ndarray:
    return acc.prod(axis=1, dtype=acc.dtype)


def _scale(acc: np.ndarray, factor: Any) -> np.ndarray:
    """``acc`` times a real factor, part by part for complex values (no 0 * inf from a
    complex multiplication)."""
    if acc.dtype.kind == "c":
        return (acc.real * factor) + 1j * (acc.imag * factor)
    return acc * factor


def _mean_store(acc: np.ndarray, out: Any, out2: Any, fields: tuple) -> None:
    _put(out, _scale(acc, fields[0]))


SUM = Reduction(
    "sum", lambda d, a: f"vram::SumOp<{_c(a)}>", _same, _sum_fold, _sum_combine, _plain_store
)
PROD = Reduction(
    "prod", lambda d, a: f"vram::ProdOp<{_c(a)}>", _same, _prod_fold, _prod_combine, _plain_store
)
MEAN = Reduction(
    "mean",
    lambda d, a: f"vram::MeanOp<{_c(a)}, {_real_c(a)}>",
    _same,
    _sum_fold,
    _sum_combine,
    _mean_store,
    fields=("factor",),
)


# ---- amax, amin --------------------------------------------------------------------------------


def _extreme(maximum: bool) -> Reduction:
    reduce = np.max if maximum else np.min
    bound = _lowest if maximum else _highest

    def fold(x: np.ndarray, first: int, a: np.dtype, fields: tuple) -> np.ndarray:
        return reduce(x.astype(a), axis=1, initial=bound(a))

    def combine(acc: np.ndarray, fields: tuple) -> np.ndarray:
        return reduce(acc, axis=1)

    name = "amax" if maximum else "amin"
    flag = "true" if maximum else "false"
    return Reduction(
        name, lambda d, a: f"vram::ExtremeOp<{_c(a)}, {flag}>", _same, fold, combine, _plain_store
    )


AMAX = _extreme(True)
AMIN = _extreme(False)


# ---- argmax, argmin (and max/min with a dim) ------------------------------------------------


def _arg_acc(a: np.dtype) -> np.dtype:
    return np.dtype([("value", a), ("index", np.int64)], align=True)


def _arg(maximum: bool) -> Reduction:
    bound = _lowest if maximum else _highest

    def fold(x: np.ndarray, first: int, a: np.dtype, fields: tuple) -> np.ndarray:
        rows, n = x.shape
        acc = np.empty(rows, _arg_acc(a))
        if n == 0:
            acc["value"], acc["index"] = bound(a), -1
            return acc
        values = x.astype(a)
        # NumPy's argmax and argmin give the first NaN, else the first extreme value
        at = np.argmax(values, axis=1) if maximum else np.argmin(values, axis=1)
        acc["value"] = values[np.arange(rows), at]
        acc["index"] = at + first
        return acc

    def wins(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        av, ai, bv, bi = a["value"], a["index"], b["value"], b["index"]
        a_nan = np.isnan(av) if av.dtype.kind == "f" else np.zeros(av.shape, bool)
        b_nan = np.isnan(bv) if bv.dtype.kind == "f" else np.zeros(bv.shape, bool)
        better = av > bv if maximum else av < bv
        ordered = np.where(av == bv, ai < bi, better)
        ordered = np.where(a_nan, ~b_nan | (ai < bi), np.where(b_nan, False, ordered))
        return np.where(bi < 0, True, np.where(ai < 0, False, ordered))

    def merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.where(wins(a, b), a, b)

    def combine(acc: np.ndarray, fields: tuple) -> np.ndarray:
        return _merge_columns(acc, merge)

    def store(acc: np.ndarray, out: Any, out2: Any, fields: tuple) -> None:
        if _output(out) is not None:
            _put(out, acc["value"])
        out2[...] = acc["index"]

    flag = "true" if maximum else "false"
    return Reduction(
        "argmax" if maximum else "argmin",
        lambda d, a: f"vram::ArgOp<{_c(a)}, {flag}>",
        _arg_acc,
        fold,
        combine,
        store,
        indices=True,
    )


ARGMAX = _arg(True)
ARGMIN = _arg(False)


# ---- var, std ------------------------------------------------------------------------------


def _var_acc(v: np.dtype) -> np.dtype:
    return np.dtype([("mean", v), ("m2", _real_np(v)), ("n", np.int64)], align=True)


def _abs2(v: np.ndarray) -> np.ndarray:
    return v.real * v.real + v.imag * v.imag if v.dtype.kind == "c" else v * v


def _var_fold(x: np.ndarray, first: int, a: np.dtype, fields: tuple) -> np.ndarray:
    rows, n = x.shape
    acc = np.zeros(rows, _var_acc(a))
    if n == 0:
        return acc
    values = x.astype(a)
    mean = values.mean(axis=1, dtype=a)
    acc["mean"] = mean
    acc["m2"] = _abs2(values - mean[:, None]).sum(axis=1, dtype=_real_np(a))
    acc["n"] = n
    return acc


def _var_merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Chan's formula, as VarOp::combine."""
    real = _real_np(a.dtype["mean"])
    n = a["n"] + b["n"]
    wb = b["n"].astype(real) / np.maximum(n, 1).astype(real)
    delta = b["mean"] - a["mean"]
    merged = np.empty_like(a)
    merged["mean"] = a["mean"] + _scale(delta, wb).astype(a.dtype["mean"])
    merged["m2"] = a["m2"] + b["m2"] + _abs2(delta) * a["n"].astype(real) * wb
    merged["n"] = n
    return np.where(a["n"] == 0, b, np.where(b["n"] == 0, a, merged))


def _var_combine(acc: np.ndarray, fields: tuple) -> np.ndarray:
    return _merge_columns(acc, _var_merge)


def _variance(root: bool) -> Reduction:
    def store(acc: np.ndarray, out: Any, out2: Any, fields: tuple) -> None:
        (correction,) = fields
        real = correction.dtype.type
        nf = acc["n"].astype(correction.dtype)
        divisor = np.where(nf > correction, nf - correction, real(0))
        var = acc["m2"] / divisor
        _put(out, np.sqrt(var) if root else var)
        if _output(out2) is not None:
            _put(out2, acc["mean"])

    flag = "true" if root else "false"
    return Reduction(
        "std" if root else "var",
        lambda d, a: f"vram::VarOp<{_c(a)}, {_real_c(a)}, {flag}>",
        _var_acc,
        _var_fold,
        _var_combine,
        store,
        fields=("correction",),
    )


VAR = _variance(False)
STD = _variance(True)


# ---- vector norms ---------------------------------------------------------------------------


def _norm(kind: int) -> Reduction:
    """KIND as NormOp: 0 nonzeros, 1 sum |x|, 2 root of sum |x|^2, 3 max |x|, 4 min |x|,
    5 p-th root of sum |x|^p."""

    def fold(x: np.ndarray, first: int, a: np.dtype, fields: tuple) -> np.ndarray:
        if kind == 0:
            return (x != 0).sum(axis=1).astype(a)
        values = _widen(x)
        if kind == 2:
            return _abs2(values).astype(a).sum(axis=1, dtype=a)
        size = np.abs(values).astype(a)
        if kind == 1:
            return size.sum(axis=1, dtype=a)
        if kind == 3:
            return np.max(size, axis=1, initial=a.type(0))
        if kind == 4:
            return np.min(size, axis=1, initial=a.type(np.inf))
        return (size ** fields[0]).sum(axis=1, dtype=a)

    def combine(acc: np.ndarray, fields: tuple) -> np.ndarray:
        if kind == 3:
            return np.max(acc, axis=1)
        if kind == 4:
            return np.min(acc, axis=1)
        return acc.sum(axis=1, dtype=acc.dtype)

    def store(acc: np.ndarray, out: Any, out2: Any, fields: tuple) -> None:
        if kind == 2:
            acc = np.sqrt(acc)
        elif kind == 5:
            acc = acc ** (acc.dtype.type(1) / fields[0])
        _put(out, acc)

    return Reduction(
        f"norm{kind}",
        lambda d, a: f"vram::NormOp<{_c(a)}, {kind}>",
        _same,
        fold,
        combine,
        store,
        fields=("p",),
    )


NORMS = {kind: _norm(kind) for kind in range(6)}


# ---- all, any ----------------------------------------------------------------------------------


def _logical(every: bool) -> Reduction:
    reduce = np.all if every else np.any

    def fold(x: np.ndarray, first: int, a: np.dtype, fields: tuple) -> np.ndarray:
        return reduce(x != 0, axis=1)

    def combine(acc: np.ndarray, fields: tuple) -> np.ndarray:
        return reduce(acc, axis=1)

    flag = "true" if every else "false"
    return Reduction(
        "all" if every else "any",
        lambda d, a: f"vram::LogicalOp<{flag}>",
        lambda a: np.dtype(np.bool_),
        fold,
        combine,
        _plain_store,
    )


ALL = _logical(True)
ANY = _logical(False)


# ---- logsumexp ------------------------------------------------------------------------------


def _lse_acc(a: np.dtype) -> np.dtype:
    return np.dtype([("max", a), ("sum", a)], align=True)


def _lse_fold(x: np.ndarray, first: int, a: np.dtype, fields: tuple) -> np.ndarray:
    rows, n = x.shape
    acc = np.empty(rows, _lse_acc(a))
    if n == 0:
        acc["max"], acc["sum"] = -np.inf, 0
        return acc
    values = x.astype(a)
    top = values.max(axis=1)
    infinite = np.isinf(top)
    shift = np.where(infinite, a.type(0), top)
    total = np.exp(values - shift[:, None]).sum(axis=1, dtype=a)
    acc["max"], acc["sum"] = top, np.where(infinite, a.type(1), total)
    return acc


def _lse_merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """As LogSumExpOp::combine."""
    top = np.maximum(a["max"], b["max"])
    total = a["sum"] * np.exp(a["max"] - top) + b["sum"] * np.exp(b["max"] - top)
    merged = np.empty_like(a)
    merged["max"] = top
    merged["sum"] = np.where(np.isinf(top), top.dtype.type(1), total)
    return np.where(a["sum"] == 0, b, np.where(b["sum"] == 0, a, merged))


def _lse_combine(acc: np.ndarray, fields: tuple) -> np.ndarray:
    return _merge_columns(acc, _lse_merge)


def _lse_store(acc: np.ndarray, out: Any, out2: Any, fields: tuple) -> None:
    _put(out, np.log(acc["sum"]) + acc["max"])


LOGSUMEXP = Reduction(
    "logsumexp",
    lambda d, a: f"vram::LogSumExpOp<{_c(a)}>",
    _lse_acc,
    _lse_fold,
    _lse_combine,
    _lse_store,
)
