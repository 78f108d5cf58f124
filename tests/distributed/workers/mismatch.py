"""Rank 0 all-reduces while rank 1 broadcasts: both must fail with ncclInvalidUsage."""

from __future__ import annotations

import sys

import vram
import vram.distributed as dist

dist.init_process_group()
t = vram.ones(4, device=dist.default_group().device)
try:
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=1)
    vram.synchronize(dist.default_group().device)
except vram.CudaError as exc:
    sys.stdout.write(f"rank {dist.get_rank()}: {exc.call} {exc.name}\n")
    sys.exit(0 if exc.name == "ncclInvalidUsage" else 1)
sys.exit(2)  # a mismatch went unnoticed
