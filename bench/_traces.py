"""The trace files that bench/record_traces.py records: writing, reading back, the index.

Nothing here needs a GPU or PyTorch (only the recording does), so the tests run it on CI.
A trace file is a PyTorch memory snapshot (``torch.cuda.memory._snapshot()``), pickled with
the highest protocol and xz-compressed, named ``<workload>-<setting>.pickle.xz``; it carries
one key of its own, ``vram_recording`` (what was run, under which PYTORCH_CUDA_ALLOC_CONF,
with which PyTorch on which GPU), which PyTorch's tools ignore. Files are read back through
vram's snapshot loader (``vram.tools.load_snapshot``): the restricted unpickler, which
decompresses xz and gzip.
"""

from __future__ import annotations

import lzma
import pickle
from collections.abc import Iterable
from itertools import zip_longest
from pathlib import Path

__all__ = [
    "SUFFIXES",
    "trace_file",
    "trace_files",
    "write_trace",
    "read_trace",
    "requests",
    "summarize",
    "index_markdown",
    "write_index",
    "first_difference",
]

SUFFIXES = (".pickle.xz", ".pickle.gz", ".pickle")
_XZ_PRESET = 9 | lzma.PRESET_EXTREME  # the smallest files; a trace compresses in < 1 s
_MiB = 1 << 20
_GROW = ("segment_alloc", "segment_map")
_SHRINK = ("segment_free", "segment_unmap")


def trace_file(workload: str, setting: str) -> str:
    """The file name of ``workload`` recorded under ``setting``."""
    return f"{workload}-{setting}.pickle.xz"


def _stem(path: Path) -> str:
    name = path.name
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def trace_files(directory: str | Path) -> list[Path]:
    """The trace files in ``directory`` (``*.pickle``, ``*.pickle.xz``, ``*.pickle.gz``)."""
    directory = Path(directory)
    found = {p for suffix in SUFFIXES for p in directory.glob(f"*{suffix}")}
    return sorted(p for p in found if p.is_file())


def write_trace(snapshot: dict, path: str | Path) -> Path:
    """Pickle ``snapshot`` (highest protocol) and write it xz-compressed to ``path``."""
    path = Path(path)
    data = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
    path.write_bytes(lzma.compress(data, preset=_XZ_PRESET))
    return path


def read_trace(path: str | Path) -> dict:
    """A trace file's snapshot, read by vram's restricted loader (compressed or not)."""
    from vram.tools import load_snapshot

    return load_snapshot(path)


def _trace(snapshot: dict) -> list[dict]:
    """The first non-empty device trace (the recording uses one device)."""
    return next((t for t in snapshot.get("device_traces") or [] if t), [])


def requests(snapshot: dict) -> list[tuple[str, int, int]]:
    """The program's requests, which no allocator setting changes: (action, size, stream)
    of every alloc and free_requested, streams numbered in the order they first appear."""
    streams: dict[int, int] = {}
    return [
        (e["action"], e["size"], streams.setdefault(e.get("stream", 0), len(streams)))
        for e in _trace(snapshot)
        if e["action"] in ("alloc", "free_requested")
    ]


