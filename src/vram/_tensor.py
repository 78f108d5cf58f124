"""Tensor: a strided view over device memory or a host array.

- A tensor is (storage, shape, strides in elements, storage offset, dtype). Views (slicing,
  ``view``, ``t``, ``transpose``, ``expand``) share the storage; strides are never negative.
- Storage is device memory from the device's allocator (the storage gives it back when the
  last tensor that views it is dropped), device memory owned by another library (kept
  alive, never freed by vram), or a NumPy array for the ``cpu`` device.
- Work runs on the current stream of the tensor's device. Copies between host and device
  use pageable NumPy memory, so they synchronize that stream before returning, as CUDA does
  for pageable memory; ``.numpy()`` of a device tensor therefore always sees finished work.
- Methods that run ops (arithmetic, copies, fill, ``@``, DLPack) look their function up in
  ``dispatch``, a table that the layers above fill when they are imported (``vram.ops``,
  ``vram.blas``, ``vram._interop``): this module imports nothing above it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._device import Device, as_device
from ._dtypes import as_dtype, bool_, dtype, float32, int64
from ._streams import Stream, as_stream, current_stream
from .memory import Allocation, PinnedAllocation, allocate_pinned, allocator_for

__all__ = ["Tensor"]

_DEFAULT_DTYPES = (float32, int64, bool_)  # dtypes repr leaves out, as PyTorch


class Storage:
    """The bytes tensors view: device memory or (for ``cpu``) a uint8 host array.

    Device memory from vram's allocator is the storage's own: ``allocator`` gives ``ptr``
    back when the last tensor that views it goes (the finalizer hands the pointer to
    ``allocator.free_later``, which never takes a lock). Otherwise ``owner`` keeps the
    memory alive: a foreign object (a PyTorch tensor, a DLPack capsule owner: never freed
    by vram), a pinned allocation, or the host array itself.
    """

    __slots__ = ("device", "ptr", "nbytes", "owner", "host", "allocator", "__weakref__")

    def __init__(
        self,
        device: Device,
        ptr: int,
        nbytes: int,
        owner: object,
        host: np.ndarray | None = None,
        allocator: Any = None,
    ) -> None:
        self.device = device
        self.ptr = ptr
        self.nbytes = nbytes
        self.owner = owner
        self.host = host
        self.allocator = allocator  # vram's allocator that ``ptr`` goes back to, or None

    @classmethod
    def of_host(cls, buffer: np.ndarray) -> Storage:
        """Storage over a 1-D uint8 host array (whose base keeps its memory alive)."""
        return cls(Device("cpu"), buffer.ctypes.data, buffer.nbytes, buffer, buffer)

    def view_bytes(self, ptr: int, nbytes: int) -> np.ndarray:
        """A uint8 view of host storage at address ``ptr``."""
        start = ptr - self.ptr
        return self.host[start : start + nbytes]  # type: ignore[index]

    def record_stream(self, stream: Stream) -> None:
        """The memory is used on ``stream`` (a stream of its device) until work queued there
        by its free has run."""
        if self.allocator is not None:
            self.allocator.record_stream(self.ptr, stream.cuda_stream)
        elif isinstance(self.owner, Allocation):
            self.owner.record_stream(stream)

    def record_use(self, stream: Stream) -> None:
        """The last use on ``stream`` (of this device, or of a peer) is queued now."""
        if self.allocator is not None:
            peer = None if stream.device == self.device else stream.device.index
            self.allocator.record_use(self.ptr, stream.cuda_stream, peer)
        elif isinstance(self.owner, Allocation):
            self.owner.record_use(stream)

    def __del__(self) -> None:
        allocator = self.allocator
        if allocator is not None:
            try:
                allocator.free_later(self.ptr)
            except Exception:  # finalizers never raise
                pass


def device_storage(nbytes: int, device: Device) -> Storage:
    """``nbytes`` of new memory from the allocator of ``device`` (a cuda or sim device), for
    its current stream, owned by the storage: for tensors laid out by their maker
    (``Tensor._make``)."""
    if not nbytes:
        return Storage(device, 0, 0, None)
    allocator = allocator_for(device)
    ptr = allocator.malloc(nbytes, current_stream(device).cuda_stream)
    return Storage(device, ptr, nbytes, None, None, allocator)


class _HostMemory:
    """Raw host memory offered to NumPy; the arrays made over it keep ``owner`` alive."""

    def __init__(self, address: int, nbytes: int, owner: object, readonly: bool) -> None:
        self.owner = owner
        self.__array_interface__ = {
            "data": (address, readonly),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }


def host_bytes(address: int, nbytes: int, owner: object, readonly: bool = False) -> np.ndarray:
    """A 1-D uint8 array over ``nbytes`` of host memory at ``address``, keeping ``owner``
    alive as long as the array or any view of it lives."""
    if nbytes == 0:
        return np.empty(0, np.uint8)
    return np.asarray(_HostMemory(address, nbytes, owner, readonly))


def ndarray_view(
    view: Callable[[int, int], np.ndarray],
    ptr: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    np_dtype: np.dtype,
) -> np.ndarray:
    """A NumPy view of strided memory: ``view(ptr, nbytes)`` gives the bytes; strides in bytes."""
    if 0 in shape:
        return np.empty(shape, np_dtype)
    extent = sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + np_dtype.itemsize
    base = view(ptr, extent).view(np_dtype)
    return as_strided(base, shape=shape, strides=strides)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The shape that all ``shapes`` broadcast to (NumPy's rules); ValueError otherwise."""
    return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))


