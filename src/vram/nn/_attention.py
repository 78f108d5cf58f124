"""torch.nn.functional.scaled_dot_product_attention: PyTorch's checks and messages, one plan
per signature, vram's fused kernel (ops/_attention.py) where it applies, the composite
everywhere else.

- The composite is PyTorch's math path: float16 and bfloat16 are computed in float32
  (PyTorch's ``_scaled_dot_product_attention_math`` widens them too), ``(q * scale) @ k^T``,
  the mask added (a bool mask as 0 / -inf, ``is_causal`` as the bool mask of key <= query,
  top-left aligned), softmax over the keys with a row of no key giving zeros (PyTorch's
  ``_safe_softmax``), ``@ v``, rounded to the inputs' dtype. It works for every float dtype
  and device, and it is what the fused kernel is tested against.
- The fused kernel takes float16 and bfloat16 with one head dim of 64 or 128 for q, k and v,
  at most two batch dims and 16-byte aligned pointers and strides (``_attention.fusable``);
  a call whose pointers are not aligned takes the composite.

Grouped-query attention (``enable_gqa``): key and value may have fewer heads (dim -3) than
query, a divisor of its count; each of their heads serves that many query heads in a row
(PyTorch's ``repeat_interleave``). The fused kernel maps heads instead of repeating them.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .._dtypes import bfloat16, bool_, dtype, float16, float32, int64
from .._tensor import Tensor
from ..blas import matmul
from ..ops import _attention, _math
from ..ops._iterator import broadcast_shape, operand_strides
from ..ops._plans import PLANS
from ..ops._promotion import kind
from ..ops._reductions import all as _all
from ..ops._scan import cumsum
from ..ops._softmax import softmax

__all__ = ["scaled_dot_product_attention"]

_NAME = "scaled_dot_product_attention"
_CPP_NAMES = {  # dtypes as PyTorch's C++ messages print them
    "float32": "float",
    "float64": "double",
    "float16": "c10::Half",
    "bfloat16": "c10::BFloat16",
    "int64": "long int",
    "int32": "int",
    "int16": "short int",
    "int8": "signed char",
    "uint8": "unsigned char",
    "bool": "bool",
    "complex64": "c10::complex<float>",
    "complex128": "c10::complex<double>",
}
_ALIGN_MASK = 15  # the fused kernel's pointers are 16-byte aligned


class _Plan:
    """One signature of attention: the composite's facts and, where it applies, the fused
    kernel's plan."""

    __slots__ = ("fused", "causal", "repeat_k", "repeat_v", "default_scale", "itemsize")

    def __init__(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, gqa: bool
    ) -> None:
        lq, e = q._shape[-2:]
        s = k._shape[-2]
        ev = v._shape[-1]
        self.causal = causal
        self.itemsize = q.dtype.itemsize
        self.default_scale = 1 / math.sqrt(e) if e else math.inf
        heads = q._shape[-3] if q.ndim >= 3 else 1
        self.repeat_k = heads // k._shape[-3] if gqa and k._shape[-3] != heads else 1
        self.repeat_v = heads // v._shape[-3] if gqa and v._shape[-3] != heads else 1
        k_batch = _with_heads(k._shape[:-2], heads, self.repeat_k)
        v_batch = _with_heads(v._shape[:-2], heads, self.repeat_v)
        scores_batch = broadcast_shape([q._shape[:-2], k_batch])
        batch = broadcast_shape([scores_batch, v_batch])
        if mask is not None:  # added in place to the scores, as PyTorch's math path does
            scores = (*scores_batch, lq, s)
            wanted = broadcast_shape([scores, mask._shape])
            if wanted != scores:
                raise RuntimeError(
                    f"output with shape {list(scores)} doesn't match the broadcast shape "
                    f"{list(wanted)}"
                )
        self.fused = None
        rows_contiguous = q._stride[-1] == k._stride[-1] == v._stride[-1] == 1
        if len(batch) <= 2 and e == ev and rows_contiguous:
            problem = _problem(q, k, v, mask, batch, self.repeat_k, self.repeat_v)
            if _attention.fusable(problem, q.dtype):
                mask_dtype = None if mask is None else mask.dtype
                self.fused = _attention.AttentionPlan(
                    problem, q.dtype, mask_dtype, causal, q.device
                )

    def __call__(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float
    ) -> Tensor:
        fused = self.fused
        if fused is not None:
            item = self.itemsize
            pq = q._storage.ptr + q._offset * item
            pk = k._storage.ptr + k._offset * item
            pv = v._storage.ptr + v._offset * item
            if not (pq | pk | pv) & _ALIGN_MASK:
                pm = 0 if mask is None else mask._storage.ptr + mask._offset * mask.itemsize
                return fused(pq, pk, pv, pm, scale)
        return composite(q, k, v, mask, self.causal, scale, self.repeat_k, self.repeat_v)


