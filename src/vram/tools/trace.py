"""``vram trace`` (run a program with allocation history on) and ``vram stats``.

    vram trace -o train.pickle -- python train.py --epochs 1
    vram stats                      memory_summary of the default device (this process)
    vram stats train.pickle         what a snapshot holds, per device

``vram trace`` runs the script in this process (runpy), as ``python script.py`` would, with
``_record_memory_history`` on for the device's type, and writes the snapshot when the
script ends, also when it fails or calls sys.exit.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from collections import Counter
from pathlib import Path

from .._device import as_device
from ..memory._api import memory_summary
from ..memory._snapshot import _dump_snapshot, _record_memory_history
from .replay import _console, _fmt, load_snapshot

__all__ = ["main_trace", "main_stats"]

_PYTHONS = ("python", "python3")


def _script_argv(
    command: list[str], parser: argparse.ArgumentParser
) -> tuple[str, list[str], bool]:
    """(target, argv, is_module) from ``python script.py ...``, ``script.py ...`` or ``-m mod``."""
    if command and (
        os.path.basename(command[0]).startswith(_PYTHONS) or command[0] == sys.executable
    ):
        command = command[1:]
    if not command:
        parser.error("give the program to run after --, e.g. vram trace -- python train.py")
    if command[0] == "-m":
        if len(command) < 2:
            parser.error("-m needs a module name")
        return command[1], command[1:], True
    return command[0], command, False


def _run(target: str, argv: list[str], is_module: bool) -> int:
    """Run the program as __main__ with ``argv``; its exit status."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = list(argv)
    if not is_module:
        sys.path.insert(0, str(Path(target).resolve().parent))
    try:
        if is_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
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
    target, script_argv, is_module = _script_argv(command, parser)
    if not is_module and not Path(target).is_file():
        print(f"vram trace: error: {target}: no such file", file=sys.stderr)
        return 2
    try:
        device = as_device(options.device, "--device")
        context = None if options.context == "none" else options.context
        _record_memory_history("all", context, max_entries=options.max_entries, device=device)
    except ValueError as exc:
        print(f"vram trace: error: {exc}", file=sys.stderr)
        return 2
    try:
        status = _run(target, script_argv, is_module)
    finally:
        _dump_snapshot(options.output, device)
        _record_memory_history(None, device=device)
    print(f"vram trace: wrote {options.output}", file=sys.stderr)
    return status


# ============================================================================ stats
def _snapshot_table(snapshot: dict, title: str):
    from rich.table import Table

    table = Table(title=title)
    for name in (
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
    ):
        table.add_column(name, justify="right")
    devices = sorted(
        {s.get("device", 0) for s in snapshot.get("segments") or []}
        | {i for i, t in enumerate(snapshot.get("device_traces") or []) if t}
    )
    for device in devices:
        segments = [s for s in snapshot.get("segments") or [] if s.get("device", 0) == device]
        traces = snapshot.get("device_traces") or []
        trace = traces[device] if device < len(traces) else []
        actions = Counter(e["action"] for e in trace)
        inactive = [
            b["size"] for s in segments for b in s.get("blocks", ()) if b["state"] == "inactive"
        ]
        table.add_row(
            str(device),
            str(len(segments)),
            _fmt(sum(s["total_size"] for s in segments)),
            _fmt(sum(s["allocated_size"] for s in segments)),
            _fmt(sum(s["active_size"] for s in segments)),
            _fmt(sum(s["requested_size"] for s in segments)),
            _fmt(sum(inactive)),
            _fmt(max(inactive, default=0)),
            str(len(trace)),
            str(actions["alloc"]),
            str(actions["segment_alloc"] + actions["segment_map"]),
        )
    return table


def main_stats(argv: list[str] | None = None) -> int:
    """``vram stats [SNAPSHOT] [--device DEV] [--abbreviated]``."""
    parser = argparse.ArgumentParser(
        prog="vram stats",
        description="memory_summary of a device of this process, or what a snapshot holds.",
    )
    parser.add_argument("snapshot", nargs="?", help="a snapshot pickle (PyTorch's or vram's)")
    parser.add_argument("--device", default=None, help="the device (default: the default device)")
    parser.add_argument("--abbreviated", action="store_true", help="the short summary")
    options = parser.parse_args(argv)
    if options.snapshot is not None:
        try:
            snapshot = load_snapshot(options.snapshot)
        except (OSError, ValueError) as exc:
            print(f"vram stats: error: {exc}", file=sys.stderr)
            return 2
        _console().print(_snapshot_table(snapshot, f"snapshot {options.snapshot}"))
        return 0
    try:
        print(memory_summary(options.device, abbreviated=options.abbreviated), end="")
    except ValueError as exc:
        print(f"vram stats: error: {exc}", file=sys.stderr)
        return 2
    return 0
