"""Tensors across the boundary with the shim library: a vram tensor as a new handle, a
handle as a vram tensor, and the description (vram_tensor_desc) a callback receives.

- ``Boundary.handle(t)``: a borrowed handle over a tensor's memory (a model's input).
- ``Boundary.tensors(descs)``: vram tensors over described memory, for the length of one
  callback; views of one storage share one Storage, so that vram's overlap checks see them.
- ``Boundary.adopt(handles)``: a model's outputs. Memory from vram's allocator that only the
  outputs view becomes theirs (an Allocation: record_stream and record_use work); anything
  else (a model's constants, an input) stays behind a handle the tensor keeps.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from collections.abc import Sequence
from ctypes import POINTER, byref, c_int32, c_int64, c_void_p
from typing import Any

from .. import _dtypes
from .._device import Device
from .._tensor import Storage, Tensor, host_bytes
from ..interop._streams import peer_stream
from ..memory import Allocation, allocator_for

__all__ = ["Boundary", "TensorDesc", "DTYPE_CODES", "DEVICE_CPU", "DEVICE_CUDA"]

DEVICE_CPU, DEVICE_CUDA = 0, 1  # c10::DeviceType
# vram dtype name -> c10::ScalarType code (aoti_torch_dtype_*)
DTYPE_CODES = {
    "uint8": 0,
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "float16": 5,
    "float32": 6,
    "float64": 7,
    "complex64": 9,
    "complex128": 10,
    "bool": 11,
    "bfloat16": 15,
}
_DTYPES = {code: _dtypes.as_dtype(name) for name, code in DTYPE_CODES.items()}


class TensorDesc(ctypes.Structure):
    """A tensor as the library describes it (vram_tensor_desc)."""

    _fields_ = [
        ("storage_id", ctypes.c_size_t),
        ("base", c_void_p),
        ("nbytes", c_int64),
        ("ndim", c_int64),
        ("sizes", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("offset", c_int64),
        ("dtype", c_int32),
        ("device_type", c_int32),
        ("device_index", c_int32),
        ("sized", c_int32),
    ]


class Boundary:
    """The shim library's handles as vram tensors and back, for devices of one ``kind``."""

    def __init__(self, lib: ctypes.CDLL, kind: str) -> None:
        self.lib = lib
        self.kind = kind
        self._devices: dict[tuple[int, int], Device] = {}

    def error(self) -> str:
        """The library's last error message on this thread ('' for none)."""
        return (self.lib.vram_aoti_last_error() or b"").decode("utf-8", "replace")

    def device(self, device_type: int, index: int) -> Device:
        """The vram device a (c10 device type, index) pair means here."""
        found = self._devices.get((device_type, index))
        if found is None:
            if device_type == DEVICE_CPU:
                found = Device("cpu")
            elif device_type == DEVICE_CUDA:
                found = Device(self.kind, index)
            else:
                raise ValueError(f"device type {device_type} is not one vram.aoti runs on")
            self._devices[(device_type, index)] = found
        return found

    def handle(self, t: Tensor) -> int:
        """A new handle viewing ``t``'s memory (borrowed: the caller keeps ``t`` alive)."""
        code = DTYPE_CODES.get(t.dtype.name)
        if code is None:
            raise TypeError(f"dtype: {t.dtype.name} has no AOTInductor dtype code")
        device_type = DEVICE_CPU if t.device.type == "cpu" else DEVICE_CUDA
        ndim = t.ndim
        sizes = (c_int64 * ndim)(*t.shape)
        strides = (c_int64 * ndim)(*t.stride())
        handle = c_void_p()
        result = self.lib.aoti_torch_create_tensor_from_blob_v2(
            t.data_ptr() or None, ndim, sizes, strides, 0, code, device_type,
            t.device.index or 0, byref(handle), 0, None, 0,
        )  # fmt: skip
        if result != 0:
            raise RuntimeError(f"vram.aoti: {self.error()}")
        return handle.value  # type: ignore[return-value]

    def delete(self, handle: int) -> None:
        self.lib.aoti_torch_delete_tensor_object(handle)

    def adopt(self, handles: Sequence[int], keep: object) -> tuple[Tensor, ...]:
        """vram tensors for output ``handles``, which this call consumes. Memory from vram's
        allocator becomes the tensors' own (an Allocation: record_stream and record_use
        work); other memory (a model's constants, an input) stays with a handle that the
        tensor keeps, with ``keep``."""
        descs = []
        owners: dict[int, Any] = {}
        try:
            for handle in handles:
                desc = TensorDesc()
                if self.lib.vram_aoti_describe(handle, byref(desc)) != 0:
                    raise RuntimeError(f"vram.aoti: an output: {self.error()}")
                descs.append(_Desc.of(desc))
            sizes = _sizes(descs)
            views = Counter(desc.storage_id for desc in descs)
            storages: dict[int, Storage] = {}
            for handle, desc in zip(handles, descs, strict=True):
                if desc.storage_id not in storages:
                    storage, kept = self._storage(handle, desc, sizes[desc.storage_id],
                                                  views[desc.storage_id], keep)  # fmt: skip
                    storages[desc.storage_id] = storage
                    if kept:
                        owners[handle] = storage.owner
            return tuple(desc.tensor(storages[desc.storage_id]) for desc in descs)
        finally:
            for handle in handles:
                if handle not in owners:
                    self.delete(handle)

    def _storage(
        self, handle: int, desc: _Desc, size: int, views: int, keep: object
    ) -> tuple[Storage, bool]:
        """The Storage of an output's memory: its own (an Allocation) when nothing but the
        ``views`` outputs views it, else borrowed through its handle, kept with ``keep``."""
        device = self.device(desc.device_type, desc.device_index)
        data, nbytes, stream = c_void_p(), c_int64(), c_void_p()
        taken = self.lib.vram_aoti_take_storage(
            handle, views, byref(data), byref(nbytes), byref(stream)
        )
        if taken < 0:
            raise RuntimeError(f"vram.aoti: an output: {self.error()}")
        ptr = data.value or 0
        if taken:
            owner = Allocation(
                ptr,
                nbytes.value,
                device,
                peer_stream(stream.value or 0, device),
                allocator_for(device),
            )
            return Storage(device, ptr, nbytes.value, owner), False
        kept = _HandleOwner(self.lib, handle, keep)
        if device.type == "cpu":
            return Storage(device, ptr, size, kept, host_bytes(ptr, size, kept)), True
        return Storage(device, ptr, size, kept), True

    def tensors(self, descs: Sequence[TensorDesc]) -> list[Tensor]:
        """vram tensors over the memory ``descs`` describe (borrowed: alive for one call).
        Views of one storage share one Storage; the same view twice is the same tensor."""
        found = [_Desc.of(d) for d in descs]
        sizes = _sizes(found)
        storages: dict[int, Storage] = {}
        views: dict[tuple, Tensor] = {}
        out = []
        for desc in found:
            sid = desc.storage_id
            key = (sid, desc.shape, desc.strides, desc.offset, desc.dtype)
            tensor = views.get(key) if sid else None
            if tensor is None:
                storage = storages.get(sid) if sid else None
                if storage is None:
                    device = self.device(desc.device_type, desc.device_index)
                    size = sizes[sid]
                    host = host_bytes(desc.base, size, None) if device.type == "cpu" else None
                    storage = storages[sid] = Storage(device, desc.base, size, None, host)
                tensor = views[key] = desc.tensor(storage)
            out.append(tensor)
        return out


