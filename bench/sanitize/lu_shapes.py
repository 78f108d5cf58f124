"""vram.linalg.lu_factor of the shapes the issue ran under memcheck (n x batch, float32), on
vram's blocked LU: each shape's first panel (a cluster of 8 blocks on sm_90, unless
VRAM_LINALG_CLUSTERS=0) and P L U = A checked on the host in float64. Exit status 1 when a
product is off. bench/sanitize/cluster_probe.py runs it under the tools.

    python3 bench/sanitize/lu_shapes.py [600x1,1100x1,...]
"""

from __future__ import annotations

import sys

import numpy as np

import vram
from vram.linalg import _blocked, _dispatch

SHAPES = "520x1,600x1,600x2,600x4,1100x1,2048x1"


def product(lu: np.ndarray, pivots: np.ndarray) -> np.ndarray:
    """P L U of one matrix's factors (LAPACK's pivots, 1-based), in float64."""
    n = lu.shape[0]
    lower = np.tril(lu, -1).astype(np.float64) + np.eye(n)
    out = lower @ np.triu(lu).astype(np.float64)
    for j in range(n - 1, -1, -1):
        p = pivots[j] - 1
        out[[j, p]] = out[[p, j]]
    return out


def main(argv: list[str]) -> int:
    device = vram.default_device()
    clusters = _blocked.clusters_on(device)
    rng = np.random.default_rng(0)
    failed = 0
    for shape in (argv[0] if argv else SHAPES).split(","):
        n, batch = (int(part) for part in shape.split("x"))
        a = rng.standard_normal((batch, n, n)).astype(np.float32)
        with _dispatch.forced("blocked"):
            lu, pivots, info = vram.linalg.lu_factor_ex(vram.tensor(a, device=device))
        first = _blocked.panel_config("float32", n, batch, clusters)
        kind = f"a cluster of {first.blocks} blocks" if first.blocks > 1 else "one block"
        lu, pivots = lu.numpy(), pivots.numpy()
        worst = max(np.abs(product(lu[i], pivots[i]) - a[i]).max() for i in range(batch))
        ok = worst <= 2e-3 * np.sqrt(n) and not info.numpy().any()
        failed += not ok
        print(
            f"{n} x {batch}: first panel {first.threads} threads x {kind}; "
            f"max |P L U - A| {worst:.2e} ({'ok' if ok else 'WRONG'})",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
