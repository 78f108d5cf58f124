"""FSDP-like pipeline (pytorch#181191's motivating case): all-gather the next layer's
parameters on a side stream while the current layer computes.

Every rank holds 1/world of each layer's [H, H] float32 weight. Per iteration, for each of
the L layers: the gather stream all-gathers the next layer's weight into a buffer it
allocates (prefetch), the compute stream waits for the current layer's gather and runs the
layer with it, then the gathered buffer is dropped. The buffer was allocated on the gather
stream and read on the compute stream; how its free is made safe is what the rows compare:

- ``vram record_stream``: ``w.record_stream(compute)`` before ``del w`` (the block waits,
  from the free on, for everything queued on the compute stream by then);
- ``vram record_use``: ``w.record_use(compute)`` right after the layer's last read (the
  block is free at once; the next gather's allocation waits for that read on the GPU);
- ``vram event+stash``: the hand-rolled recipe: an event recorded on the compute stream
  after the read, the buffer stashed until the gather stream has waited on that event, then
  dropped inside ``with vram.stream(gather)``;
- ``pytorch record_stream``: the same pipeline in PyTorch (torch.distributed over NCCL).

The layer is ``act @ w`` (PyTorch's matmul over vram's buffers, on vram's compute stream,
where PyTorch is present), else an elementwise update over the gathered buffer. Rows: peak
reserved / peak allocated (MiB, the largest over ranks) and ms per iteration.

    python -m vram.distributed.run --nproc 2 bench/fsdp.py [--layers 16] [--hidden 4096]
    python bench/fsdp.py --device sim:0      # starts 2 ranks on simulated GPUs itself
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import time
from pathlib import Path

import vram
import vram.distributed as dist
from _common import description_of, device_name, write_results

MiB = 1 << 20
VARIANTS = ("record_stream", "record_use", "event+stash")


class _Pointer:
    """A raw device pointer offered to PyTorch as a float32 matrix (zero copy)."""

    def __init__(self, ptr: int, shape: tuple[int, int]) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": "<f4",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,  # ordering is the caller's: the work runs on vram's compute stream
        }


class Layer:
    """The compute: PyTorch's matmul on vram's stream and buffers, or an elementwise update."""

    def __init__(self, device: vram.Device, hidden: int, batch: int, compute: vram.Stream):
        self.hidden, self.batch, self.compute = hidden, batch, compute
        self.torch = None
        if device.type == "cuda":
            try:
                import torch
            except ImportError:
                torch = None
            if torch is not None:
                torch.backends.cuda.matmul.allow_tf32 = False
                self.torch = torch
                self.stream = torch.cuda.ExternalStream(compute.cuda_stream)
        self.act = vram.ones(batch, hidden, device=device)
        self.out = vram.empty(batch, hidden, device=device)

    def __call__(self, weight: vram.Tensor) -> None:
        torch = self.torch
        if torch is None:
            self.act.mul_(0.5)
            self.act.add_(weight[: self.batch])  # reads the gathered weight on compute
            return
        h, b = self.hidden, self.batch
        with torch.cuda.stream(self.stream):
            a = torch.as_tensor(_Pointer(self.act.data_ptr(), (b, h)), device="cuda")
            w = torch.as_tensor(_Pointer(weight.data_ptr(), (h, h)), device="cuda")
            o = torch.as_tensor(_Pointer(self.out.data_ptr(), (b, h)), device="cuda")
            torch.mm(a, w, out=o)
        self.act, self.out = self.out, self.act


def vram_variant(variant: str, layers: int, hidden: int, batch: int, iters: int) -> dict:
    group = dist.default_group()
    device, world = group.device, group.world_size
    compute, gather = vram.Stream(device), vram.Stream(device)
    shard = hidden * hidden // world
    shards = [vram.full((shard,), 1.0 / hidden, device=device) for _ in range(layers)]
    layer = Layer(device, hidden, batch, compute)
    vram.synchronize(device)
    vram.memory.empty_cache(device)
    vram.memory.reset_peak_memory_stats(device)
    stash: list[tuple[vram.Tensor, vram.Event]] = []

    def all_gather(i: int) -> tuple[vram.Tensor, vram.Event]:
        with vram.stream(gather):
            if variant == "event+stash":  # the recipe: wait for the reads, then drop on gather
                for _, read in stash:
                    gather.wait_event(read)
                stash.clear()
            out = vram.empty(hidden, hidden, device=device)
            dist.all_gather_into_tensor(out, shards[i])
            return out, gather.record_event()

    def iteration() -> None:
        upcoming = all_gather(0)
        for i in range(layers):
            weight, ready = upcoming
            if i + 1 < layers:
                upcoming = all_gather(i + 1)  # prefetch while layer i computes
            compute.wait_event(ready)
            with vram.stream(compute):
                layer(weight)
            if variant == "record_stream":
                weight.record_stream(compute)
            elif variant == "record_use":
                weight.record_use(compute)  # right after the layer's last read
            else:
                stash.append((weight, compute.record_event()))
            del weight

    ms = _timed(iteration, iters, device, (compute, gather))
    stats = vram.memory.memory_stats(device)
    stash.clear()
    return _row(f"vram {variant}", stats, ms, device)


def _timed(iteration, iters: int, device: vram.Device, streams: tuple[vram.Stream, ...]) -> float:
    for _ in range(2):  # warm up (kernels, communicator, allocator)
        iteration()
    vram.synchronize(device)
    gc.collect()
    start, end = vram.Event(enable_timing=True), vram.Event(enable_timing=True)
    start.record(streams[0])
    t0 = time.perf_counter()
    for _ in range(iters):
        iteration()
    for stream in streams[1:]:
        streams[0].wait_stream(stream)
    end.record(streams[0])
    end.synchronize()
    wall = (time.perf_counter() - t0) * 1e3 / iters
    return start.elapsed_time(end) / iters if device.type == "cuda" else wall


def _row(variant: str, stats: dict, ms: float, device: vram.Device) -> dict:
    peaks = vram.tensor(
        [stats["reserved_bytes.all.peak"], stats["allocated_bytes.all.peak"]],
        dtype=vram.int64,
        device=device,
    )
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    reserved, allocated = peaks.numpy().tolist()
    return {
        "variant": variant,
        "peak_reserved_mib": round(reserved / MiB, 1),
        "peak_allocated_mib": round(allocated / MiB, 1),
        "ms_per_iter": round(ms, 3),
    }


def torch_variant(layers: int, hidden: int, batch: int, iters: int) -> dict:
    """The same pipeline in PyTorch: torch.distributed over NCCL, record_stream."""
    import torch
    import torch.distributed as tdist

    group = dist.default_group()
    rank, world = group.rank, group.world_size
    port = int(os.environ["MASTER_PORT"]) + 1  # vram's rendezvous used MASTER_PORT
    init = f"tcp://{os.environ['MASTER_ADDR']}:{port}"
    tdist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    device = torch.device("cuda", group.device.index)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    compute, gather = torch.cuda.Stream(device), torch.cuda.Stream(device)
    shard = hidden * hidden // world
    shards = [torch.full((shard,), 1.0 / hidden, device=device) for _ in range(layers)]
    acts = [torch.ones(batch, hidden, device=device), torch.empty(batch, hidden, device=device)]
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)

    def all_gather(i: int):
        with torch.cuda.stream(gather):
            out = torch.empty(hidden, hidden, device=device)
            tdist.all_gather_into_tensor(out, shards[i])
            return out, gather.record_event()

    def iteration() -> None:
        upcoming = all_gather(0)
        for i in range(layers):
            weight, ready = upcoming
            if i + 1 < layers:
                upcoming = all_gather(i + 1)
            compute.wait_event(ready)
            with torch.cuda.stream(compute):
                torch.mm(acts[0], weight, out=acts[1])
            acts.reverse()
            weight.record_stream(compute)
            del weight

    for _ in range(2):
        iteration()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(compute)
    for _ in range(iters):
        iteration()
    compute.wait_stream(gather)
    end.record(compute)
    end.synchronize()
    ms = start.elapsed_time(end) / iters
    peaks = torch.tensor(
        [torch.cuda.max_memory_reserved(device), torch.cuda.max_memory_allocated(device)],
        device=device,
    )
    tdist.all_reduce(peaks, op=tdist.ReduceOp.MAX)
    tdist.destroy_process_group()
    return {
        "variant": "pytorch record_stream",
        "peak_reserved_mib": round(peaks[0].item() / MiB, 1),
        "peak_allocated_mib": round(peaks[1].item() / MiB, 1),
        "ms_per_iter": round(ms, 3),
    }


def table(rows: list[dict]) -> str:
    lines = [f"{'variant':<24}{'peak reserved MiB':>19}{'peak allocated MiB':>20}{'ms/iter':>10}"]
    for r in rows:
        lines.append(
            f"{r['variant']:<24}{r['peak_reserved_mib']:>19.1f}"
            f"{r['peak_allocated_mib']:>20.1f}{r['ms_per_iter']:>10.3f}"
        )
    return "\n".join(lines)


def rank_main(options: argparse.Namespace) -> int:
    dist.init_process_group()
    group = dist.default_group()
    device = group.device
    sim = device.type == "sim"
    layers = options.layers or (4 if sim else 16)
    hidden = options.hidden or (64 if sim else 4096)
    batch = options.batch or (16 if sim else 4096)
    iters = options.iters or (3 if sim else 20)
    if hidden * hidden % group.world_size or batch > hidden:
        raise ValueError("--hidden squared must split evenly over ranks, and --batch <= --hidden")
    rows = [vram_variant(v, layers, hidden, batch, iters) for v in VARIANTS]
    skipped = []
    if not sim:
        try:
            rows.append(torch_variant(layers, hidden, batch, iters))
        except ImportError:
            skipped.append("pytorch: not installed")
    if group.rank == 0:
        with_torch = not sim and importlib.util.find_spec("torch") is not None
        work = "PyTorch matmul" if with_torch else "elementwise"
        for row in rows:
            row.update(layers=layers, hidden=hidden, batch=batch, world=group.world_size)
            row["layer"] = f"{work} [{batch},{hidden}]x[{hidden},{hidden}] fp32"
        paths = write_results("fsdp", device, rows, options.out)
        print(f"fsdp benchmark on {group.world_size} x {device_name(device)}, {iters} iterations")
        print(f"{layers} layers of [{hidden},{hidden}] fp32, batch {batch}")
        print(table(rows))
        for skip in skipped:
            print(f"skipped: {skip}")
        for path in paths:
            print(f"wrote {path}")
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=None, help="cuda or sim (when not launched)")
    parser.add_argument("--nproc", type=int, default=2, help="ranks to start (when not launched)")
    parser.add_argument("--layers", type=int, default=None, help="layers (16; sim 4)")
    parser.add_argument("--hidden", type=int, default=None, help="H of the [H, H] weights")
    parser.add_argument("--batch", type=int, default=None, help="rows of the activation")
    parser.add_argument("--iters", type=int, default=None, help="timed iterations (20; sim 3)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    options = parser.parse_args(argv)
    if "RANK" in os.environ:
        return rank_main(options)
    from vram.distributed.run import launch

    kind = None if options.device is None else vram.device(options.device).type
    args = [a for a in (argv if argv is not None else sys.argv[1:])]
    return launch(str(Path(__file__).resolve()), args, options.nproc, device=kind)


if __name__ == "__main__":
    sys.exit(main())
