"""The reductions with torch's names, arguments, dtypes, results and errors: sum, prod, mean,
amax, amin, aminmax, max and min (a value, values and indices with a dim, or the elementwise
maximum of two tensors), argmax, argmin, var, std, var_mean, std_mean, norm and
linalg.vector_norm, all, any, logsumexp.

Each function looks its plan up under the call's signature (op, dtype, shape, strides,
device and the arguments as given) before anything else: a repeated call checks nothing
again. A new signature is checked and planned (ops/_reduce.py) by the op's ``_build_*``.

Dtypes as PyTorch's: sums and products of bool and integer tensors are int64; ``dtype=``
converts the elements as they are loaded; float16 and bfloat16 accumulate in float32;
var, std and norms of complex tensors are real; all and any give bool (uint8 for uint8).
"""

from __future__ import annotations

import builtins
import math
import numbers
import warnings
from typing import Any

import numpy as np

from .._dtypes import as_dtype, bool_, complex64, complex128, dtype, float32, float64, int64, uint8
from .._tensor import Tensor, dispatch
from . import _reduce_ops as ops
from . import return_types
from ._math import _torch_name, maximum, minimum
from ._pointwise import signature_id
from ._promotion import get_default_dtype, kind, opmath, promote_types
from ._reduce import ReducePlan, Reduction, plan_for

__all__ = [
    "FUNCTIONS",
    "one_dim",
    "all",
    "amax",
    "amin",
    "aminmax",
    "any",
    "argmax",
    "argmin",
    "logsumexp",
    "max",
    "mean",
    "min",
    "norm",
    "prod",
    "std",
    "std_mean",
    "sum",
    "var",
    "var_mean",
    "vector_norm",
]


# ---- arguments -------------------------------------------------------------------------------


def _tensor(name: str, value: Any) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(value).__name__}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _dims(name: str, dim: Any, ndim: int, many: bool = True) -> tuple[int, ...]:
    """The reduced dims, normalized, distinct and sorted: None, () and [] are every dim."""
    if dim is None:
        return tuple(range(ndim))
    if _is_int(dim):
        found: tuple = (dim,)
    elif many and isinstance(dim, (tuple, list)) and builtins.all(_is_int(d) for d in dim):
        if not dim:
            return tuple(range(ndim))
        found = tuple(dim)
    else:
        wanted = "int or tuple of ints" if many else "int"
        raise TypeError(f"{name}(): argument 'dim' must be {wanted}, not {type(dim).__name__}")
    wrap = builtins.max(ndim, 1)
    seen: list[int] = []
    for d in found:
        if not -wrap <= d < wrap:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-wrap}, {wrap - 1}], "
                f"but got {d})"
            )
        d = int(d) % wrap
        if d in seen:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        seen.append(d)
    return tuple(sorted(seen)) if ndim else ()


def one_dim(name: str, dim: Any, ndim: int) -> int:
    """An op's one ``dim`` (softmax, cumsum), normalized; 0 for a zero-dimensional tensor."""
    if not _is_int(dim):
        raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")
    found = _dims(name, dim, ndim, many=False)
    return found[0] if found else 0


def _keepdim(name: str, keepdim: Any) -> bool:
    if not isinstance(keepdim, (bool, np.bool_)):
        raise TypeError(f"{name}(): argument 'keepdim' must be bool, not {type(keepdim).__name__}")
    return bool(keepdim)


def _dtype_arg(name: str, value: Any) -> dtype | None:
    return None if value is None else as_dtype(value, f"{name}(): argument 'dtype'")


def _real(dt: dtype) -> dtype:
    return {complex64: float32, complex128: float64}.get(dt, dt)


def _key(op: Any, x: Any, *arguments: Any) -> tuple:
    if type(x) is not Tensor and not isinstance(x, Tensor):
        return (op, None, id(x))  # not a tensor: the builder raises
    return (op, x._sig or signature_id(x), *arguments)


def _no_complex(x: Tensor, name: str) -> None:
    if x.dtype.is_complex:
        raise NotImplementedError(f"\"{name}\" not implemented for '{_torch_name(x.dtype)}'")


