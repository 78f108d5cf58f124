"""The ``vram`` command (also ``python -m vram``).

    vram info                          versions, devices, allocator configuration
    vram demo [--device sim:0]         a producer/consumer pipeline on two streams, step by step
    vram viz SNAPSHOT -o out.html [--png out.png]    the memory viewer for a snapshot
    vram viz A --diff B -o out.html    what grew and shrank from A to B
    vram replay|trace|stats|explain ARGS...   the tools in vram.tools, given ARGS as they are
    vram bench NAME ARGS...            bench/NAME.py of a source checkout, given ARGS

The tools are imported only when their subcommand runs, so ``vram info`` stays quick and a
tool that is missing (or needs a package that is not installed) fails alone, with exit
status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path

import numpy as np
from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from . import __version__, memory, sim
from ._device import Device, as_device, default_device, device_count, get_device_properties
from ._device import mem_get_info as _mem_get_info
from ._dtypes import float32
from ._errors import CudaError
from ._factories import empty
from ._streams import Event, Stream
from ._tensor import Tensor
from ._units import format_bytes, format_size
from .driver import cuda_usable

__all__ = ["main"]

# subcommand -> (module, function, help); the function takes argv and returns an exit status
_TOOLS: dict[str, tuple[str, str, str]] = {
    "replay": ("vram.tools.replay", "main_replay", "replay a snapshot's trace under settings"),
    "trace": ("vram.tools.trace", "main_trace", "run a script with allocation history on"),
    "stats": ("vram.tools.trace", "main_stats", "memory_summary of a device or a snapshot"),
    "explain": ("vram.tools.explain", "main_explain", "why an OOM happened, from a snapshot"),
}
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
_WIDE = 120  # columns of output that is not a terminal
_EXIT_USAGE = 2  # argparse's status for bad usage; also a tool that cannot be loaded


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
    except (ValueError, OSError, CudaError, LookupError) as exc:
        if os.environ.get("VRAM_TRACEBACK"):
            raise
        from .tools._output import describe_error

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
    if args and args[0] in _TOOLS:
        return _run_tool(args[0], args[1:])
    if args and args[0] == "bench":
        return _run_bench(args[1:])
    parser = _parser()
    try:
        options = parser.parse_args(args)
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

    info = commands.add_parser("info", help="versions, devices and allocator configuration")
    info.set_defaults(run=_info)

    demo = commands.add_parser("demo", help="a producer/consumer pipeline on two streams")
    demo.add_argument("--device", help="cuda:N or sim:N (default: the default device)")
    demo.add_argument("--batches", type=int, default=3, help="batches to pipeline (default 3)")
    demo.set_defaults(run=_demo)

    viz = commands.add_parser("viz", help="draw a memory snapshot as an HTML page (and PNG)")
    viz.add_argument("snapshot", help="a snapshot pickle (PyTorch's or vram's format)")
    viz.add_argument("-o", "--out", required=True, help="the HTML file to write")
    viz.add_argument("--png", help="also draw the timeline to this PNG file")
    viz.add_argument("--device", type=int, default=0, help="device index in the snapshot")
    viz.add_argument(
        "--diff", metavar="OTHER", help="draw what changed from SNAPSHOT to OTHER instead"
    )
    viz.set_defaults(run=_viz)

    for name, (_, _, text) in _TOOLS.items():
        commands.add_parser(name, help=f"{text} (see vram {name} --help)", add_help=False)
    commands.add_parser("bench", help="run bench/NAME.py (see vram bench)", add_help=False)
    return parser


# ====================================================================== tools, forwarded
def _load(module: str, function: str) -> Callable[[list[str]], int] | None:
    """Import ``module`` and return its ``function``; None (with a message) if unavailable."""
    try:
        found = getattr(importlib.import_module(module), function, None)
    except ImportError as exc:
        _error(f"{module} cannot be imported: {exc}")
        return None
    if found is None:
        _error(f"{module} has no {function}(); this build of vram lacks that tool")
    return found


def _run_tool(name: str, argv: list[str]) -> int:
    module, function, _ = _TOOLS[name]
    tool = _load(module, function)
    return _EXIT_USAGE if tool is None else int(tool(argv) or 0)


def _run_bench(argv: list[str]) -> int:
    """``vram bench NAME ARGS``: run ``main(ARGS)`` of bench/NAME.py in a source checkout."""
    scripts = _BENCH_DIR.glob("[!_]*.py")
    available = sorted(p.stem for p in scripts if p.stem not in ("report", "record_traces"))
    if not argv or argv[0] in ("-h", "--help"):
        listed = ", ".join(available) or "none found"
        print(f"usage: vram bench NAME [ARGS...]\nbenchmarks in {_BENCH_DIR}: {listed}")
        return 0 if argv else _EXIT_USAGE
    name, rest = argv[0], argv[1:]
    path = _BENCH_DIR / f"{name}.py"
    if not path.is_file():
        _error(f"no benchmark {name!r} in {_BENCH_DIR} (benchmarks run from a source checkout)")
        return _EXIT_USAGE
    sys.path.insert(0, str(_BENCH_DIR))  # the benchmarks import their _common helpers
    saved_argv0 = sys.argv[0] if sys.argv else ""
    try:
        spec = importlib.util.spec_from_file_location(f"vram_bench_{name}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        if sys.argv:
            sys.argv[0] = f"vram bench {name}"  # argparse's usage line names the command
        try:
            return int(module.main(rest) or 0)
        except SystemExit as exc:  # argparse: --help, or bad usage (already printed)
            return exc.code if isinstance(exc.code, int) else _EXIT_USAGE
    finally:
        if sys.argv:
            sys.argv[0] = saved_argv0
        sys.path.remove(str(_BENCH_DIR))


def _viz(options: argparse.Namespace) -> int:
    viz = importlib.import_module("vram.tools.viz")
    output = importlib.import_module("vram.tools._output")
    out = output.check_output_path(options.out, "-o/--out")  # before the long work
    if options.diff is not None:
        if options.png is not None:
            raise ValueError("--png: a diff is drawn as a page only (leave out --png)")
        diff = importlib.import_module("vram.tools.diff")
        result = diff.snapshot_diff(options.snapshot, options.diff, options.device)
        print(f"wrote {diff.write_diff_html(result, out)}")
        return 0
    png = None if options.png is None else output.check_output_path(options.png, "--png")
    snapshot = viz.load_snapshot(options.snapshot)
    viz.check_device(snapshot, options.device)
    title = Path(options.snapshot).name
    print(f"wrote {viz.write_html(snapshot, out, device=options.device, title=title)}")
    if png is not None:
        print(f"wrote {viz.write_png(snapshot, png, device=options.device, title=title)}")
    return 0


def _console() -> Console:
    """A console for stdout; one that is not a terminal (a file, a pipe) is 120 columns,
    unless the COLUMNS environment variable sets the width."""
    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=max(console.width, _WIDE))


def _error(message: str, command: str | None = None) -> None:
    """Print ``vram [COMMAND]: error: MESSAGE`` to stderr as one line."""
    prefix = f"vram {command}" if command else "vram"
    print(f"{prefix}: error: {' '.join(message.split())}", file=sys.stderr)


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
    from .tools._output import describe_error, fitted

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


# ====================================================================== vram demo
_BATCH = 2 << 20  # bytes per batch: a large-pool request, carved from one 20 MiB segment
_PAUSE = 0.05  # seconds between steps on a terminal, so that the steps can be followed


class _Pipeline:
    """Two streams of one device, a log of the work queued on them, and a table of steps.

    Each queued operation is followed by an event, so what has completed is read the same
    way on a GPU and on the simulator (where deferred mode holds the work until a sync).
    """

    def __init__(self, device: Device, console: Console) -> None:
        self.device = device
        self.console = console
        self.streams = {"producer": Stream(device), "consumer": Stream(device)}
        self.ops: list[tuple[str, Event]] = []
        self.blocks: dict[int, str] = {}  # device pointer -> its name in the table
        self.step = 0
        self.table = Table()
        self.live: Live | None = None

    def empty(self, stream: str, *shape: int) -> Tensor:
        """A float32 tensor allocated for use on ``stream``."""
        with self.streams[stream]:
            return empty(*shape, dtype=float32, device=self.device)

    def name(self, tensor: Tensor) -> str:
        """A short name for a tensor's block: A, B, C, ... in the order first seen."""
        return self.blocks.setdefault(tensor.data_ptr(), chr(ord("A") + len(self.blocks) % 26))

    def queue(self, stream: str, op: Callable[..., object], *args: object) -> Event:
        """Queue ``op(*args)`` on ``stream``; return an event recorded just after it."""
        with self.streams[stream] as s:
            op(*args)
            event = s.record_event()
        self.ops.append((stream, event))
        return event

    @contextlib.contextmanager
    def section(self, title: str) -> Iterator[None]:
        """A table of steps, drawn live on a terminal and once at the end elsewhere."""
        self.table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE)
        self.table.add_column("#", justify="right", no_wrap=True)
        self.table.add_column("what happened", overflow="fold")
        for column in ("queued\nproducer", "queued\nconsumer", "ops\ndone"):
            self.table.add_column(column, justify="right", no_wrap=True)
        for column in ("allocated", "active", "reserved"):
            self.table.add_column(column, justify="right", no_wrap=True)
        if self.console.is_terminal:
            with Live(self.table, console=self.console, auto_refresh=False) as self.live:
                yield
        else:
            yield
            self.console.print(self.table)

    def show(self, what: str, style: str = "") -> None:
        """Add a row: what was just done, the work still queued, the memory in use."""
        self.step += 1
        done = [event.query() for _, event in self.ops]
        queued = {name: 0 for name in self.streams}
        for (name, _), finished in zip(self.ops, done, strict=True):
            queued[name] += not finished
        stats = memory.memory_stats(self.device)
        self.table.add_row(
            str(self.step),
            Text(what, style=style),
            str(queued["producer"]),
            str(queued["consumer"]),
            f"{sum(done)}/{len(done)}",
            format_bytes(stats["allocated_bytes.all.current"], 0),
            format_bytes(stats["active_bytes.all.current"], 0),
            format_bytes(stats["reserved_bytes.all.current"], 0),
        )
        if self.live is not None:
            self.live.refresh()
            time.sleep(_PAUSE)

    def read(self, tensor: Tensor) -> np.ndarray:
        """The tensor's values, copied out on the consumer stream. Synchronizes it."""
        with self.streams["consumer"]:
            return tensor.numpy()


