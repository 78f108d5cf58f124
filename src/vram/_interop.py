"""Zero-copy interop: DLPack (both ways) and the CUDA Array Interface v3 (both ways).

DLPack is built here in pure Python over the C structs with ctypes:
- Export (``Tensor.__dlpack__``) returns a PyCapsule named "dltensor_versioned" (DLPack 1.0,
  when the consumer passes ``max_version``) or "dltensor" over a DLManagedTensor(Versioned)
  that vram allocated. While the capsule or its consumer holds it, the
  tensor stays alive (``_exports``, keyed by the struct's address). The consumer calls the
  struct's ``deleter`` when done; a capsule dropped unconsumed (still named "dltensor")
  calls it from its destructor. Either way the deleter only drops the ``_exports`` entry.
- Import (``from_dlpack``) asks for DLPack 1.0 (falling back to legacy), renames the
  producer's capsule to "used_dltensor[_versioned]" (so the producer no longer frees it)
  and calls its deleter when the last vram tensor over it is dropped.
- Devices: cuda tensors export as kDLCUDA and cpu tensors as kDLCPU. Sim tensors export as
  kDLCPU at the real host address of the simulated memory, after synchronizing the tensor's
  current stream: the consumer sees the device memory itself (writes go through both ways),
  valid while the capsule or its consumer holds the tensor.

Streams: a consumer on a cuda device names its stream (``__dlpack__(stream=...)``); vram makes
that stream wait for the tensor's current stream, or synchronizes where it cannot name the
consumer's stream. Device memory from other libraries is never freed by vram.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from ._device import Device, current_device_obj
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
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from ._errors import CudaError
from ._streams import current_stream
from ._tensor import Storage, Tensor, contiguous_strides, dispatch, host_bytes

__all__ = ["from_dlpack", "to_dlpack", "dlpack_device", "cuda_array_interface"]

# DLDeviceType
_KDLCPU, _KDLCUDA, _KDLCUDAHOST, _KDLCUDAMANAGED = 1, 2, 3, 13
# DLDataTypeCode
_KDLINT, _KDLUINT, _KDLFLOAT, _KDLBFLOAT, _KDLCOMPLEX, _KDLBOOL = 0, 1, 2, 4, 5, 6

_TO_DL = {
    int8: (_KDLINT, 8),
    int16: (_KDLINT, 16),
    int32: (_KDLINT, 32),
    int64: (_KDLINT, 64),
    uint8: (_KDLUINT, 8),
    float16: (_KDLFLOAT, 16),
    float32: (_KDLFLOAT, 32),
    float64: (_KDLFLOAT, 64),
    bfloat16: (_KDLBFLOAT, 16),
    complex64: (_KDLCOMPLEX, 64),
    complex128: (_KDLCOMPLEX, 128),
    bool_: (_KDLBOOL, 8),
}
_FROM_DL = {code: dt for dt, code in _TO_DL.items()}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # void (*)(DLManagedTensor*)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _Deleter),
    ]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):  # DLPack 1.0
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _Deleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY

# The Python C API calls, with prototypes of their own (ctypes.pythonapi's are shared).
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)

# Capsule names (module constants: capsules keep pointers to these bytes), by DLPack kind.
_NAMES = {False: b"dltensor", True: b"dltensor_versioned"}
_USED_NAMES = {False: b"used_dltensor", True: b"used_dltensor_versioned"}
_STRUCTS = {False: _DLManagedTensor, True: _DLManagedTensorVersioned}

# address of an exported DLManagedTensor -> what must live until its deleter runs
_exports: dict[int, tuple[Any, ...]] = {}


def _delete_export(address: int | None) -> None:
    """The deleter of every DLManagedTensor vram exports: let go of the tensor."""
    if address:
        _exports.pop(address, None)


_deleter = _Deleter(_delete_export)


def _destroy_capsule(capsule: int) -> None:
    """PyCapsule destructor: a capsule nobody consumed still owns its DLManagedTensor.

    Takes the capsule as a raw pointer: it is being deallocated, so no reference may be taken.
    """
    for name in _NAMES.values():
        if _capsule_is_valid_raw(capsule, name):
            _delete_export(_capsule_get_pointer_raw(capsule, name))


_capsule_destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_destroy_capsule)


# ---- export ------------------------------------------------------------------------------


def dlpack_device(t: Tensor) -> tuple[int, int]:
    """(DLDeviceType, device id): kDLCUDA for cuda tensors, kDLCPU for cpu and sim tensors."""
    if t.device.type == "cuda":
        return _KDLCUDA, t.device.index  # type: ignore[return-value]
    return _KDLCPU, 0


def _host_address(t: Tensor) -> int:
    """Where a consumer on the host finds element 0 of ``t`` (sim: its backing memory)."""
    if t.device.type != "sim" or t.numel() == 0:
        return t.data_ptr()
    current_stream(t.device).synchronize()
    return t.device.driver.view(t.data_ptr(), t.element_size()).ctypes.data


def _wait_for_us(t: Tensor, stream: Any) -> None:
    """Make the consumer's cuda stream (DLPack's ``stream`` argument) wait for our work."""
    if stream == -1:
        return
    ours = current_stream(t.device)
    theirs = 0 if stream in (None, 1) else stream
    if theirs == ours.cuda_stream:
        return
    driver, index = t.device.driver, t.device.index
    if stream == 2:  # the per-thread default stream cannot be named here: wait on the host
        ours.synchronize()
        return
    event = driver.event_create(index)
    try:
        driver.event_record(event, ours.cuda_stream)
        driver.stream_wait_event(theirs, event)
    except (ValueError, CudaError):  # a stream vram did not make: wait on the host instead
        driver.event_synchronize(event)
    finally:
        driver.event_destroy(event)


def to_dlpack(
    t: Tensor,
    stream: Any = None,
    *,
    max_version: tuple[int, int] | None = None,
    dl_device: tuple[int, int] | None = None,
    copy: bool | None = None,
) -> Any:
    """A DLPack capsule sharing ``t``'s memory: "dltensor_versioned" (DLPack 1.0, writable)
    when ``max_version`` allows it, else a legacy "dltensor".

    ``stream``: for cuda tensors, the consumer's stream (None or 1: legacy default, 2:
    per-thread default, -1: no synchronization); it waits for the tensor's current stream.
    """
    if copy:
        raise BufferError("copy=True: vram exports DLPack without copying; copy the tensor first")
    if dl_device is not None and tuple(dl_device) != dlpack_device(t):
        raise BufferError(f"dl_device: cannot export a tensor on {t.device} to {dl_device}")
    if t.device.type == "cuda":
        _wait_for_us(t, stream)
    elif stream is not None:
        raise BufferError(f"stream: must be None for a tensor on {t.device}, got {stream!r}")
    versioned = max_version is not None and tuple(max_version) >= (1, 0)
    code, bits = _TO_DL[t.dtype]
    shape = (ctypes.c_int64 * max(t.ndim, 1))(*t.shape)
    strides = (ctypes.c_int64 * max(t.ndim, 1))(*t.stride())
    kind, index = dlpack_device(t)
    managed = _STRUCTS[versioned]()
    managed.dl_tensor = _DLTensor(
        _host_address(t) or None,
        _DLDevice(kind, index),
        t.ndim,
        _DLDataType(code, bits, 1),
        shape,
        strides,
        0,
    )
    managed.deleter = _deleter
    if versioned:
        managed.version = _DLPackVersion(1, 0)
    address = ctypes.addressof(managed)
    _exports[address] = (managed, shape, strides, t)
    destructor = ctypes.cast(_capsule_destructor, ctypes.c_void_p)
    return _capsule_new(address, _NAMES[versioned], destructor)


# ---- import ------------------------------------------------------------------------------


class _DLPackOwner:
    """Holds an imported DLManagedTensor(Versioned); calls its deleter when the last tensor
    over it goes."""

    __slots__ = ("address", "struct", "__weakref__")

    def __init__(self, address: int, struct: type[ctypes.Structure]) -> None:
        self.address = address
        self.struct = struct

    def __del__(self) -> None:
        try:
            deleter = self.struct.from_address(self.address).deleter
            if deleter:
                deleter(self.address)
        except Exception:  # finalizers never raise
            pass


def _extent(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    """Bytes from element 0 to the end of the last element (0 for no elements)."""
    if math.prod(shape) == 0:
        return 0
    return (sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + 1) * itemsize


def _wrap(
    device: Device, address: int, shape: tuple, strides: tuple, dt: dtype, owner: object
) -> Tensor:
    """A tensor over memory another library owns (kept alive through ``owner``)."""
    if any(s < 0 for s in strides):
        raise ValueError("obj: negative strides are not supported; make it contiguous first")
    nbytes = _extent(shape, strides, dt.itemsize)
    if device.type == "cpu":
        storage = Storage.of_host(host_bytes(address, nbytes, owner))
        storage.ptr = address  # element 0 is at the buffer's start (also when it is empty)
    else:
        storage = Storage(device, address, nbytes, owner)
    return Tensor._make(storage, shape, strides, 0, dt)


def _from_capsule(capsule: Any) -> Tensor:
    """Take over a "dltensor" or "dltensor_versioned" capsule."""
    versioned = next((v for v, name in _NAMES.items() if _capsule_is_valid(capsule, name)), None)
    if versioned is None:
        raise ValueError("x: the DLPack capsule was already consumed or is not a 'dltensor'")
    address = _capsule_get_pointer(capsule, _NAMES[versioned])
    managed = _STRUCTS[versioned].from_address(address)
    if versioned and managed.version.major != 1:
        raise BufferError(f"x: DLPack version {managed.version.major} is not supported")
    dl = managed.dl_tensor
    code = (dl.dtype.code, dl.dtype.bits)
    if dl.dtype.lanes != 1 or code not in _FROM_DL:
        raise TypeError(f"x: DLPack dtype (code {code[0]}, {code[1]} bits) has no vram dtype")
    kind, index = dl.device.device_type, dl.device.device_id
    if kind in (_KDLCPU, _KDLCUDAHOST):
        device = Device("cpu")
    elif kind in (_KDLCUDA, _KDLCUDAMANAGED):
        device = Device("cuda", index)
    else:
        raise TypeError(f"x: DLPack device type {kind} is not supported (cpu or cuda)")
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    strides = (
        tuple(dl.strides[i] for i in range(dl.ndim)) if dl.strides else contiguous_strides(shape)
    )
    _capsule_set_name(capsule, _USED_NAMES[versioned])  # ours now: the producer lets go
    owner = _DLPackOwner(address, _STRUCTS[versioned])
    data = (dl.data or 0) + dl.byte_offset
    return _wrap(device, data, shape, strides, _FROM_DL[code], owner)


def _request(x: Any, stream: Any) -> Any:
    """``x.__dlpack__``: a DLPack 1.0 capsule where the producer offers one."""
    kwargs = {} if stream is None else {"stream": stream}
    try:
        return x.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:  # a producer from before DLPack 1.0
        return x.__dlpack__(**kwargs)


def from_dlpack(x: Any) -> Tensor:
    """A vram tensor sharing the memory of a DLPack producer (NumPy, PyTorch, CuPy, ...),
    a "dltensor" capsule, or an object with ``__cuda_array_interface__``.

    A cuda producer is asked to order its work before the current stream of the device.
    """
    if isinstance(x, Tensor):
        return x
    if hasattr(x, "__dlpack__"):
        kind, index = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else (1, 0)
        if kind in (_KDLCUDA, _KDLCUDAMANAGED):
            handle = current_stream(Device("cuda", index)).cuda_stream
            capsule = _request(x, handle or 1)
        else:
            capsule = _request(x, None)
        return _from_capsule(capsule)
    if type(x).__name__ == "PyCapsule":  # a capsule handed over directly
        return _from_capsule(x)
    if hasattr(x, "__cuda_array_interface__"):
        return from_cuda_array_interface(x)
    raise TypeError(
        f"x: expected a DLPack producer, a 'dltensor' capsule or an object with "
        f"__cuda_array_interface__, got {type(x).__name__}"
    )


# ---- the CUDA Array Interface ------------------------------------------------------------


def cuda_array_interface(t: Tensor) -> dict[str, Any]:
    """``__cuda_array_interface__`` version 3 of a cuda tensor.

    ``stream`` is the tensor's current stream (1 for the legacy default stream), on which a
    consumer must order its work. AttributeError for tensors not on a cuda device.
    """
    if t.device.type != "cuda":
        raise AttributeError(
            f"__cuda_array_interface__: only cuda tensors have it; this one is on {t.device}"
        )
    if t.dtype == bfloat16:
        raise TypeError("__cuda_array_interface__: bfloat16 has no typestr; use DLPack")
    item = t.element_size()
    typestr = t.dtype.np.str
    handle = current_stream(t.device).cuda_stream
    return {
        "shape": tuple(t.shape),
        "typestr": typestr,
        "descr": [("", typestr)],
        "strides": None if t.is_contiguous() else tuple(s * item for s in t.stride()),
        "data": (t.data_ptr() if t.numel() else 0, False),
        "version": 3,
        "stream": handle or 1,
    }


def _cuda_device_of(obj: Any) -> Device:
    """The cuda device of a CAI producer: its ``__dlpack_device__``, else the current one."""
    if hasattr(obj, "__dlpack_device__"):
        kind, index = obj.__dlpack_device__()
        if kind in (_KDLCUDA, _KDLCUDAMANAGED):
            return Device("cuda", int(index))
    current = current_device_obj()
    return current if current.type == "cuda" else Device("cuda", 0)


def _wait_for_producer(device: Device, stream: int) -> None:
    """Order the current stream after the producer's ``stream`` (CAI v3's stream field)."""
    ours = current_stream(device)
    theirs = 0 if stream == 1 else stream
    if theirs == ours.cuda_stream:
        return
    driver, index = device.driver, device.index
    if stream == 2:
        driver.device_synchronize(index)
        return
    event = driver.event_create(index)
    try:
        driver.event_record(event, theirs)
        driver.stream_wait_event(ours.cuda_stream, event)
    except (ValueError, CudaError):  # a stream vram did not make: wait for the whole device
        driver.device_synchronize(index)
    finally:
        driver.event_destroy(event)


def from_cuda_array_interface(obj: Any) -> Tensor:
    """A cuda tensor sharing the memory ``obj.__cuda_array_interface__`` describes; it keeps
    ``obj`` alive, and vram never frees that memory."""
    cai = obj.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise TypeError("obj: masked arrays (__cuda_array_interface__ 'mask') are not supported")
    try:
        dt = as_dtype(np.dtype(cai["typestr"]), "obj")
    except TypeError as exc:
        raise TypeError(f"obj: typestr {cai['typestr']!r} has no vram dtype") from exc
    shape = tuple(int(n) for n in cai["shape"])
    if cai.get("strides") is None:
        strides = contiguous_strides(shape)
    else:
        if any(s % dt.itemsize for s in cai["strides"]):
            raise ValueError("obj: strides must be multiples of the element size")
        strides = tuple(int(s) // dt.itemsize for s in cai["strides"])
    device = _cuda_device_of(obj)
    if cai.get("version", 0) >= 3 and cai.get("stream") is not None:
        _wait_for_producer(device, int(cai["stream"]))
    return _wrap(device, int(cai["data"][0]), shape, strides, dt, obj)


# Tensor.__dlpack__ and friends reach these through the tensor layer's dispatch table.
dispatch.update(
    to_dlpack=to_dlpack, dlpack_device=dlpack_device, cuda_array_interface=cuda_array_interface
)
