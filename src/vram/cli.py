"""The ``vram`` command (also ``python -m vram``).

    vram info                          versions, devices, allocator configuration
    vram demo [--device sim:0]         a producer/consumer pipeline on two streams, step by step
    vram viz SNAPSHOT -o out.html [--png out.png]    the memory viewer for a snapshot
    vram viz A --diff B -o out.html    what grew and shrank from A to B
    vram replay TRACE [--config STR ...] [--suggest]  a trace replayed under other settings
    vram trace -o OUT -- python script.py ARGS       a program run with allocation history on
    vram stats SNAPSHOT [--diff OTHER]               what a snapshot holds, and its peaks
    vram explain SNAPSHOT [--capacity 8GiB]          why an OOM happened; would a run fit
    vram bench NAME ARGS...            bench/NAME.py of a source checkout, given ARGS

Every subcommand's arguments are parsed here, one parser each; the work is done by the
functions of ``vram.tools`` (imported when their subcommand runs, so ``vram info`` stays
quick). Bad input is one line on stderr, ``vram COMMAND: error: ...``, with exit status 2.
Commands that can take long show a progress bar on stderr when it is a terminal, once they
have run 2 s (``-q``/``--quiet``: never).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__, memory
from ._device import Device, as_device, default_device, device_count, get_device_properties
from ._device import mem_get_info as _mem_get_info
from ._errors import CudaError
from ._units import format_size, parse_bytes
from .driver import cuda_usable

__all__ = ["main"]

_ENV_VARS = (
    "VRAM_DEVICE",
    "VRAM_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "VRAM_NO_CACHING",
    "VRAM_SIM_MEMORY",
    "VRAM_SIM_DEVICES",
    "VRAM_SNAPSHOT_LIMITS",
)
_PACKAGES = ("numpy", "ml_dtypes", "cuda-bindings", "cuda-core", "rich")
_BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"  # present in a source checkout
_NOT_BENCHMARKS = ("report", "record_traces")  # scripts of bench/ that are not benchmarks
_WIDE = 120  # columns of output that is not a terminal
_EXIT_USAGE = 2  # argparse's status for bad usage; also bad input of any kind
_PYTHONS = ("python", "python3")
_TRACE_NOTE = (
    "vram trace records vram's allocator: the memory the program takes through vram "
    "(vram.empty, vram.memory, PyTorch with vram as its allocator). To record PyTorch's own "
    "allocator, call torch.cuda.memory._record_memory_history() early in the program and "
    "torch.cuda.memory._dump_snapshot(PATH) at its end; vram's tools read that snapshot."
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``vram`` command with ``argv`` (sys.argv[1:] if None); return the exit status.

    Bad input (a missing or malformed file, a bad option or environment variable) is one
    line on stderr naming the problem, with exit status 2; never a traceback. An error that
    is vram's own fault is one line too, exit status 1 (``VRAM_TRACEBACK=1`` shows where).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args and not args[0].startswith("-") else None
    try:
        return _main(args)
    except KeyboardInterrupt:
        _error("interrupted", command)
        return 130
    except (ValueError, OSError, CudaError, LookupError, SyntaxError, ImportError) as exc:
        if os.environ.get("VRAM_TRACEBACK"):
            raise
        from .tools.output import describe_error

        _error(describe_error(exc), command)
        return _EXIT_USAGE
    except Exception as exc:  # a bug: still one line, with the way to see more
        if os.environ.get("VRAM_TRACEBACK"):
            raise
        _error(
            f"internal error: {type(exc).__name__}: {exc} (VRAM_TRACEBACK=1 shows where)", command
        )
        return 1


def _main(args: list[str]) -> int:
    parser = _parser()
    try:
        options, extra = parser.parse_known_args(args)
        if extra:  # said by the subcommand's parser, which names the subcommand
            getattr(options, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help or bad usage: argparse has printed why
        return exc.code if isinstance(exc.code, int) else _EXIT_USAGE
    if options.command is None:
        parser.print_help()
        return _EXIT_USAGE
    return options.run(options)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vram",
        description="vram: PyTorch's CUDA backend in Python, on real GPUs and a simulated one.",
    )
    parser.add_argument("--version", action="version", version=f"vram {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar (one is shown on a terminal once the work has taken 2 s)",
    )

    info = commands.add_parser("info", help="versions, devices and allocator configuration")
    info.set_defaults(run=_info)

    demo = commands.add_parser("demo", help="a producer/consumer pipeline on two streams")
    demo.add_argument("--device", help="cuda:N or sim:N (default: the default device)")
    demo.add_argument("--batches", type=int, default=3, help="batches to pipeline (default 3)")
    demo.set_defaults(run=_demo)

    viz = commands.add_parser(
        "viz", parents=[quiet], help="draw a memory snapshot as an HTML page (and PNG)"
    )
    viz.add_argument("snapshot", help="a snapshot pickle (PyTorch's or vram's format)")
    viz.add_argument("-o", "--out", required=True, help="the HTML file to write")
    viz.add_argument(
        "--png", help='also draw the timeline to this PNG file (needs pip install -e ".[plot]")'
    )
    viz.add_argument("--device", type=int, default=0, help="device index in the snapshot")
    viz.add_argument(
        "--diff", metavar="OTHER", help="draw what changed from SNAPSHOT to OTHER instead"
    )
    viz.set_defaults(run=_viz)

    _replay_parser(commands, quiet)
    _trace_parser(commands, quiet)

    stats = commands.add_parser(
        "stats",
        help="what a snapshot holds, and its peaks",
        description="What a snapshot holds at its end, per device, and the peaks of reserved, "
        "allocated and active memory over its trace, with the event at which each was reached.",
    )
    stats.add_argument("snapshot", nargs="?", help="a snapshot pickle (PyTorch's or vram's)")
    stats.add_argument(
        "--device", default=None, help="the device, as N or cuda:N (default: all of them)"
    )
    stats.add_argument(
        "--abbreviated",
        action="store_true",
        help="the short table: segments, reserved, allocated, active, events",
    )
    stats.add_argument(
        "--diff",
        metavar="OTHER",
        help="compare SNAPSHOT with OTHER: what grew and shrank, per stack frame and segment",
    )
    stats.set_defaults(run=_stats)

    explain = commands.add_parser(
        "explain",
        parents=[quiet],
        help="why an OOM happened; would a run fit in N GiB",
        description="Why memory ran out: the OOM report of a saved snapshot and the allocator "
        "setting that would have avoided it (found by replaying its history). With "
        "--capacity: would the recorded run fit in that much memory, and under which setting.",
    )
    explain.add_argument("snapshot", help="a snapshot pickle (VRAM_OOM_SNAPSHOT's, PyTorch's)")
    explain.add_argument("--device", type=int, default=None, help="the device index")
    explain.add_argument(
        "--capacity",
        metavar="BYTES",
        help="the device's memory, e.g. 8GiB: would the run fit in it, with which setting",
    )
    explain.add_argument(
        "--no-replay", action="store_true", help="the report alone, without replaying history"
    )
    explain.add_argument("--jobs", type=int, default=None, help="replay processes")
    explain.add_argument("--json", action="store_true", help="print the report as JSON")
    explain.set_defaults(run=_explain)

    bench = commands.add_parser(
        "bench",
        parents=[quiet],
        help="run bench/NAME.py of a source checkout",
        usage="vram bench [-h] [-q] NAME [ARGS...]",
        description="Run a benchmark of this checkout's bench/ folder, given ARGS "
        "(vram bench NAME --help shows its own).",
        epilog=f"benchmarks in {_BENCH_DIR}: {', '.join(_benchmarks()) or 'none found'}",
    )
    bench.add_argument("name", nargs="?", metavar="NAME", help="the benchmark")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    bench.set_defaults(run=_bench)
    for command in commands.choices.values():
        command.set_defaults(parser=command)
    return parser


def _error(message: str, command: str | None = None) -> None:
    """Print ``vram [COMMAND]: error: MESSAGE`` to stderr as one line."""
    prefix = f"vram {command}" if command else "vram"
    print(f"{prefix}: error: {' '.join(message.split())}", file=sys.stderr)


def _console() -> Console:
    """A console for stdout; one that is not a terminal (a file, a pipe) is 120 columns,
    unless the COLUMNS environment variable sets the width."""
    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=max(console.width, _WIDE))


def _print(lines: list[str]) -> None:
    """Plain lines to stdout, as they are (the tools' text is already 80 columns wide)."""
    print("\n".join(lines))


def _progress(
    options: argparse.Namespace, description: str, total: int = 1, prints: bool = False
) -> Any:
    """The progress bar of a long command (``vram.tools.output.progress``): none with
    ``--quiet``."""
    from .tools.output import progress

    return progress(description, total, enabled=not options.quiet, prints=prints)


def _bytes(text: str | None, argument: str) -> int | None:
    return None if text is None else parse_bytes(text, argument)


# ====================================================================== vram viz
def _viz(options: argparse.Namespace) -> int:
    from .tools import viz
    from .tools.output import check_output_path

    out = check_output_path(options.out, "-o/--out")  # before the long work
    if options.diff is not None:
        if options.png is not None:
            raise ValueError("--png: a diff is drawn as a page only (leave out --png)")
        from .tools.diff import snapshot_diff, write_diff_html

        with _progress(options, "comparing snapshots"):
            result = snapshot_diff(options.snapshot, options.diff, options.device)
            written = write_diff_html(result, out)
        print(f"wrote {written}")
        return 0
    png = None
    if options.png is not None:
        viz.check_png("--png")  # before anything is written
        png = check_output_path(options.png, "--png")
    title = Path(options.snapshot).name
    written = []
    try:
        with _progress(options, f"drawing {title}", 2 if png else 1) as advance:
            snapshot = viz.load_snapshot(options.snapshot)
            viz.check_device(snapshot, options.device)
            written.append(viz.write_html(snapshot, out, device=options.device, title=title))
            advance(1)
            if png is not None:
                written.append(viz.write_png(snapshot, png, device=options.device, title=title))
    finally:  # what was written is said, also when a later step fails
        for path in written:
            print(f"wrote {path}")
    return 0


# ====================================================================== vram replay
def _replay_parser(commands, quiet: argparse.ArgumentParser) -> None:
    replay = commands.add_parser(
        "replay",
        parents=[quiet],
        help="replay a snapshot's trace under other settings; --suggest searches them",
        description="Replay a PyTorch or vram memory trace through vram's allocator, under the "
        "settings it was recorded with and others; --suggest searches the settings that "
        "matter and ranks them.",
    )
    replay.add_argument("trace", help="a snapshot pickle with a device trace")
    replay.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="STR",
        help="settings applied to the recorded ones (repeatable): a key replaces the recorded "
        "value or is added; a default by name drops it (max_split_size_mb:-1, "
        "expandable_segments:False, garbage_collection_threshold:0)",
    )
    replay.add_argument("--capacity", metavar="BYTES", help="device memory, e.g. 40GiB")
    replay.add_argument("--device", type=int, default=None, help="the trace's device index")
    replay.add_argument(
        "--record-use", action="store_true", help="replay pending frees with record_use"
    )
    replay.add_argument("--json", action="store_true", help="print the results as JSON")
    replay.add_argument("--html", metavar="OUT", help="write the timelines to an HTML file")
    replay.add_argument(
        "--suggest",
        action="store_true",
        help="search the settings that matter and rank them by peak reserved",
    )
    replay.add_argument(
        "--jobs", type=int, default=None, help="--suggest: worker processes (default: CPUs)"
    )
    replay.add_argument(
        "--all", action="store_true", help="--suggest: every row (default: the best ones)"
    )
    replay.set_defaults(run=_replay)


