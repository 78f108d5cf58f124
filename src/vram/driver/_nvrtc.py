"""NVRTC: CUDA C++ source to a cubin, in process, on any machine.

NVRTC is a plain library (the ``nvidia-cuda-nvrtc`` wheel; cuda-bindings finds it through
cuda-pathfinder), so compiling needs no GPU and no driver: CI compiles every kernel.

- ``compile_cuda(source, arch)`` returns a cubin for a real architecture (``sm_90``) and PTX
  for a virtual one (``compute_90``), or when NVRTC produced no cubin.
- Results are cached in process by (source, arch, name expressions): the same call returns
  the same object; and on disk (Note [The kernel cache]), so that a new process loads what an
  earlier one compiled instead of compiling it again.
- Headers: ``cuda_fp16.h`` / ``cuda_bf16.h`` come from the first directory that holds them:
  ``$CUDA_HOME/include`` or ``$CUDA_PATH/include``, the one cuda-pathfinder finds for cudart,
  an ``nvidia/*/include`` of an installed wheel, then ``/usr/local/cuda/include``.
- Every NVRTC result goes through ``_check``; a failed compile raises ``CudaError`` whose
  ``detail`` is the compile log.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cuda.bindings import nvrtc

from .._errors import CudaError

__all__ = [
    "CompiledProgram",
    "compile_cuda",
    "compile_program",
    "nvrtc_version",
    "include_dirs",
    "arch_for",
]

_SUCCESS = nvrtc.nvrtcResult.NVRTC_SUCCESS
_STD = "-std=c++17"
_PROBE_HEADER = "cuda_fp16.h"  # the directory that has it has cuda_bf16.h too


@dataclass(frozen=True, slots=True, eq=False)
class CompiledProgram:
    """What NVRTC made of one source: the image to load and the kernels' lowered names."""

    image: bytes  # a cubin, or NUL-terminated PTX when ``kind == "ptx"``
    kind: str  # "cubin" or "ptx"
    arch: str
    lowered_names: dict[str, str] = field(default_factory=dict)  # name expression -> symbol
    # the on-disk image it shares with the other kernels compiled in the same batch
    # (compile_batch), or "" for an image of its own: loaders keep one module per batch
    image_file: str = ""


_cache: dict[tuple[str, str, tuple[str, ...]], CompiledProgram] = {}
_cache_lock = threading.Lock()  # guards _cache; compiling runs outside it


def _log(program: nvrtc.nvrtcProgram) -> str:
    """The program's compile log, or "" when even that cannot be read."""
    err, size = nvrtc.nvrtcGetProgramLogSize(program)
    if err != _SUCCESS or size <= 1:
        return ""
    log = b" " * size
    (err,) = nvrtc.nvrtcGetProgramLog(program, log)
    return log.rstrip(b"\0").decode(errors="replace") if err == _SUCCESS else ""


