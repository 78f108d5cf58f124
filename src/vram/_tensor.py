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
import itertools
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._device import Device, as_device, current_device_obj
from ._dtypes import (
    as_dtype,
    bfloat16,
    bool_,
    complex64,
    complex128,
    dtype,
    float16,
    float32,
    float64,
    get_default_dtype,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from ._printing import tensor_repr
from ._streams import Stream, as_stream, current_handle, current_stream
from ._views import (
    basic_index,
    chunk_sizes,
    expand_layout,
    infer_shape,
    int_sequence,
    movedim_order,
    narrow_offset,
    permute_order,
    split_sizes,
    squeeze_layout,
    unflatten_shape,
    unsqueeze_layout,
    view_strides,
    wrap_dim,
)
from .memory import Allocation, PinnedAllocation, allocate_pinned, allocator_for, made_allocator

__all__ = ["Tensor", "layout_id", "signature_id"]


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


def device_storage(nbytes: int, device: Device, stream: int | None = None) -> Storage:
    """``nbytes`` of new memory from the allocator of ``device`` (a cuda or sim Device), for
    ``stream`` (a handle: its current stream's when None), owned by the storage: for
    tensors laid out by their maker (``Tensor._make``)."""
    if not nbytes:
        return Storage(device, 0, 0, None)
    allocator = made_allocator(device) or allocator_for(device)
    ptr = allocator.malloc(nbytes, current_handle(device) if stream is None else stream)
    return Storage(device, ptr, nbytes, None, None, allocator)


class _Allocated(Storage):
    """A Storage that ``new_tensor`` made over memory from vram's allocator: it has no owner
    and no host array, which its class says (None) instead of two slots filled per tensor
    (Note [A new tensor in one frame])."""

    __slots__ = ()

    owner = None
    host = None


def new_tensor(
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    dt: dtype,
    device: Device,
    nbytes: int,
    stream: int | None = None,
    sig: int = 0,
) -> Tensor:
    """A new tensor of ``nbytes`` of memory laid out as ``shape`` / ``stride``, for
    ``stream`` (a handle: the device's current stream when None): every op's result.
    ``sig``: the layout's ``layout_id`` where the caller knows it (0: asked when needed).

    (``device_storage``, ``Storage`` and ``Tensor._make`` inline: one frame and the
    allocator's per new tensor, Note [A new tensor in one frame].)
    """
    allocator = made_allocator(device)  # (None on cpu, and until the device's first malloc)
    if allocator is not None and nbytes:
        ptr = allocator.malloc(nbytes, current_handle(device) if stream is None else stream)
        storage = _new(_Allocated)
        storage.device = device
        storage.ptr = ptr
        storage.nbytes = nbytes
        storage.allocator = allocator
    elif device.type == "cpu":
        storage = Storage.of_host(np.empty(nbytes, np.uint8))
    else:
        storage = device_storage(nbytes, device, stream)
    t = _new(Tensor)
    t._storage = storage
    t._shape = shape
    t._stride = stride
    t._offset = 0
    t.dtype = dt
    t.grad = None
    t._sig = sig
    return t


_new = object.__new__

# Note [A new tensor in one frame]
# An op's result is a Storage and a Tensor over new memory, made once per call of every op.
# ``new_tensor`` fills both objects' slots itself instead of calling their constructors and
# ``device_storage``: the Python frames around the allocator's malloc cost about as much as
# the malloc of a block taken back (Note [Taking a dropped block back] in
# memory/_caching.py), so a result costs this frame and the allocator's. Its storage is an
# ``_Allocated``, whose class holds the owner and host array that memory of vram's
# allocator never has, so that only the slots that differ per tensor are written.


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


# Note [Layouts remembered]: a view's shape and strides follow from the source's shape and
# strides and the call's int arguments alone; view, reshape (as a view), permute and
# transpose keep what they worked out under the source's layout id (``signature_id``: its
# dtype, shape, strides and device) and those arguments (bounded; cleared when full), with
# the view's own layout id, which the view carries: a model's repeated reshuffles of one
# activation's layout are one lookup, and the op the view goes to next finds its id made.
# Arguments of any other type (bools, floats, NumPy ints, lists) are not keys: bool and
# float compare equal to ints, and PyTorch refuses them where vram checks below.
_layouts: dict[Any, tuple[tuple[int, ...], tuple[int, ...], int]] = {}
_MAX_LAYOUTS = 4096
_INTS = frozenset((int,))


_signatures: dict[tuple, int] = {}
_next_id = itertools.count(1)
_MAX_SIGNATURES = 1 << 16


def layout_id(dt: dtype, shape: tuple[int, ...], stride: tuple[int, ...], device: Device) -> int:
    """A small int naming (dtype, shape, strides, device): plans are looked up by these ids,
    and a plan gives the tensors it makes the id of their layout (``new_tensor``'s ``sig``).
    Ids are never reused, so forgetting the table (when it grows past its bound) costs only
    lookups, never a wrong plan."""
    key = (dt, shape, stride, device)
    found = _signatures.get(key)
    if found is None:
        if len(_signatures) >= _MAX_SIGNATURES:
            _signatures.clear()
        found = _signatures.setdefault(key, next(_next_id))
    return found


def signature_id(t: Tensor) -> int:
    """``t``'s ``layout_id``, kept on the tensor (``t._sig``; 0 until asked)."""
    t._sig = found = layout_id(t.dtype, t._shape, t._stride, t._storage.device)
    return found


def _one_tuple_of_ints(args: tuple[Any, ...]) -> tuple[int, ...] | None:
    """The ints of ``view((2, 3))``'s one tuple argument, or None: not a key (the arguments
    of ``view(2, 3)`` are one already)."""
    if len(args) == 1 and type(args[0]) is tuple and {*map(type, args[0])} <= _INTS:
        return args[0]
    return None


def _remember_layout(key: Any, source: Tensor, shape: tuple, stride: tuple) -> tuple:
    """(shape, stride, the layout id of a view of ``source`` so), kept under ``key``."""
    layout = (shape, stride, layout_id(source.dtype, shape, stride, source._storage.device))
    if key is not None:
        if len(_layouts) >= _MAX_LAYOUTS:
            _layouts.clear()
        _layouts[key] = layout
    return layout


class Tensor:
    """A strided n-dimensional array on a cuda, sim or cpu device (PyTorch's torch.Tensor)."""

    __slots__ = (
        "_storage",
        "_shape",
        "_stride",
        "_offset",
        "dtype",
        "grad",
        "_sig",  # the id of (dtype, shape, stride, device) plans are keyed by; 0: not yet
        "__weakref__",
    )

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
        sig: int = 0,
    ) -> Tensor:
        """``sig``: the layout's ``layout_id`` where the caller knows it (0: asked when
        needed)."""
        t = _new(cls)
        t._storage = storage
        t._shape = shape
        t._stride = stride
        t._offset = offset
        t.dtype = dt
        t.grad = None  # set by the user (vram has no autograd); optimizers read it
        t._sig = sig
        return t

    @classmethod
    def _empty(
        cls, shape: tuple[int, ...], dt: dtype, device: Device, pin_memory: bool = False
    ) -> Tensor:
        """A new contiguous tensor with uninitialized contents (pinned host memory if asked)."""
        numel = math.prod(shape)
        if device.type != "cpu" and not pin_memory:  # device memory: the common case first
            return new_tensor(shape, contiguous_strides(shape), dt, device, numel * dt.itemsize)
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
        return wrap_dim(dim, self.ndim if ndim is None else ndim)

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

    # ---- views (the arithmetic in vram._views; advanced indexing in vram.ops) ---------
    def view(self, *shape: Any) -> Tensor:
        """The same elements with another shape, sharing memory; RuntimeError if the strides
        cannot express it (use ``reshape``)."""
        sizes = shape if {*map(type, shape)} <= _INTS else _one_tuple_of_ints(shape)
        key = ("view", self._sig or signature_id(self), sizes) if sizes is not None else None
        new_shape, strides, sig = _layouts.get(key) or self._view_layout(shape, key)
        if strides is None:
            raise RuntimeError(
                "view size is not compatible with input tensor's size and stride (at least one "
                "dimension spans across two contiguous subspaces). Use .reshape(...) instead."
            )
        return Tensor._make(self._storage, new_shape, strides, self._offset, self.dtype, sig)

    def _view_layout(self, shape: tuple[Any, ...], key: Any) -> tuple[tuple[int, ...], Any, int]:
        """(shape, strides, layout id) of a view of ``shape``'s sizes, worked out and
        remembered under ``key`` (Note [Layouts remembered]: ``view`` and ``reshape`` make
        the key and look it up in their own frame); strides None where the memory cannot be
        viewed so."""
        new_shape = infer_shape(shape, self.numel())
        strides = view_strides(self._shape, self._stride, new_shape)
        if strides is None:
            return new_shape, None, 0
        return _remember_layout(key, self, new_shape, strides)

    def view_as(self, other: Tensor) -> Tensor:
        return self.view(other.shape)

    def reshape(self, *shape: Any) -> Tensor:
        """A view when the strides allow one, else a contiguous copy."""
        sizes = shape if {*map(type, shape)} <= _INTS else _one_tuple_of_ints(shape)
        key = ("view", self._sig or signature_id(self), sizes) if sizes is not None else None
        new_shape, strides, sig = _layouts.get(key) or self._view_layout(shape, key)
        if strides is None:
            return self.contiguous().view(new_shape)
        return Tensor._make(self._storage, new_shape, strides, self._offset, self.dtype, sig)

    def reshape_as(self, other: Tensor) -> Tensor:
        return self.reshape(other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Dimensions ``start_dim`` to ``end_dim`` as one (a view where strides allow)."""
        start, end = wrap_dim(start_dim, self.ndim), wrap_dim(end_dim, self.ndim)
        if start > end:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        if self.ndim == 0:
            return self.reshape(1)
        if start == end:
            return self
        merged = math.prod(self._shape[start : end + 1])
        return self.reshape(self._shape[:start] + (merged,) + self._shape[end + 1 :])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Dimension ``dim`` split into ``sizes`` (one may be -1) (a view)."""
        return self.view(unflatten_shape(self._shape, dim, sizes))

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """Swap two dimensions (a view)."""
        plain = type(dim0) is int and type(dim1) is int
        key = ("transpose", self._sig or signature_id(self), dim0, dim1) if plain else None
        found = _layouts.get(key)
        if found is None:
            a, b = wrap_dim(dim0, self.ndim), wrap_dim(dim1, self.ndim)
            if self.ndim == 0:
                return self
            shape, stride = list(self._shape), list(self._stride)
            shape[a], shape[b] = shape[b], shape[a]
            stride[a], stride[b] = stride[b], stride[a]
            found = _remember_layout(key, self, tuple(shape), tuple(stride))
        return Tensor._make(self._storage, found[0], found[1], self._offset, self.dtype, found[2])

    swapaxes = swapdims = transpose

    def t(self) -> Tensor:
        """Transpose a tensor of at most 2 dimensions (a view)."""
        if self.ndim > 2:
            raise RuntimeError(
                f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D"
            )
        return self.transpose(0, 1) if self.ndim == 2 else self

    @property
    def T(self) -> Tensor:  # noqa: N802 - PyTorch's name
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> Tensor:  # noqa: N802 - PyTorch's name
        """The last two dimensions swapped (a batch of matrices transposed)."""
        if self.ndim < 2:
            raise RuntimeError(
                "tensor.mT is only supported on matrices or batches of matrices. Got "
                f"{self.ndim}-D tensor."
            )
        return self.transpose(-2, -1)

    def permute(self, *dims: Any) -> Tensor:
        """Reorder the dimensions (a view)."""
        order = dims if {*map(type, dims)} <= _INTS else _one_tuple_of_ints(dims)
        key = ("permute", self._sig or signature_id(self), order) if order is not None else None
        found = _layouts.get(key)
        if found is None:
            order = permute_order(dims, self.ndim)
            shape = tuple(self._shape[d] for d in order)
            found = _remember_layout(key, self, shape, tuple(self._stride[d] for d in order))
        return Tensor._make(self._storage, found[0], found[1], self._offset, self.dtype, found[2])

    def movedim(self, source: Any, destination: Any) -> Tensor:
        """Dimensions ``source`` moved to positions ``destination`` (a view)."""
        return self.permute(movedim_order(source, destination, self.ndim))

    moveaxis = movedim

    def expand(self, *sizes: Any) -> Tensor:
        """Broadcast to ``sizes`` (a view; -1 keeps a dimension, new dims go in front)."""
        shape, stride = expand_layout(self._shape, self._stride, sizes)
        return self._view(shape, stride, self._offset)

    def expand_as(self, other: Tensor) -> Tensor:
        return self.expand(other.shape)

    def squeeze(self, dim: Any = None) -> Tensor:
        """Size-1 dimensions removed: all, or those of ``dim`` (an int or a tuple) (a view)."""
        shape, stride = squeeze_layout(self._shape, self._stride, dim)
        return self._view(shape, stride, self._offset)

    def unsqueeze(self, dim: int) -> Tensor:
        """A size-1 dimension inserted at ``dim`` (a view)."""
        shape, stride = unsqueeze_layout(self._shape, self._stride, dim)
        return self._view(shape, stride, self._offset)

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """Elements ``start`` to ``start + length`` along ``dim`` (a view)."""
        if self.ndim == 0:
            raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
        d = wrap_dim(dim, self.ndim)
        first = narrow_offset(self._shape[d], start, length)
        shape = self._shape[:d] + (int(length),) + self._shape[d + 1 :]
        return self._view(shape, self._stride, self._offset + first * self._stride[d])

    def select(self, dim: int, index: int) -> Tensor:
        """The slice at ``index`` along ``dim``, that dimension removed (a view)."""
        if self.ndim == 0:
            raise IndexError("select() cannot be applied to a 0-dim tensor.")
        d = wrap_dim(dim, self.ndim)
        n = self._shape[d]
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index: expected an int, got {index!r}")
        if not -n <= index < n:
            raise IndexError(
                f"select(): index {index} out of range for tensor of size {list(self._shape)} "
                f"at dimension {d}"
            )
        offset = self._offset + (int(index) % n) * self._stride[d]
        return self._view(
            self._shape[:d] + self._shape[d + 1 :], self._stride[:d] + self._stride[d + 1 :], offset
        )

    def split(self, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
        """Views of pieces along ``dim``: of ``split_size`` each (the last may be smaller),
        or of the sizes in a list."""
        if self.ndim == 0:
            raise RuntimeError("split expects at least a 1-dimensional tensor")
        d = wrap_dim(dim, self.ndim)
        return self._pieces(d, split_sizes(self._shape[d], split_size_or_sections, d))

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """At most ``chunks`` views of equal size along ``dim`` (the last may be smaller)."""
        if self.ndim == 0:
            raise RuntimeError("chunk expects at least a 1-dimensional tensor")
        d = wrap_dim(dim, self.ndim)
        return self._pieces(d, chunk_sizes(self._shape[d], chunks))

    def _pieces(self, d: int, sizes: list[int]) -> tuple[Tensor, ...]:
        pieces, start = [], 0
        for n in sizes:
            pieces.append(self.narrow(d, start, n))
            start += n
        return tuple(pieces)

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        """Every slice along ``dim`` (views without that dimension)."""
        if self.ndim == 0:
            raise IndexError("Dimension specified as 0 but tensor has no dimensions")
        d = wrap_dim(dim, self.ndim)
        return tuple(self.select(d, i) for i in range(self._shape[d]))

    def __getitem__(self, index: Any) -> Tensor:
        """Basic indexing (ints, slices, None, ..., True/False) is a view; tensors, lists and
        arrays in the index read a copy (PyTorch's advanced indexing, vram.ops)."""
        shape = self._shape
        if type(index) is int and shape and 0 <= index < shape[0]:  # t[i], the commonest
            stride = self._stride
            at = self._offset + index * stride[0]
            return Tensor._make(self._storage, shape[1:], stride[1:], at, self.dtype)
        (shape, stride, offset), advanced = basic_index(shape, self._stride, self._offset, index)
        view = self._view(shape, stride, offset)
        return dispatch["__getitem__"](view, advanced) if advanced else view

    def __setitem__(self, index: Any, value: Any) -> None:
        (shape, stride, offset), advanced = basic_index(
            self._shape, self._stride, self._offset, index
        )
        target = self._view(shape, stride, offset)
        if isinstance(value, Tensor) and not advanced:
            target.copy_(value)
        elif isinstance(value, (numbers.Number, np.generic)) and not advanced:
            target.fill_(value)
        else:  # through tensors, arrays or lists, or a list or array of values (vram.ops)
            dispatch["__setitem__"](target, advanced, value)

    # ---- indexing, joining and triangles (vram.ops: _indexing, _advanced, _nonzero, _shapes) --
    def index_select(self, dim: int, index: Tensor) -> Tensor:
        return dispatch["index_select"](self, dim, index)

    def gather(self, dim: int, index: Tensor) -> Tensor:
        return dispatch["gather"](self, dim, index)

    def scatter(
        self, dim: int, index: Tensor, src: Any = None, value: Any = None, *, reduce: Any = None
    ) -> Tensor:
        return dispatch["scatter"](self, dim, index, src, value, reduce=reduce)

    def scatter_(
        self, dim: int, index: Tensor, src: Any = None, value: Any = None, *, reduce: Any = None
    ) -> Tensor:
        return dispatch["scatter_"](self, dim, index, src, value, reduce=reduce)

    def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        return dispatch["scatter_add"](self, dim, index, src)

    def scatter_add_(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        return dispatch["scatter_add_"](self, dim, index, src)

    def index_put(self, indices: Sequence[Any], values: Tensor, accumulate: bool = False) -> Tensor:
        return dispatch["index_put"](self, indices, values, accumulate)

    def index_put_(
        self, indices: Sequence[Any], values: Tensor, accumulate: bool = False
    ) -> Tensor:
        return dispatch["index_put_"](self, indices, values, accumulate)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        return dispatch["masked_fill"](self, mask, value)

    def masked_fill_(self, mask: Tensor, value: Any) -> Tensor:
        return dispatch["masked_fill_"](self, mask, value)

    def masked_select(self, mask: Tensor) -> Tensor:
        """The elements where ``mask`` is True, 1-D. Synchronizes."""
        return dispatch["masked_select"](self, mask)

    def nonzero(self, *, as_tuple: bool = False) -> Any:
        """The indices of the nonzero elements. Synchronizes."""
        return dispatch["nonzero"](self, as_tuple=as_tuple)

    def argwhere(self) -> Tensor:
        return dispatch["argwhere"](self)

    def repeat(self, *sizes: Any) -> Tensor:
        return dispatch["repeat"](self, *sizes)

    def tile(self, *dims: Any) -> Tensor:
        return dispatch["tile"](self, int_sequence(dims, "dims"))

    def tril(self, diagonal: int = 0) -> Tensor:
        return dispatch["tril"](self, diagonal)

    def tril_(self, diagonal: int = 0) -> Tensor:
        return dispatch["tril_"](self, diagonal)

    def triu(self, diagonal: int = 0) -> Tensor:
        return dispatch["triu"](self, diagonal)

    def triu_(self, diagonal: int = 0) -> Tensor:
        return dispatch["triu_"](self, diagonal)

    # ---- diagonals, flips and rolls (vram.ops._composite) ----------------------------
    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """A view of the diagonal of the (``dim1``, ``dim2``) matrices."""
        return dispatch["diagonal"](self, offset, dim1, dim2)

    def diag(self, diagonal: int = 0) -> Tensor:
        return dispatch["diag"](self, diagonal)

    def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
        return dispatch["diag_embed"](self, offset, dim1, dim2)

    def trace(self) -> Tensor:
        return dispatch["trace"](self)

    def outer(self, vec2: Tensor) -> Tensor:
        return dispatch["outer"](self, vec2)

    def flip(self, *dims: Any) -> Tensor:
        return dispatch["flip"](self, int_sequence(dims, "dims"))

    def fliplr(self) -> Tensor:
        return dispatch["fliplr"](self)

    def flipud(self) -> Tensor:
        return dispatch["flipud"](self)

    def roll(self, shifts: Any, dims: Any = None) -> Tensor:
        return dispatch["roll"](self, shifts, dims)

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
            dispatch["copy_"](self, src)
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
        """NumPy's view of a cpu tensor. A device tensor raises TypeError, as torch's CUDA
        tensors do: ``np.exp(t)`` must not copy to the host behind the user's back (call
        ``t.cpu()`` or ``t.numpy()``, which copies and says so)."""
        if self.device.type != "cpu":
            raise TypeError(
                f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() "
                "to copy the tensor to host memory first."
            )
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def tolist(self) -> Any:
        """The values as (nested) Python lists, or a number for a 0-d tensor. Synchronizes."""
        return self.numpy().tolist()

    def item(self) -> bool | int | float | complex:
        """The value of a one-element tensor as a Python number. Synchronizes."""
        count = self.numel()
        if count != 1:
            raise RuntimeError(f"a Tensor with {count} elements cannot be converted to Scalar")
        return self.numpy().reshape(-1)[0].item()

    def __bool__(self) -> bool:
        count = self.numel()
        if count == 0:
            raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
        if count > 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())  # type: ignore[arg-type]

    def __int__(self) -> int:
        return int(self.item())  # type: ignore[arg-type]

    def __complex__(self) -> complex:
        return complex(self.item())

    def __index__(self) -> int:
        if self.dtype.is_floating_point or self.dtype.is_complex or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())  # type: ignore[arg-type]

    def __iter__(self) -> Any:
        """The tensor's rows: ``t[0]``, ``t[1]``, ... (views)."""
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._shape[0]))

    def __reduce__(self) -> tuple:
        """Pickled as its values, dtype, shape and device (unpickled on that device, which
        must exist where it is loaded, as torch's CUDA tensors)."""
        host = np.ascontiguousarray(self.numpy())
        return _unpickle, (host.tobytes(), self.dtype.name, self._shape, str(self.device))

    def __deepcopy__(self, memo: dict) -> Tensor:
        found = memo.get(id(self))
        if found is None:
            found = memo[id(self)] = self.clone()
        return found

    def detach(self) -> Tensor:
        """A new tensor sharing this one's memory (vram records no autograd history)."""
        return self._view(self._shape, self._stride, self._offset)

    def cuda(self, device: Any = None, non_blocking: bool = False) -> Tensor:
        """This tensor on a device with a driver: ``device``, else the current device (cuda:N
        where a GPU is usable, sim:N otherwise, as vram.default_device chooses). A copy unless
        it is there already."""
        target = current_device_obj() if device is None else as_device(device)
        if target.type == "cpu":
            raise ValueError("device: cuda() moves a tensor to a device, not to the cpu")
        return self.to(target, non_blocking=non_blocking)

    def half(self) -> Tensor:
        return self.to(float16)

    def bfloat16(self) -> Tensor:
        return self.to(bfloat16)

    def float(self) -> Tensor:
        return self.to(float32)

    def double(self) -> Tensor:
        return self.to(float64)

    def int(self) -> Tensor:
        return self.to(int32)

    def long(self) -> Tensor:
        return self.to(int64)

    def short(self) -> Tensor:
        return self.to(int16)

    def char(self) -> Tensor:
        return self.to(int8)

    def byte(self) -> Tensor:
        return self.to(uint8)

    def bool(self) -> Tensor:
        return self.to(bool_)

    def type(self, dtype: Any = None) -> Any:
        """The dtype's name without ``dtype``; a converted tensor with it (torch's form)."""
        if dtype is None:
            return f"vram.{self.dtype.name}"
        return self.to(as_dtype(dtype))

    def new_empty(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        """A new tensor with this one's dtype and device unless given (uninitialized)."""
        dt = self.dtype if dtype is None else as_dtype(dtype)
        found = self.device if device is None else as_device(device)
        return Tensor._empty(as_shape(size), dt, found)

    def new_zeros(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return self.new_empty(*size, dtype=dtype, device=device).zero_()

    def new_ones(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return self.new_empty(*size, dtype=dtype, device=device).fill_(1)

    def new_full(
        self, size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None
    ) -> Tensor:
        shape = size if isinstance(size, (tuple, list)) else (size,)
        return self.new_empty(*shape, dtype=dtype, device=device).fill_(fill_value)

    def fill_(self, value: Any) -> Tensor:
        """Set every element to ``value``."""
        return dispatch["fill_"](self, value)

    def zero_(self) -> Tensor:
        return dispatch["fill_"](self, 0)

    # ---- pointwise ops (vram.ops): the methods below and the in-place twins of _UNARY ----
    def add(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return dispatch["add"](self, other, alpha=alpha)

    def add_(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return dispatch["add"](self, other, alpha=alpha, out=self)

    def sub(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return dispatch["sub"](self, other, alpha=alpha)

    def sub_(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return dispatch["sub"](self, other, alpha=alpha, out=self)

    def div(self, other: Any, *, rounding_mode: str | None = None) -> Tensor:
        return dispatch["div"](self, other, rounding_mode=rounding_mode)

    def div_(self, other: Any, *, rounding_mode: str | None = None) -> Tensor:
        return dispatch["div"](self, other, rounding_mode=rounding_mode, out=self)

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        return dispatch["clamp"](self, min, max)

    def clamp_(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        return dispatch["clamp"](self, min, max, out=self)

    clip, clip_ = clamp, clamp_

    def addcmul(self, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
        return dispatch["addcmul"](self, tensor1, tensor2, value=value)

    def addcmul_(self, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
        return dispatch["addcmul"](self, tensor1, tensor2, value=value, out=self)

    def addcdiv(self, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
        return dispatch["addcdiv"](self, tensor1, tensor2, value=value)

    def addcdiv_(self, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
        return dispatch["addcdiv"](self, tensor1, tensor2, value=value, out=self)

    def lerp(self, end: Tensor, weight: Any) -> Tensor:
        return dispatch["lerp"](self, end, weight)

    def lerp_(self, end: Tensor, weight: Any) -> Tensor:
        return dispatch["lerp"](self, end, weight, out=self)

    def where(self, condition: Tensor, other: Any) -> Tensor:
        """``self`` where ``condition``, else ``other`` (torch.where(condition, self, other))."""
        return dispatch["where"](condition, self, other)

    def nan_to_num(
        self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
    ) -> Tensor:
        return dispatch["nan_to_num"](self, nan, posinf, neginf)

    def nan_to_num_(
        self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
    ) -> Tensor:
        return dispatch["nan_to_num"](self, nan, posinf, neginf, out=self)

    # Python's operators, as torch's: elementwise, comparisons included (bool results)
    def __add__(self, other: Any) -> Tensor:
        return dispatch["__add__"](self, other)

    def __radd__(self, other: Any) -> Tensor:
        return dispatch["__add__"](self, other)

    def __iadd__(self, other: Any) -> Tensor:
        return dispatch["__iadd__"](self, other)

    def __sub__(self, other: Any) -> Tensor:
        return dispatch["__sub__"](self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return dispatch["sub"](other, self)

    def __isub__(self, other: Any) -> Tensor:
        return dispatch["__isub__"](self, other)

    def __mul__(self, other: Any) -> Tensor:
        return dispatch["__mul__"](self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return dispatch["__mul__"](self, other)

    def __imul__(self, other: Any) -> Tensor:
        return dispatch["__imul__"](self, other)

    def __truediv__(self, other: Any) -> Tensor:
        return dispatch["__truediv__"](self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return dispatch["div"](other, self)

    def __itruediv__(self, other: Any) -> Tensor:
        return dispatch["__itruediv__"](self, other)

    def __floordiv__(self, other: Any) -> Tensor:
        return dispatch["floor_divide"](self, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return dispatch["floor_divide"](other, self)

    def __ifloordiv__(self, other: Any) -> Tensor:
        return dispatch["floor_divide"](self, other, out=self)

    def __mod__(self, other: Any) -> Tensor:
        return dispatch["remainder"](self, other)

    def __rmod__(self, other: Any) -> Tensor:
        return dispatch["remainder"](other, self)

    def __imod__(self, other: Any) -> Tensor:
        return dispatch["remainder"](self, other, out=self)

    def __pow__(self, other: Any) -> Tensor:
        return dispatch["pow"](self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return dispatch["pow"](other, self)

    def __ipow__(self, other: Any) -> Tensor:
        return dispatch["pow"](self, other, out=self)

    def __neg__(self) -> Tensor:
        return dispatch["neg"](self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return dispatch["abs"](self)

    def __invert__(self) -> Tensor:
        return dispatch["bitwise_not"](self)

    def __and__(self, other: Any) -> Tensor:
        return dispatch["bitwise_and"](self, other)

    __rand__ = __and__

    def __iand__(self, other: Any) -> Tensor:
        return dispatch["bitwise_and"](self, other, out=self)

    def __or__(self, other: Any) -> Tensor:
        return dispatch["bitwise_or"](self, other)

    __ror__ = __or__

    def __ior__(self, other: Any) -> Tensor:
        return dispatch["bitwise_or"](self, other, out=self)

    def __xor__(self, other: Any) -> Tensor:
        return dispatch["bitwise_xor"](self, other)

    __rxor__ = __xor__

    def __ixor__(self, other: Any) -> Tensor:
        return dispatch["bitwise_xor"](self, other, out=self)

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        if not isinstance(other, (Tensor, numbers.Number, np.generic)):
            return NotImplemented
        return dispatch["__eq__"](self, other)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        if not isinstance(other, (Tensor, numbers.Number, np.generic)):
            return NotImplemented
        return dispatch["__ne__"](self, other)

    def __lt__(self, other: Any) -> Tensor:
        return dispatch["__lt__"](self, other)

    def __le__(self, other: Any) -> Tensor:
        return dispatch["__le__"](self, other)

    def __gt__(self, other: Any) -> Tensor:
        return dispatch["__gt__"](self, other)

    def __ge__(self, other: Any) -> Tensor:
        return dispatch["__ge__"](self, other)

    __hash__ = object.__hash__  # by identity, as torch.Tensor (``==`` is elementwise)

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
        """As torch prints tensors (vram._printing)."""
        default = get_default_dtype()
        complex_default = complex128 if default is float64 else complex64
        return tensor_repr(self, default, (default, complex_default, int64, bool_))


# ---- the op methods that only forward (the ops layer fills ``dispatch``) -------------------

# unary ops: ``t.exp()``, and ``t.exp_()`` in place
_UNARY = (
    "abs",
    "neg",
    "sign",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sigmoid",
    "erf",
    "floor",
    "ceil",
    "round",
    "trunc",
    "logical_not",
    "bitwise_not",
    "relu",
    "erfc",
    "erfinv",
    "lgamma",
    "digamma",
    "sinh",
    "cosh",
    "asin",
    "acos",
    "atan",
    "asinh",
    "acosh",
    "atanh",
    "sinc",
    "deg2rad",
    "rad2deg",
    "square",
    "frac",
    "sgn",
    "logit",
)
_UNARY_ONLY = ("isnan", "isinf", "isfinite")  # no in-place form (the result is bool)
# no in-place form in torch either: ``t.positive()``, ``t.logaddexp(o)``, ``t.isclose(o)``
_NO_INPLACE = ("positive", "logaddexp", "logaddexp2", "isclose", "allclose", "equal")
# reductions, scans and row ops: ``t.sum(dim)``, ``t.max(dim)``, ``t.softmax(dim)``
_REDUCTIONS = (
    "sum",
    "prod",
    "mean",
    "amax",
    "amin",
    "aminmax",
    "max",
    "min",
    "argmax",
    "argmin",
    "var",
    "std",
    "norm",
    "all",
    "any",
    "logsumexp",
    "cumsum",
    "cumprod",
    "softmax",
    "log_softmax",
)
# binary ops: ``t.mul(other)``, and ``t.mul_(other)`` in place
_BINARY = (
    "mul",
    "true_divide",
    "floor_divide",
    "remainder",
    "fmod",
    "pow",
    "maximum",
    "minimum",
    "atan2",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "clamp_min",
    "clamp_max",
    "hypot",
    "copysign",
    "xlogy",
    "heaviside",
)
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")  # and their in-place forms, as torch's
_ALIASES = {  # torch's other names for the same ops
    "absolute": "abs",
    "negative": "neg",
    "multiply": "mul",
    "divide": "div",
    "subtract": "sub",
    "greater": "gt",
    "greater_equal": "ge",
    "less": "lt",
    "less_equal": "le",
    "not_equal": "ne",
    "fix": "trunc",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
}


def _forward(name: str, inplace: bool) -> Callable[..., Tensor]:
    if inplace:

        def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
            return dispatch[name](self, *args, out=self, **kwargs)

        method.__name__ = f"{name}_"
        method.__doc__ = f"In place: ``t.{name}_(...)`` writes ``t.{name}(...)`` into ``t``."
    else:

        def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
            return dispatch[name](self, *args, **kwargs)

        method.__name__ = name
        method.__doc__ = f"``vram.{name}(t, ...)`` (torch.Tensor.{name})."
    method.__qualname__ = f"Tensor.{method.__name__}"
    return method


for _name in _UNARY + _BINARY + _COMPARE:
    setattr(Tensor, _name, _forward(_name, False))
    setattr(Tensor, f"{_name}_", _forward(_name, True))
for _name in _UNARY_ONLY + _NO_INPLACE + _REDUCTIONS:
    setattr(Tensor, _name, _forward(_name, False))
for _alias, _name in _ALIASES.items():
    setattr(Tensor, _alias, getattr(Tensor, _name))
    if hasattr(Tensor, f"{_name}_"):
        setattr(Tensor, f"{_alias}_", getattr(Tensor, f"{_name}_"))

# random numbers (vram.ops._random): t.normal_(mean, std), t.uniform_(from, to),
# t.random_([from,] to), t.bernoulli_(p), t.bernoulli([p]); each takes generator=
for _name in ("normal_", "uniform_", "random_", "bernoulli_", "bernoulli"):
    setattr(Tensor, _name, _forward(_name, False))
    getattr(Tensor, _name).__doc__ = f"torch.Tensor.{_name} (vram.ops._random)."


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


def _unpickle(data: bytes, dtype_name: str, shape: tuple[int, ...], device: str) -> Tensor:
    """A pickled tensor (``Tensor.__reduce__``) made again on its device."""
    dt = as_dtype(dtype_name)
    values = np.frombuffer(data, dtype=dt.np).reshape(shape)
    out = Tensor._empty(tuple(shape), dt, as_device(device))
    if out.device.type == "cpu":
        out.numpy()[...] = values
    else:
        _upload(out, values)
    return out