def _replay(options: argparse.Namespace) -> int:
    from .tools.output import check_output_path

    capacity = _bytes(options.capacity, "--capacity")
    name = Path(options.trace).name
    if options.suggest:
        if options.config or options.html or options.record_use:
            raise ValueError(
                "--suggest chooses the settings itself; it takes no --config, --record-use "
                "or --html"
            )
        from .tools.suggest import suggest_settings
        from .tools.suggest_report import suggest_lines

        with _progress(options, f"searching settings for {name}") as advance:
            result = suggest_settings(
                options.trace, capacity, options.jobs, options.device, advance
            )
        if options.json:
            print(json.dumps(result.as_dict(), indent=2))
        else:
            _print(suggest_lines(result, options.all))
        return 0
    if options.all or options.jobs is not None:
        raise ValueError("--all and --jobs go with --suggest")
    from .tools.replay import replay_runs, report_lines, write_html

    html_out = None if options.html is None else check_output_path(options.html, "--html")
    configs = [""] + [c for c in options.config if c != ""]
    with _progress(options, f"replaying {name}") as advance:
        runs = replay_runs(
            options.trace,
            configs,
            capacity,
            options.record_use,
            options.device,
            html_out is not None,
            advance,
        )
    rows = [run.row for run in runs]
    if options.json:
        print(json.dumps(rows, indent=2))
    else:
        _print(report_lines(rows, f"replay of {options.trace}"))
    if html_out is not None:
        write_html(runs, html_out, f"vram replay: {name}")
    return 0


