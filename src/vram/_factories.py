"""Making tensors: empty, zeros, ones, full, arange, tensor, from_numpy, asarray.

``device=None`` is the current device (``vram.set_device``), as PyTorch's CUDA factories;
``"cpu"`` makes a host tensor. ``dtype=None`` is float32, or what the data says.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ._device import Device, as_device
from ._dtypes import as_dtype, bool_, complex64, dtype, float32, int64
from ._interop import from_cuda_array_interface, from_dlpack
from ._tensor import Storage, Tensor, _upload, as_shape, host_bytes, new_tensor

__all__ = ["empty", "zeros", "ones", "full", "arange", "tensor", "from_numpy", "asarray"]


def _resolve(dt: Any, device: Any, default: dtype = float32) -> tuple[dtype, Device]:
    return (default if dt is None else as_dtype(dt)), as_device(device)


def empty(*size: Any, dtype: Any = None, device: Any = None, pin_memory: bool = False) -> Tensor:
    """A new contiguous tensor with uninitialized contents.

    ``pin_memory=True`` (cpu tensors only) takes page-locked memory from the host allocator.
    """
    dt = float32 if dtype is None else as_dtype(dtype)
    found = as_device(device)
    if len(size) == 1 and type(size[0]) is int and size[0] >= 0:  # (n,): as_shape's answer
        if found.type != "cpu" and not pin_memory:  # (``Tensor._empty``'s, without its frame)
            return new_tensor(size, (1,), dt, found, size[0] * dt.itemsize)
        shape = size
    else:
        shape = as_shape(size)
    return Tensor._empty(shape, dt, found, pin_memory)


def zeros(*size: Any, dtype: Any = None, device: Any = None, pin_memory: bool = False) -> Tensor:
    """A new tensor of zeros (the fill runs on the device's current stream)."""
    return empty(*size, dtype=dtype, device=device, pin_memory=pin_memory).zero_()


def ones(*size: Any, dtype: Any = None, device: Any = None, pin_memory: bool = False) -> Tensor:
    """A new tensor of ones."""
    return empty(*size, dtype=dtype, device=device, pin_memory=pin_memory).fill_(1)


def _scalar_dtype(value: Any, argument: str) -> dtype:
    """PyTorch's dtype for a Python number: bool, int64, float32 or complex64."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, numbers.Integral):
        return int64
    if isinstance(value, numbers.Real):
        return float32
    if isinstance(value, numbers.Complex):
        return complex64
    raise TypeError(f"{argument}: expected a number, got {type(value).__name__}")


def full(
    size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None, pin_memory: bool = False
) -> Tensor:
    """A new tensor with every element ``fill_value`` (dtype from the value by default)."""
    default = _scalar_dtype(fill_value, "fill_value")
    dt, found = _resolve(dtype, device, default)
    shape = as_shape(size if isinstance(size, (tuple, list)) else (size,))
    return Tensor._empty(shape, dt, found, pin_memory).fill_(fill_value)


def arange(
    start: Any,
    end: Any = None,
    step: Any = 1,
    *,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """Values from ``start`` up to (not including) ``end`` by ``step``. Synchronizes for
    device tensors (the values are computed on the host and copied)."""
    if end is None:
        start, end = 0, start
    for name, value in (("start", start), ("end", end), ("step", step)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name}: expected a real number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{name}: must be finite, got {value!r}")
    if step == 0:
        raise ValueError("step: must be nonzero")
    if (end - start) * step < 0:
        raise ValueError(f"step: {step} cannot go from {start} to {end}")
    integral = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt, found = _resolve(dtype, device, int64 if integral else float32)
    length = max(math.ceil((end - start) / step), 0)
    values = start + step * np.arange(length, dtype=np.float64 if not integral else np.int64)
    return _from_host(values.astype(dt.np), found)


def _from_host(array: np.ndarray, device: Device) -> Tensor:
    """A new tensor on ``device`` holding a copy of ``array``."""
    dt = as_dtype(array.dtype)
    out = Tensor._empty(array.shape, dt, device)
    if device.type == "cpu":
        out.numpy()[...] = array
    else:
        _upload(out, array)
    return out


def _host_array(data: Any, dt: dtype | None) -> np.ndarray:
    """``data`` (nested sequences, numbers, arrays) as a NumPy array with PyTorch's defaults."""
    try:
        array = np.asarray(data) if dt is None else np.asarray(data).astype(dt.np)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"data: cannot make a tensor of {type(data).__name__}: {exc}") from None
    if array.dtype.kind in "OUSM":
        raise TypeError(f"data: cannot make a tensor of {type(data).__name__} {data!r:.60}")
    if dt is not None:
        return array
    if not isinstance(data, np.ndarray):  # Python numbers: float32 and complex64, as PyTorch
        if array.dtype == np.float64:
            return array.astype(np.float32)
        if array.dtype == np.complex128:
            return array.astype(np.complex64)
    as_dtype(array.dtype, "data")
    return array