def _with_heads(batch: tuple[int, ...], heads: int, repeat: int) -> tuple[int, ...]:
    """Key's or value's batch dims after their heads are repeated ``repeat`` times."""
    return batch if repeat == 1 else (*batch[:-1], heads)


def _problem(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    batch: tuple[int, ...],
    repeat_k: int,
    repeat_v: int,
) -> _attention.Problem:
    """The fused kernel's view of the operands: batch padded to (B, H), strides over it."""
    lq, s = q._shape[-2], k._shape[-2]
    padded = (1,) * (2 - len(batch)) + batch

    def strides(t: Tensor, repeat: int) -> tuple[int, int, int]:
        row = t._stride[-2] if t._shape[-2] > 1 else 0
        if repeat > 1:  # heads shared by ``repeat`` query heads: their own dim's stride
            b = _batch_strides(t._shape[:-3], t._stride[:-3], padded[:1])
            return (*b, t._stride[-3], row)  # type: ignore[return-value]
        return (*_batch_strides(t._shape[:-2], t._stride[:-2], padded), row)  # type: ignore[return-value]

    mask_strides = None
    if mask is not None:
        full = (*padded, lq, s)
        mask_strides = operand_strides(mask, full)
    return _attention.Problem(
        batch=batch,
        heads=padded,  # type: ignore[arg-type]
        rows=lq,
        keys=s,
        dim=q._shape[-1],
        q=strides(q, 1),
        k=strides(k, repeat_k),
        v=strides(v, repeat_v),
        mask=mask_strides,  # type: ignore[arg-type]
        group_k=repeat_k,
        group_v=repeat_v,
    )


def _batch_strides(
    shape: tuple[int, ...], stride: tuple[int, ...], out: tuple[int, ...]
) -> tuple[int, ...]:
    """Strides over the broadcast batch dims ``out`` (0 along a broadcast dim)."""
    lead = (0,) * (len(out) - len(shape))
    return lead + tuple(0 if n == 1 else st for n, st in zip(shape, stride, strict=True))


# ---- the composite ----------------------------------------------------------------------------