# ====================================================================== vram trace
def _trace_parser(commands, quiet: argparse.ArgumentParser) -> None:
    trace = commands.add_parser(
        "trace",
        parents=[quiet],
        help="run a Python program with allocation history on; write its snapshot",
        usage="vram trace [-h] [-o OUT] [--device DEV] [--max-entries N] "
        "[--context {none,state,alloc,all}] [-q] -- python script.py [ARGS...]",
        description="Run a Python program (python script.py, python -m module, python -c "
        "CODE) in this process with vram's allocation history on, and write its snapshot "
        "when it ends, also when it fails.",
        epilog=_TRACE_NOTE,
    )
    trace.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        default="vram_snapshot.pickle",
        help="the snapshot to write (default: vram_snapshot.pickle)",
    )
    trace.add_argument(
        "--device",
        metavar="DEV",
        default=None,
        help="the device whose type to record (default: current)",
    )
    trace.add_argument(
        "--max-entries",
        metavar="N",
        type=int,
        default=sys.maxsize,
        help="events the trace keeps, the latest (default: all)",
    )
    trace.add_argument(
        "--context",
        default="all",
        choices=("none", "state", "alloc", "all"),
        help="which events keep their stack frames (default: all)",
    )
    trace.add_argument(
        "program",
        nargs=argparse.REMAINDER,
        help="after --: python script.py ARGS, python -m module ARGS or python -c CODE ARGS",
    )
    trace.set_defaults(run=_trace)


