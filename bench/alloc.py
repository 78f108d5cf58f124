"""Allocator benchmark: microseconds per alloc+free pair on the cached path.

One run on one device times, at 512 B, 64 KiB, 4 MiB and 64 MiB:
- vram: ``caching_allocator_alloc`` / ``caching_allocator_delete``, and ``vram.empty`` + del;
- PyTorch: ``torch.cuda.caching_allocator_alloc`` / ``caching_allocator_delete``, and
  ``torch.empty`` + del;
- both raw pairs again with one buffer kept live (allocate the next, free the previous), so
  that each pair splits a free block and merges it back;
- CuPy: ``cupy.cuda.MemoryPool().malloc`` + del;
- the CUDA driver's stream-ordered pool: ``cuMemAllocAsync`` / ``cuMemFreeAsync`` on a
  created stream (the device's default pool, release threshold at its maximum).

Each pair function warms up first (the first pair reaches the device; every later one is
served from the cache). Then REPEATS rounds each time PAIRS pairs of every peer at every
size, in turn, with perf_counter_ns (interleaved, so that a busy moment of a shared machine
does not fall on one peer only); the row is the median over the rounds. A peer that is not
installed, or that needs a GPU on a ``sim`` run, is skipped with the reason.
``--device sim:0`` times vram alone, to check the script anywhere. ``--vram-src DIR`` runs
vram from another source tree (an older commit: the "before" rows), ``--label`` names its
rows and ``--only-vram`` leaves the peers out (as bench/trace_ops.py and bench/scaling.py).

    python bench/alloc.py [--device cuda:0] [--pairs 20000] [--repeats 7] [--out FILE.json|DIR]
                          [--save] [--vram-src DIR] [--label NAME] [--only-vram]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext

if "--vram-src" in sys.argv:  # before vram is imported: run another tree's vram
    from pathlib import Path

    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--vram-src") + 1]).resolve()))

import vram  # noqa: E402
from _common import add_output_arguments, description_of, device_name, write_results  # noqa: E402

try:
    from vram.tools.output import progress
except ImportError:  # an older tree (--vram-src) has no progress line: none is shown

    def progress(label: str, total: int):  # type: ignore[no-redef]
        return nullcontext(lambda done: None)


SIZES = (512, 64 << 10, 4 << 20, 64 << 20)  # bytes
WARMUP = 200  # pairs before each timed run

Pair = Callable[[], None]  # one alloc + free


def _label(size: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def _time_pairs(pair: Pair, pairs: int, repeats: int) -> list[float]:
    """Microseconds per pair, one value per repeat (after WARMUP pairs: warm caches)."""
    for _ in range(WARMUP):
        pair()
    runs = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            for _ in range(pairs):
                pair()
            runs.append((time.perf_counter_ns() - start) / pairs / 1e3)
    finally:
        if gc_was_enabled:
            gc.enable()
    return runs


# ---------------------------------------------------------------------------- the peers
# Each returns {size: pair function}, or raises _Skip with the reason it cannot run.
class _Skip(Exception):
    pass


def _vram_raw(device: vram.Device) -> dict[int, Pair]:
    alloc, delete = vram.memory.caching_allocator_alloc, vram.memory.caching_allocator_delete

    def make(size: int) -> Pair:
        return lambda: delete(alloc(size))

    return {size: make(size) for size in SIZES}


def _one_live(alloc: Callable[[int], int], delete: Callable[[int], None]) -> dict[int, Pair]:
    """Pairs that keep one buffer live: allocate a new one, then free the previous one (the
    freed block is never the one just allocated)."""

    def make(size: int) -> Pair:
        held = [alloc(size)]

        def pair() -> None:
            ptr = alloc(size)
            delete(held[0])
            held[0] = ptr

        return pair

    return {size: make(size) for size in SIZES}


def _vram_raw_one_live(device: vram.Device) -> dict[int, Pair]:
    return _one_live(vram.memory.caching_allocator_alloc, vram.memory.caching_allocator_delete)


def _vram_empty(device: vram.Device) -> dict[int, Pair]:
    if not hasattr(vram, "empty"):
        raise _Skip("vram.empty is not in this build")
    empty, uint8 = vram.empty, vram.uint8

    def make(size: int) -> Pair:
        return lambda: empty(size, dtype=uint8, device=device)

    return {size: make(size) for size in SIZES}


def _torch(device: vram.Device):
    if device.type != "cuda":
        raise _Skip("PyTorch times a real GPU only")
    try:
        import torch
    except ImportError as exc:
        raise _Skip(f"torch is not importable ({exc})") from None
    if not torch.cuda.is_available():
        raise _Skip("torch.cuda.is_available() is False")
    torch.cuda.set_device(device.index)
    return torch


def _torch_raw(device: vram.Device) -> dict[int, Pair]:
    torch = _torch(device)
    alloc, delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete

    def make(size: int) -> Pair:
        return lambda: delete(alloc(size))

    return {size: make(size) for size in SIZES}


def _torch_raw_one_live(device: vram.Device) -> dict[int, Pair]:
    torch = _torch(device)
    return _one_live(torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete)


def _torch_empty(device: vram.Device) -> dict[int, Pair]:
    torch = _torch(device)
    empty, uint8, where = torch.empty, torch.uint8, torch.device("cuda", device.index)

    def make(size: int) -> Pair:
        return lambda: empty(size, dtype=uint8, device=where)

    return {size: make(size) for size in SIZES}


def _cupy_pool(device: vram.Device) -> dict[int, Pair]:
    if device.type != "cuda":
        raise _Skip("CuPy times a real GPU only")
    try:
        import cupy
    except ImportError as exc:
        raise _Skip(f"cupy is not importable ({exc})") from None
    cupy.cuda.Device(device.index).use()
    pool = cupy.cuda.MemoryPool()

    def make(size: int) -> Pair:
        return lambda: pool.malloc(size)  # the MemoryPointer is dropped at once: freed

    return {size: make(size) for size in SIZES}


def _driver_pool(device: vram.Device) -> dict[int, Pair]:
    if device.type != "cuda":
        raise _Skip("the driver's pool needs a real GPU")
    from cuda.bindings import driver as cu

    def check(result: tuple):
        if result[0] != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA driver call failed: {result[0]!r}")
        return result[1] if len(result) > 1 else None

    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(device.index))
    check(cu.cuCtxSetCurrent(check(cu.cuDevicePrimaryCtxRetain(dev))))
    pool = check(cu.cuDeviceGetDefaultMemPool(dev))
    keep_all = cu.cuuint64_t(2**64 - 1)  # cache every freed byte: the cached path
    threshold = cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    check(cu.cuMemPoolSetAttribute(pool, threshold, keep_all))
    stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
    alloc, free = cu.cuMemAllocAsync, cu.cuMemFreeAsync
    check(free(check(alloc(SIZES[-1], stream)), stream))  # every call is checked once here

    def make(size: int) -> Pair:
        def pair() -> None:
            free(alloc(size, stream)[1], stream)

        return pair

    return {size: make(size) for size in SIZES}


PEERS: tuple[tuple[str, Callable[[vram.Device], dict[int, Pair]]], ...] = (
    ("vram caching_allocator_alloc/delete", _vram_raw),
    ("vram caching_allocator_alloc/delete, one live", _vram_raw_one_live),
    ("vram.empty + del", _vram_empty),
    ("torch.cuda.caching_allocator_alloc/delete", _torch_raw),
    ("torch.cuda.caching_allocator_alloc/delete, one live", _torch_raw_one_live),
    ("torch.empty + del", _torch_empty),
    ("cupy MemoryPool.malloc + del", _cupy_pool),
    ("cuMemAllocAsync/cuMemFreeAsync", _driver_pool),
)


# ---------------------------------------------------------------------------- the run
def run(
    device: vram.Device, pairs: int, repeats: int, label: str = "vram", only_vram: bool = False
) -> tuple[list[dict], list[dict]]:
    """Time every peer on ``device`` (vram's rows named ``label``; only those with
    ``only_vram``): (rows, skipped).

    The timed runs are interleaved: each of the ``repeats`` rounds times every peer at
    every size once, so that a shared machine's slow moments fall on all peers alike.
    """
    timed: list[tuple[str, int, Pair]] = []
    skipped = []
    for name, setup in PEERS:
        if not name.startswith("vram"):
            if only_vram:
                continue
        elif label != "vram":
            name = f"{name} ({label})"
        try:
            pairs_of = setup(device)
        except _Skip as why:
            skipped.append({"impl": name, "reason": str(why)})
            print(f"skip  {name}: {why}", file=sys.stderr)
            continue
        timed += [(name, size, pair) for size, pair in pairs_of.items()]
    runs: dict[tuple[str, int], list[float]] = {(n, s): [] for n, s, _ in timed}
    with progress("timing alloc+free pairs", repeats * len(timed)) as advance:
        for _ in range(repeats):
            for name, size, pair in timed:
                runs[name, size] += _time_pairs(pair, pairs, 1)
                advance(1)
    rows = []
    for name, size, _ in timed:
        us = statistics.median(runs[name, size])
        rows.append(
            {
                "impl": name,
                "size": size,
                "size_label": _label(size),
                "us_per_pair": round(us, 4),
                "runs_us": [round(r, 4) for r in runs[name, size]],
                "pairs": pairs,
            }
        )
        print(f"{name:<52} {_label(size):>7}  {us:8.3f} us/pair", file=sys.stderr)
    return rows, skipped


READERS = 20_000  # calls per timed run of a stats reader


def time_readers(
    device: vram.Device, repeats: int, label: str = "vram", only_vram: bool = False
) -> list[dict]:
    """µs per call of memory_allocated() and memory_stats(), after the pairs above (over a
    million allocator operations), vram's and PyTorch's."""
    readers = [
        ("vram memory_allocated()", lambda: vram.memory.memory_allocated(device)),
        ("vram memory_stats()", lambda: vram.memory.memory_stats(device)),
    ]
    if label != "vram":
        readers = [(f"{name} ({label})", call) for name, call in readers]
    try:
        torch = None if only_vram else _torch(device)
    except _Skip:
        torch = None
    if torch is not None:
        readers += [
            ("torch.cuda.memory_allocated()", lambda: torch.cuda.memory_allocated(device.index)),
            ("torch.cuda.memory_stats()", lambda: torch.cuda.memory_stats(device.index)),
        ]
    rows = []
    for name, call in readers:
        runs = _time_pairs(call, READERS, repeats)
        rows.append({"impl": name, "us_per_call": round(statistics.median(runs), 4)})
        print(f"{name:<52} {rows[-1]['us_per_call']:8.3f} us/call", file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    """The rows as a text table: one line per implementation, one column per size."""
    sizes = sorted({r["size"] for r in rows})
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    cell = {(r["impl"], r["size"]): r["us_per_pair"] for r in rows}
    lines = [f"{'us per alloc+free pair':<52}" + "".join(f"{_label(s):>10}" for s in sizes)]
    for impl in impls:
        values = (cell.get((impl, s)) for s in sizes)
        lines.append(
            f"{impl:<52}" + "".join("         -" if v is None else f"{v:10.3f}" for v in values)
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=None, help="cuda:N or sim:N (default: the default)")
    parser.add_argument("--pairs", type=int, default=20_000, help="pairs per timed run")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds")
    parser.add_argument("--vram-src", default=None, help="run vram from this source folder")
    parser.add_argument("--label", default="vram", help="the name of vram's rows")
    parser.add_argument("--only-vram", action="store_true", help="time vram alone")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    device = vram.default_device() if options.device is None else vram.device(options.device)
    vram.set_device(device)
    label, only = options.label, options.only_vram
    rows, skipped = run(device, options.pairs, options.repeats, label, only)
    readers = time_readers(device, options.repeats, label, only)
    name = "alloc" if label == "vram" else f"alloc-{label}"
    results = write_results(name, device, rows + readers, options.out, options.save)
    print(f"\nalloc benchmark on {device} ({device_name(device)})")
    print(table(rows))
    for row in readers:
        print(f"{row['impl']:<52} {row['us_per_call']:10.3f} us per call")
    for skip in skipped:
        print(f"skipped: {skip['impl']}: {skip['reason']}")
    for path in results:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