def _check(call: str, result: tuple, program: nvrtc.nvrtcProgram | None = None):
    """The checker for every NVRTC call: ``(err, *values)`` -> values, or raise CudaError.

    With ``program`` given, the error's ``detail`` is that program's compile log.
    """
    err, *values = result
    if err != _SUCCESS:
        detail = _log(program) if program is not None else ""
        raise CudaError(call, err.name, detail)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library that was loaded."""
    return _check("nvrtcVersion", nvrtc.nvrtcVersion())


@functools.cache
def _supported_archs() -> tuple[int, ...]:
    return tuple(_check("nvrtcGetSupportedArchs", nvrtc.nvrtcGetSupportedArchs()))


def arch_for(major: int, minor: int) -> str:
    """The ``--gpu-architecture`` for a device of compute capability ``major.minor``.

    ``sm_XY`` when this NVRTC knows the device; otherwise ``compute_XY`` PTX of the newest
    architecture it knows below the device, which the driver compiles at load time.
    """
    wanted = major * 10 + minor
    supported = _supported_archs()
    if wanted in supported:
        return f"sm_{wanted}"
    older = [arch for arch in supported if arch < wanted]
    if not older:
        raise CudaError(
            "nvrtcGetSupportedArchs",
            "NVRTC_ERROR_INVALID_OPTION",
            f"NVRTC {nvrtc_version()} cannot compile for compute capability {major}.{minor}",
        )
    return f"compute_{max(older)}"


def _candidate_include_dirs() -> list[Path]:
    """Places that may hold the CUDA runtime headers, best first."""
    candidates = [
        Path(os.environ[var]) / "include"
        for var in ("CUDA_HOME", "CUDA_PATH")
        if os.environ.get(var)
    ]
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
        if found:
            candidates.append(Path(found))
    except Exception:  # an older or broken cuda-pathfinder: the fixed places below remain
        pass
    for entry in sys.path:
        candidates.extend(sorted(Path(entry).glob("nvidia/*/include")))
    candidates.append(Path("/usr/local/cuda/include"))
    return candidates


@functools.cache
def include_dirs() -> tuple[str, ...]:
    """The ``-I`` directories for kernels: the first that has ``cuda_fp16.h``, or none."""
    for candidate in _candidate_include_dirs():
        if (candidate / _PROBE_HEADER).is_file():
            return (str(candidate),)
    return ()


def _options(arch: str) -> list[bytes]:
    options = [f"--gpu-architecture={arch}", _STD]
    options += [f"-I{directory}" for directory in include_dirs()]
    return [option.encode() for option in options]


def _image(program: nvrtc.nvrtcProgram, arch: str) -> tuple[bytes, str]:
    """The cubin when NVRTC made one (real ``sm_`` arch), else the PTX."""
    if arch.startswith("sm_"):
        size = _check("nvrtcGetCUBINSize", nvrtc.nvrtcGetCUBINSize(program))
        if size:
            cubin = b" " * size
            _check("nvrtcGetCUBIN", nvrtc.nvrtcGetCUBIN(program, cubin))
            return cubin, "cubin"
    size = _check("nvrtcGetPTXSize", nvrtc.nvrtcGetPTXSize(program))
    ptx = b" " * size
    _check("nvrtcGetPTX", nvrtc.nvrtcGetPTX(program, ptx))
    return ptx, "ptx"


def _compile(source: str, arch: str, name_expressions: tuple[str, ...]) -> CompiledProgram:
    program = _check(
        "nvrtcCreateProgram", nvrtc.nvrtcCreateProgram(source.encode(), b"vram.cu", 0, [], [])
    )
    try:
        for expression in name_expressions:
            _check(
                "nvrtcAddNameExpression",
                nvrtc.nvrtcAddNameExpression(program, expression.encode()),
            )
        options = _options(arch)
        _check(
            "nvrtcCompileProgram",
            nvrtc.nvrtcCompileProgram(program, len(options), options),
            program,
        )
        image, kind = _image(program, arch)
        lowered = {
            expression: _check(
                "nvrtcGetLoweredName", nvrtc.nvrtcGetLoweredName(program, expression.encode())
            ).decode()
            for expression in name_expressions
        }
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return CompiledProgram(image=image, kind=kind, arch=arch, lowered_names=lowered)


def compile_program(
    source: str, arch: str = "sm_90", name_expressions: tuple[str, ...] = ()
) -> CompiledProgram:
    """Compile CUDA C++ ``source`` for ``arch`` (cached); kernels named by expression.

    ``name_expressions`` are kernel names as C++ would spell them (``"axpy"``,
    ``"scale<float>"``); their mangled symbols come back in ``lowered_names``.
    """
    key = (source, arch, tuple(name_expressions))
    compiled = _cache.get(key)
    if compiled is None:
        path = _disk_path(source, arch, key[2])
        compiled = _read_disk(path, arch, key[2]) if path is not None else None
        if compiled is None:
            compiled = _compile(source, arch, key[2])
            if path is not None:
                _write_disk(path, compiled)
        with _cache_lock:
            compiled = _cache.setdefault(key, compiled)
    return compiled


# Note [The kernel cache]
# A compiled program is kept on disk under ``$VRAM_CACHE_DIR`` (default
# ``$XDG_CACHE_HOME/vram/kernels``, else ``~/.cache/vram/kernels``), one file per program,
# named by a hash of everything that decides the result: the source, the architecture, the
# name expressions, the NVRTC version and the include directory's headers. ``VRAM_KERNEL_CACHE=0``
# turns it off. A file is a JSON line (kind, arch, lowered names) and the image after it; one
# that cannot be read is compiled again and replaced. Files are written to a temporary name
# and renamed, so processes that compile the same program at once never see half a file.
# ``compile_batch`` (for vram.ops.warm) compiles many kernels of one source in one program:
# their image is written once, as ``<hash of the image>.img``, and each kernel's file holds
# its lowered name and the image's file name instead of an image; a reader that finds that
# file missing or misnamed compiles the kernel again, alone.


def cache_dir() -> Path | None:
    """The folder of the on-disk kernel cache, or None when it is turned off."""
    if os.environ.get("VRAM_KERNEL_CACHE", "1") == "0":
        return None
    folder = os.environ.get("VRAM_CACHE_DIR")
    if folder:
        return Path(folder)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vram" / "kernels"


@functools.cache
def _toolchain() -> str:
    """What besides the source decides a compile: NVRTC's version and the headers used."""
    stamps = []
    for folder in include_dirs():
        for name in (_PROBE_HEADER, "cuda_bf16.h"):
            path = Path(folder) / name
            if path.is_file():
                stamps.append(hashlib.sha256(path.read_bytes()).hexdigest()[:16])
    return json.dumps([list(nvrtc_version()), _STD, stamps])