def _program(command: list[str]) -> tuple[str, list[str], str]:
    """(target, argv, kind) from ``python script.py ...``, ``script.py ...``, ``-m mod ...``
    or ``-c CODE ...``; kind is "path", "module" or "code"."""
    if command and command[0] == "--":
        command = command[1:]
    if command and (
        os.path.basename(command[0]).startswith(_PYTHONS) or command[0] == sys.executable
    ):
        command = command[1:]
    if not command:
        raise ValueError("give the program to run after --, e.g. vram trace -- python train.py")
    if command[0] in ("-m", "-c"):
        if len(command) < 2:
            raise ValueError(
                f"{command[0]} needs {'a module name' if command[0] == '-m' else 'code'}"
            )
        if command[0] == "-m":
            return command[1], command[1:], "module"
        return command[1], ["-c", *command[2:]], "code"
    return command[0], command, "path"


def _trace(options: argparse.Namespace) -> int:
    from .tools.output import check_output_path
    from .tools.trace import trace_program

    target, argv, kind = _program(options.program)
    if kind == "path" and not Path(target).is_file():
        raise ValueError(f"{target}: no such file")
    if kind == "code":
        compile(target, "<string>", "exec")  # a syntax error is reported before the run
    if options.max_entries < 1:
        raise ValueError(f"--max-entries: must be at least 1, got {options.max_entries}")
    check_output_path(options.output, "-o/--output")
    device = as_device(options.device, "--device")
    if device.type == "cpu":
        raise ValueError("--device: the cpu device has no caching allocator")
    context = None if options.context == "none" else options.context
    status = trace_program(target, argv, kind, options.output, device, options.max_entries, context)
    print(f"vram trace: wrote {options.output}", file=sys.stderr)
    return status


# ====================================================================== vram stats
def _stats(options: argparse.Namespace) -> int:
    from .tools.output import console, fitted

    if options.snapshot is None and options.diff is not None:
        raise ValueError("--diff: give the snapshot to compare with first: A --diff B")
    if options.snapshot is None:
        raise ValueError(
            "give a snapshot file: vram stats SNAPSHOT. vram trace -o FILE -- python "
            "script.py records one of vram's allocator; PyTorch's "
            "torch.cuda.memory._dump_snapshot(FILE) one of PyTorch's"
        )
    out = console()
    if options.diff is not None:
        from .tools.diff import diff_tables, snapshot_diff

        device = 0 if options.device is None else _device_index(options.device)
        for table in diff_tables(snapshot_diff(options.snapshot, options.diff, device)):
            out.print(fitted(table, out.width) if isinstance(table, Table) else table)
        return 0
    from .tools import load_snapshot
    from .tools.trace import one_device, peak_table, peaks, snapshot_table

    snapshot = load_snapshot(options.snapshot)
    if options.device is not None:
        snapshot = one_device(snapshot, options.device)
    table = snapshot_table(snapshot, f"snapshot {options.snapshot}", options.abbreviated)
    out.print(fitted(table, out.width))
    found = peaks(snapshot)
    if found:
        out.print(fitted(peak_table(found, "peaks over the trace"), out.width))
    else:
        out.print("peaks: the snapshot has no trace (only its end state)")
    return 0


