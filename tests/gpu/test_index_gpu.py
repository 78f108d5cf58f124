"""Shapes, indexing and factories on a real GPU, compared with PyTorch's CUDA results: the
index kernels (gather, scatter with atomics, cat_rows, triangle, nonzero, masked_select,
linspace) over every dtype, layouts, sizes past one block and one chunk, and the device-side
assert of a bad index (in a child process: it ends the CUDA context)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import vram
from vram._dtypes import all_dtypes
from vram.driver import cuda_usable

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

CUDA = "cuda:0"
DTYPES = list(all_dtypes)
IDS = [d.name for d in DTYPES]
_BF16 = vram.bfloat16.np


def random(dt: vram.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Small integer values of ``dt`` (sums and products stay exact in every dtype)."""
    rng = np.random.default_rng(seed)
    if dt == vram.bool_:
        return rng.random(shape) > 0.5
    values = rng.integers(-4, 5, shape)
    if dt.is_complex:
        values = values + 1j * rng.integers(-4, 5, shape)
    if dt == vram.uint8:
        values = np.abs(values)
    return values.astype(dt.np)


def to_torch(a: np.ndarray) -> torch.Tensor:
    if a.dtype == _BF16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def from_torch(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_BF16)
    return t.numpy()


def both(a: np.ndarray) -> tuple[vram.Tensor, torch.Tensor]:
    return vram.tensor(a, device=CUDA), to_torch(a)


_RTOL = {"bfloat16": 1e-2, "float16": 2e-3}


def same(got: vram.Tensor, want: torch.Tensor | None, exact: bool = True) -> None:
    """``got`` equals PyTorch's ``want`` (exactly, or to a few ulps); None: PyTorch has no
    such CUDA kernel for this dtype, nothing to compare."""
    if want is None:
        return
    array, expected = got.numpy(), from_torch(want)
    assert array.shape == expected.shape, (array.shape, expected.shape)
    assert array.dtype == expected.dtype, (array.dtype, expected.dtype)
    if exact:
        np.testing.assert_array_equal(array, expected)
    else:
        rtol = _RTOL.get(got.dtype.name, 1e-5)
        np.testing.assert_allclose(
            array.astype(np.complex128), expected.astype(np.complex128), rtol=rtol, atol=1e-6
        )


def torch_if_supported(call):
    """PyTorch's result, or None where its CUDA build has no kernel for the dtype."""
    try:
        return call()
    except (RuntimeError, NotImplementedError) as error:
        if "not implemented" in str(error) or "not supported" in str(error):
            return None
        raise


# ---- gather kernels ----------------------------------------------------------------------------


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_index_select_gather_and_advanced_reads(dt):
    a = random(dt, (33, 70, 5), 1)
    v, t = both(a)
    rng = np.random.default_rng(2)
    rows = rng.integers(0, 70, 300)
    ri, rt = both(rows)
    same(v.index_select(1, ri), t.index_select(1, rt))
    same(v.permute(2, 0, 1).index_select(2, ri[::3]), t.permute(2, 0, 1).index_select(2, rt[::3]))
    same(v.index_select(0, ri[:40].to(vram.int32) % 33), t.index_select(0, (rt[:40] % 33).int()))
    cols = rng.integers(0, 5, (33, 70, 9))
    ci, ct = both(cols)
    same(v.gather(2, ci), t.gather(2, ct))
    same(
        v.gather(1, ci[:, :4, :].transpose(1, 2) % 70),
        t.gather(1, ct[:, :4, :].transpose(1, 2) % 70),
    )
    same(v[ri % 33], t[rt % 33])
    same(v[:, ri], t[:, rt])
    same(v[ri % 33, :, ri[:300] % 5], t[rt % 33, :, rt % 5])
    same(v[2, :, ri % 5], t[2, :, rt % 5])
    same(v[-ri % 33 - 33], t[-rt % 33 - 33])
    mask = rng.random((33, 70)) > 0.3
    mi, mt = both(mask)
    same(v[mi], t[mt])
    same(v[:, mi[0]], t[:, mt[0]])


def test_reads_larger_than_one_grid():
    a = np.arange(3_000_000, dtype=np.float32).reshape(-1, 3)
    v, t = both(a)
    rows = np.random.default_rng(3).integers(0, a.shape[0], 2_000_000)
    ri, rt = both(rows)
    same(v.index_select(0, ri), t.index_select(0, rt))
    same(v[ri, ri % 3], t[rt, rt % 3])


