"""The fused attention kernel alone, on the shapes of tests/gpu/test_attention_gpu.py's
``test_fused_matches_torch`` (tails of L and S, both head dims, both dtypes, causal or not),
one call at a time with a synchronize after each: run under compute-sanitizer's memcheck it
names the first launch that reads or writes out of bounds, without PyTorch in the process.

    compute-sanitizer --tool memcheck python3 bench/sanitize/attn_probe.py
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np

import vram
import vram.nn.functional as F


def main() -> None:
    device = vram.device("cuda:0")
    rng = np.random.default_rng(0)
    shapes = [(100, 150), (257, 257), (300, 77)]
    dtypes = [ml_dtypes.bfloat16, np.float16]
    for (rows, keys), dim, causal, dtype in itertools.product(
        shapes, (64, 128), (False, True), dtypes
    ):
        q, k, v = (
            vram.tensor(rng.standard_normal((2, 3, n, dim)).astype(dtype), device=device)
            for n in (rows, keys, keys)
        )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        vram.synchronize(device)
        total = float(out.float().abs().sum())
        name = np.dtype(dtype).name
        print(f"L={rows} S={keys} D={dim} causal={causal} {name}: ok {total:.3f}", flush=True)
    print("done")


if __name__ == "__main__":
    main()
