"""The shim library in this process: loaded once, ``RTLD_GLOBAL``, with its calls into vram.

``shim(kind)`` builds (at first use), loads and wires the library: a model loaded after it
resolves its ``aoti_torch_*`` imports here. The callbacks it installs are vram's decisions:

- memory: vram.interop's pluggable-allocator pair (``Callbacks``: the caching allocator of
  the device, on the stream the C side names), and the raw pair for a model's weights
  (``weight_use_caching_allocator``), whose blocks the model labels in snapshots;
- the current device and stream: vram's (a model's stream guard overrides the stream in C);
- GEMMs: ``vram.mm(out=)``, ``addmm``, ``bmm``, ``baddbmm`` on the named stream (NumPy for
  tensors in host memory); copies and zeroing: ``Tensor.copy_`` and ``zero_``.

A callback never raises into C: a failure sets the library's error message and returns
non-zero; the shim returns an error code, and vram.aoti raises the message.

The library maps PyTorch's cuda device type to one kind of vram device per process, the
kind of the first model or shim call ("cuda", or "sim" where tests run the shims on the
simulated GPU). It refuses to load in a process that has loaded libtorch, which exports the
same symbol names (pytorch#190922).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from ctypes import CFUNCTYPE, POINTER, byref, c_char_p, c_double, c_int32, c_int64, c_void_p
from pathlib import Path
from typing import Any

import numpy as np

from .. import _dtypes
from .._device import Device, current_device_obj, set_device
from .._streams import current_stream
from .._streams import stream as use_stream
from .._tensor import Storage, Tensor, host_bytes
from ..blas import addmm, baddbmm, bmm, mm
from ..interop._pluggable import Callbacks
from ..interop._streams import peer_stream
from ..memory import Allocation, allocator_for, clear_label
from ._build import library_path
from ._elf import dynamic_symbols

__all__ = [
    "Shim",
    "TensorDesc",
    "shim",
    "libtorch_loaded",
    "refuse_libtorch",
    "DTYPE_CODES",
    "DEVICE_CPU",
    "DEVICE_CUDA",
]

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
_GEMM_MM, _GEMM_ADDMM, _GEMM_BMM, _GEMM_BADDBMM = range(4)
_ABI_VERSION = 1  # vram_aoti_abi_version() of the sources this module drives
_MESSAGE_BYTES = 1000


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


_DESC = POINTER(TensorDesc)
_ALLOC = CFUNCTYPE(c_void_p, ctypes.c_size_t, c_int32, c_void_p)
_FREE = CFUNCTYPE(None, c_void_p, ctypes.c_size_t, c_int32, c_void_p)
_RAW_FREE = CFUNCTYPE(c_int32, c_void_p)
_CURRENT_STREAM = CFUNCTYPE(c_int32, c_int32, POINTER(c_void_p))
_CURRENT_DEVICE = CFUNCTYPE(c_int32, POINTER(c_int32))
_SET_DEVICE = CFUNCTYPE(c_int32, c_int32)
_GEMM = CFUNCTYPE(c_int32, c_int32, _DESC, _DESC, _DESC, _DESC, c_double, c_double, c_void_p)
_COPY = CFUNCTYPE(c_int32, _DESC, _DESC, c_void_p)
_ZERO = CFUNCTYPE(c_int32, _DESC, c_void_p)
_WARN = CFUNCTYPE(None, c_char_p)


class _Table(ctypes.Structure):  # vram_callbacks, field for field
    _fields_ = [
        ("alloc", c_void_p),
        ("free", c_void_p),
        ("raw_alloc", _ALLOC),
        ("raw_free", _RAW_FREE),
        ("current_stream", _CURRENT_STREAM),
        ("current_device", _CURRENT_DEVICE),
        ("set_device", _SET_DEVICE),
        ("gemm", _GEMM),
        ("copy", _COPY),
        ("zero", _ZERO),
        ("warn", _WARN),
    ]


_HANDLE = c_void_p
_SIZES = POINTER(c_int64)
# the prototypes vram.aoti calls (tests call the rest with ctypes-typed arguments)
_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "vram_aoti_abi_version": (c_int32, []),
    "vram_aoti_last_error": (c_char_p, []),
    "vram_aoti_clear_error": (None, []),
    "vram_aoti_set_error": (None, [c_char_p]),
    "vram_aoti_set_callbacks": (None, [POINTER(_Table)]),
    "vram_aoti_describe": (c_int32, [_HANDLE, _DESC]),
    "vram_aoti_take_storage": (
        c_int32,
        [_HANDLE, c_int64, POINTER(c_void_p), POINTER(c_int64), POINTER(c_void_p)],
    ),
    "vram_aoti_live_objects": (c_int64, [c_int32]),
    "vram_aoti_run": (
        c_int32,
        [c_void_p, c_void_p, POINTER(_HANDLE), ctypes.c_size_t, POINTER(_HANDLE)]
        + [ctypes.c_size_t, c_void_p],
    ),
    "vram_aoti_create": (
        c_int32,
        [c_void_p, POINTER(c_void_p), ctypes.c_size_t, c_char_p, c_char_p],
    ),
    "vram_aoti_update_constants": (c_int32, [c_void_p, c_void_p, c_void_p]),
    "vram_aoti_delete": (c_int32, [c_void_p, c_void_p]),
    "aoti_torch_create_tensor_from_blob_v2": (
        c_int32,
        [c_void_p, c_int64, _SIZES, _SIZES, c_int64, c_int32, c_int32, c_int32]
        + [POINTER(_HANDLE), c_int32, c_void_p, c_int64],
    ),
    "aoti_torch_empty_strided": (
        c_int32,
        [c_int64, _SIZES, _SIZES, c_int32, c_int32, c_int32, POINTER(_HANDLE)],
    ),
    "aoti_torch_delete_tensor_object": (c_int32, [_HANDLE]),
}


def libtorch_loaded() -> str | None:
    """What shows that libtorch is in this process (the torch module, or its library in
    the process's memory map), or None."""
    if "torch" in sys.modules:
        return "the torch module is imported"
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "/libtorch" in line:
                    return line.split()[-1]
    except OSError:
        pass
    return None


def refuse_libtorch() -> None:
    """RuntimeError when libtorch is in this process (see the module docstring)."""
    found = libtorch_loaded()
    if found is not None:
        raise RuntimeError(
            f"vram.aoti cannot run in a process that has loaded libtorch ({found}): both "
            "export the aoti_torch_* symbols a compiled model imports (pytorch#190922), so "
            "the model would bind to one of them at random. Run the model in a process that "
            "does not import torch, or use torch._inductor.aoti_load_package"
        )


class Shim:
    """The loaded library (``lib``, a ctypes CDLL) and the calls into vram it makes."""

    def __init__(self, kind: str) -> None:
        refuse_libtorch()
        self.kind = kind
        self.path: Path = library_path()
        self.lib = ctypes.CDLL(str(self.path), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        for name, (restype, argtypes) in _PROTOTYPES.items():
            function = getattr(self.lib, name)
            function.restype = restype
            function.argtypes = argtypes
        version = self.lib.vram_aoti_abi_version()
        if version != _ABI_VERSION:
            raise RuntimeError(
                f"vram.aoti: {self.path} implements callbacks v{version}, this vram drives "
                f"v{_ABI_VERSION}; remove it from the cache folder to rebuild it"
            )
        self.exports = dynamic_symbols(self.path).defined
        self.memory = Callbacks(kind, self._current_index)
        self.raw: dict[int, Device] = {}  # raw allocations (a model's weights) -> device
        self._devices: dict[tuple[int, int], Device] = {}
        self.recording: list[int] | None = None  # raw allocations a model load is making
        self._callbacks = [  # kept alive with this object: C holds their addresses
            _ALLOC(self._raw_alloc),
            _RAW_FREE(self._raw_free),
            _CURRENT_STREAM(self._current_stream),
            _CURRENT_DEVICE(self._current_device),
            _SET_DEVICE(self._set_device),
            _GEMM(self._gemm),
            _COPY(self._copy),
            _ZERO(self._zero),
            _WARN(self._warn),
        ]
        alloc, free = self.memory.addresses
        self._table = _Table(alloc, free, *self._callbacks)
        self.lib.vram_aoti_set_callbacks(byref(self._table))

    # ---- what callers ask ---------------------------------------------------------------
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

    def live_tensors(self) -> int:
        """Tensor handles alive in the library (all threads)."""
        return self.lib.vram_aoti_live_objects(1)

    def handle(self, t: Tensor) -> int:
        """A new handle viewing ``t``'s memory (borrowed: the caller keeps ``t`` alive)."""
        code = DTYPE_CODES.get(t.dtype.name)
        if code is None:
            raise TypeError(f"dtype: {t.dtype.name} has no AOTInductor dtype code")
        device_type = DEVICE_CPU if t.device.type == "cpu" else DEVICE_CUDA
        ndim = t.ndim
        sizes = (c_int64 * ndim)(*t.shape)
        strides = (c_int64 * ndim)(*t.stride())
        handle = _HANDLE()
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

    @contextmanager
    def recording_raw(self) -> Iterator[list[int]]:
        """Collect the raw allocations made in the block (a model's weights at load)."""
        made: list[int] = []
        self.recording = made
        try:
            yield made
        finally:
            self.recording = None

    # ---- the callbacks (each catches everything: nothing may cross into C) --------------
    def _failed(self, what: str, exc: BaseException) -> int:
        message = f"{what}: {type(exc).__name__}: {exc}"[:_MESSAGE_BYTES]
        try:
            self.lib.vram_aoti_set_error(message.encode("utf-8", "replace"))
        except BaseException:  # nothing may cross into C
            pass
        return 1

    def _current_index(self) -> int:
        current = current_device_obj()
        return current.index if current.type == self.kind and current.index is not None else 0

    def _current_stream(self, device: int, out: Any) -> int:
        try:
            out[0] = current_stream(Device(self.kind, device)).cuda_stream or None
            return 0
        except BaseException as exc:
            return self._failed("the current stream", exc)

    def _current_device(self, out: Any) -> int:
        try:
            out[0] = self._current_index()
            return 0
        except BaseException as exc:
            return self._failed("the current device", exc)

    def _set_device(self, device: int) -> int:
        try:
            set_device(Device(self.kind, device))
            return 0
        except BaseException as exc:
            return self._failed(f"set_device({device})", exc)

    def _raw_alloc(self, size: int, device: int, stream: int | None) -> int | None:
        try:
            found = Device(self.kind, device)
            ptr = allocator_for(found).malloc(size, peer_stream(stream or 0, found).cuda_stream)
            self.raw[ptr] = found
            if self.recording is not None:
                self.recording.append(ptr)
            return ptr
        except BaseException as exc:
            self._failed(f"raw allocation of {size} bytes", exc)
            return None

    def _raw_free(self, ptr: int | None) -> int:
        try:
            device = self.raw.pop(ptr or 0, None)
            if device is None:
                raise ValueError(f"{ptr:#x} was not allocated by the raw allocation shim")
            clear_label(ptr)  # type: ignore[arg-type]
            allocator_for(device).free(ptr)
            return 0
        except BaseException as exc:
            return self._failed("raw free", exc)

    def _gemm(
        self, op: int, out: Any, a: Any, b: Any, bias: Any, beta: float, alpha: float, stream: Any
    ) -> int:
        try:
            given = [out[0], a[0], b[0]] + ([bias[0]] if bias else [])
            o, x, y, *rest = self.tensors(given)
            add = rest[0] if rest else None
            if o.device.type == "cpu":
                _host_gemm(o, x, y, add, beta, alpha)
                return 0
            with _on(stream, o.device):
                if op == _GEMM_MM:
                    mm(x, y, out=o)
                elif op == _GEMM_BMM:
                    bmm(x, y, out=o)
                elif op == _GEMM_ADDMM:
                    addmm(add, x, y, beta=beta, alpha=alpha, out=o)
                else:
                    baddbmm(add, x, y, beta=beta, alpha=alpha, out=o)
            return 0
        except BaseException as exc:
            names = ("mm_out", "addmm_out", "bmm_out", "baddbmm_out")
            return self._failed(names[op] if 0 <= op < 4 else "gemm", exc)

    def _copy(self, dst: Any, src: Any, stream: Any) -> int:
        try:
            d, s = self.tensors([dst[0], src[0]])
            device = d.device if d.device.type != "cpu" else s.device
            if device.type == "cpu":
                np.copyto(d.numpy(), np.broadcast_to(s.numpy(), d.shape), casting="unsafe")
            else:
                with _on(stream, device):
                    d.copy_(s)
            return 0
        except BaseException as exc:
            return self._failed("copy_", exc)

    def _zero(self, t: Any, stream: Any) -> int:
        try:
            (tensor,) = self.tensors([t[0]])
            if tensor.device.type == "cpu":
                tensor.numpy()[...] = 0
            else:
                with _on(stream, tensor.device):
                    tensor.zero_()
            return 0
        except BaseException as exc:
            return self._failed("zero_", exc)

    def _warn(self, message: bytes | None) -> None:
        try:
            text = (message or b"").decode("utf-8", "replace")
            warnings.warn(f"vram.aoti: a model warns: {text}", RuntimeWarning, stacklevel=2)
        except BaseException:  # a filter set to "error" must not cross into C
            pass


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


def _on(stream: int | None, device: Device) -> Any:
    """A context where ``stream`` (a handle) is ``device``'s current vram stream: nothing to
    do when it already is (a model runs on the current stream)."""
    if current_stream(device).cuda_stream == (stream or 0):
        return nullcontext()
    return use_stream(peer_stream(stream or 0, device))


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


def _host_gemm(
    out: Tensor, a: Tensor, b: Tensor, bias: Tensor | None, beta: float, alpha: float
) -> None:
    """A GEMM of tensors in host memory, accumulated in fp32 (fp64 for fp64), as cuBLAS."""
    acc = np.float64 if out.dtype.name == "float64" else np.float32
    product = np.matmul(a.numpy().astype(acc), b.numpy().astype(acc))
    if alpha != 1:
        product *= acc(alpha)
    if bias is not None and beta != 0:
        product += acc(beta) * bias.numpy().astype(acc)
    out.numpy()[...] = product.astype(out.dtype.np)


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


_shim: Shim | None = None
_lock = threading.Lock()


def shim(kind: str) -> Shim:
    """The process's shim library, bound to ``kind`` devices ("cuda" or "sim")."""
    global _shim
    if kind not in ("cuda", "sim"):
        raise ValueError(f"kind: expected 'cuda' or 'sim', got {kind!r}")
    with _lock:
        if _shim is None:
            _shim = Shim(kind)
        elif _shim.kind != kind:
            raise RuntimeError(
                f"vram.aoti is bound to {_shim.kind} devices in this process (its first use "
                f"was on {_shim.kind}); a model on {kind} needs a process of its own"
            )
        return _shim


def bound_kind() -> str | None:
    """The kind the process's shim library is bound to, or None before its first use."""
    return None if _shim is None else _shim.kind