# ---- scatter kernels ---------------------------------------------------------------------------


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_scatter_scatter_add_multiply_and_index_put_accumulate(dt):
    a = random(dt, (40, 30), 4)
    src = random(dt, (200, 30), 5)
    v, t = both(a)
    sv, st = both(src)
    rng = np.random.default_rng(6)
    unique = np.stack([rng.permutation(40) for _ in range(30)], axis=1)
    uv, ut = both(unique)
    same(v.scatter(0, uv, sv[:40]), t.scatter(0, ut, st[:40]))
    repeated = rng.integers(0, 40, (200, 30))
    rv, rt = both(repeated)
    same(v.scatter_add(0, rv, sv), torch_if_supported(lambda: t.scatter_add(0, rt, st)))
    cols = np.ascontiguousarray(repeated.T[:, :30] % 30)
    cv, ct = both(cols)
    same(
        v.scatter(1, cv, 3, reduce="add"),
        torch_if_supported(lambda: t.scatter(1, ct, 3, reduce="add")),
    )
    if dt != vram.complex128:
        few = rng.integers(0, 40, (3, 30))
        fv, ft = both(few)
        got = v.scatter(0, fv, sv[:3], reduce="multiply")
        same(got, torch_if_supported(lambda: t.scatter(0, ft, st[:3], reduce="multiply")))
    idx = rng.integers(-40, 40, 500)
    iv, it = both(idx)
    values = random(dt, (500, 30), 7)
    vv, vt = both(values)
    got = v.index_put((iv,), vv, accumulate=True)
    same(got, torch_if_supported(lambda: t.index_put((it,), vt, accumulate=True)))


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_writes_through_indices_and_masks(dt):
    a = random(dt, (50, 20), 8)
    v, t = both(a)
    rng = np.random.default_rng(9)
    mask = rng.random((50, 20)) > 0.5
    mv, mt = both(mask)
    v[mv] = 1
    t[mt] = 1
    same(v, t)
    count = int(mask.sum())
    values = random(dt, (count,), 10)
    vv, vt = both(values)
    v[mv] = vv
    t[mt] = vt
    same(v, t)
    rows = rng.permutation(50)[:17]
    rv, rt = both(rows)
    block = random(dt, (17, 20), 11)
    bv, bt = both(block)
    v[rv] = bv
    t[rt] = bt
    same(v, t)
    cols = rng.permutation(20)[:6]
    cv, ct = both(cols)
    row = random(dt, (1, 6), 12)
    wv, wt = both(row)
    v[:, cv] = wv
    t[:, ct] = wt
    same(v, t)
    same(v.masked_fill(mv[0], 0), t.masked_fill(mt[0], 0))
    same(v.t().masked_fill(mv.t(), 1), t.t().masked_fill(mt.t(), 1))


