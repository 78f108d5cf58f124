"""Cross-stream lifetimes benchmark: the pipeline PyTorch's users hit.

Each iteration the producer (the default stream) makes a 64 MiB buffer; a side stream
waits for it, copies it into a buffer of its own, then runs unrelated work (four 4096x4096
float32 matmuls); the producer frees its buffer. How the producer's free is made safe is
what the variants compare, in one run:

- ``pytorch record_stream``: ``x.record_stream(side)`` before ``del x``;
- ``pytorch event+stash``: the hand-rolled recipe: an event recorded on the side stream
  right after the copy, the buffer kept in a stash until the producer waited on it;
- ``vram record_stream``, ``vram record_use`` (recorded right after the copy), and
  ``vram cross_stream_reuse`` (record_use with ``cross_stream_reuse:True``).

Every variant allocates the same buffers on the same streams (the side stream's copy and
the matmul outputs too). vram has no GEMM yet: its variants run PyTorch's own matmuls, on
vram's side stream and over vram's buffers, so the side work is the same; without PyTorch
it is a "busy" NVRTC kernel on every SM for DEFAULT_WORK_MS. Rows: peak reserved and peak
allocated (MiB), ms per iteration (CUDA events around the timed loop, including the side
stream's work).

``--device sim:0`` runs the vram variants on the simulated GPU with few iterations, to
check the script anywhere; its times and peaks say nothing about a GPU.

    python bench/streams.py [--device cuda:0] [--iters 200] [--out FILE.json|DIR] [--save]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable

import numpy as np

import vram
from _common import add_output_arguments, description_of, device_name, write_results
from vram.memory import caching_allocator_alloc as vram_alloc
from vram.memory import caching_allocator_delete as vram_free

BUFFER = 64 << 20  # bytes the producer makes each iteration
N = 4096  # matmul size: 4096x4096 float32 = 64 MiB per matrix
MATMULS = 4
WARMUP = 10  # iterations before the timed loop
DEFAULT_WORK_MS = 2.6  # four 4096^2 fp32 matmuls on an H100 (TF32 off), if PyTorch is absent
MiB = 1 << 20

BUSY = r"""
extern "C" __global__ void busy(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


# ================================================================= vram side-stream work
class Busy:
    """Side-stream work that keeps every SM busy for about ``ms`` milliseconds."""

    def __init__(self, device: vram.Device, ms: float) -> None:
        self.device = device
        self.driver = device.driver
        self.kernel = None
        self.cycles = 0
        if device.type == "cuda":
            self.kernel = self.driver.compile(device.index, BUSY, "busy")
            self.grid = (vram.get_device_properties(device).multi_processor_count * 4, 1, 1)
            self.cycles = self._calibrate(ms)

    def launch(self, stream: vram.Stream, out: int = 0) -> None:
        if self.kernel is None:
            self.driver.enqueue(stream.cuda_stream, lambda: None)  # sim: a no-op kernel
            return
        args = (np.int64(self.cycles),)
        self.driver.launch(self.kernel, self.grid, (128, 1, 1), args, stream.cuda_stream)

    def _time(self, cycles: int) -> float:
        stream = vram.Stream(self.device)
        start, end = vram.Event(enable_timing=True), vram.Event(enable_timing=True)
        args = (np.int64(cycles),)
        start.record(stream)
        self.driver.launch(self.kernel, self.grid, (128, 1, 1), args, stream.cuda_stream)
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end)

    def _calibrate(self, ms: float) -> int:
        cycles = 1_000_000
        self._time(cycles)  # warm up
        for _ in range(3):
            measured = self._time(cycles)
            cycles = max(int(cycles * ms / measured), 1000)
        return cycles


class _DevicePointer:
    """A raw device pointer offered to PyTorch as an N x N float32 matrix (zero copy)."""

    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (N, N),
            "typestr": "<f4",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,  # ordering is the caller's: the work runs on vram's side stream
        }