def summarize(snapshot: dict) -> dict:
    """What the index says of one trace: its settings, events, device mallocs, peaks."""
    trace = _trace(snapshot)
    reserved = peak_reserved = allocated = peak_allocated = 0
    actions: dict[str, int] = {}
    for e in trace:
        action = e["action"]
        actions[action] = actions.get(action, 0) + 1
        if action in _GROW:
            reserved += e["size"]
            peak_reserved = max(peak_reserved, reserved)
        elif action in _SHRINK:
            reserved -= e["size"]
        elif action == "alloc":
            allocated += e["size"]
            peak_allocated = max(peak_allocated, allocated)
        elif action == "free_completed":
            allocated -= e["size"]
    settings = snapshot.get("allocator_settings") or {}
    recording = snapshot.get("vram_recording") or {}
    return {
        "settings": settings.get("PYTORCH_CUDA_ALLOC_CONF", "") or "",
        "events": len(trace),
        "allocs": actions.get("alloc", 0),
        "device_mallocs": sum(actions.get(a, 0) for a in _GROW),
        "segments": len(snapshot.get("segments") or []),
        "peak_reserved": peak_reserved,
        "peak_requested": peak_allocated,
        "streams": len({e.get("stream", 0) for e in trace}),
        "torch": recording.get("torch", ""),
        "device_name": recording.get("device_name", ""),
    }


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def index_markdown(
    directory: str | Path,
    workloads: dict[str, str],
    settings: dict[str, str],
    command: str,
) -> str:
    """The README of a folder of traces: how they were made, and one table row per file.

    ``workloads`` maps a workload's name to what it is, ``settings`` a setting's name to its
    PYTORCH_CUDA_ALLOC_CONF string; ``command`` is how the files were recorded. A row says
    whether the file's requests are those of the same workload's ``default`` trace.
    """
    files = trace_files(directory)
    snapshots = {path: read_trace(path) for path in files}
    defaults = {}
    for path, snapshot in snapshots.items():
        workload, _, setting = _stem(path).partition("-")
        if setting == "default":
            defaults[workload] = requests(snapshot)
    recorded_with = sorted(
        {
            f"PyTorch {s['vram_recording'].get('torch', '?')} on "
            f"{s['vram_recording'].get('device_name', '?')}"
            for s in snapshots.values()
            if isinstance(s.get("vram_recording"), dict)
        }
    )
    lines = [
        "# Allocator traces",
        "",
        "PyTorch memory snapshots (`torch.cuda.memory._snapshot()` after",
        "`_record_memory_history(enabled='all', context=None)`), pickled and xz-compressed;",
        "vram's tools read them as they are (`vram replay FILE`, `vram viz FILE -o out.html`,",
        "`vram stats FILE`). Every workload runs with fixed seeds and shapes, in a fresh process",
        "per setting (PYTORCH_CUDA_ALLOC_CONF is read at start-up), so its requests (the",
        "sizes allocated and freed, in order) are the same under every setting: a replay of the",
        "`default` trace under another setting can be checked against that setting's recording.",
        "",
        f"Recorded with `{command}`"
        + (f" ({'; '.join(recorded_with)})." if recorded_with else "."),
        "This file is written by that command.",
        "",
        "| workload | what it is |",
        "| --- | --- |",
    ]
    lines += [f"| {name} | {_cell(text)} |" for name, text in workloads.items()]
    lines += ["", "| setting | PYTORCH_CUDA_ALLOC_CONF |", "| --- | --- |"]
    lines += [
        f"| {name} | `{value}` |" if value else f"| {name} | (unset) |"
        for name, value in settings.items()
    ]
    lines += [
        "",
        "| file | what it is | settings | events | segments | device mallocs "
        "| peak reserved MiB | peak requested MiB | same requests as default |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for path, snapshot in snapshots.items():
        workload, _, setting = _stem(path).partition("-")
        summary = summarize(snapshot)
        reference = defaults.get(workload)
        same = "-" if reference is None else ("yes" if requests(snapshot) == reference else "no")
        what = f"{workload} under {setting}" if setting else workload
        lines.append(
            f"| {path.name} | {_cell(what)} | `{summary['settings'] or '(none)'}` "
            f"| {summary['events']:,} | {summary['segments']} | {summary['device_mallocs']} "
            f"| {summary['peak_reserved'] / _MiB:,.0f} | {summary['peak_requested'] / _MiB:,.0f} "
            f"| {same} |"
        )
    lines += [
        "",
        "events: entries of the device trace; segments: segments alive in the final state;",
        "device mallocs: segment_alloc and segment_map events; peak reserved: the most the",
        "trace's segments held at once; peak requested: the most its live allocations asked for.",
        "",
    ]
    return "\n".join(lines)


def write_index(
    directory: str | Path,
    workloads: dict[str, str],
    settings: dict[str, str],
    command: str,
) -> Path:
    """Write ``index_markdown`` to ``directory``/README.md; return its path."""
    path = Path(directory) / "README.md"
    path.write_text(index_markdown(directory, workloads, settings, command))
    return path


def first_difference(a: Iterable, b: Iterable) -> int | None:
    """The index where two sequences first differ (None if they are equal)."""
    missing = object()
    for i, (x, y) in enumerate(zip_longest(a, b, fillvalue=missing)):
        if x != y:
            return i
    return None