def _device_index(text: str) -> int:
    index = text.rpartition(":")[2]
    if not index.isdecimal():
        raise ValueError(f"--device: expected a device index, got {text!r}")
    return int(index)


# ====================================================================== vram explain
def _explain(options: argparse.Namespace) -> int:
    from .tools.explain import (
        explain_lines,
        find_setting,
        fit_verdict,
        has_oom,
        report_from_snapshot,
    )
    from .tools.suggest import suggest_settings

    capacity = _bytes(options.capacity, "--capacity")
    report = report_from_snapshot(options.snapshot, options.device)
    if options.device is not None and not report.reserved and report.history is None:
        raise ValueError(f"--device: the snapshot holds nothing for device {options.device}")
    oom = has_oom(options.snapshot, options.device)
    result = fit = fit_result = None
    name = Path(options.snapshot).name
    if not options.no_replay:
        with _progress(options, f"replaying {name}") as advance:
            if oom and report.request is not None:
                result = find_setting(report, capacity, options.jobs, options.device, advance)
            elif capacity is not None and report.history is not None:
                fit_result = suggest_settings(
                    report.history, capacity, options.jobs, options.device, advance
                )
                fit = fit_verdict(fit_result)
    if capacity is not None and fit is None and not oom and report.history is None:
        fit = [f"would the run fit in {options.capacity}: the snapshot has no trace to replay"]
    if options.json:
        out = report.as_dict()
        out["oom"] = oom
        out["search"] = None if result is None else result.as_dict()
        out["fits"] = None if fit_result is None else fit_result.as_dict()
        out["fit_verdict"] = fit
        print(json.dumps(out, indent=2))
        return 0
    _print(explain_lines(report, oom, fit))
    return 0


# ====================================================================== vram bench
def _benchmarks() -> list[str]:
    scripts = _BENCH_DIR.glob("[!_]*.py")
    return sorted(p.stem for p in scripts if p.stem not in _NOT_BENCHMARKS)