def tensor(data: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A new tensor holding a copy of ``data`` (numbers, nested lists, arrays, tensors)."""
    if isinstance(data, Tensor):
        target = as_device(device) if device is not None else data.device
        dt = data.dtype if dtype is None else as_dtype(dtype)
        return data.to(target, dt, copy=True)
    dt = None if dtype is None else as_dtype(dtype)
    return _from_host(_host_array(data, dt), as_device(device))


def from_numpy(array: np.ndarray) -> Tensor:
    """A cpu tensor sharing memory with ``array`` (writes through one show in the other)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"array: expected a numpy.ndarray, got {type(array).__name__}")
    dt = as_dtype(array.dtype, "array")
    item = array.itemsize
    if any(s < 0 for s in array.strides):
        raise ValueError("array: negative strides are not supported; copy the array first")
    if any(s % item for s in array.strides):
        raise ValueError("array: strides must be multiples of the element size")
    extent = (
        0
        if array.size == 0
        else (sum((n - 1) * s for n, s in zip(array.shape, array.strides, strict=True)) + item)
    )
    buffer = host_bytes(array.ctypes.data, extent, array, not array.flags.writeable)
    strides = tuple(s // item for s in array.strides)
    return Tensor._make(Storage.of_host(buffer), array.shape, strides, 0, dt)


def asarray(obj: Any, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Tensor:
    """A tensor sharing ``obj``'s memory when it can (zero copy), else a copy.

    ``obj`` may be a vram Tensor, anything with ``__cuda_array_interface__`` (a PyTorch CUDA
    tensor, a CuPy array) or ``__dlpack__``, a NumPy array (a cpu tensor), or data for
    ``vram.tensor`` (on the current device). ``copy=True`` always copies; ``copy=False``
    raises ValueError when a copy would be needed.
    """
    if isinstance(obj, Tensor):
        shared = obj
    elif hasattr(obj, "__cuda_array_interface__"):
        try:
            shared = from_cuda_array_interface(obj)
        except TypeError:  # a dtype the interface cannot name (bfloat16 is '<V2'): DLPack can
            if not hasattr(obj, "__dlpack__"):
                raise
            shared = from_dlpack(obj)
    elif isinstance(obj, np.ndarray):
        shared = from_numpy(obj)
    elif hasattr(obj, "__dlpack__"):
        shared = from_dlpack(obj)
    else:
        if copy is False:
            raise ValueError(f"obj: a {type(obj).__name__} cannot be shared without a copy")
        return tensor(obj, dtype=dtype, device=device)
    target = shared.device if device is None else as_device(device)
    dt = shared.dtype if dtype is None else as_dtype(dtype)
    needs_copy = target != shared.device or dt != shared.dtype
    if needs_copy and copy is False:
        raise ValueError(f"copy=False, but moving to {target} as {dt} needs a copy")
    if not needs_copy and not copy:
        return shared
    return shared.to(target, dt, copy=True)