def composite(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    repeat_k: int = 1,
    repeat_v: int = 1,
) -> Tensor:
    """Attention from vram's ops (PyTorch's math path); the arguments are checked."""
    result = q.dtype
    if result in (float16, bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    if repeat_k > 1:
        k = _repeat_heads(k, repeat_k)
    if repeat_v > 1:
        v = _repeat_heads(v, repeat_v)
    scores = matmul(q * scale, k.transpose(-2, -1))
    if causal:
        lq, s = scores._shape[-2:]
        rows = cumsum(_ones((lq, 1), q.device), 0)
        cols = cumsum(_ones((1, s), q.device), 1)
        scores.add_(_math.where(rows >= cols, 0.0, -math.inf))
    elif mask is not None:
        scores.add_(_math.where(mask, 0.0, -math.inf) if mask.dtype is bool_ else mask)
    weights = softmax(scores, -1)
    if mask is not None:  # rows of no key: zeros, not NaN (PyTorch's _safe_softmax)
        dead = _all(scores == -math.inf, -1, True)
        weights = _math.where(dead, 0.0, weights)
    out = matmul(weights, v)
    return out if out.dtype is result else out.to(result)


def _ones(shape: tuple[int, ...], device: Any) -> Tensor:
    return Tensor._empty(shape, int64, device).fill_(1)


def _repeat_heads(t: Tensor, repeat: int) -> Tensor:
    """``t.repeat_interleave(repeat, -3)``: each head ``repeat`` times in a row."""
    *lead, heads, n, e = t._shape
    spread = t.reshape(*lead, heads, 1, n, e).expand(*lead, heads, repeat, n, e)
    return spread.reshape(*lead, heads * repeat, n, e)


# ---- the public function ----------------------------------------------------------------------


def _signature(t: Any) -> Any:
    return (t.dtype, t._shape, t._stride, t._storage.device)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value`` (torch.nn.functional's): query
    [..., L, E], key [..., S, E], value [..., S, Ev] -> [..., L, Ev]; batch dims broadcast.

    ``attn_mask``: bool (True takes part) or float (added to the scores; float32 or the
    query's dtype), broadcast to [..., L, S]. ``is_causal``: query i attends to keys
    0..i (top-left aligned); not with ``attn_mask``. ``scale``: 1 / sqrt(E) by default.
    ``enable_gqa``: key and value may have fewer heads than query (a divisor)."""
    if type(is_causal) is not bool or type(enable_gqa) is not bool:  # (NumPy's bools pass)
        _check_flag("is_causal", is_causal)
        _check_flag("enable_gqa", enable_gqa)
        is_causal, enable_gqa = bool(is_causal), bool(enable_gqa)
    try:  # each operand's (dtype, shape, strides, device), made in this frame
        signature: Any = (
            _NAME,
            is_causal,
            enable_gqa,
            query.dtype, query._shape, query._stride, query._storage.device,
            key.dtype, key._shape, key._stride, key._storage.device,
            value.dtype, value._shape, value._stride, value._storage.device,
            None if attn_mask is None else _signature(attn_mask),
        )  # fmt: skip
        plan = PLANS.get(signature)
    except AttributeError:  # not tensors: the checks below name the argument
        signature, plan = None, None
    if plan is None:
        plan = _build(query, key, value, attn_mask, is_causal, enable_gqa)
        if signature is not None:
            PLANS.add(signature, plan)
    if dropout_p != 0.0:
        _check_dropout(dropout_p)
    if scale is None:
        scale = plan.default_scale
    elif isinstance(scale, numbers.Real):
        scale = float(scale)
    else:
        raise TypeError(f"{_NAME}(): argument 'scale' must be float, not {type(scale).__name__}")
    return plan(query, key, value, attn_mask, scale)


def _check_flag(name: str, value: Any) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{_NAME}(): argument '{name}' must be bool, not {type(value).__name__}")


def _check_dropout(p: Any) -> None:
    if not isinstance(p, numbers.Real):
        raise TypeError(f"{_NAME}(): argument 'dropout_p' must be float, not {type(p).__name__}")
    if p > 1:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p:g}")
    if p > 0:
        raise NotImplementedError(
            f"{_NAME}: dropout_p > 0 needs random numbers (vram.manual_seed and a Philox "
            "generator), which this build of vram does not have yet; pass dropout_p=0.0"
        )


def _build(q: Any, k: Any, v: Any, mask: Any, causal: bool, gqa: bool) -> _Plan:
    """Every check of PyTorch's (its messages), then the plan."""
    for position, (name, t) in enumerate((("query", q), ("key", k), ("value", v)), 1):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"{_NAME}(): argument '{name}' (position {position}) must be Tensor, not "
                f"{type(t).__name__}"
            )
    if mask is not None and not isinstance(mask, Tensor):
        raise TypeError(
            f"{_NAME}(): argument 'attn_mask' must be Tensor, not {type(mask).__name__}"
        )
    if not q.dtype is k.dtype is v.dtype:
        raise RuntimeError(
            "Expected query, key, and value to have the same dtype, but got query.dtype: "
            f"{_cpp(q.dtype)} key.dtype: {_cpp(k.dtype)} and value.dtype: {_cpp(v.dtype)} "
            "instead."
        )
    if not q.device == k.device == v.device:
        raise RuntimeError(
            "Expected query, key, and value to have the same device type, but got "
            f"query.device: {q.device} key.device: {k.device} and value.device: {v.device} "
            "instead."
        )
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise RuntimeError(
            "Expected query, key, and value to all be  at least 2 dimensional, but got "
            f"query.dim: {q.ndim} key.dim: {k.ndim} and value.dim: {v.ndim} instead."
        )
    if mask is not None:
        if mask.dtype not in (bool_, float32, q.dtype):
            raise RuntimeError(
                "Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                f"attn_mask.dtype: {_cpp(mask.dtype)} and  query.dtype: {_cpp(q.dtype)} "
                "instead."
            )
        if mask.device != q.device:
            raise RuntimeError(
                f"{_NAME}: expected 'attn_mask' on {q.device}, the device of query, got "
                f"{mask.device}"
            )
        if causal:
            raise RuntimeError(
                "_scaled_dot_product_attention: Explicit attn_mask should not be set when "
                "is_causal=True"
            )
    if q.dtype.is_complex:
        raise NotImplementedError(
            f"\"softmax_lastdim_kernel_impl\" not implemented for '{_math._torch_name(q.dtype)}'"
        )
    if kind(q.dtype) != 2:
        raise RuntimeError(f"expected scalar type Float but found {_math._torch_name(q.dtype)}")
    if gqa:
        _check_groups(q, k, v)
    _check_sizes(q, k, v)
    return _Plan(q, k, v, mask, causal, gqa)


def _cpp(dt: dtype) -> str:
    return _CPP_NAMES.get(dt.name, dt.name)


def _check_groups(q: Tensor, k: Tensor, v: Tensor) -> None:
    for t in (q, k, v):
        if t.ndim < 3:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-t.ndim}, {t.ndim - 1}], "
                "but got -3)"
            )
    hq, hk, hv = q._shape[-3], k._shape[-3], v._shape[-3]
    if hq == hk == hv:
        return
    if not hk or not hv or hq % hk or hq % hv:
        raise RuntimeError(
            "Number of heads in key and value must divide the number of heads in query "
            f"(query {hq}, key {hk}, value {hv} heads)"
        )


def _check_sizes(q: Tensor, k: Tensor, v: Tensor) -> None:
    if k._shape[-1] != q._shape[-1]:
        raise RuntimeError(
            f"{_NAME}: 'key' has {k._shape[-1]} features in its last dimension, but 'query' has "
            f"{q._shape[-1]}; they must match"
        )
    if v._shape[-2] != k._shape[-2]:
        raise RuntimeError(
            f"{_NAME}: 'value' has {v._shape[-2]} positions (dimension -2), but 'key' has "
            f"{k._shape[-2]}; they must match"
        )