def _demo(options: argparse.Namespace) -> int:
    if options.batches < 1:
        raise ValueError(f"--batches must be at least 1, got {options.batches}")
    named = (options.device or "").strip()
    if named.startswith("cuda") and not cuda_usable():
        raise ValueError(f"--device {named}: no CUDA GPU is usable here (sim:0 is the simulator)")
    device = default_device() if options.device is None else as_device(options.device, "--device")
    if device.type == "cpu":
        raise ValueError("--device: the demo needs a cuda or sim device")
    memory.get_allocator_settings(device)  # a bad VRAM_ALLOC_CONF fails here, before any output
    console = _console()
    held = device.type == "sim"
    console.rule(f"[bold]vram demo on {device} ({get_device_properties(device).name})")
    console.print(
        "A producer stream fills batches; a consumer stream waits for each and copies it out.",
        "Deferred mode: queued work is held until a stream is synchronized, so what is "
        "queued and what has completed can be followed step by step."
        if held
        else "On a GPU the work completes about as fast as it is queued.",
        "Columns: operations queued and not yet completed on each stream, operations done, "
        "and the memory of the caching allocator (active = allocated + freed but still in use "
        "by queued work).",
        sep="\n",
        highlight=False,
    )
    with sim.deferred() if held else contextlib.nullcontext():
        pipe = _Pipeline(device, console)
        ok = _pipeline(pipe, options.batches)
        ok = _reuse(pipe) and ok
    if ok:
        console.print(Text("demo finished: every batch arrived intact", style="bold green"))
    else:
        console.print(Text("demo FAILED: a batch arrived damaged", style="bold red"))
    return 0 if ok else 1


