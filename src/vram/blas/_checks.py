"""PyTorch's contract for matrix products (mm_out's, executorch#19360), checked before any
work is queued. Every error names the function and the argument:

- a missing (None) or non-tensor argument: TypeError;
- a tensor of the wrong rank, inner dimensions that differ, batch sizes that differ, a
  bias that does not broadcast, an ``out`` of the wrong shape: RuntimeError;
- tensors of more than one dtype, a dtype the GEMM does not support, tensors on more than
  one device: RuntimeError (as PyTorch);
- an ``out`` whose elements overlap each other (an expanded tensor) or overlap an input:
  RuntimeError. Where the overlap cannot be decided cheaply (two strided views whose
  ranges interleave), the product is computed into a new tensor and copied (``needs_temp``).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

from .._tensor import Tensor, broadcast_shapes
from ._ops import ACTIVATIONS, GEMM_DTYPES

__all__ = [
    "tensor_arg",
    "rank",
    "same_dtype_and_device",
    "inner_dims",
    "bias_broadcasts",
    "check_out",
    "scalar",
    "activation_code",
    "needs_temp",
]

_NAMES = frozenset(d.name for d in GEMM_DTYPES)
_SUPPORTED = ", ".join(d.name for d in GEMM_DTYPES)


def tensor_arg(op: str, name: str, value: object) -> Tensor:
    """``value`` if it is a tensor; TypeError naming the argument otherwise."""
    if isinstance(value, Tensor):
        return value
    if value is None:
        raise TypeError(f"{op}: argument '{name}' is None; expected a vram.Tensor")
    raise TypeError(f"{op}: argument '{name}' must be a vram.Tensor, got {type(value).__name__}")


def rank(op: str, name: str, t: Tensor, ndim: int) -> None:
    if t.ndim != ndim:
        what = "a matrix (2-D)" if ndim == 2 else f"a {ndim}-D tensor"
        raise RuntimeError(
            f"{op}: '{name}' must be {what}, got a {t.ndim}-D tensor of shape {tuple(t.shape)}"
        )


def same_dtype_and_device(op: str, named: Sequence[tuple[str, Tensor]]) -> None:
    first, ref = named[0]
    for name, t in named:
        if t.dtype is not ref.dtype:
            raise RuntimeError(
                f"{op}: expected all tensors to have one dtype, but '{name}' is {t.dtype.name} "
                f"and '{first}' is {ref.dtype.name}"
            )
        if t.device != ref.device:
            raise RuntimeError(
                f"{op}: expected all tensors on one device, but '{name}' is on {t.device} "
                f"and '{first}' is on {ref.device}"
            )
    if ref.dtype.name not in _NAMES:
        raise RuntimeError(
            f"{op}: '{first}' has dtype {ref.dtype.name}; matrix products support {_SUPPORTED}"
        )


def inner_dims(op: str, names: tuple[str, str], a: Tensor, b: Tensor) -> None:
    """a [.., M, K] and b [.., K, N]: K must agree (PyTorch's message)."""
    if a.shape[-1] != b.shape[-2]:
        ra = "x".join(map(str, a.shape))
        rb = "x".join(map(str, b.shape))
        raise RuntimeError(
            f"{op}: '{names[0]}' and '{names[1]}' shapes cannot be multiplied ({ra} and {rb})"
        )


def bias_broadcasts(op: str, name: str, bias: Tensor, shape: tuple[int, ...]) -> None:
    try:
        found = broadcast_shapes(bias.shape, shape)
    except ValueError:
        found = None
    if found != tuple(shape):
        raise RuntimeError(
            f"{op}: '{name}' of shape {tuple(bias.shape)} cannot be broadcast to the result's "
            f"shape {tuple(shape)}"
        )


def _extent(t: Tensor) -> tuple[int, int]:
    """[first byte, last byte + 1) that ``t``'s elements occupy (an empty range if none)."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    span = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)) + 1
    return t.data_ptr(), t.data_ptr() + span * t.element_size()


def _dense(t: Tensor) -> bool:
    """True when ``t``'s elements fill their range without gaps or repeats."""
    lo, hi = _extent(t)
    return hi - lo == t.numel() * t.element_size() and not _self_overlapping(t)


def _self_overlapping(t: Tensor) -> bool:
    """True when two elements of ``t`` share memory (a stride 0, or strides that collide)."""
    dims = sorted((s, n) for n, s in zip(t.shape, t.stride(), strict=True) if n > 1)
    covered = 1
    for stride, n in dims:
        if stride < covered:
            return True
        covered = stride * n
    return False


def check_out(
    op: str, out: Tensor, shape: tuple[int, ...], inputs: Sequence[tuple[str, Tensor]]
) -> bool:
    """``out`` has the result's shape, distinct elements, and shares no memory with the
    factors ``inputs`` (addmm's ``input`` may be ``out``: it is not among them). Returns
    ``needs_temp(out, inputs)``."""
    if tuple(out.shape) != tuple(shape):
        raise RuntimeError(
            f"{op}: 'out' has shape {tuple(out.shape)}, but the result has shape {tuple(shape)}"
        )
    if _self_overlapping(out):
        raise RuntimeError(
            f"{op}: 'out' has more than one element at a single memory location (an expanded "
            "tensor); it cannot be written. Pass a tensor from vram.empty, or clone() it"
        )
    for name, t in inputs:
        if _meet(out, t) and (t is out or (_dense(t) and _dense(out))):
            raise RuntimeError(
                f"{op}: 'out' and '{name}' share memory; the result cannot be written over an "
                f"input. clone() '{name}' or pass another 'out'"
            )
    return needs_temp(out, [t for _, t in inputs])


def _meet(out: Tensor, t: Tensor) -> bool:
    """True when ``t``'s byte range meets ``out``'s. Tensors over different storages never
    do (PyTorch's rule: only views of one storage alias)."""
    if t._storage is not out._storage:
        return False
    lo, hi = _extent(out)
    tlo, thi = _extent(t)
    return tlo < hi and lo < thi


def needs_temp(out: Tensor, inputs: Sequence[Tensor]) -> bool:
    """True when an input other than ``out`` itself lies in ``out``'s byte range: whether
    they share an element is not decided here, so the product is computed into a new
    tensor and copied into ``out``."""
    return any(t is not out and _meet(out, t) for t in inputs)


def scalar(op: str, name: str, value: object) -> float:
    """``beta``/``alpha`` as a float; TypeError unless it is a real number."""
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: '{name}' must be a real number, got {value!r}")
    return float(value)


def activation_code(op: str, activation: object) -> int:
    if not (activation is None or type(activation) is str) or activation not in ACTIVATIONS:
        raise ValueError(f"{op}: 'activation' must be None, 'relu' or 'gelu', got {activation!r}")
    return ACTIVATIONS[activation]  # type: ignore[index]
