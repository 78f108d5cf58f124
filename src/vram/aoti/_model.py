"""An AOTInductor-compiled model, loaded and run by vram: ``vram.aoti.load``.

Loading, in order: the shim library (RTLD_GLOBAL); a check that it exports every
``aoti_torch_*`` symbol the model imports (all missing ones named); the CUDA runtime
(RTLD_GLOBAL) when the model calls it (``link_libtorch=False`` models call cudaMalloc,
cudaEventRecord... and link only libcuda); the process's libstdc++ (RTLD_GLOBAL: Note [A
model's own C++ runtime]); the model (RTLD_NOW, RTLD_LOCAL); its container
(AOTInductorModelContainerCreateWithDevice), which loads its constants; their blob when
they live outside the library (AOTInductorModelUpdateConstantsFromBlob).

Running: inputs become borrowed handles, the container runs on the current vram stream of
the model's device (AOTInductorModelContainerRunSingleThreaded: no events, no waits, so a
run can be captured in a CUDA graph; runs of one model are serialized by a lock), and the
outputs become vram tensors that own their memory.

Note [A model's own C++ runtime]: a CUDA model compiled with ``link_libtorch=False`` links
libstdc++ statically and exports its symbols, among them the locale facets' ids and their
guards as GNU-unique symbols, which the dynamic linker makes one per process whatever the
RTLD flags: where the process already has the shared libstdc++ (a C++ extension brought it),
the model's inline code indexed a locale its own copy built with the shared copy's facet ids,
and std::regex in parse_device_str faulted inside AOTInductorModelContainerCreateWithDevice on
every CUDA package (seen on an H200; RTLD_DEEPBIND does not help: unique symbols ignore it).
Made global first, the shared libstdc++ interposes every libstdc++ symbol the model uses, as in
the C++ processes that load such models (PyTorch's runner, ExecuTorch), so that one copy does
all of it; where no shared libstdc++ exists, nothing can mix with the model's own.

Note [The first run]: a model's first run folds its constants and loads its kernels
(cudaEventSynchronize, cuModuleLoadData), which a stream that captures a graph must not
see; vram.aoti refuses to capture a model that has not run yet, as torch.cuda.graphs asks
for warm-up iterations.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import shutil
import threading
import weakref
import zipfile
from ctypes import POINTER, byref, c_bool, c_char_p, c_int32, c_size_t, c_void_p
from pathlib import Path
from typing import Any

from .._device import Device, as_device, current_device_obj
from .._interop import from_dlpack
from .._streams import current_stream
from .._tensor import Tensor
from ..driver import cuda_usable, load_cuda_runtime
from ..memory import Allocation, set_label
from ._elf import dynamic_symbols
from ._package import extract_model
from ._shim import Shim, bound_kind, refuse_libtorch, shim
from ._tensors import DTYPE_CODES

__all__ = ["Model", "load"]

_CONTAINER = "AOTInductorModelContainer"
_LABELLED_NAMES = 6  # constant names a snapshot label lists before "..."


def load(path: str | os.PathLike, device: object = None, *, model_name: str = "model") -> Model:
    """Load an AOTInductor-compiled model: a ``.pt2`` package
    (torch._inductor.aoti_compile_and_package) or a model's ``.so``.

    ``device``: where it runs (the current device if None); a model compiled for CUDA runs
    on a cuda device (or, for tests of the shims, a sim device), a model compiled for the
    CPU on "cpu". ``model_name``: which model of a package (torch's default, "model").
    The model must have been compiled with ``aot_inductor.link_libtorch=False``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: no file {path}")
    found = current_device_obj() if device is None else as_device(device)
    if zipfile.is_zipfile(path):
        extracted = extract_model(path, model_name)
        try:
            return Model(
                extracted.library,
                found,
                name=path.name,
                cubin_dir=extracted.folder if extracted.has_kernel_files else None,
                weights_blob=extracted.weights_blob,
                folder=extracted.folder,
            )
        except BaseException:
            shutil.rmtree(extracted.folder, ignore_errors=True)
            raise
    if _magic(path) != b"\x7fELF":
        raise ValueError(f"path: {path} is neither a .pt2 package nor a shared library")
    kernels = any(p.suffix in (".cubin", ".fatbin") for p in path.parent.iterdir())
    blob = next(iter(sorted(path.parent.glob(f"{path.stem}_weights.blob"))), None)
    return Model(path, found, name=path.name, cubin_dir=path.parent if kernels else None,
                 weights_blob=blob)  # fmt: skip


def _magic(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(4)


def _share_cxx_runtime() -> None:
    """The shared libstdc++ made global in this process, where there is one (Note [A model's
    own C++ runtime])."""
    try:
        ctypes.CDLL("libstdc++.so.6", mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError:  # none on this system: the model's own copy is the only one
        pass


def _kind_for(device: Device) -> str:
    if device.type != "cpu":
        return device.type
    return bound_kind() or ("cuda" if cuda_usable() else "sim")


class Model:
    """A loaded AOTInductor model: ``model(*tensors)`` runs it (see ``vram.aoti.load``)."""

    def __init__(
        self,
        library: Path,
        device: Device,
        *,
        name: str,
        cubin_dir: Path | None = None,
        weights_blob: Path | None = None,
        folder: Path | None = None,
    ) -> None:
        self.name = name
        self.device = device
        self.path = library
        self._shim: Shim = shim(_kind_for(device))
        refuse_libtorch()  # (torch may have come after the shim library)
        self._check_symbols(library)
        try:
            _share_cxx_runtime()
            self._lib = ctypes.CDLL(str(library), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as exc:
            raise RuntimeError(f"vram.aoti: cannot load {name}: {exc}") from None
        self._address: dict[str, int] = {}
        for suffix in ("CreateWithDevice", "Delete", "GetNumInputs", "GetNumOutputs"):
            self._address[suffix] = self._function(_CONTAINER + suffix, required=True)
        run = self._function(_CONTAINER + "RunSingleThreaded") or self._function(_CONTAINER + "Run")
        if not run:
            raise RuntimeError(
                f"vram.aoti: {name} has no {_CONTAINER}Run: not an AOTInductor model"
            )
        self._run = run
        self._lock = threading.Lock()
        self._ran = False
        self._borrowers: weakref.WeakSet = weakref.WeakSet()  # outputs viewing constants
        container = c_void_p()
        where = b"cpu" if device.type == "cpu" else f"cuda:{device.index}".encode()
        kernels = str(cubin_dir).encode() if cubin_dir is not None else None
        with _current(device), self._shim.recording_raw() as weights:
            result = self._shim.lib.vram_aoti_create(
                self._address["CreateWithDevice"], byref(container), 1, where, kernels
            )
            if result != 0:
                raise RuntimeError(f"vram.aoti: creating {name} failed: {self._error()}")
            self._container = container.value
            self._finalizer = weakref.finalize(
                self, _delete, self._shim, self._address["Delete"], self._container
            )
            self._finalizer.atexit = False  # at exit the process's memory goes anyway
            if weights_blob is not None:
                self._load_blob(weights_blob)
        if folder is not None:
            weakref.finalize(self, shutil.rmtree, folder, True)
        self.num_inputs = self._count("GetNumInputs")
        self.num_outputs = self._count("GetNumOutputs")
        self.constant_names, self._constant_bytes = self._constants()
        listed = ", ".join(self.constant_names[:_LABELLED_NAMES])
        more = ", ..." if len(self.constant_names) > _LABELLED_NAMES else ""
        for ptr in weights:
            set_label(ptr, f"aoti constants of {name}: {listed}{more}")

    # ---- loading ------------------------------------------------------------------------
    def _check_symbols(self, library: Path) -> None:
        try:
            needed = dynamic_symbols(library).undefined
        except ValueError as exc:
            raise ValueError(f"path: {exc}") from None
        missing = sorted(n for n in needed if n.startswith("aoti_") and n not in self._shim.exports)
        if missing:
            raise RuntimeError(
                f"vram.aoti: {self.name} needs {len(missing)} shim(s) vram does not provide: "
                f"{', '.join(missing)} (a model compiled with link_libtorch=True needs libtorch; "
                "ops without a vram shim need torch's runtime)"
            )
        if self.device.type != "cpu" and any(n.startswith("cuda") for n in needed):
            load_cuda_runtime()

    def _function(self, symbol: str, required: bool = False) -> int:
        try:
            return ctypes.cast(getattr(self._lib, symbol), c_void_p).value or 0
        except AttributeError:
            if required:
                raise RuntimeError(
                    f"vram.aoti: {self.name} lacks {symbol}: not an AOTInductor model"
                ) from None
            return 0

    def _getter(self, symbol: str, *argtypes: Any) -> Any:
        function = getattr(self._lib, symbol, None)
        if function is not None:
            function.restype = c_int32
            function.argtypes = [c_void_p, *argtypes]
        return function

    def _count(self, suffix: str) -> int:
        out = c_size_t()
        if self._getter(_CONTAINER + suffix, POINTER(c_size_t))(self._container, byref(out)):
            raise RuntimeError(f"vram.aoti: {_CONTAINER}{suffix} failed for {self.name}")
        return out.value

    def _constants(self) -> tuple[tuple[str, ...], int | None]:
        """The constants' original names (FQNs), and their bytes (None if not reported)."""
        count = self._getter(_CONTAINER + "GetNumConstants", POINTER(c_size_t))
        if count is None:
            return (), None
        n = c_size_t()
        if count(self._container, byref(n)):
            raise RuntimeError(f"vram.aoti: {_CONTAINER}GetNumConstants failed for {self.name}")
        fqn = self._getter(_CONTAINER + "GetConstantOriginalFQN", c_size_t, POINTER(c_char_p))
        name = self._getter(_CONTAINER + "GetConstantName", c_size_t, POINTER(c_char_p))
        size = self._getter(_CONTAINER + "GetConstantDataSize", c_size_t, POINTER(c_size_t))
        folded = self._getter(_CONTAINER + "GetConstantFromFolded", c_size_t, POINTER(c_bool))
        names, total = [], 0
        for i in range(n.value):
            text = c_char_p()
            lookup = fqn or name
            if lookup is not None and lookup(self._container, i, byref(text)) == 0:
                names.append((text.value or b"").decode("utf-8", "replace"))
            from_folded = c_bool(False)
            if folded is not None:
                folded(self._container, i, byref(from_folded))
            nbytes = c_size_t()
            if size is not None and not from_folded.value:
                if size(self._container, i, byref(nbytes)) == 0:
                    total += nbytes.value
        return tuple(names), total if size is not None else None

    def _load_blob(self, blob: Path) -> None:
        update = self._function("AOTInductorModelUpdateConstantsFromBlob")
        if not update:
            raise RuntimeError(
                f"vram.aoti: {self.name} keeps its weights in {blob.name} but has no "
                "AOTInductorModelUpdateConstantsFromBlob to load them"
            )
        with open(blob, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as data:
            view = (ctypes.c_char * len(data)).from_buffer(data)
            try:
                result = self._shim.lib.vram_aoti_update_constants(
                    update, self._container, ctypes.addressof(view)
                )
            finally:
                del view
        if result != 0:
            raise RuntimeError(f"vram.aoti: loading {blob.name} failed: {self._error()}")

    def _error(self) -> str:
        message = self._shim.error()
        if not message:  # a model's own error (newer models keep their last one)
            getter = getattr(self._lib, "AOTInductorGetLastError", None)
            if getter is not None:
                getter.restype = c_int32
                getter.argtypes = [POINTER(c_char_p)]
                text = c_char_p()
                if getter(byref(text)) == 0 and text.value:
                    message = text.value.decode("utf-8", "replace")
        return message or "the model reported an error (see its message on stderr)"

    # ---- what users see -----------------------------------------------------------------
    @property
    def constants_bytes(self) -> int:
        """Bytes of the model's constants (weights and buffers) on its device."""
        if self._constant_bytes is None:
            raise RuntimeError(
                f"vram.aoti: {self.name} does not report its constants' sizes "
                f"({_CONTAINER}GetConstantDataSize)"
            )
        return self._constant_bytes

    def __call__(self, *tensors: Any) -> tuple[Tensor, ...]:
        """Run the model on ``tensors`` (vram tensors or any DLPack tensors on the model's
        device) on the current stream; returns its outputs as vram tensors."""
        if len(tensors) != self.num_inputs:
            raise TypeError(f"{self.name} takes {self.num_inputs} tensors, got {len(tensors)}")
        inputs = [self._input(i, t) for i, t in enumerate(tensors)]
        shim_ = self._shim
        with self._lock:
            if self._container is None:
                raise RuntimeError(f"vram.aoti: {self.name} is closed")
            stream = None if self.device.type == "cpu" else current_stream(self.device)
            if not self._ran and stream is not None and _capturing(stream):
                raise RuntimeError(
                    f"vram.aoti: run {self.name} once before capturing it in a graph: its "
                    "first run folds constants and loads kernels (Note [The first run])"
                )
            handles = (c_void_p * self.num_inputs)()
            try:
                for i, t in enumerate(inputs):
                    handles[i] = shim_.handle(t)
            except BaseException:
                for handle in handles:
                    if handle:
                        shim_.delete(handle)
                raise
            outputs = (c_void_p * self.num_outputs)()
            with _current(self.device):
                result = shim_.lib.vram_aoti_run(
                    self._run, self._container, handles, self.num_inputs, outputs,
                    self.num_outputs, stream.cuda_stream if stream is not None else None,
                )  # fmt: skip
            made = [h for h in outputs if h]
            if result != 0:
                message = self._error()
                for handle in made:
                    shim_.delete(handle)
                raise RuntimeError(f"vram.aoti: running {self.name} failed: {message}")
            self._ran = True
            outputs_ = shim_.adopt(made, keep=(self, inputs))
            for t in outputs_:
                if not isinstance(t._storage.owner, Allocation):
                    self._borrowers.add(t._storage.owner)
        return outputs_

    def _input(self, i: int, t: Any) -> Tensor:
        tensor = t if isinstance(t, Tensor) else from_dlpack(t)
        if tensor.device != self.device:
            raise ValueError(
                f"input {i}: a tensor on {tensor.device}; {self.name} runs on {self.device}"
            )
        if tensor.dtype.name not in DTYPE_CODES:
            raise TypeError(f"input {i}: dtype {tensor.dtype.name} has no AOTInductor code")
        return tensor

    def close(self) -> None:
        """Delete the model's container now (its constants go); later calls raise.
        RuntimeError while outputs that view its constants (or inputs) are alive."""
        with self._lock:
            if len(self._borrowers):
                raise RuntimeError(
                    f"vram.aoti: {self.name} cannot close while {len(self._borrowers)} of its "
                    "outputs view memory it owns (its constants); drop them first"
                )
            if self._container is not None:
                self._finalizer()
                self._container = None

    def __repr__(self) -> str:
        return (
            f"<vram.aoti.Model {self.name} on {self.device}: {self.num_inputs} inputs, "
            f"{self.num_outputs} outputs>"
        )


def _delete(shim_: Shim, delete: int, container: int) -> None:
    try:
        shim_.lib.vram_aoti_delete(delete, container)
    except Exception:  # finalizers never raise
        pass


def _capturing(stream: Any) -> bool:
    return stream.device.driver.stream_capture_info(stream.cuda_stream).status != "none"


class _current:  # noqa: N801 - a context manager, used as a function
    """Make ``device`` vram's current device for a block, if it is not already."""

    __slots__ = ("device", "entered")

    def __init__(self, device: Device) -> None:
        self.device = device
        self.entered = False

    def __enter__(self) -> None:
        if self.device.type != "cpu" and current_device_obj() != self.device:
            self.device.__enter__()
            self.entered = True

    def __exit__(self, *exc: object) -> None:
        if self.entered:
            self.device.__exit__(*exc)
