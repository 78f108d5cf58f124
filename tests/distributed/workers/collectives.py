"""Run by the launcher on every rank (sim or GPUs): each collective, op and dtype against NumPy.

Every rank can make every rank's input (seeded by rank), so each checks its own result
exactly; any mismatch raises, and the launcher's exit code says so.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

import vram
import vram.distributed as dist

DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "int32": np.int32,
    "int64": np.int64,
    "int8": np.int8,
    "uint8": np.uint8,
}
OPS = {
    dist.ReduceOp.SUM: np.add,
    dist.ReduceOp.PRODUCT: np.multiply,
    dist.ReduceOp.MAX: np.maximum,
    dist.ReduceOp.MIN: np.minimum,
}


def data(rank: int, name: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(rank)
    if name.startswith(("float", "bfloat")):
        return rng.standard_normal(n).astype(DTYPES[name])
    low = 0 if name == "uint8" else -5
    return rng.integers(low, 6, n).astype(DTYPES[name])


def expected_reduce(name: str, op: dist.ReduceOp, world: int, n: int) -> np.ndarray:
    parts = [data(r, name, n) for r in range(world)]
    if op is dist.ReduceOp.AVG:
        if name.startswith(("float", "bfloat")):
            scale = np.array(1.0 / world, dtype=DTYPES[name])
            out = parts[0] * scale
            for p in parts[1:]:
                out = out + p * scale
            return out
        total = parts[0].astype(np.int64)
        for p in parts[1:]:
            total = total + p
        return (np.sign(total) * (np.abs(total) // world)).astype(DTYPES[name])
    out = parts[0]
    for p in parts[1:]:
        out = OPS[op](out, p)
    return out


def same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if got.dtype != want.dtype or got.tobytes() != want.tobytes():
        raise AssertionError(f"rank {dist.get_rank()}: {what}: got {got}, want {want}")


def main() -> None:
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = dist.default_group().device
    expected_type = "cuda" if dist.get_backend() == "nccl" else "sim"
    assert device == vram.device(expected_type, rank), device  # one device per local rank
    n = 6
    for name in DTYPES:
        for op in [*OPS, dist.ReduceOp.AVG]:
            t = vram.tensor(data(rank, name, n), device=device)
            dist.all_reduce(t, op=op)
            same(t.numpy(), expected_reduce(name, op, world, n), f"all_reduce {name} {op}")
        mine = vram.tensor(data(rank, name, n), device=device)
        out = vram.empty(n * world, dtype=mine.dtype, device=device)
        dist.all_gather_into_tensor(out, mine)
        same(out.numpy(), np.concatenate([data(r, name, n) for r in range(world)]), "gather")
        big = vram.tensor(data(rank, name, n * world), device=device)
        part = vram.empty(n, dtype=big.dtype, device=device)
        work = dist.reduce_scatter_tensor(part, big, op=dist.ReduceOp.SUM, async_op=True)
        work.wait()
        full = expected_reduce(name, dist.ReduceOp.SUM, world, n * world)
        same(part.numpy(), full[rank * n : (rank + 1) * n], f"reduce_scatter {name}")
        b = vram.tensor(data(rank, name, n), device=device)
        dist.broadcast(b, src=world - 1)
        same(b.numpy(), data(world - 1, name, n), f"broadcast {name}")
    flags = vram.tensor(np.array([rank == 0, False, True]), device=device)
    dist.all_reduce(flags)  # bool SUM is a logical or, as in PyTorch
    same(flags.numpy(), np.array([True, False, True]), "bool all_reduce")
    z = vram.tensor(np.array([1 + 2j, rank - 1j], np.complex64), device=device)
    dist.all_reduce(z)
    want = sum(np.array([1 + 2j, r - 1j], np.complex64) for r in range(world))
    same(z.numpy(), want.astype(np.complex64), "complex all_reduce")
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.write(f"rank {rank} ok\n")  # one write: the ranks share the pipe


if __name__ == "__main__":
    main()
