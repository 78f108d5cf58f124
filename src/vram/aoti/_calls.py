"""The calls into vram the shim library makes: its table of callbacks (vram_callbacks).

- memory: vram.interop's pluggable-allocator pair (``Callbacks``: the caching allocator of
  the device, on the stream the C side names), and the raw pair for a model's weights
  (``weight_use_caching_allocator``), whose blocks a model labels in snapshots;
- the current device and stream: vram's (a model's stream guard overrides the stream in C);
- GEMMs: ``vram.mm(out=)``, ``addmm``, ``bmm``, ``baddbmm`` on the named stream (NumPy for
  tensors in host memory); copies and zeroing: ``Tensor.copy_`` and ``zero_``.

A callback never raises into C: a failure sets the library's error message and returns
non-zero; the shim returns an error code, and vram.aoti raises the message.
"""

from __future__ import annotations

import ctypes
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from ctypes import CFUNCTYPE, POINTER, c_char_p, c_double, c_int32, c_void_p
from typing import Any

import numpy as np

from .._device import Device, current_device_obj, set_device
from .._streams import current_stream
from .._streams import stream as use_stream
from .._tensor import Tensor
from ..blas import addmm, baddbmm, bmm, mm
from ..interop._pluggable import Callbacks
from ..interop._streams import peer_stream
from ..memory import allocator_for, clear_label
from ._tensors import Boundary, TensorDesc

__all__ = ["Calls", "CallbackTable"]

_GEMM_MM, _GEMM_ADDMM, _GEMM_BMM, _GEMM_BADDBMM = range(4)
_MESSAGE_BYTES = 1000

_DESC = POINTER(TensorDesc)
_ALLOC = CFUNCTYPE(c_void_p, ctypes.c_size_t, c_int32, c_void_p)
_RAW_FREE = CFUNCTYPE(c_int32, c_void_p)
_CURRENT_STREAM = CFUNCTYPE(c_int32, c_int32, POINTER(c_void_p))
_CURRENT_DEVICE = CFUNCTYPE(c_int32, POINTER(c_int32))
_SET_DEVICE = CFUNCTYPE(c_int32, c_int32)
_GEMM = CFUNCTYPE(c_int32, c_int32, _DESC, _DESC, _DESC, _DESC, c_double, c_double, c_void_p)
_COPY = CFUNCTYPE(c_int32, _DESC, _DESC, c_void_p)
_ZERO = CFUNCTYPE(c_int32, _DESC, c_void_p)
_WARN = CFUNCTYPE(None, c_char_p)


class CallbackTable(ctypes.Structure):  # vram_callbacks, field for field
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


class Calls:
    """vram's answers to the library's questions, for devices of one ``kind``; ``table`` is
    what ``vram_aoti_set_callbacks`` takes (kept alive with this object)."""

    def __init__(self, boundary: Boundary) -> None:
        self.boundary = boundary
        self.lib = boundary.lib
        self.kind = boundary.kind
        self.memory = Callbacks(self.kind, self._current_index)
        self.raw: dict[int, Device] = {}  # raw allocations (a model's weights) -> device
        self.recording: list[int] | None = None  # raw allocations a model load is making
        self._functions = [  # C holds their addresses: they live as long as this object
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
        self.table = CallbackTable(alloc, free, *self._functions)

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
            o, x, y, *rest = self.boundary.tensors(given)
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
            d, s = self.boundary.tensors([dst[0], src[0]])
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
            (tensor,) = self.boundary.tensors([t[0]])
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


def _on(stream: int | None, device: Device) -> Any:
    """A context where ``stream`` (a handle) is ``device``'s current vram stream: nothing to
    do when it already is (a model runs on the current stream)."""
    if current_stream(device).cuda_stream == (stream or 0):
        return nullcontext()
    return use_stream(peer_stream(stream or 0, device))


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