# ---- nonzero and masked_select -----------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 255, 256, 257, 70_000, 3_000_001])
def test_nonzero_and_masked_select_across_chunks(size):
    rng = np.random.default_rng(size)
    mask = rng.random(size) > 0.6
    values = rng.standard_normal(size).astype(np.float32)
    mv, mt = both(mask)
    vv, vt = both(values)
    same(mv.nonzero(), mt.nonzero())
    same(vv.masked_select(mv), vt.masked_select(mt))
    grid = rng.random((size // 7 + 1, 7)) > 0.5
    gv, gt = both(grid)
    same(gv.nonzero(), gt.nonzero())
    same(gv.t().nonzero(), gt.t().nonzero())


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_nonzero_every_dtype(dt):
    a = random(dt, (100, 9), 12)
    v, t = both(a)
    same(v.nonzero(), t.nonzero())
    same(v[::2, 1:].nonzero(), t[::2, 1:].nonzero())
    same(vram.nonzero(v[3, 3]), torch.nonzero(t[3, 3]))


# ---- cat, stack, repeat, triangles -------------------------------------------------------------


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_cat_every_unit_and_layout(dt):
    for widths in ((16, 32), (3, 5, 8), (1, 2, 3, 4)):
        parts = [random(dt, (7, w), w) for w in widths]
        vs, ts = zip(*(both(p) for p in parts), strict=True)
        same(vram.cat(vs, 1), torch.cat(ts, 1))
        same(vram.cat([x.t() for x in vs], 0), torch.cat([x.t() for x in ts], 0))
        same(vram.cat(vs[:1] * 3, 0), torch.cat(ts[:1] * 3, 0))
    base_v, base_t = both(random(dt, (64,), 13))
    same(vram.cat([base_v[1:9], base_v[9:17]]), torch.cat([base_t[1:9], base_t[9:17]]))
    many = [random(dt, (3, 1 + k % 4), k) for k in range(150)]
    vs, ts = zip(*(both(p) for p in many), strict=True)
    same(vram.cat(vs, 1), torch.cat(ts, 1))
    same(vram.stack(vs[:5:4], 1), torch.stack(ts[:5:4], 1))


def test_cat_large_and_mixed_dtypes():
    a = np.arange(5_000_000, dtype=np.float32).reshape(1000, 5000)
    v, t = both(a)
    same(vram.cat([v, v[:, :37], v], 1), torch.cat([t, t[:, :37], t], 1))
    h, ht = both(random(vram.float16, (1000, 3), 14))
    i, it = both(random(vram.int32, (1000, 2), 15))
    same(vram.cat([v[:, :4], h, i], 1), torch.cat([t[:, :4], ht, it], 1))


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_repeat_tile_tril_triu(dt):
    a = random(dt, (3, 4, 5), 16)
    v, t = both(a)
    same(v.repeat(2, 1, 3), t.repeat(2, 1, 3))
    same(v.permute(2, 0, 1).repeat(1, 2, 1, 2), t.permute(2, 0, 1).repeat(1, 2, 1, 2))
    same(v.tile((2,)), t.tile((2,)))
    for k in (-3, 0, 2):
        same(v.tril(k), t.tril(k))
        same(v.transpose(1, 2).triu(k), t.transpose(1, 2).triu(k))
    w, wt = both(a)
    w.permute(2, 1, 0).tril_(1)
    wt.permute(2, 1, 0).tril_(1)
    same(w, wt)


def test_triangles_of_large_matrices():
    a = np.random.default_rng(17).standard_normal((3, 1500, 1700)).astype(np.float32)
    v, t = both(a)
    same(v.tril(-7), t.tril(-7))
    same(v.mT.triu(5), t.mT.triu(5))


# ---- factories ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dt", [vram.float16, vram.bfloat16, vram.float32, vram.float64, vram.int32, vram.int64]
)
def test_linspace_logspace_eye_and_like(dt):
    tdt = getattr(torch, dt.name)
    for start, end, steps in ((0, 1, 5), (-3, 10, 7), (-2.5, 100.0, 1000), (1, 1, 1)):
        got = vram.linspace(start, end, steps, dtype=dt, device=CUDA)
        want = torch.linspace(start, end, steps, dtype=tdt, device="cuda")
        same(got, want, exact=not dt.is_floating_point)
    if dt.is_floating_point:
        got = vram.logspace(-2, 2, 9, dtype=dt, device=CUDA)
        same(got, torch.logspace(-2, 2, 9, dtype=tdt, device="cuda"), exact=False)
    same(vram.eye(5, 7, dtype=dt, device=CUDA), torch.eye(5, 7, dtype=tdt, device="cuda"))
    v, t = both(random(dt, (4, 6), 18))
    like = vram.empty_like(v.t())
    assert like.stride() == torch.empty_like(t.t()).stride()
    same(vram.full_like(v.t(), 3), torch.full_like(t.t(), 3))
    same(vram.ones_like(v[:, ::2]), torch.ones_like(t[:, ::2]))


def test_linspace_complex():
    got = vram.linspace(0, 1 + 2j, 11, device=CUDA)
    same(got, torch.linspace(0, 1 + 2j, 11, device="cuda"), exact=False)


# ---- a bad index -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        "t.index_select(0, vram.tensor([0, 9], device='cuda:0'))",
        "t[vram.tensor([0, -9], device='cuda:0')]",
        "t.scatter_add_(0, vram.tensor([[0, 9, 0]], device='cuda:0'), t[:1].clone())",
    ],
)
def test_a_bad_index_is_a_device_side_assert(call):
    """As PyTorch's: the kernel stops, and the next synchronization reports it."""
    script = textwrap.dedent(
        f"""
        import vram
        t = vram.zeros(3, 3, device="cuda:0")
        {call}
        try:
            vram.synchronize("cuda:0")
        except vram.CudaError as error:
            print("raised", error.name)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert "raised CUDA_ERROR_ASSERT" in done.stdout, done.stdout + done.stderr