class TorchMatmuls:
    """The same side-stream work as PyTorch's variants: PyTorch's matmuls, queued on vram's
    side stream (an ExternalStream) over vram's buffers, so that only the allocator differs."""

    def __init__(self, torch, side: vram.Stream, a: int, b: int) -> None:
        self.torch = torch
        self.stream = torch.cuda.ExternalStream(side.cuda_stream)
        self.a = torch.as_tensor(_DevicePointer(a), device="cuda")
        self.b = torch.as_tensor(_DevicePointer(b), device="cuda")
        with torch.cuda.stream(self.stream):
            self.a.copy_(torch.randn(N, N, device="cuda"))
            self.b.copy_(torch.randn(N, N, device="cuda"))

    def launch(self, stream: vram.Stream, out: int) -> None:
        torch = self.torch
        with torch.cuda.stream(self.stream):
            torch.mm(self.a, self.b, out=torch.as_tensor(_DevicePointer(out), device="cuda"))


# ======================================================================= vram variants
def vram_variant(device: vram.Device, busy: Busy | None, iters: int, mode: str) -> dict:
    """One vram variant; ``mode`` is record_stream, record_use or cross_stream_reuse.

    The side stream's unrelated work is PyTorch's matmuls where PyTorch is there (``busy``
    None), else the calibrated busy kernel."""
    vram.memory.set_allocator_settings(
        f"cross_stream_reuse:{'True' if mode == 'cross_stream_reuse' else 'False'}"
    )
    drv = device.driver
    producer, side = vram.default_stream(device), vram.Stream(device)
    vram.synchronize(device)
    vram.memory.empty_cache(device)
    vram.memory.reset_peak_memory_stats(device)
    a = vram_alloc(BUFFER, device, side)  # the matmuls' inputs, as in PyTorch's variants
    b = vram_alloc(BUFFER, device, side)
    if busy is None:
        import torch

        work = TorchMatmuls(torch, side, a, b)
        vram.synchronize(device)
    else:
        work = busy

    def iteration(i: int) -> None:
        x = vram_alloc(BUFFER, device, producer)
        drv.memset_d8(x, i & 0xFF, BUFFER, producer.cuda_stream)
        side.wait_stream(producer)
        y = vram_alloc(BUFFER, device, side)
        drv.memcpy_dtod(y, x, BUFFER, side.cuda_stream)
        if mode == "record_stream":
            vram.memory.record_stream(x, side)
        else:
            vram.memory.record_use(x, side)  # right after the last read
        previous = None
        for _ in range(MATMULS):
            out = vram_alloc(BUFFER, device, side)
            work.launch(side, out)
            if previous is not None:
                vram_free(previous)
            previous = out
        vram_free(previous)  # type: ignore[arg-type]
        vram_free(y)
        vram_free(x)

    start, end = vram.Event(enable_timing=True), vram.Event(enable_timing=True)
    ms = _timed(iteration, iters, lambda: start.record(producer), lambda: _end(end, producer, side))
    ms = start.elapsed_time(end) / iters if device.type == "cuda" else ms
    stats = vram.memory.memory_stats(device)
    vram_free(a)
    vram_free(b)
    vram.memory.set_allocator_settings("cross_stream_reuse:False")
    name = {"record_stream": "vram record_stream", "record_use": "vram record_use"}
    return _row(
        name.get(mode, "vram cross_stream_reuse"),
        stats["reserved_bytes.all.peak"],
        stats["allocated_bytes.all.peak"],
        ms,
    )


def _end(end: vram.Event, producer: vram.Stream, side: vram.Stream) -> None:
    producer.wait_stream(side)
    end.record(producer)
    end.synchronize()


def _timed(iteration: Callable[[int], None], iters: int, begin, finish) -> float:
    """Run WARMUP + ``iters`` iterations; begin() before the timed ones, finish() after."""
    for i in range(WARMUP):
        iteration(i)
    gc.collect()
    begin()
    t0 = time.perf_counter()
    for i in range(iters):
        iteration(i)
    finish()
    return (time.perf_counter() - t0) * 1e3 / iters


def _row(variant: str, reserved: int, allocated: int, ms: float, **extra) -> dict:
    return {
        "variant": variant,
        "peak_reserved_mib": round(reserved / MiB, 1),
        "peak_allocated_mib": round(allocated / MiB, 1),
        "ms_per_iter": round(ms, 3),
        **extra,
    }


# ==================================================================== PyTorch variants
def torch_variants(index: int, iters: int) -> tuple[list[dict], float]:
    """PyTorch's record_stream and event+stash rows, and its four matmuls' time in ms."""
    import torch

    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for variant in ("pytorch record_stream", "pytorch event+stash"):
        rows.append(_torch_variant(torch, device, variant, iters))
        torch.cuda.empty_cache()  # the variant's a and b are gone: start the next one empty
    return rows, _matmul_ms(torch, device)


