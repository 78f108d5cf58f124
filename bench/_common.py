"""What every benchmark shares: naming the device, its output options, and writing one JSON
result.

A result file is ``<name>-<device>-<date>.json`` holding
``{"name", "device", "device_name", "date", "results": [row, ...]}``; ``device`` is
"cuda:0" or "sim:0", ``device_name`` the GPU's name, ``date`` YYYY-MM-DD.

Where it goes (``add_output_arguments``): ``--out FILE.json`` is that file, ``--out DIR``
(or $OUT, where set) a folder for it; bench/results/, the committed results the README's
tables come from, only with ``--save``. A run with neither prints its table and writes
nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from pathlib import Path

import vram

__all__ = [
    "RESULTS",
    "add_output_arguments",
    "device_name",
    "output_path",
    "description_of",
    "write_result",
    "write_results",
]

RESULTS = Path(__file__).resolve().parent / "results"


def description_of(doc: str | None) -> str:
    """A script's description for ``--help``: its docstring's first paragraph, whole."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def device_name(device: object) -> str:
    """The name of ``device`` (a vram device or "cuda:0" / "sim:0"): "NVIDIA H100 80GB HBM3"."""
    return vram.get_device_name(vram.device(device))


def output_path(text: str) -> Path:
    """An argparse type for ``--out``: a FILE.json whose folder exists, or a folder (made if
    missing, under an existing parent). Checked when the arguments are read, before any work."""
    path = Path(text)
    if path.suffix == ".json":
        if not path.parent.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: the folder {path.parent} does not exist")
    elif path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: not a folder (name a FILE.json or a folder)")
    elif not path.exists() and not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the folder {path.parent} does not exist")
    return path


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out FILE.json|DIR`` and ``--save`` (see the module docstring)."""
    parser.add_argument(
        "--out",
        type=output_path,
        default=None,
        metavar="FILE.json|DIR",
        help="write the JSON result to this file, or into this folder (default: $OUT if set)",
    )
    parser.add_argument(
        "--save",
        action="store_true",
        help="also write it to bench/results/ (the committed results the README shows)",
    )


def device_from_arguments(parser: argparse.ArgumentParser, argv: list[str] | None):
    """(options, device): ``--device`` and the output arguments added to ``parser`` and
    parsed; the device (the default one where none is named) made the current one."""
    parser.add_argument("--device", default=None, help="cuda:N or sim:N (default: the default)")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    device = vram.default_device() if options.device is None else vram.device(options.device)
    vram.set_device(device)
    return options, device


def write_result(name: str, device: object, rows: list[dict], out: Path | None = None) -> Path:
    """Write ``rows`` as the result of benchmark ``name`` on ``device``; returns the path.

    ``out``: a ``.json`` file, or a folder (bench/results/ if None) for
    ``<name>-<device>-<date>.json``.
    """
    found = vram.device(device)
    date = datetime.date.today().isoformat()
    target = Path(out) if out is not None else RESULTS
    if target.suffix == ".json":
        path = target
    else:
        target.mkdir(parents=True, exist_ok=True)
        path = target / f"{name}-{found.type}{found.index}-{date}.json"
    result = {
        "name": name,
        "device": str(found),
        "device_name": device_name(found),
        "date": date,
        "results": rows,
    }
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def write_results(
    name: str, device: object, rows: list[dict], out: Path | None, save: bool = False
) -> list[Path]:
    """Write the result to ``out`` (or $OUT, where set), and to bench/results/ if ``save``;
    the paths written (none when neither is asked for)."""
    paths = [write_result(name, device, rows)] if save else []
    extra = out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if extra is not None:
        paths.append(write_result(name, device, rows, out=extra))
    return paths
