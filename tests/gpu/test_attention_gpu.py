"""scaled_dot_product_attention on a real GPU against PyTorch's on the same GPU: the fused
kernel (float16 and bfloat16, head dims 64 and 128, causal or not, L != S, masks,
grouped-query attention, heads split from one projection, tails of L and S that are not
whole tiles), the composite (float32, float64, other head dims), a GPT-2-small decoder
block, and compute-sanitizer's memcheck and racecheck over the kernel."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import vram
import vram.nn.functional as F
from vram.driver import cuda_usable
from vram.ops import _attention
from vram.ops.warm import warm

torch = pytest.importorskip("torch")
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

CUDA = "cuda:0"
# PyTorch's reference without its cuDNN backend, which failed on an H200 run (cuDNN's
# CUDNN_STATUS_INTERNAL_ERROR at L=100, S=150, bf16): flash, memory-efficient or math.
REFERENCE_BACKENDS = [
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
]
ROOT = Path(__file__).resolve().parents[2]
BF16 = ml_dtypes.bfloat16
TORCH = {
    BF16: torch.bfloat16,
    np.float16: torch.float16,
    np.float32: torch.float32,
    np.float64: torch.float64,
}
TOL = {BF16: 2e-2, np.float16: 2e-3, np.float32: 2e-5, np.float64: 1e-10}


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    """Every fused instance compiled first, on every core, into the kernel cache."""
    warm(_attention.instances())


def both(array: np.ndarray):
    """The same values as a vram tensor and a torch tensor on the GPU."""
    ours = vram.tensor(array, device=CUDA)
    wide = np.float64 if array.dtype == np.float64 else np.float32  # exact for every dtype
    theirs = torch.from_numpy(array.astype(wide)).to(CUDA).to(TORCH[array.dtype.type])
    return ours, theirs


def sample(shape, dt, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dt)


def compare(ours: vram.Tensor, theirs, dt) -> None:
    got = ours.numpy().astype(np.float64)
    want = theirs.detach().double().cpu().numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=TOL[dt], atol=TOL[dt])


def run_both(qs, ks, vs, dt, mask=None, **options):
    q, k, v = sample(qs, dt, 1), sample(ks, dt, 2), sample(vs, dt, 3)
    (q0, q1), (k0, k1), (v0, v1) = both(q), both(k), both(v)
    m0 = m1 = None
    if mask is not None:
        m0, m1 = (
            both(mask)
            if mask.dtype != np.bool_
            else (vram.tensor(mask, device=CUDA), torch.from_numpy(mask).to(CUDA))
        )
    ours = F.scaled_dot_product_attention(q0, k0, v0, m0, **options)
    vram.synchronize()  # a fault of ours is reported as ours, not in PyTorch's next call
    # PyTorch 2.11's memory-efficient kernel takes a float mask of another dtype than the
    # query's, then refuses it ("invalid dtype for bias"); its math backend accepts it
    other_dtype = m1 is not None and m1.is_floating_point() and m1.dtype != q1.dtype
    with sdpa_kernel([SDPBackend.MATH] if other_dtype else REFERENCE_BACKENDS):
        theirs = torch.nn.functional.scaled_dot_product_attention(q1, k1, v1, m1, **options)
    return ours, theirs


@pytest.mark.parametrize("dt", [BF16, np.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lengths", [(100, 150), (257, 257), (300, 77)], ids=str)
def test_fused_matches_torch(dt, dim, causal, lengths, fused_calls):
    lq, s = lengths
    ours, theirs = run_both((2, 3, lq, dim), (2, 3, s, dim), (2, 3, s, dim), dt, is_causal=causal)
    assert len(fused_calls) == 1
    compare(ours, theirs, dt)


@pytest.mark.parametrize("dim", [64, 128])
def test_fused_large_grid(dim, fused_calls):
    """GPT-2's attention at batch 8, seq 1024: 128-row blocks (two row tiles a warp) at
    head dim 64."""
    ours, theirs = run_both(
        (8, 12, 1024, dim), (8, 12, 1024, dim), (8, 12, 1024, dim), BF16, is_causal=True
    )
    assert len(fused_calls) == 1
    compare(ours, theirs, BF16)


MASKS = {
    "bool": lambda rng: rng.random((2, 1, 90, 130)) > 0.2,
    "own dtype": lambda rng: rng.standard_normal((90, 130)),
    "float32": lambda rng: rng.standard_normal((3, 1, 130)).astype(np.float32),
}


@pytest.mark.parametrize("dt", [BF16, np.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("kind", MASKS)
def test_fused_masks_match_torch(dt, dim, kind, fused_calls):
    mask = MASKS[kind](np.random.default_rng(4))
    if kind == "own dtype":
        mask = mask.astype(dt)
    ours, theirs = run_both((2, 3, 90, dim), (2, 3, 130, dim), (2, 3, 130, dim), dt, mask)
    assert len(fused_calls) == 1
    compare(ours, theirs, dt)


def test_fused_grouped_query_attention(fused_calls):
    ours, theirs = run_both(
        (2, 8, 70, 128), (2, 2, 90, 128), (2, 4, 90, 128), BF16, enable_gqa=True
    )
    assert len(fused_calls) == 1
    compare(ours, theirs, BF16)


def test_fused_reads_heads_split_from_one_projection(fused_calls):
    b, t, h, d = 2, 200, 12, 64
    x = sample((b, t, 3 * h * d), BF16, 5)
    ours_x, theirs_x = both(x)
    q0, k0, v0 = ours_x.view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
    q1, k1, v1 = theirs_x.view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
    ours = F.scaled_dot_product_attention(q0, k0, v0, is_causal=True)
    theirs = torch.nn.functional.scaled_dot_product_attention(q1, k1, v1, is_causal=True)
    assert len(fused_calls) == 1
    compare(ours, theirs, BF16)
    merged = ours.transpose(1, 2).reshape(b, t, h * d)
    assert merged.data_ptr() == ours.data_ptr()


def test_fused_three_and_two_dims(fused_calls):
    ours, theirs = run_both((5, 70, 64), (5, 33, 64), (5, 33, 64), np.float16, is_causal=True)
    compare(ours, theirs, np.float16)
    ours, theirs = run_both((70, 128), (33, 128), (33, 128), BF16, scale=0.3)
    compare(ours, theirs, BF16)
    assert len(fused_calls) == 2


@pytest.mark.parametrize(
    "dt, dim", [(np.float32, 64), (np.float64, 32), (BF16, 80), (np.float16, 16)], ids=str
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_composite_matches_torch(dt, dim, causal, fused_calls):
    ours, theirs = run_both((2, 3, 50, dim), (2, 3, 70, dim), (2, 3, 70, 24), dt, is_causal=causal)
    assert not fused_calls
    compare(ours, theirs, dt)


def test_composite_with_a_mask_matches_torch():
    mask = np.random.default_rng(6).random((40, 60)) > 0.3
    mask[3] = False  # a row of no key: zeros, as PyTorch's
    ours, theirs = run_both((2, 40, 32), (2, 60, 32), (2, 60, 32), np.float32, mask)
    compare(ours, theirs, np.float32)


@pytest.mark.parametrize("batch, seq", [(2, 128), (1, 1024)])
def test_decoder_block_matches_torch(batch, seq, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    decoder = importlib.import_module("_decoder")
    weights = decoder.gpt2_weights()
    x = sample((batch, seq, decoder.D_MODEL), BF16, 7)
    ours_x, theirs_x = both(x)
    ours = decoder.vram_block(weights, CUDA)(ours_x)
    with torch.no_grad():
        theirs = decoder.torch_block(weights, CUDA)(theirs_x)
    error, close = decoder.tolerance(ours.numpy().astype(np.float32), theirs.float().cpu().numpy())
    assert close, f"largest difference {error}"


_SANITIZED = """
import numpy as np, vram, vram.nn.functional as F
rng = np.random.default_rng(0)
def t(shape, dt):
    return vram.tensor(rng.standard_normal(shape).astype(dt), device="cuda:0")
