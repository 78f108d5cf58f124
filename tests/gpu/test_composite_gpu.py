"""The composite ops (diagonal, diag, diag_embed, trace, outer, flip, roll, einsum, tensordot)
and nn.functional's composites (embedding, one_hot, pad, normalize, rms_norm and the losses)
on a real GPU, compared with PyTorch on the same GPU: random inputs, float32, float16 and
bfloat16 where they apply, contiguous and transposed layouts."""

from __future__ import annotations

import numpy as np
import pytest

import vram
import vram.nn.functional as F
from vram.driver import cuda_usable

torch = pytest.importorskip("torch")
TF = pytest.importorskip("torch.nn.functional")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

CUDA = "cuda:0"
TORCH_DTYPES = {
    vram.float16: torch.float16,
    vram.bfloat16: torch.bfloat16,
    vram.float32: torch.float32,
    vram.float64: torch.float64,
    vram.int32: torch.int32,
    vram.int64: torch.int64,
    vram.uint8: torch.uint8,
    vram.bool_: torch.bool,
}
RTOL = {vram.float16: 4e-3, vram.bfloat16: 3e-2, vram.float32: 1e-4, vram.float64: 1e-10}
FLOATS = [vram.float32, vram.float16, vram.bfloat16]


@pytest.fixture(autouse=True)
def _exact_torch_matmul():
    """PyTorch's float32 matmul without TF32 (vram's default), restored afterwards."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


def sample(shape: tuple[int, ...], dt: vram.dtype = vram.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt.is_floating_point:
        return rng.standard_normal(shape).astype(np.float32)
    return rng.integers(0, 5, size=shape).astype(dt.np)


def both(array: np.ndarray, dt: vram.dtype = vram.float32):
    """The same values as a vram tensor and a torch tensor of ``dt`` on the GPU."""
    ours = vram.tensor(array, device=CUDA).to(dt)
    theirs = torch.from_numpy(np.ascontiguousarray(array)).to(CUDA).to(TORCH_DTYPES[dt])
    return ours, theirs


def host(result) -> np.ndarray:
    if isinstance(result, vram.Tensor):
        values = result.numpy()
        return values.astype(np.float32) if values.dtype.name == "bfloat16" else values
    result = result.detach().cpu()
    if result.dtype == torch.bfloat16:
        result = result.float()
    return result.numpy()


def check(ours, theirs, rtol: float | None = None) -> None:
    """torch's dtype and shape; equal for integers and bool, within the dtype's rounding
    (relative to the largest magnitude) for floating point."""
    assert ours.shape == tuple(theirs.shape)
    assert TORCH_DTYPES[ours.dtype] == theirs.dtype
    got, want = host(ours), host(theirs)
    if ours.dtype.np.kind in "iub":
        np.testing.assert_array_equal(got, want)
        return
    tol = RTOL[ours.dtype] if rtol is None else rtol
    scale = max(float(np.nanmax(np.abs(want))) if want.size else 0.0, 1.0)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True)


# ---- diagonals, flips, rolls --------------------------------------------------------------------


@pytest.mark.parametrize("dt", FLOATS + [vram.int64], ids=str)
def test_diagonals_match_torch(dt):
    ours, theirs = both(sample((5, 7, 6), dt), dt)
    for offset, d1, d2 in ((0, 0, 1), (2, -1, 0), (-3, 1, 2), (9, 0, 2)):
        view = ours.diagonal(offset, d1, d2)
        check(view, theirs.diagonal(offset, d1, d2))
        assert view.stride() == theirs.diagonal(offset, d1, d2).stride()
        assert view.storage_offset() == theirs.diagonal(offset, d1, d2).storage_offset()
    m, tm = ours[0], theirs[0]
    for k in (-2, 0, 3):
        check(vram.diag(m, k), torch.diag(tm, k))
        check(vram.diag(m.t(), k), torch.diag(tm.t(), k))
        check(vram.diag(m[:, 0], k), torch.diag(tm[:, 0], k))
        check(vram.diag_embed(m, k, 0, 2), torch.diag_embed(tm, k, 0, 2))
    check(vram.trace(m), torch.trace(tm), rtol=RTOL.get(dt, 0) * 4)
    check(vram.outer(m[0], m[1]), torch.outer(tm[0], tm[1]))


@pytest.mark.parametrize("dt", FLOATS + [vram.int32, vram.bool_], ids=str)
def test_flip_and_roll_match_torch(dt):
    ours, theirs = both(sample((4, 5, 3), dt), dt)
    for dims in ((0,), (-1,), (0, 2), (2, 1, 0)):
        check(vram.flip(ours, dims), torch.flip(theirs, dims))
        check(vram.flip(ours.transpose(0, 2), dims), torch.flip(theirs.transpose(0, 2), dims))
    for shifts, dims in ((1, 0), (-2, 1), (7, -1), ((1, -3), (0, 2)), (5, None), (-13, None)):
        check(vram.roll(ours, shifts, dims), torch.roll(theirs, shifts, dims))
        check(
            vram.roll(ours.permute(2, 0, 1), shifts, dims),
            torch.roll(theirs.permute(2, 0, 1), shifts, dims),
        )


# ---- einsum and tensordot ---------------------------------------------------------------------

EQUATIONS = [
    ("ij,jk->ik", [(33, 40), (40, 17)]),
    ("bij,bjk->bik", [(3, 20, 24), (3, 24, 9)]),
    ("i,i->", [(100,), (100,)]),
    ("ij->ji", [(7, 9)]),
    ("ii->i", [(8, 8)]),
    ("ii", [(8, 8)]),
    ("bhqd,bhkd->bhqk", [(2, 4, 16, 32), (2, 4, 24, 32)]),
    ("bhqk,bhkd->bhqd", [(2, 4, 16, 24), (2, 4, 24, 32)]),
    ("ij,jk", [(6, 5), (5, 4)]),
    ("i,j->ij", [(6,), (7,)]),
    ("ijk->j", [(4, 5, 6)]),
    ("bn,anm,bm->ba", [(3, 8), (5, 8, 6), (3, 6)]),
    ("...ij,...jk->...ik", [(2, 3, 12, 16), (3, 16, 8)]),
    ("...d,...d->...", [(4, 6, 32), (6, 32)]),
    ("b...,b...->...b", [(3, 4, 5), (3, 4, 5)]),
]


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize(("equation", "shapes"), EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_matches_torch(equation, shapes, dt):
    pairs = [both(sample(s, dt, k), dt) for k, s in enumerate(shapes)]
    ours = vram.einsum(equation, *[p[0] for p in pairs])
    theirs = torch.einsum(equation, *[p[1] for p in pairs])
    check(ours, theirs, rtol=RTOL[dt] * 4)


def test_einsum_transposed_operands_match_torch():
    (a, ta), (b, tb) = both(sample((40, 33))), both(sample((17, 40), seed=1))
    check(vram.einsum("ij,jk->ik", a.t(), b.t()), torch.einsum("ij,jk->ik", ta.t(), tb.t()))
    check(vram.tensordot(a, b, ([0], [1])), torch.tensordot(ta, tb, ([0], [1])))
    (c, tc), (d, td) = both(sample((3, 4, 5))), both(sample((4, 5, 6), seed=2))
    check(vram.tensordot(c, d), torch.tensordot(tc, td))
    check(vram.tensordot(c, d, 0), torch.tensordot(tc, td, 0))


# ---- nn.functional: embedding, one_hot, pad, normalize, rms_norm ---------------------------------


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_embedding_and_one_hot_match_torch(dt):
    weight, tweight = both(sample((50, 16), dt), dt)
    idx = np.random.default_rng(1).integers(0, 50, size=(4, 7))
    for index_dt in (vram.int64, vram.int32):
        i, ti = both(idx.astype(index_dt.np), index_dt)
        check(F.embedding(i, weight), TF.embedding(ti, tweight))
        check(
            F.embedding(i.t(), weight, padding_idx=0), TF.embedding(ti.t(), tweight, padding_idx=0)
        )
    labels, tlabels = both(idx, vram.int64)
    check(F.one_hot(labels), TF.one_hot(tlabels))
    check(F.one_hot(labels.t(), 64), TF.one_hot(tlabels.t(), 64))


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_pad_matches_torch(dt):
    img, timg = both(sample((2, 3, 6, 7), dt), dt)
    for pad, value in (
        ((1, 2), 0.0),
        ((0, 0, 2, 1), -1.5),
        ((-1, 2, 1, -2), 3.0),
        ((1,) * 8, None),
    ):
        check(F.pad(img, pad, value=value), TF.pad(timg, pad, value=value))
    for mode in ("reflect", "replicate", "circular"):
        for x, tx, pad in (
            (img[0], timg[0], (3, 1)),
            (img, timg, (2, 1, 0, 3)),
            (img[None], timg[None], (1, 1, 2, 0, 0, 2)),
            (img[0], timg[0], (-2, 3)),
            (img.transpose(2, 3), timg.transpose(2, 3), (2, 2, 1, 1)),
        ):
            check(F.pad(x, pad, mode=mode), TF.pad(tx, pad, mode=mode))


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_normalize_and_rms_norm_match_torch(dt):
    x, tx = both(sample((8, 12, 64), dt), dt)
    w, tw = both(sample((64,), dt, 1), dt)
    check(F.normalize(x, dim=-1), TF.normalize(tx, dim=-1))
    check(F.normalize(x.transpose(0, 2), p=1, dim=0), TF.normalize(tx.transpose(0, 2), p=1, dim=0))
    check(F.rms_norm(x, (64,)), TF.rms_norm(tx, (64,)))
    check(F.rms_norm(x, (64,), w, eps=1e-5), TF.rms_norm(tx, (64,), tw, eps=1e-5))
    check(F.rms_norm(x, (12, 64)), TF.rms_norm(tx, (12, 64)))


# ---- losses ----------------------------------------------------------------------------------

REDUCTIONS = ("none", "mean", "sum")


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_regression_losses_match_torch(reduction, dt):
    (x, tx), (y, ty) = both(sample((16, 33), dt), dt), both(sample((16, 33), dt, 1), dt)
    check(F.mse_loss(x, y, reduction=reduction), TF.mse_loss(tx, ty, reduction=reduction))
    check(
        F.l1_loss(x.t(), y.t(), reduction=reduction),
        TF.l1_loss(tx.t(), ty.t(), reduction=reduction),
    )
    w, tw = both(np.random.default_rng(2).random(33).astype(np.float32), dt)
    check(
        F.binary_cross_entropy_with_logits(
            x * 10, y.sigmoid(), w, reduction=reduction, pos_weight=w
        ),
        TF.binary_cross_entropy_with_logits(
            tx * 10, ty.sigmoid(), tw, reduction=reduction, pos_weight=tw
        ),
    )


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_classification_losses_match_torch(reduction, dt):
    x, tx = both(sample((32, 10), dt) * 3, dt)
    target = np.random.default_rng(3).integers(0, 10, size=32)
    target[::5] = -100
    t, tt = both(target, vram.int64)
    w, tw = both(np.random.default_rng(4).random(10).astype(np.float32), dt)
    logp, tlogp = x.log_softmax(1), tx.log_softmax(1)
    check(F.nll_loss(logp, t, reduction=reduction), TF.nll_loss(tlogp, tt, reduction=reduction))
    check(
        F.nll_loss(logp, t, w, reduction=reduction), TF.nll_loss(tlogp, tt, tw, reduction=reduction)
    )
    for smoothing in (0.0, 0.1):
        check(
            F.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing),
            TF.cross_entropy(tx, tt, reduction=reduction, label_smoothing=smoothing),
        )
        check(
            F.cross_entropy(x, t, w, reduction=reduction, label_smoothing=smoothing),
            TF.cross_entropy(tx, tt, tw, reduction=reduction, label_smoothing=smoothing),
        )
    x3, tx3 = both(sample((4, 10, 6), dt), dt)  # [N, C, d]: the class dim is 1
    t3, tt3 = both(np.random.default_rng(5).integers(0, 10, size=(4, 6)), vram.int64)
    check(
        F.cross_entropy(x3, t3, ignore_index=2, reduction=reduction, label_smoothing=0.2),
        TF.cross_entropy(tx3, tt3, ignore_index=2, reduction=reduction, label_smoothing=0.2),
    )
    probs, tprobs = x.softmax(1), tx.softmax(1)
    check(
        F.cross_entropy(x, probs.flip(0), w, reduction=reduction, label_smoothing=0.1),
        TF.cross_entropy(tx, tprobs.flip(0), tw, reduction=reduction, label_smoothing=0.1),
    )