def _bench(options: argparse.Namespace) -> int:
    """``vram bench NAME ARGS``: run ``main(ARGS)`` of bench/NAME.py in a source checkout."""
    from .tools.output import quiet

    if options.name is None:
        listed = ", ".join(_benchmarks()) or "none found"
        raise ValueError(f"give a benchmark: vram bench NAME [ARGS...]; in {_BENCH_DIR}: {listed}")
    name, rest = options.name, options.args
    path = _BENCH_DIR / f"{name}.py"
    if not path.is_file() or name in _NOT_BENCHMARKS or name.startswith("_"):
        raise ValueError(
            f"no benchmark {name!r} in {_BENCH_DIR} (benchmarks run from a source checkout)"
        )
    sys.path.insert(0, str(_BENCH_DIR))  # the benchmarks import their _common helpers
    saved_argv0 = sys.argv[0] if sys.argv else ""
    try:
        spec = importlib.util.spec_from_file_location(f"vram_bench_{name}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        if sys.argv:
            sys.argv[0] = f"vram bench {name}"  # argparse's usage line names the command
        try:
            if options.quiet:
                with quiet():
                    return int(module.main(rest) or 0)
            with _progress(options, f"vram bench {name}", prints=True):
                return int(module.main(rest) or 0)
        except SystemExit as exc:  # argparse: --help, or bad usage (already printed)
            if isinstance(exc.code, str):
                _error(exc.code, "bench")
            return exc.code if isinstance(exc.code, int) else _EXIT_USAGE
    finally:
        if sys.argv:
            sys.argv[0] = saved_argv0
        sys.path.remove(str(_BENCH_DIR))


# ====================================================================== vram demo
def _demo(options: argparse.Namespace) -> int:
    from ._demo import run_demo

    if options.batches < 1:
        raise ValueError(f"--batches must be at least 1, got {options.batches}")
    named = (options.device or "").strip()
    if named.startswith("cuda") and not cuda_usable():
        raise ValueError(f"--device {named}: no CUDA GPU is usable here (sim:0 is the simulator)")
    device = default_device() if options.device is None else as_device(options.device, "--device")
    if device.type == "cpu":
        raise ValueError("--device: the demo needs a cuda or sim device")
    memory.get_allocator_settings(device)  # a bad VRAM_ALLOC_CONF fails here, before any output
    return 0 if run_demo(device, options.batches, _console()) else 1


# ====================================================================== vram info
def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _nvrtc() -> str:
    try:
        from .driver._nvrtc import nvrtc_version

        major, minor = nvrtc_version()
    except Exception as exc:  # no NVRTC library: info reports it rather than failing
        return f"unavailable ({type(exc).__name__})"
    return f"{major}.{minor}"


def _devices(problems: list[str], describe_error: Callable[[BaseException], str]) -> list[Device]:
    """The devices to list; what stops a kind from being listed goes to ``problems``."""
    found: list[Device] = []
    for kind in ("cuda", "sim"):
        try:
            if kind == "cuda" and not cuda_usable():
                continue
            found += [Device(kind, i) for i in range(device_count(kind))]
        except (ValueError, OSError, CudaError) as exc:
            problems.append(f"{kind} devices: {describe_error(exc)}")
    return found


def _setting_text(value: object) -> str:
    if isinstance(value, dict):  # roundup_power2_divisions: interval -> divisions
        return ", ".join(f"{k}:{v}" for k, v in value.items() if v) or "off"
    return repr(value) if isinstance(value, str) else str(value)


def _info(options: argparse.Namespace) -> int:
    """Versions, devices, the allocator configuration and the environment. A bad setting
    (VRAM_DEVICE, VRAM_SIM_*, VRAM_ALLOC_CONF) is shown where it belongs and named on
    stderr, one line each, with exit status 2; everything else is still listed."""
    from .tools.output import describe_error, fitted

    console = _console()
    problems: list[str] = []
    console.rule(f"[bold]vram {__version__}")

    versions = Table(title="Versions", title_justify="left", show_header=False)
    versions.add_row("vram", __version__)
    versions.add_row("python", f"{platform.python_version()} ({sys.executable})")
    for package in _PACKAGES:
        versions.add_row(package, _version(package))
    versions.add_row("NVRTC", _nvrtc())
    console.print(fitted(versions, console.width))

    default: Device | None = None
    try:
        default = default_device()
    except (ValueError, OSError, CudaError) as exc:
        problems.append(f"default device: {describe_error(exc)}")
    devices = Table(title="Devices", title_justify="left")
    for column in ("device", "name", "memory", "free", "compute", "SMs", "driver"):
        numeric = column in ("memory", "free", "compute", "SMs")
        devices.add_column(column, justify="right" if numeric else "left", no_wrap=numeric)
    for found in _devices(problems, describe_error):
        props = get_device_properties(found)
        free, total = _mem_get_info(found)
        mark = " (default)" if found == default else ""
        devices.add_row(
            f"{found}{mark}",
            props.name,
            format_size(total),
            format_size(free),
            f"{props.major}.{props.minor}",
            str(props.multi_processor_count),
            props.driver,
        )
    console.print(fitted(devices, console.width))
    if not cuda_usable():
        console.print("No CUDA GPU is usable here: the default device is the simulated GPU.")

    config = Table(title=f"Allocator configuration ({default or '?'})", title_justify="left")
    config.add_column("setting")
    config.add_column("value")
    try:
        if default is None:
            raise ValueError("no default device to read it for")
        settings = memory.get_allocator_settings(default)
    except (ValueError, OSError, CudaError) as exc:  # say so, and still show the rest
        config.add_row("error", Text(describe_error(exc), style="red"))
        if default is not None:
            problems.append(f"allocator configuration: {describe_error(exc)}")
    else:
        for key, value in settings.items():
            config.add_row(key, _setting_text(value))
    console.print(fitted(config, console.width))

    env = Table(title="Environment", title_justify="left")
    env.add_column("variable")
    env.add_column("value")
    for name in _ENV_VARS:
        value = os.environ.get(name)
        env.add_row(name, Text("(unset)", style="dim") if value is None else Text(value))
    console.print(fitted(env, console.width))
    told: set[str] = set()
    for problem in problems:  # one line per problem, where it was first met
        what = problem.partition(": ")[2]
        if what not in told:
            told.add(what)
            _error(problem, "info")
    return _EXIT_USAGE if problems else 0