mask = vram.tensor(rng.random((130, 77)) > 0.5, device="cuda:0")
for dim in (64, 128):
    q, k, v = t((2, 2, 130, dim), "f2"), t((2, 2, 77, dim), "f2"), t((2, 2, 77, dim), "f2")
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    F.scaled_dot_product_attention(q, k, v, mask)
    q, k = t((2, 3, 100, dim), "f2"), t((2, 3, 150, dim), "f2")  # more keys than rows
    F.scaled_dot_product_attention(q, k, k)
q = t((8, 12, 260, 64), "f2")  # 128-row blocks (two row tiles a warp)
F.scaled_dot_product_attention(q, q, q, is_causal=True)
vram.synchronize()
print("done")
"""


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer_finds_nothing(tool):
    """Out-of-bounds accesses (tails of L and S, masks) and shared-memory races (the K and
    V tiles' reuse across the block's warps) under NVIDIA's compute-sanitizer."""
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.path.exists(sanitizer):
        pytest.skip("compute-sanitizer is not installed")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
    env["VRAM_NO_CACHING"] = "1"  # each tensor its own allocation: a read past one is caught
    result = subprocess.run(
        [sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, "-c", _SANITIZED],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert result.returncode == 0 and "done" in result.stdout, result.stdout + result.stderr
