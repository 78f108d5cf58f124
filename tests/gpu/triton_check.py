"""A Triton kernel on vram tensors, launched through vram.interop.triton (test_triton_gpu.py
runs it in a fresh process).

    python tests/gpu/triton_check.py [--keep-torch-out]

- an add kernel on a side stream made current with ``vram.stream``: the driver reports
  that stream and the sum is right;
- the same kernel captured by ``vram.graph``: replays read new inputs, so the launch was on
  the capturing stream (vram's current one);
- where Triton has device-side tensor descriptors (``tl.make_tensor_descriptor``), a
  kernel that needs scratch memory: ``triton.set_allocator``'s allocator is vram's.
``--keep-torch-out`` keeps torch from being imported at all (an import hook refuses it:
Triton's argument specializer tries ``import torch`` and carries on without it). Without
it, the report says which torch modules got imported, where torch is installed. Prints
one JSON line; exits 1 with a message when a check fails.
"""

from __future__ import annotations

import importlib.abc
import json
import sys

KEEP_TORCH_OUT = "--keep-torch-out" in sys.argv


class _RefuseTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"{name} is kept out of this process", name=name)
        return None


if KEEP_TORCH_OUT:
    sys.meta_path.insert(0, _RefuseTorch())

import numpy as np  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import vram  # noqa: E402
from vram.interop import triton as vram_triton  # noqa: E402

N = 10_000
BLOCK = 1024


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out + offsets, tl.load(x + offsets, mask=mask) + tl.load(y + offsets, mask=mask),
             mask=mask)  # fmt: skip


@triton.jit
def double_tiles(src, dst, M, N, BM: tl.constexpr, BN: tl.constexpr):
    into = tl.make_tensor_descriptor(src, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    out = tl.make_tensor_descriptor(dst, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    out.store([m, n], into.load([m, n]) * 2)


def fail(message: str) -> None:
    print(f"FAILED: {message}", flush=True)
    sys.exit(1)


def main() -> None:
    device = vram.device("cuda:0")
    driver = vram_triton.use_vram()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    x, y = vram.tensor(a, device=device), vram.tensor(b, device=device)
    out = vram.empty(N, device=device)
    grid = (triton.cdiv(N, BLOCK),)
    side = vram.Stream(device)
    side.wait_stream(vram.current_stream(device))
    with vram.stream(side):
        if driver.get_current_stream(0) != side.cuda_stream:
            fail("Triton's driver does not report vram's current stream")
        add_kernel[grid](x, y, out, N, BLOCK=BLOCK)
    side.synchronize()
    if not np.array_equal(out.numpy(), a + b):
        fail("the sum launched on a side stream is wrong")

    graph = vram.CUDAGraph()
    with vram.graph(graph):
        add_kernel[grid](x, y, out, N, BLOCK=BLOCK)
    x.copy_(vram.tensor(2 * a, device=device))
    graph.replay()
    vram.synchronize(device)
    if not np.array_equal(out.numpy(), 2 * a + b):
        fail("the captured launch did not replay on new inputs")

    scratch = "skipped: this Triton has no tl.make_tensor_descriptor"
    if hasattr(tl, "make_tensor_descriptor"):
        before = vram_triton.allocations()
        tiles = rng.standard_normal((64, 64)).astype(np.float32)
        src = vram.tensor(tiles, device=device)
        dst = vram.empty((64, 64), device=device)
        double_tiles[(2, 2)](src, dst, 64, 64, BM=32, BN=32)
        vram.synchronize(device)
        if not np.array_equal(dst.numpy(), 2 * tiles):
            fail("the tensor-descriptor kernel's result is wrong")
        if vram_triton.allocations() == before:
            fail("the tensor-descriptor kernel took no scratch memory from vram")
        scratch = f"vram served {vram_triton.allocations() - before} allocation(s)"
    torch_modules = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    if KEEP_TORCH_OUT and torch_modules:
        fail(f"torch was imported: {torch_modules[:5]}")
    print(json.dumps({
        "triton": triton.__version__,
        "keep_torch_out": KEEP_TORCH_OUT,
        "torch_modules_imported": torch_modules[:10],
        "side_stream": "ok",
        "graph_replay": "ok",
        "scratch": scratch,
    }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