def _disk_path(source: str, arch: str, names: tuple[str, ...]) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    digest = hashlib.sha256()
    for part in (source, arch, "\0".join(names), _toolchain()):
        digest.update(part.encode())
        digest.update(b"\0")
    return folder / f"{digest.hexdigest()[:40]}.bin"


def _read_disk(path: Path, arch: str, names: tuple[str, ...]) -> CompiledProgram | None:
    try:
        data = path.read_bytes()
        header, image = data.split(b"\n", 1)
        meta = json.loads(header)
        lowered = meta["lowered_names"]
        shared = meta.get("image_file", "")
        if shared:  # a kernel of a batch: the image is the batch's file beside it
            if not _BATCH_FILE.fullmatch(shared):
                return None
            image = _batch_image(path.parent / shared)
        if meta["arch"] != arch or sorted(lowered) != sorted(names) or not image:
            return None
        if meta["kind"] not in ("cubin", "ptx"):
            return None
        return CompiledProgram(
            image=image, kind=meta["kind"], arch=arch, lowered_names=lowered, image_file=shared
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # damaged: compile again
        return None


_BATCH_FILE = re.compile(r"[0-9a-f]{40}\.img")
_batch_images: dict[Path, bytes] = {}  # one bytes object per batch file in this process


def _batch_image(path: Path) -> bytes:
    image = _batch_images.get(path)
    if image is None:
        image = path.read_bytes()
        with _cache_lock:
            image = _batch_images.setdefault(path, image)
    return image


def _write_disk(path: Path, program: CompiledProgram) -> None:
    meta = {"kind": program.kind, "arch": program.arch, "lowered_names": program.lowered_names}
    image = program.image
    if program.image_file:
        meta["image_file"] = program.image_file
        image = b""
    _write_file(path, json.dumps(meta).encode() + b"\n" + image)


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file renamed)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:  # a read-only or full disk: the kernel still runs, compiled each time
        pass


def compile_batch(source: str, arch: str, names: tuple[str, ...]) -> int:
    """Put kernels ``names`` of ``source`` into the on-disk cache in one NVRTC compile (the
    headers parsed once: several times faster per kernel than one compile each), for
    ``vram.ops.warm``. The image goes to one file; each kernel's cache entry names it, so
    ``compile_program(source, arch, (name,))`` finds it, and a loader keeps one module for
    the batch. Returns how many were compiled (those already cached are left out); without
    a disk cache, nothing is done. Raises as ``compile_program`` when the source is wrong."""
    folder = cache_dir()
    if folder is None:
        return 0
    missing = tuple(
        name
        for name in dict.fromkeys(names)
        if _read_disk(_disk_path(source, arch, (name,)), arch, (name,)) is None  # type: ignore[arg-type]
    )
    if not missing:
        return 0
    compiled = _compile(source, arch, missing)
    digest = hashlib.sha256(compiled.image).hexdigest()[:40]
    image_file = f"{digest}.img"
    _write_file(folder / image_file, compiled.image)
    for name in missing:
        entry = CompiledProgram(
            image=compiled.image,
            kind=compiled.kind,
            arch=arch,
            lowered_names={name: compiled.lowered_names[name]},
            image_file=image_file,
        )
        _write_disk(_disk_path(source, arch, (name,)), entry)  # type: ignore[arg-type]
    return len(missing)


def compile_cuda(source: str, arch: str = "sm_90", name_expressions: tuple[str, ...] = ()) -> bytes:
    """Compile CUDA C++ ``source`` to a cubin for ``arch`` (PTX only if no cubin can be made).

    Cached: the same arguments return the same bytes object. Raises ``CudaError`` named
    ``NVRTC_ERROR_COMPILATION`` with the compile log in ``detail`` when the source is wrong.
    """
    return compile_program(source, arch, name_expressions).image