def _need_nonempty(name: str, x: Tensor, dims: tuple[int, ...], empty: Exception | None) -> None:
    """PyTorch's checks for reductions without an identity (max, min, argmax, ...):
    ``empty`` is raised for an empty tensor reduced over every dim."""
    if x.numel() == 0 and empty is not None:
        raise empty
    for d in dims:
        if x._shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _every(dim: Any) -> bool:
    return dim is None or (isinstance(dim, (tuple, list)) and not dim)


# ---- sum, prod, mean -------------------------------------------------------------------------


def _build_sum(op: Reduction, x: Any, dim: Any, keepdim: Any, dt: Any) -> ReducePlan:
    name = op.name
    x = _tensor(name, x)
    d = _dtype_arg(name, dt) or (int64 if kind(x.dtype) <= 1 else x.dtype)
    dims = _dims(name, dim, x.ndim, many=name != "prod")
    return ReducePlan(op, x, dims, _keepdim(name, keepdim), d, opmath(d), d, None)


def sum(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:  # noqa: A001, A002
    """torch.sum: over every dim, one or several; bool and integers sum in int64."""
    plan = plan_for(
        _key(ops.SUM, input, dim, keepdim, dtype), _build_sum, ops.SUM, input, dim, keepdim, dtype
    )
    return plan(input)[0]


def prod(
    input: Tensor, dim: int | None = None, keepdim: bool = False, *, dtype: Any = None
) -> Tensor:  # noqa: A002
    """torch.prod: of every element, or along one dim; bool and integers multiply in int64."""
    plan = plan_for(
        _key(ops.PROD, input, dim, keepdim, dtype), _build_sum, ops.PROD, input, dim, keepdim, dtype
    )
    return plan(input)[0]


def _build_mean(x: Any, dim: Any, keepdim: Any, dt: Any) -> ReducePlan:
    x = _tensor("mean", x)
    given = _dtype_arg("mean", dt)
    d = given or x.dtype
    if kind(d) < 2:
        which = "Optional dtype" if given is not None else "Input dtype"
        raise RuntimeError(
            "mean(): could not infer output dtype. "
            f"{which} must be either a floating point or complex dtype. Got: {_torch_name(d)}"
        )
    dims = _dims("mean", dim, x.ndim)
    real = _real(opmath(d)).np.type
    outputs = math.prod(n for i, n in enumerate(x._shape) if i not in dims)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = real(outputs) / real(x.numel())  # PyTorch's MeanOps factor, in its type
    return ReducePlan(
        ops.MEAN, x, dims, _keepdim("mean", keepdim), d, opmath(d), d, None, (factor,)
    )


def mean(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """torch.mean: floating point and complex tensors (or ``dtype=`` one)."""
    plan = plan_for(
        _key(ops.MEAN, input, dim, keepdim, dtype), _build_mean, input, dim, keepdim, dtype
    )
    return plan(input)[0]


# ---- amax, amin, max, min, argmax, argmin ---------------------------------------------------


def _build_extreme(op: Reduction, x: Any, dim: Any, keepdim: Any, name: str) -> ReducePlan:
    x = _tensor(name, x)
    _no_complex(x, name)
    dims = _dims(name, dim, x.ndim)
    empty = RuntimeError(
        f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
        "Specify the reduction dim with the 'dim' argument."
    )
    _need_nonempty(name, x, dims, empty if _every(dim) else None)
    d = x.dtype
    return ReducePlan(op, x, dims, _keepdim(name, keepdim), d, opmath(d), d, None)


def amax(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:  # noqa: A002
    """torch.amax: the largest element (NaN if any is NaN) over the dims (every dim: ())."""
    key = _key(ops.AMAX, input, dim, keepdim)
    return plan_for(key, _build_extreme, ops.AMAX, input, dim, keepdim, "amax")(input)[0]


def amin(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:  # noqa: A002
    """torch.amin: the smallest element (NaN if any is NaN) over the dims (every dim: ())."""
    key = _key(ops.AMIN, input, dim, keepdim)
    return plan_for(key, _build_extreme, ops.AMIN, input, dim, keepdim, "amin")(input)[0]


def aminmax(input: Tensor, *, dim: int | None = None, keepdim: bool = False) -> Any:  # noqa: A002
    """torch.aminmax: (min, max) over every dim or one."""
    if dim is not None and not _is_int(dim):
        raise TypeError(f"aminmax(): argument 'dim' must be int, not {type(dim).__name__}")
    low = amin(input, () if dim is None else dim, keepdim)
    high = amax(input, () if dim is None else dim, keepdim)
    return return_types.aminmax(low, high)


def _build_arg(op: Reduction, x: Any, dim: Any, keepdim: Any, values: bool) -> ReducePlan:
    name = op.name if not values else ("max" if op is ops.ARGMAX else "min")
    x = _tensor(name, x)
    if x.dtype.is_complex:
        raise RuntimeError(f"{name}(): does not support complex input")
    if x.dtype is bool_ and not values:
        raise RuntimeError(f"{name}(): does not support bool input")
    if dim is not None and not _is_int(dim):
        raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")
    dims = _dims(name, dim, x.ndim)
    empty = IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
    _need_nonempty(name, x, dims, empty if dim is None else None)
    d = x.dtype
    out = d if values else None
    return ReducePlan(op, x, dims, _keepdim(name, keepdim), d, opmath(d), out, int64)


def argmax(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    """torch.argmax: the index of the first maximal element (of the first NaN, if any), in
    the flattened tensor or along ``dim``."""
    key = _key(ops.ARGMAX, input, dim, keepdim)
    return plan_for(key, _build_arg, ops.ARGMAX, input, dim, keepdim, False)(input)[1]


def argmin(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    """torch.argmin: the index of the first minimal element (of the first NaN, if any)."""
    key = _key(ops.ARGMIN, input, dim, keepdim)
    return plan_for(key, _build_arg, ops.ARGMIN, input, dim, keepdim, False)(input)[1]


def _extreme_of(
    name: str, values_op: Reduction, arg_op: Reduction, input: Any, dim: Any, keepdim: Any
) -> Any:
    if isinstance(dim, Tensor):  # torch.max(a, b): the elementwise maximum
        return (maximum if name == "max" else minimum)(input, dim)
    if dim is None:
        if keepdim:
            raise TypeError(f"{name}(): 'keepdim' needs 'dim' (use amax/amin for every dim)")
        key = _key(values_op, input, None, False)
        return plan_for(key, _build_extreme, values_op, input, None, False, name)(input)[0]
    key = (name, *_key(arg_op, input, dim, keepdim))
    values, indices = plan_for(key, _build_arg, arg_op, input, dim, keepdim, True)(input)
    return getattr(return_types, name)(values, indices)


def max(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001, A002
    """torch.max: ``max(t)`` the largest element; ``max(t, dim, keepdim)`` (values, indices)
    along ``dim`` (the first maximal element, or the first NaN); ``max(a, b)``: maximum."""
    return _extreme_of("max", ops.AMAX, ops.ARGMAX, input, dim, keepdim)


def min(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001, A002
    """torch.min: ``min(t)``, ``min(t, dim, keepdim)`` (values, indices), ``min(a, b)``."""
    return _extreme_of("min", ops.AMIN, ops.ARGMIN, input, dim, keepdim)


# ---- var, std -------------------------------------------------------------------------------


class _Moments:
    """A var/std plan and whether PyTorch warns of its degrees of freedom."""

    __slots__ = ("plan", "warning")

    def __init__(self, plan: ReducePlan, warning: str) -> None:
        self.plan = plan
        self.warning = warning


def _correction(name: str, unbiased: Any, correction: Any) -> float:
    if unbiased is not None and correction is not None:
        raise TypeError(f"{name}(): give 'unbiased' or 'correction', not both")
    if unbiased is not None:
        if not isinstance(unbiased, (bool, np.bool_)):
            raise TypeError(
                f"{name}(): argument 'unbiased' must be bool, not {type(unbiased).__name__}"
            )
        return 1.0 if unbiased else 0.0
    if correction is None:
        return 1.0
    if isinstance(correction, bool) or not isinstance(correction, numbers.Real):
        raise TypeError(
            f"{name}(): argument 'correction' must be a number, not {type(correction).__name__}"
        )
    return float(correction)


def _build_moments(
    op: Reduction, x: Any, dim: Any, unbiased: Any, keepdim: Any, correction: Any, mean: bool
) -> _Moments:
    name = op.name + ("_mean" if mean else "")
    x = _tensor(name, x)
    if kind(x.dtype) < 2:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    corr = _correction(name, unbiased, correction)
    dims = _dims(name, dim, x.ndim)
    outputs = math.prod(n for i, n in enumerate(x._shape) if i not in dims)
    factor = x.numel() / outputs if outputs else 0
    warning = ""
    if factor - corr <= 0:
        warning = (
            f"{op.name}(): degrees of freedom is <= 0. Correction should be strictly less than "
            "the reduction factor (input numel divided by output numel)."
        )
    compute = opmath(x.dtype)
    plan = ReducePlan(
        op,
        x,
        dims,
        _keepdim(name, keepdim),
        x.dtype,
        compute,
        _real(x.dtype),
        x.dtype if mean else None,
        (corr,),
    )
    return _Moments(plan, warning)


def _moments(
    op: Reduction, input: Any, dim: Any, unbiased: Any, keepdim: Any, correction: Any, mean: bool
) -> tuple[Tensor, Tensor | None]:
    if isinstance(dim, (bool, np.bool_)):  # torch.var(t, True): the old (input, unbiased) form
        dim, unbiased = None, dim
    key = (mean, *_key(op, input, dim, unbiased, keepdim, correction))
    found = plan_for(key, _build_moments, op, input, dim, unbiased, keepdim, correction, mean)
    if found.warning:
        warnings.warn(found.warning, UserWarning, stacklevel=3)
    return found.plan(input)


def _moment_function(name: str, op: Reduction, mean: bool, doc: str) -> Any:
    def function(
        input: Tensor,  # noqa: A002
        dim: Any = None,
        unbiased: bool | None = None,
        keepdim: bool = False,
        *,
        correction: float | None = None,
    ) -> Any:
        found = _moments(op, input, dim, unbiased, keepdim, correction, mean)
        return found if mean else found[0]

    function.__name__ = function.__qualname__ = name
    function.__doc__ = doc
    return function


var = _moment_function(
    "var",
    ops.VAR,
    False,
    "torch.var: ``sum |x - mean|^2 / (N - correction)`` (correction 1 by default; "
    "``unbiased=False`` is correction 0), from Welford's one pass. Real for complex tensors.",
)
std = _moment_function("std", ops.STD, False, "torch.std: the square root of ``var``.")
var_mean = _moment_function("var_mean", ops.VAR, True, "torch.var_mean: (var, mean), one pass.")
std_mean = _moment_function("std_mean", ops.STD, True, "torch.std_mean: (std, mean), one pass.")


# ---- norms ----------------------------------------------------------------------------------


def _norm_kind(ord: float) -> int:  # noqa: A002
    if ord == 0:
        return 0
    if ord == 1:
        return 1
    if ord == 2:
        return 2
    if ord == math.inf:
        return 3
    if ord == -math.inf:
        return 4
    return 5


def _ord_text(ord: float) -> str:  # noqa: A002
    return str(int(ord)) if float(ord).is_integer() else str(ord)


def _build_norm(x: Any, ord: Any, dim: Any, keepdim: Any, dt: Any) -> ReducePlan:  # noqa: A002
    name = "linalg.vector_norm"
    x = _tensor("linalg_vector_norm", x)
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise TypeError(
            f"linalg_vector_norm(): argument 'ord' must be Number, not {type(ord).__name__}"
        )
    if kind(x.dtype) < 2:
        raise RuntimeError(
            f"{name}: Expected a floating point or complex tensor as input. "
            f"Got {_torch_name(x.dtype)}"
        )
    d = x.dtype
    given = _dtype_arg(name, dt)
    if given is not None:
        if x.dtype.is_complex and not given.is_complex:
            raise RuntimeError(
                f"{name}: dtype should be complex for complex inputs, but got {_torch_name(given)}"
            )
        if not x.dtype.is_complex and given.is_complex:
            raise RuntimeError(
                f"{name}: dtype should be real for real inputs, but got {_torch_name(given)}"
            )
        if kind(given) < 2 or promote_types(x.dtype, given) is not given:
            raise RuntimeError(
                f"{name}: the dtype of the input ({_torch_name(x.dtype)}) should be "
                f"convertible without narrowing to the specified dtype ({_torch_name(given)})"
            )
        d = given
    dims = _dims("linalg_vector_norm", dim, x.ndim)
    ord = float(ord)  # noqa: A001
    if x.numel() == 0 and (ord < 0 or ord == math.inf):
        if _every(dim):
            raise RuntimeError(
                f"{name} cannot compute the {_ord_text(ord)} norm on an empty tensor because "
                "the operation does not have an identity"
            )
        for i in dims:
            if x._shape[i] == 0:
                raise RuntimeError(
                    f"{name} cannot compute the {_ord_text(ord)} norm on the dimension {i} "
                    "because this dimension is empty and the operation does not have an identity"
                )
    real = _real(opmath(d))
    op = ops.NORMS[_norm_kind(ord)]
    return ReducePlan(op, x, dims, _keepdim(name, keepdim), d, real, _real(d), None, (ord,))


def vector_norm(
    x: Tensor,
    ord: float = 2,  # noqa: A002
    dim: Any = None,
    keepdim: bool = False,
    *,
    dtype: Any = None,
) -> Tensor:
    """torch.linalg.vector_norm: ``(sum |x|^ord)^(1/ord)`` over every dim or the given ones
    (ord 0: nonzeros; inf, -inf: max, min |x|). Real for complex tensors."""
    key = _key("vector_norm", x, ord, dim, keepdim, dtype)
    return plan_for(key, _build_norm, x, ord, dim, keepdim, dtype)(x)[0]


def norm(
    input: Tensor,  # noqa: A002
    p: Any = "fro",
    dim: Any = None,
    keepdim: bool = False,
    dtype: Any = None,
) -> Tensor:
    """torch.norm: a vector norm (``p`` a number, or "fro": 2) over every dim or ``dim``."""
    if isinstance(p, str):
        if p == "nuc":
            raise NotImplementedError(
                "norm(): p='nuc' (the nuclear norm) needs singular values, which vram does not "
                "compute; use a number or 'fro'"
            )
        if p != "fro":
            raise RuntimeError(f"linalg.matrix_norm: Order {p} not supported.")
        p = 2
    return vector_norm(input, p, dim, keepdim, dtype=dtype)


# ---- all, any, logsumexp -----------------------------------------------------------------


def _build_logical(op: Reduction, x: Any, dim: Any, keepdim: Any) -> ReducePlan:
    x = _tensor(op.name, x)
    dims = _dims(op.name, dim, x.ndim)
    out = uint8 if x.dtype is uint8 else bool_
    return ReducePlan(op, x, dims, _keepdim(op.name, keepdim), x.dtype, bool_, out, None)


def all(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:  # noqa: A001, A002
    """torch.all: whether every element is nonzero (bool; uint8 for uint8 tensors)."""
    key = _key(ops.ALL, input, dim, keepdim)
    return plan_for(key, _build_logical, ops.ALL, input, dim, keepdim)(input)[0]


def any(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:  # noqa: A001, A002
    """torch.any: whether some element is nonzero (bool; uint8 for uint8 tensors)."""
    key = _key(ops.ANY, input, dim, keepdim)
    return plan_for(key, _build_logical, ops.ANY, input, dim, keepdim)(input)[0]


def _build_logsumexp(x: Any, dim: Any, keepdim: Any) -> ReducePlan:
    x = _tensor("logsumexp", x)
    _no_complex(x, "logsumexp")
    dims = _dims("logsumexp", dim, x.ndim)
    d = x.dtype if kind(x.dtype) == 2 else get_default_dtype()
    return ReducePlan(ops.LOGSUMEXP, x, dims, _keepdim("logsumexp", keepdim), d, opmath(d), d, None)


def logsumexp(input: Tensor, dim: Any, keepdim: bool = False) -> Tensor:  # noqa: A002
    """torch.logsumexp: ``log(sum(exp(x)))`` over ``dim``, in one pass without overflow
    (integers give the default float dtype)."""
    key = _key(ops.LOGSUMEXP, input, dim, keepdim, get_default_dtype())
    return plan_for(key, _build_logsumexp, input, dim, keepdim)(input)[0]


FUNCTIONS: dict[str, Any] = {
    "sum": sum,
    "prod": prod,
    "mean": mean,
    "amax": amax,
    "amin": amin,
    "aminmax": aminmax,
    "max": max,
    "min": min,
    "argmax": argmax,
    "argmin": argmin,
    "var": var,
    "std": std,
    "var_mean": var_mean,
    "std_mean": std_mean,
    "norm": norm,
    "all": all,
    "any": any,
    "logsumexp": logsumexp,
}

# Tensor methods reach these through the tensor layer's dispatch table.
dispatch.update(FUNCTIONS)