class _Desc:
    """A TensorDesc's values, copied out of the library's memory."""

    __slots__ = (
        "storage_id", "base", "nbytes", "shape", "strides", "offset", "dtype", "device_type",
        "device_index", "sized",
    )  # fmt: skip

    @classmethod
    def of(cls, desc: TensorDesc) -> _Desc:
        d = cls()
        ndim = desc.ndim
        d.storage_id = desc.storage_id
        d.base = desc.base or 0
        d.nbytes = desc.nbytes
        d.shape = tuple(desc.sizes[:ndim])
        d.strides = tuple(desc.strides[:ndim])
        d.offset = desc.offset
        d.dtype = desc.dtype
        d.device_type = desc.device_type
        d.device_index = desc.device_index
        d.sized = desc.sized
        return d

    def extent(self) -> int:
        """Bytes from the storage's start to the end of this view's last element."""
        if 0 in self.shape:
            return 0
        span = 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True))
        return (self.offset + span) * _itemsize(self.dtype)

    def tensor(self, storage: Storage) -> Tensor:
        dt = _DTYPES.get(self.dtype)
        if dt is None:
            raise TypeError(f"dtype code {self.dtype} has no vram dtype")
        return Tensor._make(storage, self.shape, self.strides, self.offset, dt)


def _itemsize(code: int) -> int:
    dt = _DTYPES.get(code)
    if dt is None:
        raise TypeError(f"dtype code {code} has no vram dtype")
    return dt.itemsize


def _sizes(descs: Sequence[_Desc]) -> dict[int, int]:
    """The bytes each storage spans: its size where known, else what its views reach."""
    out: dict[int, int] = {}
    for desc in descs:
        if desc.sized:
            out[desc.storage_id] = desc.nbytes
        else:
            reach = max(desc.nbytes, desc.extent())
            out[desc.storage_id] = max(out.get(desc.storage_id, 0), reach)
    return out


class _HandleOwner:
    """Keeps a handle (and ``keep``) alive for a tensor whose memory vram does not own."""

    __slots__ = ("lib", "handle", "keep", "__weakref__")

    def __init__(self, lib: ctypes.CDLL, handle: int, keep: object) -> None:
        self.lib = lib
        self.handle = handle
        self.keep = keep

    def __del__(self) -> None:
        try:
            self.lib.aoti_torch_delete_tensor_object(self.handle)
        except Exception:  # finalizers never raise
            pass