@functools.lru_cache(maxsize=4096)
def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements (cached: the same shapes come back again and again)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def as_shape(size: Sequence[Any], argument: str = "size") -> tuple[int, ...]:
    """``(2, 3)``, ``[2, 3]`` or ``((2, 3),)`` -> (2, 3); errors name ``argument``."""
    if len(size) == 1:
        first = size[0]
        if type(first) is int and first >= 0:  # (256,): the common case, cheaply
            return (first,)
        if type(first) is tuple or type(first) is list:
            size = first
    for n in size:  # plain non-negative ints (the common forms) are taken as they are
        if type(n) is not int or n < 0:
            break
    else:
        return size if type(size) is tuple else tuple(size)
    shape = []
    for n in size:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"{argument}: dimensions must be ints, got {n!r}")
        if n < 0:
            raise ValueError(f"{argument}: dimensions must be non-negative, got {tuple(size)}")
        shape.append(int(n))
    return tuple(shape)


class _Dispatch(dict):
    """Op name -> the function that runs it, filled by the layers above (``dispatch[name] =
    fn`` when they are imported). A missing name is an op that no imported layer provides."""

    def __missing__(self, name: str) -> Callable[..., Any]:
        raise NotImplementedError(f"vram has no {name!r} operation for tensors (is vram imported?)")


dispatch: dict[str, Callable[..., Any]] = _Dispatch()


