"""Argument checks and error reports of vram.linalg, worded as torch.linalg words them.

- Bad arguments raise before anything is queued: RuntimeError for shapes and dtypes (as
  PyTorch), TypeError for what is not a tensor, ValueError for tensors on different devices.
- ``check_errors(info, api, is_matrix)`` is PyTorch's ``_linalg_check_errors``: it finds
  the first nonzero ``info`` on the device and reads it on the host (so it synchronizes
  the current stream), and raises ``LinAlgError`` naming that batch element and its zero
  pivot. Given a ``ZeroPivotFlag`` that vram's blocked LU watched, it looks only when
  the flag is up: a factorization without a zero pivot costs a synchronization, no search.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._dtypes import complex64, complex128, dtype, float32, float64
from .._streams import current_stream
from .._tensor import Tensor, broadcast_shapes
from ._libs import LIBS, PinnedArray, per_thread

__all__ = [
    "LinAlgError",
    "SUPPORTED",
    "check_matrix",
    "check_same",
    "check_errors",
    "ZeroPivotFlag",
    "batch_shape",
    "broadcast_batch",
]

SUPPORTED: tuple[dtype, ...] = (float32, float64, complex64, complex128)


class LinAlgError(RuntimeError):
    """A linear algebra routine failed on its input (PyTorch's torch.linalg.LinAlgError):
    a singular matrix where the result needs an invertible one."""


def check_matrix(api: str, A: object, name: str = "A", square: bool = True) -> Tensor:
    """``A`` is a tensor of (batches of) matrices of a supported dtype on a GPU or sim."""
    if not isinstance(A, Tensor):
        raise TypeError(f"{api}: argument '{name}' must be a vram.Tensor, got {type(A).__name__}")
    if A.ndim < 2:
        raise RuntimeError(
            f"{api}: The input tensor {name} must have at least 2 dimensions, "
            f"but got shape {tuple(A.shape)}."
        )
    if square and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(
            f"{api}: {name} must be batches of square matrices, but they are "
            f"{A.shape[-2]} by {A.shape[-1]} matrices"
        )
    if A.dtype not in SUPPORTED:
        raise RuntimeError(
            f"{api}: Expected a floating point or complex tensor as input. Got {A.dtype.name} "
            f"(argument '{name}'; supported: float32, float64, complex64, complex128)"
        )
    if A.device.type not in ("cuda", "sim"):
        raise ValueError(
            f"{api}: argument '{name}' is on {A.device}; vram.linalg runs on cuda and sim devices"
        )
    return A


def check_same(api: str, first: tuple[str, Tensor], other: tuple[str, Tensor]) -> None:
    """``other`` has the dtype and device of ``first``."""
    (a_name, a), (b_name, b) = first, other
    if not isinstance(b, Tensor):
        raise TypeError(f"{api}: argument '{b_name}' must be a vram.Tensor, got {type(b).__name__}")
    if b.device != a.device:
        raise ValueError(
            f"{api}: argument '{b_name}' is on {b.device}, but '{a_name}' is on {a.device}; "
            "all tensors must be on one device"
        )
    if b.dtype != a.dtype:
        raise RuntimeError(
            f"{api}: Expected {a_name} and {b_name} to have the same dtype, but found "
            f"{a_name} of type {a.dtype.name} and {b_name} of type {b.dtype.name} instead"
        )


def batch_shape(t: Tensor) -> tuple[int, ...]:
    return tuple(t.shape[:-2])


def broadcast_batch(api: str, a: tuple[str, Tensor], b: tuple[str, Tensor]) -> tuple[int, ...]:
    """The batch shape the two tensors' batch dimensions broadcast to."""
    first, second = batch_shape(a[1]), batch_shape(b[1])
    if first == second:
        return first
    try:
        return broadcast_shapes(first, second)
    except ValueError:
        raise RuntimeError(
            f"{api}: the batch dimensions of {a[0]} {first} and "
            f"{b[0]} {second} cannot be broadcast together"
        ) from None


def _describe(api: str, info: int) -> str:
    if "inv" in api:
        return (
            f"The diagonal element {info} is zero, the inversion could not be completed "
            "because the input matrix is singular."
        )
    if "solve" in api:
        return "The solver failed because the input matrix is singular."
    return (
        f"U[{info},{info}] is zero and using it on lu_solve would result in a division by "
        "zero. If you still want to perform the factorization, consider calling "
        "vram.linalg.lu_factor_ex(A, pivot)"
    )


class ZeroPivotFlag:
    """One thread's page-locked int32 on one driver, which vram's panel kernels set to 1
    where a matrix has a zero pivot (the device writes it where the host reads it: unified
    addressing).

    ``armed(device)`` resets it; a factorization given it (``_lu.factor``) hands ``ptr`` to
    the blocked LU's kernels and marks it ``watched`` (the other ways' info comes from
    cuBLAS and cuSOLVER, which know no flag); ``check_errors`` given a watched flag looks
    for the failing matrix only when it is up. A kernel of an earlier call that never
    synchronized (an exception between) can only raise it falsely: a search then, that
    finds nothing; no kernel can lower it."""

    def __init__(self, driver: Any) -> None:
        memory = self.memory = PinnedArray(driver, 1, np.int32)
        self.ptr, self.value = memory.ptr, memory.values
        self.watched = False

    @classmethod
    def of_thread(cls, device: Any) -> ZeroPivotFlag:
        """This thread's flag for ``device``'s driver, as the last call left it."""
        return per_thread(device.driver, "zero-pivot flag", cls)

    @classmethod
    def armed(cls, device: Any) -> ZeroPivotFlag:
        """This thread's flag for ``device``'s driver, down and not watched."""
        flag = cls.of_thread(device)
        flag.value[0] = 0
        flag.watched = False
        return flag


def check_errors(
    info: Tensor, api: str, is_matrix: bool, flag: ZeroPivotFlag | None = None
) -> None:
    """Raise LinAlgError for the first nonzero ``info`` (PyTorch's _linalg_check_errors).

    Synchronizes: a kernel finds the first nonzero and the host reads its index and value
    (not all of ``info``: ``first_nonzero`` of the device's libraries); with a watched
    ``flag`` that is down, nothing is searched.
    """
    if info.numel() == 0:
        return
    info = info.contiguous()
    stream = current_stream(info.device)
    if flag is not None and flag.watched:
        stream.synchronize()
        if not flag.value[0]:
            return  # no zero pivot, and the blocked LU writes no negative info
    found = LIBS.first_nonzero(stream, info.data_ptr(), info.numel())
    if found is None:
        return
    first, value = found
    where = "" if is_matrix else f": (Batch element {first})"
    if value < 0:  # a library said an argument was wrong: a bug in vram, not in the input
        raise RuntimeError(f"{api}{where}: Argument {-value} has illegal value.")
    raise LinAlgError(f"{api}{where}: {_describe(api, value)}")


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
