"""Building the shim library (``csrc/*.c``) at first use, as Triton builds its launchers.

- The compiler is ``$CC``, else the first of ``cc``, ``gcc``, ``clang`` on PATH; none is a
  RuntimeError that says so and how to get one.
- The library is cached in ``$VRAM_CACHE_DIR`` (else ``$XDG_CACHE_HOME/vram``, else
  ``~/.cache/vram``), under ``aoti/``, named by vram's version and a hash of the sources,
  the flags and the ABI they implement: a cached library is used without a compiler; a
  change to any of them builds a new one. A build writes a temporary file next to the
  target and renames it, so processes building at once never see half a library.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["SOURCES", "ABI", "find_compiler", "cache_dir", "library_path"]

_CSRC = Path(__file__).with_name("csrc")
SOURCES = ("errors.c", "registry.c", "handles.c", "tensors.c", "device.c", "ops.c")
_HEADERS = ("vram_aoti.h",)
# What the library implements: PyTorch's shim.h and c10 numbering as of torch 2.11, and the
# layout of its callback table (vram_aoti_abi_version in errors.c).
ABI = "shim.h torch-2.11, callbacks v1"
_FLAGS = (
    "-std=c11",
    "-O2",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-fexceptions",  # a model's C++ exception may unwind through these frames
    "-pthread",
)
_LIBS = ("-ldl",)
_BUILD_TIMEOUT_S = 300


def find_compiler(env: Mapping[str, str] | None = None) -> list[str]:
    """The C compiler's command: ``$CC`` (split as a shell would), else cc, gcc or clang."""
    env = os.environ if env is None else env
    path = env.get("PATH", "")
    given = env.get("CC", "").strip()
    if given:
        command = shlex.split(given)
        found = shutil.which(command[0], path=path)
        if found is None:
            raise RuntimeError(
                f"vram.aoti: the C compiler CC={given!r} was not found; vram.aoti builds its "
                "shim library with it at first use"
            )
        return [found, *command[1:]]
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name, path=path)
        if found is not None:
            return [found]
    raise RuntimeError(
        "vram.aoti builds its shim library with a C compiler at first use, and none was "
        "found: CC is not set and none of cc, gcc, clang is on PATH. Install one (on Debian "
        "and Ubuntu: apt install gcc) or set CC to its path"
    )


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where built libraries are kept."""
    env = os.environ if env is None else env
    if env.get("VRAM_CACHE_DIR"):
        root = Path(env["VRAM_CACHE_DIR"])
    elif env.get("XDG_CACHE_HOME"):
        root = Path(env["XDG_CACHE_HOME"]) / "vram"
    else:
        root = Path.home() / ".cache" / "vram"
    return root / "aoti"


def _key() -> str:
    digest = hashlib.sha256(ABI.encode())
    for flag in (*_FLAGS, *_LIBS):
        digest.update(flag.encode() + b"\0")
    for name in (*_HEADERS, *SOURCES):
        digest.update(name.encode() + b"\0" + (_CSRC / name).read_bytes())
    return digest.hexdigest()[:16]


def library_path(env: Mapping[str, str] | None = None) -> Path:
    """The built shim library, built now if the cache has none for these sources."""
    from .. import __version__

    target = cache_dir(env) / f"libvram_aoti-{__version__}-{_key()}.so"
    if not target.exists():
        _build(target, find_compiler(env))
    return target


def _build(target: Path, compiler: list[str]) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeError(
            f"vram.aoti: cannot create the cache folder {target.parent} for its shim library "
            f"({exc}); set VRAM_CACHE_DIR to a writable folder"
        ) from None
    fd, partial = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    command = [
        *compiler,
        *_FLAGS,
        "-o",
        partial,
        *(str(_CSRC / name) for name in SOURCES),
        *_LIBS,
    ]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"vram.aoti: building the shim library failed ({shlex.join(command)}):\n"
                f"{result.stdout}{result.stderr}"
            )
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