class Tensor:
    """A strided n-dimensional array on a cuda, sim or cpu device (PyTorch's torch.Tensor)."""

    __slots__ = ("_storage", "_shape", "_stride", "_offset", "dtype", "grad", "__weakref__")

    __array_priority__ = 1000  # NumPy defers ``ndarray + tensor`` to the tensor

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("make tensors with vram.empty, vram.tensor, vram.from_numpy, ...")

    @classmethod
    def _make(
        cls,
        storage: Storage,
        shape: tuple[int, ...],
        stride: tuple[int, ...],
        offset: int,
        dt: dtype,
    ) -> Tensor:
        t = object.__new__(cls)
        t._storage = storage
        t._shape = shape
        t._stride = stride
        t._offset = offset
        t.dtype = dt
        t.grad = None  # set by the user (vram has no autograd); optimizers read it
        return t

    @classmethod
    def _empty(
        cls, shape: tuple[int, ...], dt: dtype, device: Device, pin_memory: bool = False
    ) -> Tensor:
        """A new contiguous tensor with uninitialized contents (pinned host memory if asked)."""
        numel = math.prod(shape)
        if device.type != "cpu" and not pin_memory:  # device memory: the common case first
            storage = device_storage(numel * dt.itemsize, device)
        elif device.type == "cpu" and pin_memory:
            pinned = allocate_pinned(numel * dt.itemsize)
            host = host_bytes(pinned.ptr, pinned.size, pinned)
            storage = Storage(device, pinned.ptr, pinned.size, pinned, host)
        elif pin_memory:
            raise ValueError(f"pin_memory: only cpu tensors can be pinned, not {device}")
        else:
            storage = Storage.of_host(np.empty(numel, dt.np).view(np.uint8))
        return cls._make(storage, shape, contiguous_strides(shape), 0, dt)

    def _view(self, shape: Sequence[int], stride: Sequence[int], offset: int) -> Tensor:
        return Tensor._make(self._storage, tuple(shape), tuple(stride), offset, self.dtype)

    # ---- metadata ------------------------------------------------------------------
    @property
    def device(self) -> Device:
        return self._storage.device

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the elements this tensor views (numel * element size)."""
        return self.numel() * self.dtype.itemsize

    def dim(self) -> int:
        return len(self._shape)

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The shape, or the size of dimension ``dim``."""
        return self._shape if dim is None else self._shape[self._dim(dim)]

    def stride(self, dim: int | None = None) -> tuple[int, ...] | int:
        """Strides in elements, or the stride of dimension ``dim``."""
        return self._stride if dim is None else self._stride[self._dim(dim)]

    def storage_offset(self) -> int:
        """Offset of element 0 in the storage, in elements."""
        return self._offset

    def numel(self) -> int:
        return math.prod(self._shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def data_ptr(self) -> int:
        """Address of element 0 (a device pointer, or a host address for cpu tensors)."""
        return self._storage.ptr + self._offset * self.dtype.itemsize

    def is_contiguous(self) -> bool:
        """True when the elements lie row-major without gaps (size-1 dims ignored)."""
        if self._stride == contiguous_strides(self._shape):  # the common case, one lookup
            return True
        if self.numel() == 0:
            return True
        expected = 1
        for n, s in zip(reversed(self._shape), reversed(self._stride), strict=True):
            if n != 1:
                if s != expected:
                    return False
                expected *= n
        return True

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def _dim(self, dim: int, ndim: int | None = None) -> int:
        ndim = self.ndim if ndim is None else ndim
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"dim: expected an int, got {dim!r}")
        if not -max(ndim, 1) <= dim < max(ndim, 1):
            raise IndexError(
                f"dim: dimension out of range (expected to be in range of "
                f"[{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {dim})"
            )
        return int(dim) % max(ndim, 1)

    # ---- streams -------------------------------------------------------------------
    def _stream_on_device(self, stream: Stream) -> Stream:
        stream = as_stream(stream, "stream")
        if stream.device != self.device:
            raise ValueError(f"stream: a stream of {stream.device} for a tensor on {self.device}")
        return stream

    def record_stream(self, stream: Stream) -> None:
        """The memory is used on ``stream``: the allocator keeps it until that work is done."""
        self._storage.record_stream(self._stream_on_device(stream))

    def record_use(self, stream: Stream) -> None:
        """The last use on ``stream`` is queued now: the next owner waits for it (precise).
        ``stream`` may be another device's that read this memory (peer access)."""
        stream = as_stream(stream, "stream")
        if stream.device.type != self.device.type:
            raise ValueError(f"stream: a stream of {stream.device} for a tensor on {self.device}")
        self._storage.record_use(stream)

    # ---- views ---------------------------------------------------------------------
    def view(self, *shape: Any) -> Tensor:
        """The same elements with another shape, sharing memory; RuntimeError if the strides
        cannot express it (use ``reshape``)."""
        new_shape = _infer_shape(shape, self.numel())
        strides = _view_strides(self._shape, self._stride, new_shape)
        if strides is None:
            raise RuntimeError(
                f"view size {new_shape} is not compatible with the tensor's size {self._shape} "
                f"and stride {self._stride}; use .reshape(...) instead"
            )
        return self._view(new_shape, strides, self._offset)

    def reshape(self, *shape: Any) -> Tensor:
        """A view when the strides allow one, else a contiguous copy."""
        new_shape = _infer_shape(shape, self.numel())
        strides = _view_strides(self._shape, self._stride, new_shape)
        if strides is not None:
            return self._view(new_shape, strides, self._offset)
        return self.contiguous().view(new_shape)

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """Swap two dimensions (a view)."""
        a, b = self._dim(dim0), self._dim(dim1)
        if self.ndim == 0:
            return self
        shape, stride = list(self._shape), list(self._stride)
        shape[a], shape[b] = shape[b], shape[a]
        stride[a], stride[b] = stride[b], stride[a]
        return self._view(shape, stride, self._offset)

    def t(self) -> Tensor:
        """Transpose a tensor of at most 2 dimensions (a view)."""
        if self.ndim > 2:
            raise ValueError(f"t() expects a tensor with <= 2 dimensions, got {self.ndim}")
        return self.transpose(0, 1) if self.ndim == 2 else self

    @property
    def T(self) -> Tensor:  # noqa: N802 - PyTorch's name
        return self.permute(*reversed(range(self.ndim)))

    def permute(self, *dims: Any) -> Tensor:
        """Reorder the dimensions (a view)."""
        order = [self._dim(d) for d in as_shape(dims, "dims")] if dims else []
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"dims: {tuple(dims)} is not a permutation of {self.ndim} dims")
        shape = [self._shape[d] for d in order]
        return self._view(shape, [self._stride[d] for d in order], self._offset)

    def expand(self, *sizes: Any) -> Tensor:
        """Broadcast to ``sizes`` (a view; -1 keeps a dimension, new dims go in front)."""
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = tuple(sizes[0])
        if len(sizes) < self.ndim:
            raise ValueError(f"size: cannot expand shape {self._shape} to {tuple(sizes)}")
        lead = len(sizes) - self.ndim
        shape, stride = [], []
        for i, n in enumerate(sizes):
            old_n, old_s = (1, 0) if i < lead else (self._shape[i - lead], self._stride[i - lead])
            n = old_n if n == -1 and i >= lead else n
            if n == old_n:
                shape.append(n)
                stride.append(old_s)
            elif old_n == 1 and isinstance(n, int) and n >= 0:
                shape.append(n)
                stride.append(0)
            else:
                raise ValueError(f"size: cannot expand shape {self._shape} to {tuple(sizes)}")
        return self._view(shape, stride, self._offset)

    def __getitem__(self, index: Any) -> Tensor:
        shape, stride, offset = _index(self, index)
        return self._view(shape, stride, offset)

    def __setitem__(self, index: Any, value: Any) -> None:
        target = self[index]
        if isinstance(value, Tensor):
            target.copy_(value)
        else:
            target.fill_(value)

    # ---- copies and conversions ----------------------------------------------------
    def contiguous(self) -> Tensor:
        """This tensor if contiguous, else a contiguous copy."""
        return self if self.is_contiguous() else self.clone()

    def pin_memory(self) -> Tensor:
        """A copy of this cpu tensor in pinned (page-locked) memory; itself if already pinned.

        Copies between pinned memory and a device can be ``non_blocking``.
        """
        if self.device.type != "cpu":
            raise RuntimeError(f"pin_memory: only cpu tensors can be pinned, not {self.device}")
        if self.is_pinned():
            return self
        out = Tensor._empty(self._shape, self.dtype, self.device, pin_memory=True)
        np.copyto(out.numpy(), self.numpy())
        return out

    def is_pinned(self) -> bool:
        """True when this is a cpu tensor in pinned memory from vram's host allocator."""
        return self.device.type == "cpu" and isinstance(self._storage.owner, PinnedAllocation)

    def clone(self) -> Tensor:
        """A contiguous copy on the same device."""
        out = Tensor._empty(self._shape, self.dtype, self.device)
        return out.copy_(self)

    def copy_(self, src: Tensor, non_blocking: bool = False) -> Tensor:
        """Copy ``src`` (broadcast, cast to this dtype, from any device) into this tensor.

        Between host and device the copy synchronizes (the host side is pageable memory);
        between two devices it synchronizes both streams.
        """
        if not isinstance(src, Tensor):
            raise TypeError(f"src: expected a vram.Tensor, got {type(src).__name__}")
        if src.device == self.device:
            dispatch["copy"](self, src)
        elif non_blocking and _async_copy(self, src):
            pass
        else:
            _copy_across_devices(self, src)
        return self

    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)`` or ``to(other)``: this tensor
        if nothing changes, else a copy. ``non_blocking`` is accepted; copies from pageable
        host memory synchronize regardless."""
        non_blocking = bool(kwargs.get("non_blocking", False))
        device, dt, copy = _parse_to(self, args, kwargs)
        if device == self.device and dt == self.dtype and not copy:
            return self
        out = Tensor._empty(self._shape, dt, device)
        return out.copy_(self, non_blocking=non_blocking)

    def cpu(self) -> Tensor:
        """A copy on the host (this tensor if it is already there). Synchronizes."""
        return self.to("cpu")

    def numpy(self) -> np.ndarray:
        """A NumPy array: a view sharing memory for cpu tensors, a copy for device tensors
        (after synchronizing the tensor's current stream)."""
        if self.device.type == "cpu":
            item = self.dtype.itemsize
            strides = tuple(s * item for s in self._stride)
            return ndarray_view(
                self._storage.view_bytes, self.data_ptr(), self._shape, strides, self.dtype.np
            )
        out = np.empty(self._shape, self.dtype.np)
        _download(out, self.contiguous())
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> bool | int | float | complex:
        """The value of a one-element tensor as a Python number. Synchronizes."""
        if self.numel() != 1:
            raise ValueError(f"item(): the tensor has {self.numel()} elements, not 1")
        return self.numpy().reshape(-1)[0].item()

    def fill_(self, value: Any) -> Tensor:
        """Set every element to ``value``."""
        dispatch["fill"](self, value)
        return self

    def zero_(self) -> Tensor:
        return self.fill_(0)

    # ---- arithmetic ------------------------------------------------------------------
    def add(self, other: Any) -> Tensor:
        return dispatch["binary"]("add", self, other)

    def sub(self, other: Any) -> Tensor:
        return dispatch["binary"]("sub", self, other)

    def mul(self, other: Any) -> Tensor:
        return dispatch["binary"]("mul", self, other)

    def div(self, other: Any) -> Tensor:
        return dispatch["binary"]("div", self, other)

    def add_(self, other: Any) -> Tensor:
        return dispatch["binary"]("add", self, other, out=self)

    def sub_(self, other: Any) -> Tensor:
        return dispatch["binary"]("sub", self, other, out=self)

    def mul_(self, other: Any) -> Tensor:
        return dispatch["binary"]("mul", self, other, out=self)

    def div_(self, other: Any) -> Tensor:
        return dispatch["binary"]("div", self, other, out=self)

    __add__, __sub__, __mul__, __truediv__ = add, sub, mul, div
    __iadd__, __isub__, __imul__, __itruediv__ = add_, sub_, mul_, div_
    __radd__, __rmul__ = add, mul

    def __rsub__(self, other: Any) -> Tensor:
        return dispatch["binary"]("sub", self, other, reverse=True)

    def __rtruediv__(self, other: Any) -> Tensor:
        return dispatch["binary"]("div", self, other, reverse=True)

    # ---- matrix products (vram.blas) -------------------------------------------------
    def matmul(self, other: Tensor) -> Tensor:
        """``self @ other`` with torch.matmul's rules (vram.matmul)."""
        return dispatch["matmul"](self, other)

    def mm(self, mat2: Tensor) -> Tensor:
        """``self`` [M, K] @ ``mat2`` [K, N] (vram.mm)."""
        return dispatch["mm"](self, mat2)

    __matmul__ = matmul

    def __rmatmul__(self, other: Any) -> Tensor:
        return dispatch["matmul"](other, self)

    # ---- interop ---------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3 (cuda tensors only; AttributeError otherwise)."""
        return dispatch["cuda_array_interface"](self)

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """A DLPack capsule sharing this tensor's memory (see vram._interop)."""
        return dispatch["to_dlpack"](self, stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return dispatch["dlpack_device"](self)

    def __repr__(self) -> str:
        text = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        extras = "" if self.device.type == "cpu" else f", device='{self.device}'"
        if self.dtype not in _DEFAULT_DTYPES:
            extras += f", dtype={self.dtype!r}"
        return f"tensor({text}{extras})"


# ---- shapes and strides ------------------------------------------------------------------


def _infer_shape(shape: tuple[Any, ...], numel: int) -> tuple[int, ...]:
    """A view's shape with at most one -1 filled in; errors name ``shape``."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    dims = [
        int(n) if isinstance(n, (int, np.integer)) and not isinstance(n, bool) else n for n in shape
    ]
    if any(not isinstance(n, int) for n in dims):
        raise TypeError(f"shape: dimensions must be ints, got {tuple(shape)}")
    if dims.count(-1) > 1 or any(n < -1 for n in dims):
        raise ValueError(f"shape: {tuple(shape)} has a bad dimension (one -1 at most)")
    known = math.prod(n for n in dims if n != -1)
    if -1 in dims:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape {tuple(shape)} is invalid for input of size {numel}")
        dims[dims.index(-1)] = numel // known
    elif known != numel:
        raise RuntimeError(f"shape {tuple(shape)} is invalid for input of size {numel}")
    return tuple(dims)


def _view_strides(
    old_shape: tuple[int, ...], old_stride: tuple[int, ...], new_shape: tuple[int, ...]
) -> tuple[int, ...] | None:
    """Strides that view ``old`` memory as ``new_shape``, or None (PyTorch's computeStride):
    each run of old dimensions that is contiguous in memory can be re-split freely."""
    if math.prod(old_shape) == 0 or not old_shape:
        return old_stride if old_shape == new_shape else contiguous_strides(new_shape)
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = old_stride[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        chunk_ends = tensor_d == 0 or (
            old_shape[tensor_d - 1] != 1 and old_stride[tensor_d - 1] != tensor_numel * chunk_base
        )
        if chunk_ends:
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_stride[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base = old_stride[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(new_stride) if view_d == -1 else None


def _index(t: Tensor, index: Any) -> tuple[list[int], list[int], int]:
    """Shape, strides and offset of ``t[index]`` (ints, slices with step > 0, None, ...)."""
    items = index if isinstance(index, tuple) else (index,)
    ellipses = [k for k, i in enumerate(items) if i is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(i is not None and i is not Ellipsis for i in items)
    if used > t.ndim:
        raise IndexError(f"too many indices for tensor of dimension {t.ndim}")
    fill = (slice(None),) * (t.ndim - used)
    if ellipses:
        items = items[: ellipses[0]] + fill + items[ellipses[0] + 1 :]
    else:
        items = items + fill
    shape: list[int] = []
    stride: list[int] = []
    offset, dim = t.storage_offset(), 0
    for item in items:
        if item is None:
            shape.append(1)
            stride.append(t.shape[dim] * t.stride()[dim] if dim < t.ndim else 1)
        elif isinstance(item, slice):
            n = t.shape[dim]
            if item.step is not None and item.step <= 0:
                raise ValueError(f"index: slice step must be greater than zero, got {item.step}")
            start, stop, step = item.indices(n)
            shape.append(len(range(start, stop, step)))
            stride.append(t.stride()[dim] * step)
            offset += start * t.stride()[dim] if shape[-1] else 0
            dim += 1
        elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            n = t.shape[dim]
            if not -n <= item < n:
                raise IndexError(f"index {item} is out of bounds for dimension {dim} with size {n}")
            offset += (int(item) % n) * t.stride()[dim]
            dim += 1
        else:
            raise TypeError(
                "index: only ints, slices (step > 0), None and ... are supported, "
                f"got {type(item).__name__}"
            )
    return shape, stride, offset


# ---- moving data between devices ---------------------------------------------------------


def _parse_to(t: Tensor, args: tuple, kwargs: dict) -> tuple[Device, dtype, bool]:
    """The (device, dtype, copy) that ``Tensor.to(*args, **kwargs)`` asks for."""
    device, dt = kwargs.pop("device", None), kwargs.pop("dtype", None)
    copy = bool(kwargs.pop("copy", False))
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to(): unexpected argument '{next(iter(kwargs))}'")
    for arg in args:
        if isinstance(arg, Tensor):
            device, dt = arg.device, arg.dtype
        elif isinstance(arg, bool):  # to(device, dtype, non_blocking)
            continue
        elif isinstance(arg, (Device, int, str)) and not _names_dtype(arg):
            device = arg
        else:
            dt = arg
    found = t.device if device is None else as_device(device)
    return found, t.dtype if dt is None else as_dtype(dt), copy


def _names_dtype(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        as_dtype(value)
    except TypeError:
        return False
    return True


def _upload(dst: Tensor, array: np.ndarray) -> None:
    """Host -> device into contiguous ``dst``; synchronizes (pageable host memory)."""
    if dst.numel() == 0:
        return
    stream = current_stream(dst.device)
    host = np.ascontiguousarray(array, dtype=dst.dtype.np)
    dst.device.driver.memcpy_htod(dst.data_ptr(), host, stream.cuda_stream)
    stream.synchronize()


def _download(out: np.ndarray, src: Tensor) -> None:
    """Device -> host from contiguous ``src`` into C-contiguous ``out``; synchronizes."""
    if src.numel() == 0:
        return
    stream = current_stream(src.device)
    src.device.driver.download(out, src.data_ptr(), stream.cuda_stream)


def _async_copy(dst: Tensor, src: Tensor) -> bool:
    """A non_blocking copy between pinned host memory and a device, queued on the device's
    current stream with no host wait; the pinned block is kept from reuse until the copy
    has run (an event recorded for the host allocator). False when it does not apply."""
    if src.shape != dst.shape or src.dtype != dst.dtype:
        return False
    if not (src.is_contiguous() and dst.is_contiguous()) or dst.numel() == 0:
        return False
    if src.device.type == "cpu" and src.is_pinned() and dst.device.type != "cpu":
        stream = current_stream(dst.device)
        dst.device.driver.memcpy_htod(dst.data_ptr(), src.numpy(), stream.cuda_stream)
        src._storage.owner.record_event(stream)
        return True
    if dst.device.type == "cpu" and dst.is_pinned() and src.device.type != "cpu":
        stream = current_stream(src.device)
        src.device.driver.memcpy_dtoh(dst.numpy(), src.data_ptr(), stream.cuda_stream)
        dst._storage.owner.record_event(stream)
        return True
    return False


def _copy_across_devices(dst: Tensor, src: Tensor) -> None:
    """``dst.copy_(src)`` for tensors on two devices: cast and lay out ``src`` on its own
    device, move the bytes, then copy them into ``dst``'s layout on ``dst``'s device."""
    try:
        shape = broadcast_shapes(src.shape, dst.shape)
    except ValueError:
        shape = None
    if shape != dst.shape:
        raise ValueError(f"src: shape {src.shape} cannot be broadcast to {dst.shape}")
    if src.dtype != dst.dtype or not src.is_contiguous() or src.shape != dst.shape:
        src = src.expand(dst.shape).to(dst.dtype, copy=True)
    target = dst if dst.is_contiguous() else Tensor._empty(dst.shape, dst.dtype, dst.device)
    if src.device.type == "cpu":
        _upload(target, src.numpy())
    elif dst.device.type == "cpu":
        _download(target.numpy(), src)
    elif src.device.type == dst.device.type:
        _copy_peer(target, src)
    else:  # between a sim and a cuda device: through the host
        _upload(target, src.numpy())
    if target is not dst:
        dst.copy_(target)


def _copy_peer(dst: Tensor, src: Tensor) -> None:
    """Copy contiguous ``src`` into ``dst`` on another device of the same kind, as PyTorch
    does: the copy runs on the source device's current stream after the work queued so far
    on both devices' current streams, and the destination's current stream waits for it.
    No host round trip and no host synchronization (cuMemcpyPeerAsync).

    Each step runs with its stream's device current: a default stream's handle (0 on CUDA)
    means the current device's legacy stream."""
    src_stream, dst_stream = current_stream(src.device), current_stream(dst.device)
    driver = src.device.driver
    dst_ready = dst_stream.record_event()
    with src.device:
        driver.stream_wait_event(src_stream.cuda_stream, dst_ready.cuda_event)
        driver.memcpy_peer(
            dst.data_ptr(),
            dst.device.index,
            src.data_ptr(),
            src.device.index,
            dst.nbytes,
            src_stream.cuda_stream,
        )
        copied = src_stream.record_event()
    with dst.device:
        driver.stream_wait_event(dst_stream.cuda_stream, copied.cuda_event)
