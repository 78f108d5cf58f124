"""The memory doctor's costs: recording history all the time, dumping it, replaying traces.

    python bench/doctor.py [--device cuda:0|sim:0] [--repeats 7] [--out DIR] [--save]

Three measurements, each row of the result naming its ``measure``:

- ``recording``: the trace benchmark's requests (bench/trace_ops.py: each bundled trace's
  allocs and frees in order, through ``caching_allocator_alloc`` / ``_delete``) with
  history off, and on with a ring of ``--ring`` events: the event trace alone
  (``context=None``), and with the Python stack of each allocation (``context="alloc"``).
  A row is the median µs per request over interleaved rounds and its ratio to history off
  (the target: at most 1.5x for the always-on ring). On a GPU PyTorch's own
  ``_record_memory_history`` is timed the same way (``stacks="python"``).
- ``dump``: seconds for ``_dump_snapshot`` of a ring of 100,000 events (target: under 1 s),
  for vram and, on a GPU, for PyTorch.
- ``replay``: events per second of ``vram replay`` per configuration, on each bundled
  trace repeated to about 200,000 events (target: at least 100,000 a second on 2 cores).

``--device sim:0`` runs vram alone, anywhere.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import vram
from _common import add_output_arguments, description_of, device_name, write_results
from _traces import trace_files
from trace_ops import Request, replayer, sequence, time_per_request
from vram.memory import _dump_snapshot, _record_memory_history

TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
RING = 100_000  # events the history keeps (max_entries)
DUMPED = 100_000  # events in the ring that is dumped
REPLAY_EVENTS = 200_000  # a trace is repeated to about this many events for the replay rate
REPLAY_CONFIGS = {
    "recorded": "",
    "max_split_size_mb:64": "max_split_size_mb:64",
    "roundup_power2_divisions:4": "roundup_power2_divisions:4",
    "expandable_segments:True": "expandable_segments:True",
}
MODES = {"off": "off", "trace": None, "trace+stacks": "alloc"}  # label -> history context


# ======================================================================== recording
class _Vram:
    name = "vram"

    def __init__(self, device: vram.Device) -> None:
        self.device = device
        self.run = replayer(
            lambda size: vram.memory.caching_allocator_alloc(size, device),
            vram.memory.caching_allocator_delete,
        )

    def history(self, mode: str | None) -> None:
        if mode == "off":
            _record_memory_history(None, device=self.device)
        else:
            _record_memory_history("all", context=mode, max_entries=RING, device=self.device)

    def dump(self, path: str) -> None:
        _dump_snapshot(path, self.device)


class _Torch:
    name = "pytorch"

    def __init__(self, device: vram.Device) -> None:
        import torch

        self.torch = torch
        torch.cuda.set_device(device.index)
        self.run = replayer(torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete)

    def history(self, mode: str | None) -> None:
        memory = self.torch.cuda.memory
        if mode == "off":
            memory._record_memory_history(enabled=None)
        else:
            memory._record_memory_history(
                enabled="all", context=mode, stacks="python", max_entries=RING
            )

    def dump(self, path: str) -> None:
        self.torch.cuda.memory._dump_snapshot(path)


def _peers(device: vram.Device) -> list:
    peers: list = [_Vram(device)]
    if device.type == "cuda":
        try:
            peers.append(_Torch(device))
        except Exception as exc:  # no torch here: vram alone
            print(f"skip pytorch: {exc}", file=sys.stderr)
    return peers


def recording(device: vram.Device, traces: dict[str, list[Request]], repeats: int) -> list:
    rows = []
    for peer in _peers(device):
        times: dict[tuple[str, str], list[float]] = {}
        for ops in traces.values():
            peer.run(ops)  # warm the cache
        for _ in range(repeats):
            for label, mode in MODES.items():
                peer.history(mode)
                for trace, ops in traces.items():
                    times.setdefault((trace, label), []).append(time_per_request(peer.run, ops))
        peer.history("off")
        for trace, ops in traces.items():
            off = statistics.median(times[trace, "off"])
            for label in MODES:
                us = statistics.median(times[trace, label])
                rows.append(
                    {
                        "measure": "recording",
                        "impl": peer.name,
                        "trace": trace,
                        "history": label,
                        "requests": len(ops),
                        "us_per_op": round(us, 3),
                        "ratio_to_off": round(us / off, 3),
                    }
                )
    return rows


def dump(device: vram.Device, traces: dict[str, list[Request]]) -> list:
    rows = []
    longest = max(traces.values(), key=len)
    for peer in _peers(device):
        for label, mode in (("trace", None), ("trace+stacks", "alloc")):
            peer.history("off")
            peer.history(mode)
            events = 0
            while events < DUMPED:  # about 1.5 events a request: fill the ring
                peer.run(longest)
                events += 2 * len(longest)
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, "snapshot.pickle")
                start = time.perf_counter()
                peer.dump(path)
                seconds = time.perf_counter() - start
                size = os.path.getsize(path)
            peer.history("off")
            rows.append(
                {
                    "measure": "dump",
                    "impl": peer.name,
                    "history": label,
                    "events": DUMPED,
                    "seconds": round(seconds, 3),
                    "file_mib": round(size / (1 << 20), 2),
                }
            )
    return rows


# ========================================================================== replay
def _repeated(snapshot: dict, events: int) -> dict:
    """``snapshot`` with its trace's requests repeated to about ``events`` entries (segment
    events of the first copy only; each copy's addresses moved apart). A free the trace
    requested but never saw completed (still pending when the snapshot was taken) completes
    at the end of its copy, as it would in a longer run."""
    trace = next(t for t in snapshot["device_traces"] if t)
    requests = [e for e in trace if e["action"] in ("alloc", "free_requested", "free_completed")]
    pending: dict[int, dict] = {}
    for e in requests:
        if e["action"] == "free_requested":
            pending[e["addr"]] = e
        elif e["action"] == "free_completed":
            pending.pop(e["addr"], None)
    requests += [{**e, "action": "free_completed"} for e in pending.values()]
    out = list(trace)
    copy = 1
    while len(out) < events:
        shift = copy << 52
        out += [{**e, "addr": e["addr"] + shift} for e in requests]
        copy += 1
    return {**snapshot, "device_traces": [out]}


def replay_rate(paths: list[Path]) -> list:
    from _traces import read_trace
    from vram.tools.replay import read_trace as compile_trace
    from vram.tools.replay import replay_config

    rows = []
    for path in paths:
        long = _repeated(read_trace(path), REPLAY_EVENTS)
        parsed = compile_trace(long, None)
        for label, config in REPLAY_CONFIGS.items():
            best = None
            for _ in range(3):
                start = time.perf_counter()
                replay_config(parsed, config, None)
                seconds = time.perf_counter() - start
                best = seconds if best is None else min(best, seconds)
            rows.append(
                {
                    "measure": "replay",
                    "trace": path.name.split(".")[0],
                    "config": label,
                    "events": len(parsed.entries),
                    "seconds": round(best, 3),
                    "events_per_s": round(len(parsed.entries) / best),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=None, help="cuda:N or sim:N (default: the default)")
    parser.add_argument("--traces", default=str(TRACES), help="folder of trace files")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds")
    parser.add_argument(
        "--only", choices=("recording", "dump", "replay"), default=None, help="one measure"
    )
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    device = vram.default_device() if options.device is None else vram.device(options.device)
    vram.set_device(device)
    paths = [p for p in trace_files(options.traces) if "-default." in p.name]
    if not paths:
        parser.error(f"--traces: no <workload>-default traces in {options.traces}")
    traces = {p.name.split(".")[0]: sequence(p) for p in paths}
    rows = []
    if options.only in (None, "recording"):
        rows += recording(device, traces, options.repeats)
    if options.only in (None, "dump"):
        rows += dump(device, traces)
    if options.only in (None, "replay"):
        rows += replay_rate(paths)
    written = write_results("doctor", device, rows, options.out, options.save)
    print(f"memory doctor costs on {device} ({device_name(device)}, {os.cpu_count()} CPUs)")
    for row in rows:
        if row["measure"] == "recording":
            print(
                f"recording {row['impl']:<8}{row['trace']:<22}{row['history']:<14}"
                f"{row['us_per_op']:8.3f} µs/op {row['ratio_to_off']:6.2f}x"
            )
        elif row["measure"] == "dump":
            print(
                f"dump      {row['impl']:<8}{row['history']:<14}{row['events']:>8} events "
                f"{row['seconds']:7.3f} s {row['file_mib']:8.2f} MiB"
            )
        else:
            print(
                f"replay    {row['trace']:<22}{row['config']:<28}{row['events']:>8} events "
                f"{row['events_per_s']:>9,} events/s"
            )
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