def _pipeline(pipe: _Pipeline, batches: int) -> bool:
    """Part 1: batches flow from producer to consumer; record_stream keeps each alive."""
    n = _BATCH // float32.itemsize
    producer, consumer = pipe.streams["producer"], pipe.streams["consumer"]
    with pipe.section("1. pipeline: a block used on another stream is kept by record_stream"):
        out = pipe.empty("consumer", batches, n)
        pipe.show(f"consumer: alloc output {pipe.name(out)} ({format_bytes(out.nbytes, 0)})")
        for b in range(batches):
            batch = pipe.empty("producer", n)
            name = pipe.name(batch)
            pipe.show(f"producer: alloc batch {b} -> {name} ({format_bytes(batch.nbytes, 0)})")
            filled = pipe.queue("producer", batch.fill_, b + 1)
            pipe.show(f"producer: queue fill of {name} with {b + 1}s")
            consumer.wait_event(filled)
            pipe.queue("consumer", out[b].copy_, batch)
            pipe.show(f"consumer: wait for the fill, queue copy of {name}")
            batch.record_stream(consumer)
            del batch
            pipe.show(f"record_stream, free {name}: kept until the copy has run", "yellow")
        producer.synchronize()
        pipe.show("producer.synchronize(): every fill has run", "cyan")
        consumer.synchronize()
        pipe.show("consumer.synchronize(): every copy has run", "cyan")
        again = pipe.empty("producer", n)
        pipe.show(f"producer: alloc -> {pipe.name(again)} (free again), and free it", "green")
        del again
        host = pipe.read(out)
    return all((host[b] == b + 1).all() for b in range(batches))


