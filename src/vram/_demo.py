"""``vram demo``: a producer/consumer pipeline on two streams, shown step by step.

Part 1 pipelines batches from a producer stream to a consumer stream, each kept alive by
record_stream until the consumer's copy has run; part 2 shows the next allocation after a
cross-stream use, under record_stream and under record_use. On the simulated GPU the work
is held (deferred mode) until a stream is synchronized, so what is queued and what has
completed can be followed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import numpy as np
from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from . import memory, sim
from ._device import Device, get_device_properties
from ._dtypes import float32
from ._factories import empty
from ._streams import Event, Stream
from ._tensor import Tensor
from ._units import format_bytes

__all__ = ["run_demo"]

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


def run_demo(device: Device, batches: int, console: Console) -> bool:
    """Run the demo on ``device`` (a cuda or sim device), drawing it on ``console``; True
    when every batch arrived intact."""
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
        ok = _pipeline(pipe, batches)
        ok = _reuse(pipe) and ok
    if ok:
        console.print(Text("demo finished: every batch arrived intact", style="bold green"))
    else:
        console.print(Text("demo FAILED: a batch arrived damaged", style="bold red"))
    return ok


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
