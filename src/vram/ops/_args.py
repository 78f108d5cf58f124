"""Argument checks and plan lookups the shape and indexing ops share, with PyTorch's
messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._tensor import Tensor
from ._plans import PLANS

__all__ = [
    "signature",
    "require_tensor",
    "same_device",
    "cached",
    "overlaps",
    "check_no_overlap",
    "TORCH_NAMES",
]

TORCH_NAMES = {  # dtypes as PyTorch's messages name them ("Float", "Long")
    "bool": "Bool",
    "uint8": "Byte",
    "int8": "Char",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "float32": "Float",
    "float64": "Double",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
}


def signature(t: Tensor) -> tuple:
    """What a plan depends on of a tensor: dtype, shape, strides, device."""
    return (t.dtype, t._shape, t._stride, t.device)


def require_tensor(name: str, argument: str, value: Any) -> Tensor:
    """``value``, or PyTorch's TypeError for an argument that must be a tensor."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{name}(): argument '{argument}' must be Tensor, not {type(value).__name__}"
        )
    return value


def same_device(*tensors: Tensor) -> None:
    """PyTorch's RuntimeError unless every tensor is on the first one's device."""
    device = tensors[0].device
    for t in tensors[1:]:
        if t.device != device:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"{device} and {t.device}!"
            )


def cached(key: tuple, build: Callable[..., Any], *args: Any) -> Any:
    """The plan under ``key``, built by ``build(*args)`` the first time."""
    plan = PLANS.get(key)
    if plan is None:
        plan = PLANS.add(key, build(*args))
    return plan


def _byte_range(t: Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    if 0 in t._shape:
        return start, start
    span = sum((n - 1) * s for n, s in zip(t._shape, t._stride, strict=True))
    return start, start + (span + 1) * t.dtype.itemsize


def overlaps(a: Tensor, b: Tensor) -> bool:
    """True when ``a`` and ``b`` view memory in common (by the byte ranges they span)."""
    if a._storage is not b._storage:
        return False
    a_low, a_high = _byte_range(a)
    b_low, b_high = _byte_range(b)
    return a_low < b_high and b_low < a_high


def check_no_overlap(written: Tensor, *read: Tensor) -> None:
    """RuntimeError (PyTorch's) when a tensor read shares memory with the one written."""
    for t in read:
        if overlaps(written, t):
            raise RuntimeError(
                "unsupported operation: some elements of the input tensor and the written-to "
                "tensor refer to a single memory location. Please clone() the tensor before "
                "performing the operation."
            )
