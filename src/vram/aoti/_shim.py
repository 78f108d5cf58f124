"""The shim library in this process: loaded once, ``RTLD_GLOBAL``, with its calls into vram.

``shim(kind)`` builds (at first use), loads and wires the library: a model loaded after it
resolves its ``aoti_torch_*`` imports here. Its callbacks are vram's decisions (``_calls``);
its handles become vram tensors and back through ``_tensors``.

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
from ctypes import POINTER, byref, c_char_p, c_int32, c_int64, c_void_p
from pathlib import Path
from typing import Any

from ._build import library_path
from ._calls import CallbackTable, Calls
from ._elf import dynamic_symbols
from ._tensors import Boundary, TensorDesc

__all__ = ["Shim", "shim", "bound_kind", "libtorch_loaded", "refuse_libtorch"]

_ABI_VERSION = 1  # vram_aoti_abi_version() of the sources this module drives
_HANDLE = c_void_p
_SIZES = POINTER(c_int64)
_DESC = POINTER(TensorDesc)
# the prototypes vram.aoti calls (tests call the rest with ctypes-typed arguments)
_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "vram_aoti_abi_version": (c_int32, []),
    "vram_aoti_last_error": (c_char_p, []),
    "vram_aoti_clear_error": (None, []),
    "vram_aoti_set_error": (None, [c_char_p]),
    "vram_aoti_set_callbacks": (None, [POINTER(CallbackTable)]),
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


class Shim(Boundary):
    """The loaded library (``lib``, a ctypes CDLL), its handles as vram tensors (Boundary's
    methods) and the calls into vram it makes (``calls``)."""

    def __init__(self, kind: str) -> None:
        refuse_libtorch()
        self.path: Path = library_path()
        super().__init__(ctypes.CDLL(str(self.path), mode=os.RTLD_NOW | os.RTLD_GLOBAL), kind)
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
        self.calls = Calls(self)
        self.lib.vram_aoti_set_callbacks(byref(self.calls.table))

    def live_tensors(self) -> int:
        """Tensor handles alive in the library (all threads)."""
        return self.lib.vram_aoti_live_objects(1)

    def recording_raw(self) -> Any:
        """Collect the raw allocations made in a ``with`` block (a model's weights)."""
        return self.calls.recording_raw()


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
