"""What every benchmark shares: naming the device and writing one JSON result.

A result file is ``<out_dir>/<name>-<device>-<date>.json`` holding
``{"name", "device", "device_name", "date", "results": [row, ...]}``; ``device`` is
"cuda:0" or "sim:0", ``device_name`` the GPU's name, ``date`` YYYY-MM-DD.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import vram

__all__ = ["RESULTS", "device_name", "write_result", "write_results"]

RESULTS = Path(__file__).resolve().parent / "results"


def device_name(device: object) -> str:
    """The name of ``device`` (a vram device or "cuda:0" / "sim:0"): "NVIDIA H100 80GB HBM3"."""
    return vram.get_device_name(vram.device(device))


def write_result(name: str, device: object, rows: list[dict], out_dir: Path | None = None) -> Path:
    """Write ``rows`` as the result of benchmark ``name`` on ``device``; returns the path."""
    found = vram.device(device)
    date = datetime.date.today().isoformat()
    directory = Path(out_dir) if out_dir is not None else RESULTS
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{found.type}{found.index}-{date}.json"
    result = {
        "name": name,
        "device": str(found),
        "device_name": device_name(found),
        "date": date,
        "results": rows,
    }
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def write_results(name: str, device: object, rows: list[dict], out: Path | None) -> list[Path]:
    """Write the result to bench/results/, and also to ``out`` (or $OUT, where set)."""
    paths = [write_result(name, device, rows)]
    extra = out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if extra is not None:
        paths.append(write_result(name, device, rows, out_dir=extra))
    return paths