def _reuse(pipe: _Pipeline) -> bool:
    """Part 2: the next allocation after a cross-stream use, record_stream vs record_use."""
    n = _BATCH // float32.itemsize
    producer, consumer = pipe.streams["producer"], pipe.streams["consumer"]
    ok = True
    with pipe.section("2. the next allocation after a cross-stream use"):
        out = pipe.empty("consumer", n)
        for mode in ("record_stream", "record_use"):
            first = pipe.empty("producer", n)
            name, ptr = pipe.name(first), first.data_ptr()
            filled = pipe.queue("producer", first.fill_, 7)
            consumer.wait_event(filled)
            pipe.queue("consumer", out.copy_, first)
            getattr(first, mode)(consumer)
            del first
            pipe.show(f"{mode}: fill {name} with 7s, consumer copies {name}, free {name}")
            second = pipe.empty("producer", n)
            pipe.queue("producer", second.fill_, 9)
            if second.data_ptr() == ptr:
                what, style = (
                    f"{mode}: alloc -> {name} at once; its fill waits for the copy",
                    "green",
                )
            else:
                what, style = (
                    f"{mode}: alloc -> {pipe.name(second)}; {name} is kept for the copy",
                    "yellow",
                )
            pipe.show(what, style)
            producer.synchronize()
            pipe.show(f"{mode}: producer.synchronize()", "cyan")
            intact = bool((pipe.read(out) == 7).all())
            pipe.show(f"{mode}: the consumer's copy holds 7s: {'yes' if intact else 'NO'}", "cyan")
            del second
            ok = ok and intact
    return ok
