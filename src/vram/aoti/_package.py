"""Reading a ``.pt2`` package (torch._inductor.aoti_compile_and_package) without torch.

A package is a zip archive, its entries under one root folder (the package's name):
``<root>/data/aotinductor/<model>/`` holds a model's compiled library (``*.so``), its
kernels when they are not embedded in it (``*.cubin``, ``*.fatbin``), its weights when they
are kept outside it in one blob (``*_weights.blob``, package_constants_on_disk_format=
"binary_blob"), and metadata. ``<root>/data/weights/`` holds weights pickled by torch
(package_constants_in_so=False with pickled weights): those need torch to read, and such a
package is refused with a message saying how to compile one that loads.

The model's folder is extracted into a new private folder: entry names are reduced to
their last part (nothing is written outside it), links and nested folders are skipped.
"""

from __future__ import annotations

import shutil
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["Extracted", "extract_model"]

_MODELS = "data/aotinductor/"
_PICKLED_WEIGHTS = "data/weights/"
_BLOB_SUFFIX = "_weights.blob"
_KERNEL_SUFFIXES = (".cubin", ".fatbin", ".hsaco")


@dataclass(frozen=True)
class Extracted:
    """A model's files, extracted: its library, the folder (its kernels' folder when they
    are files), and its weights blob if it has one."""

    library: Path
    folder: Path
    weights_blob: Path | None
    has_kernel_files: bool


def extract_model(path: Path, model_name: str) -> Extracted:
    """Extract model ``model_name`` of the package at ``path`` into a new private folder
    (the caller removes it)."""
    with zipfile.ZipFile(path) as archive:
        entries = [(info, _inside(info.filename)) for info in archive.infolist()]
        entries = [(info, inside) for info, inside in entries if not info.is_dir()]
        if any(inside.startswith(_PICKLED_WEIGHTS) for _, inside in entries):
            raise RuntimeError(
                f"{path}: its weights are pickled torch tensors (data/weights/), which only "
                "torch can read; compile it with aot_inductor.package_constants_in_so=True "
                "(the default), or with package_constants_on_disk_format='binary_blob'"
            )
        prefix = f"{_MODELS}{model_name}/"
        wanted = [
            info
            for info, inside in entries
            if inside.startswith(prefix) and "/" not in inside[len(prefix) :]
        ]
        if not wanted:
            models = sorted(
                {
                    inside[len(_MODELS) :].split("/")[0]
                    for _, inside in entries
                    if inside.startswith(_MODELS) and "/" in inside[len(_MODELS) :]
                }
            )
            held = f"it has {', '.join(models)}" if models else "it holds no AOTInductor model"
            raise ValueError(f"model_name: {path} has no model {model_name!r} ({held})")
        folder = Path(tempfile.mkdtemp(prefix="vram-aoti-"))
        try:
            for info in wanted:
                if stat.S_ISLNK(info.external_attr >> 16):
                    continue
                target = folder / PurePosixPath(info.filename).name
                with archive.open(info) as source, open(target, "wb") as f:
                    shutil.copyfileobj(source, f)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    libraries = sorted(folder.glob("*.so"))
    if len(libraries) != 1:
        shutil.rmtree(folder, ignore_errors=True)
        names = f": {', '.join(p.name for p in libraries)}" if libraries else ""
        raise ValueError(
            f"{path}: model {model_name!r} should hold one compiled library (.so), it holds "
            f"{len(libraries)}{names}"
        )
    blobs = sorted(folder.glob(f"*{_BLOB_SUFFIX}"))
    kernels = any(p.suffix in _KERNEL_SUFFIXES for p in folder.iterdir())
    return Extracted(libraries[0], folder, blobs[0] if blobs else None, kernels)


def _inside(name: str) -> str:
    """An entry's name within the package: without the root folder all entries share."""
    head, _, rest = name.partition("/")
    return name if head == "data" or not rest else rest