def _torch_variant(torch, device, variant: str, iters: int) -> dict:
    side = torch.cuda.Stream(device)
    producer = torch.cuda.current_stream(device)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    with torch.cuda.stream(side):
        a = torch.randn(N, N, device=device)
        b = torch.randn(N, N, device=device)
    torch.cuda.synchronize(device)
    stash: list = []

    def iteration(i: int) -> None:
        if stash:  # the recipe: the producer waits for the consumer's event, then drops x
            producer.wait_event(stash[0][1])
            stash.clear()
        x = torch.empty(BUFFER // 4, device=device)
        x.fill_(float(i))
        side.wait_stream(producer)
        with torch.cuda.stream(side):
            y = torch.empty_like(x)
            y.copy_(x)
            if variant == "pytorch record_stream":
                x.record_stream(side)
            else:
                stash.append((x, side.record_event()))
            for _ in range(MATMULS):
                torch.mm(a, b)
            del y
        del x

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def finish() -> None:
        producer.wait_stream(side)
        end.record(producer)
        end.synchronize()

    _timed(iteration, iters, lambda: start.record(producer), finish)
    row = _row(
        variant,
        torch.cuda.max_memory_reserved(device),
        torch.cuda.max_memory_allocated(device),
        start.elapsed_time(end) / iters,
    )
    stash.clear()
    torch.cuda.synchronize(device)
    return row


def _matmul_ms(torch, device) -> float:
    """The time of the side stream's unrelated work in PyTorch: four 4096^2 matmuls."""
    a, b = torch.randn(N, N, device=device), torch.randn(N, N, device=device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        torch.mm(a, b)
    times = []
    for _ in range(10):
        start.record()
        for _ in range(MATMULS):
            torch.mm(a, b)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


# ================================================================================ main
def run(device: vram.Device, iters: int) -> tuple[list[dict], list[str], float]:
    rows: list[dict] = []
    skipped: list[str] = []
    work_ms = DEFAULT_WORK_MS
    with_torch = False
    if device.type == "cuda":
        try:
            torch_rows, work_ms = torch_variants(device.index, iters)  # type: ignore[arg-type]
            rows += torch_rows
            with_torch = True
        except ImportError:
            skipped.append("pytorch: not installed (vram's busy kernel uses DEFAULT_WORK_MS)")
    else:
        skipped.append("pytorch: needs a GPU")
    busy = None if with_torch else Busy(device, work_ms / MATMULS)  # a launch per matmul
    for mode in ("record_stream", "record_use", "cross_stream_reuse"):
        rows.append(vram_variant(device, busy, iters, mode))
    for row in rows:
        if row["variant"].startswith("vram") and busy is not None:
            row["side_work"] = f"{MATMULS} busy kernels, {work_ms:.2f} ms in all"
        elif row["variant"].startswith("vram"):
            row["side_work"] = f"{MATMULS} PyTorch matmuls {N}x{N} fp32 on vram's side stream"
        else:
            row["side_work"] = f"{MATMULS} matmuls {N}x{N} fp32"
    return rows, skipped, work_ms


def table(rows: list[dict]) -> str:
    lines = [f"{'variant':<28}{'peak reserved MiB':>19}{'peak allocated MiB':>20}{'ms/iter':>10}"]
    for r in rows:
        lines.append(
            f"{r['variant']:<28}{r['peak_reserved_mib']:>19.1f}"
            f"{r['peak_allocated_mib']:>20.1f}{r['ms_per_iter']:>10.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=None, help="cuda:N or sim:N (default: the default)")
    parser.add_argument("--iters", type=int, default=None, help="timed iterations (200; sim 10)")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    device = vram.default_device() if options.device is None else vram.device(options.device)
    vram.set_device(device)
    iters = options.iters or (200 if device.type == "cuda" else 10)
    rows, skipped, work_ms = run(device, iters)
    paths = write_results("streams", device, rows, options.out, options.save)
    print(f"streams benchmark on {device} ({device_name(device)}), {iters} iterations")
    print(f"side-stream work: {MATMULS} matmuls, {work_ms:.2f} ms")
    print(table(rows))
    for skip in skipped:
        print(f"skipped: {skip}")
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
