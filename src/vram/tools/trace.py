"""``vram trace`` (run a program with allocation history on) and ``vram stats``.

    vram trace -o train.pickle -- python train.py --epochs 1
    vram stats train.pickle         what a snapshot holds, per device, and its peaks

``trace_program`` runs the program in this process (runpy), as ``python script.py``,
``python -m module`` or ``python -c CODE`` would, with ``_record_memory_history`` on for
the device's type, and writes the snapshot when the program ends, also when it fails or
calls sys.exit. It records vram's allocator only: the memory a program takes through vram
(``vram.empty``, the raw API, and PyTorch's when vram is its allocator). PyTorch's own
allocator is recorded by PyTorch: ``torch.cuda.memory._record_memory_history()`` early in
the program and ``torch.cuda.memory._dump_snapshot(path)`` at its end; vram's tools read
that snapshot as they read vram's.

``peaks`` finds, over a snapshot's trace, the peaks of reserved, allocated and active
memory (active: allocated, and freed but still waiting for work on another stream) with
the event at which each was reached.
"""

from __future__ import annotations

import builtins
import runpy
import sys
import traceback
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._units import format_bytes
from ..memory import _dump_snapshot, _record_memory_history
from .viz import ViewData, check_device

__all__ = [
    "trace_program",
    "run_program",
    "snapshot_table",
    "one_device",
    "Peak",
    "peaks",
    "peak_table",
]


def run_program(target: str, argv: list[str], kind: str) -> int:
    """Run the program as __main__ with ``argv`` (``kind``: "path", "module" or "code");
    its exit status."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = list(argv)
    if kind == "path":
        sys.path.insert(0, str(Path(target).resolve().parent))
    elif kind == "code":
        sys.path.insert(0, "")  # as python -c: the current folder first
    try:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif kind == "code":
            code = compile(target, "<string>", "exec")
            exec(code, {"__name__": "__main__", "__builtins__": builtins})
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


def trace_program(
    target: str,
    argv: list[str],
    kind: str,
    output: str | Path,
    device: Any,
    max_entries: int = sys.maxsize,
    context: str | None = "all",
    writing: Callable[[], AbstractContextManager] = nullcontext,
) -> int:
    """Run the program (``run_program``) with allocation history on for ``device``'s type
    and write the snapshot to ``output`` when it ends, inside ``writing()`` (the CLI's
    progress bar: the program's own output is left alone); the program's exit status.
    Check ``output`` first (``output.check_output_path``): a run is not lost to a bad path."""
    _record_memory_history("all", context, max_entries=max_entries, device=device)
    try:
        status = run_program(target, argv, kind)
    finally:
        try:
            with writing():
                _dump_snapshot(str(output), device)
        finally:
            _record_memory_history(None, device=device)
    return status


# ============================================================================ stats
_SHORT = ("device", "segments", "reserved", "allocated", "active", "trace events")


def _devices(snapshot: dict) -> list[int]:
    segments_all = snapshot.get("segments") or []
    traces = snapshot.get("device_traces") or []
    return sorted(
        {s.get("device", 0) for s in segments_all} | {i for i, t in enumerate(traces) if t}
    )


def snapshot_table(snapshot: dict, title: str, abbreviated: bool = False) -> Any:
    """What ``snapshot`` holds at its end, one row per device; ``abbreviated``: the first
    columns only."""
    from rich.table import Table

    names = (
        "device",
        "segments",
        "reserved",
        "allocated",
        "active",
        "requested",
        "free (inactive)",
        "largest free block",
        "trace events",
        "allocs",
        "segment allocs",
    )
    shown = [name for name in names if not abbreviated or name in _SHORT]
    table = Table(title=title)
    for name in shown:
        table.add_column(name, justify="right", no_wrap=name != "device")
    segments_all = snapshot.get("segments") or []
    traces = snapshot.get("device_traces") or []
    for device in _devices(snapshot):
        segments = [s for s in segments_all if s.get("device", 0) == device]
        trace = traces[device] if device < len(traces) else []
        actions = Counter(e["action"] for e in trace)
        inactive = [
            b["size"] for s in segments for b in s.get("blocks", ()) if b["state"] == "inactive"
        ]
        values = {
            "device": str(device),
            "segments": str(len(segments)),
            "reserved": format_bytes(sum(s["total_size"] for s in segments)),
            "allocated": format_bytes(sum(s.get("allocated_size", 0) for s in segments)),
            "active": format_bytes(sum(s.get("active_size", 0) for s in segments)),
            "requested": format_bytes(sum(s.get("requested_size", 0) for s in segments)),
            "free (inactive)": format_bytes(sum(inactive)),
            "largest free block": format_bytes(max(inactive, default=0)),
            "trace events": str(len(trace)),
            "allocs": str(actions["alloc"]),
            "segment allocs": str(actions["segment_alloc"] + actions["segment_map"]),
        }
        table.add_row(*(values[name] for name in shown))
    return table


def one_device(snapshot: dict, device: str) -> dict:
    """``snapshot`` cut to one device, named by index ("1") or as "cuda:1" / "sim:1"."""
    text = device.rpartition(":")[2]
    if not text.isdecimal():
        raise ValueError(f"--device: expected a device index or cuda:N, got {device!r}")
    index = int(text)
    check_device(snapshot, index)
    traces = snapshot.get("device_traces") or []
    return {
        **snapshot,
        "segments": [s for s in snapshot.get("segments") or [] if s.get("device", 0) == index],
        "device_traces": [t if i == index else [] for i, t in enumerate(traces)],
    }


@dataclass(frozen=True)
class Peak:
    """The most memory of one kind a device held over its trace, and when."""

    device: int
    measure: str  # "reserved", "allocated" or "active"
    bytes: int
    event: int  # the trace entry after which it was reached (-1: before the first)
    action: str  # that entry's action ("" before the first)
    seconds: float  # since the trace's first entry


def peaks(snapshot: dict) -> list[Peak]:
    """Per device with a trace: the peaks of reserved, allocated and active bytes, with
    the event at which each was first reached (what was live before the trace counted)."""
    out = []
    traces = snapshot.get("device_traces") or []
    for device in _devices(snapshot):
        trace = traces[device] if device < len(traces) else []
        if not trace:
            continue
        view = ViewData.build(snapshot, device)
        totals = view.totals()
        t0 = trace[0].get("time_us", 0)
        for measure in ("reserved", "allocated", "active"):
            values = totals[measure]
            moment = max(range(len(values)), key=values.__getitem__)  # the first maximum
            event = moment - 1
            entry = trace[event] if event >= 0 else {}
            seconds = (entry.get("time_us", t0) - t0) / 1e6 if entry else 0.0
            out.append(
                Peak(device, measure, values[moment], event, entry.get("action", ""), seconds)
            )
    return out


def peak_table(found: list[Peak], title: str) -> Any:
    """``peaks`` as a table: device, measure, peak, at which event (action, time)."""
    from rich.table import Table

    table = Table(title=title)
    for name in ("device", "peak of", "bytes", "at event", "action", "time"):
        table.add_column(name, justify="left" if name in ("peak of", "action") else "right")
    for p in found:
        at = "before the trace" if p.event < 0 else str(p.event)
        table.add_row(
            str(p.device), p.measure, format_bytes(p.bytes), at, p.action, f"+{p.seconds:.3f} s"
        )
    return table
