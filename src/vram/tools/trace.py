"""``vram trace`` (run a program with allocation history on) and ``vram stats``.

    vram trace -o train.pickle -- python train.py --epochs 1
    vram stats                      memory_summary of the default device (this process)
    vram stats train.pickle         what a snapshot holds, per device

``vram trace`` runs the program in this process (runpy), as ``python script.py``,
``python -m module`` or ``python -c CODE`` would, with ``_record_memory_history`` on for the
device's type, and writes the snapshot when the program ends, also when it fails or calls
sys.exit. The output path is checked before the program starts.
"""

from __future__ import annotations

import argparse
import builtins
import os
import runpy
import sys
import traceback
from collections import Counter
from pathlib import Path

from .._device import as_device
from .._units import format_bytes
from ..memory._api import memory_summary
from ..memory._snapshot import _dump_snapshot, _record_memory_history
from ._output import check_output_path, console, describe_error, fitted
from .replay import load_snapshot
from .viz import check_device

__all__ = ["main_trace", "main_stats"]

_PYTHONS = ("python", "python3")


def _script_argv(command: list[str], parser: argparse.ArgumentParser) -> tuple[str, list[str], str]:
    """(target, argv, kind) from ``python script.py ...``, ``script.py ...``, ``-m mod ...``
    or ``-c CODE ...``; kind is "path", "module" or "code"."""
    if command and (
        os.path.basename(command[0]).startswith(_PYTHONS) or command[0] == sys.executable
    ):
        command = command[1:]
    if not command:
        parser.error("give the program to run after --, e.g. vram trace -- python train.py")
    if command[0] in ("-m", "-c"):
        if len(command) < 2:
            parser.error(f"{command[0]} needs {'a module name' if command[0] == '-m' else 'code'}")
        if command[0] == "-m":
            return command[1], command[1:], "module"
        return command[1], ["-c", *command[2:]], "code"
    return command[0], command, "path"


def _run(target: str, argv: list[str], kind: str) -> int:
    """Run the program as __main__ with ``argv``; its exit status."""
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


def main_trace(argv: list[str] | None = None) -> int:
    """``vram trace [-o OUT] [--device DEV] [--max-entries N] -- python script.py ARGS``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    own, command = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    parser = argparse.ArgumentParser(
        prog="vram trace",
        description="Run a Python program with allocation history on; write its snapshot.",
        usage="vram trace [-o OUT] [--device DEV] [--max-entries N] -- python script.py [ARGS]",
    )
    parser.add_argument(
        "-o", "--output", default="vram_snapshot.pickle", help="the snapshot to write"
    )
    parser.add_argument(
        "--device", default=None, help="the device whose type to record (default: current)"
    )
    parser.add_argument("--max-entries", type=int, default=sys.maxsize, help="trace ring size")
    parser.add_argument(
        "--context",
        default="all",
        choices=("none", "state", "alloc", "all"),
        help="stack frames kept",
    )
    options, rest = parser.parse_known_args(own)
    if rest:
        command = rest + command
    target, script_argv, kind = _script_argv(command, parser)
    try:
        if kind == "path" and not Path(target).is_file():
            raise ValueError(f"{target}: no such file")
        if kind == "code":
            compile(target, "<string>", "exec")  # a syntax error is reported before the run
        check_output_path(options.output, "-o/--output")
        device = as_device(options.device, "--device")
        context = None if options.context == "none" else options.context
        _record_memory_history("all", context, max_entries=options.max_entries, device=device)
    except (ValueError, SyntaxError) as exc:
        print(f"vram trace: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    try:
        status = _run(target, script_argv, kind)
    finally:
        _dump_snapshot(options.output, device)
        _record_memory_history(None, device=device)
    print(f"vram trace: wrote {options.output}", file=sys.stderr)
    return status


# ============================================================================ stats
_SHORT = ("device", "segments", "reserved", "allocated", "active", "trace events")


def _snapshot_table(snapshot: dict, title: str, abbreviated: bool = False):
    """What ``snapshot`` holds, one row per device; ``abbreviated``: the first columns only."""
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
    devices = sorted(
        {s.get("device", 0) for s in segments_all} | {i for i, t in enumerate(traces) if t}
    )
    for device in devices:
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


def _one_device(snapshot: dict, device: str) -> dict:
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


def _diff(options: argparse.Namespace) -> int:
    """``vram stats A --diff B``: the tables of ``vram.tools.diff``."""
    from .diff import diff_tables, snapshot_diff

    try:
        if options.snapshot is None:
            raise ValueError("--diff: give the snapshot to compare with first: A --diff B")
        device = 0
        if options.device is not None:
            text = options.device.rpartition(":")[2]
            if not text.isdecimal():
                raise ValueError(f"--device: expected a device index, got {options.device!r}")
            device = int(text)
        result = snapshot_diff(options.snapshot, options.diff, device)
    except (OSError, ValueError) as exc:
        print(f"vram stats: error: {describe_error(exc)}", file=sys.stderr)
        return 2
    out = console()
    for table in diff_tables(result):
        out.print(fitted(table, out.width))
    return 0


def main_stats(argv: list[str] | None = None) -> int:
    """``vram stats [SNAPSHOT] [--device DEV] [--abbreviated] [--diff OTHER]``."""
    parser = argparse.ArgumentParser(
        prog="vram stats",
        description="memory_summary of a device of this process, or what a snapshot holds.",
    )
    parser.add_argument("snapshot", nargs="?", help="a snapshot pickle (PyTorch's or vram's)")
    parser.add_argument(
        "--device",
        default=None,
        help="the device (default: the default device; of a snapshot: all of its devices)",
    )
    parser.add_argument(
        "--abbreviated",
        action="store_true",
        help="the short summary (of a snapshot: segments, reserved, allocated, active, events)",
    )
    parser.add_argument(
        "--diff",
        metavar="OTHER",
        help="compare SNAPSHOT with OTHER: what grew and shrank, per stack frame and segment",
    )
    options = parser.parse_args(argv)
    if options.diff is not None:
        return _diff(options)
    if options.snapshot is not None:
        try:
            snapshot = load_snapshot(options.snapshot)
            if options.device is not None:
                snapshot = _one_device(snapshot, options.device)
        except (OSError, ValueError) as exc:
            print(f"vram stats: error: {describe_error(exc)}", file=sys.stderr)
            return 2
        out = console()
        table = _snapshot_table(snapshot, f"snapshot {options.snapshot}", options.abbreviated)
        out.print(fitted(table, out.width))
        return 0
    try:
        print(memory_summary(options.device, abbreviated=options.abbreviated), end="")
    except ValueError as exc:
        print(f"vram stats: error: {exc}", file=sys.stderr)
        return 2
    return 0
