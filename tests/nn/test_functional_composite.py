"""nn.functional's composites (embedding, one_hot, pad, normalize, rms_norm and the losses) on
the simulated GPU and the host, checked against NumPy references, with torch's errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import vram
import vram.nn.functional as F

DEVICES = [vram.device("sim:0"), vram.device("cpu")]
REDUCTIONS = ("none", "mean", "sum")


def put(a, device) -> vram.Tensor:
    return vram.tensor(a, device=device)


def normal(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def close(got: vram.Tensor, want, rtol: float = 1e-5, dtype=None) -> None:
    array = got.float().numpy() if got.dtype in (vram.float16, vram.bfloat16) else got.numpy()
    assert array.shape == np.shape(want), (array.shape, np.shape(want))
    if dtype is not None:
        assert got.dtype == dtype
    np.testing.assert_allclose(array, want, rtol=rtol, atol=rtol, equal_nan=True)


def reduce(loss: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "mean":
        return np.asarray(loss.mean())
    return np.asarray(loss.sum()) if reduction == "sum" else loss


# ---- embedding and one_hot ------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32], ids=["int64", "int32"])
def test_embedding_rows(index_dtype, device):
    weight = normal((7, 3))
    idx = np.array([[0, 6, 2], [2, 2, 5]], index_dtype)
    got = F.embedding(put(idx, device), put(weight, device))
    close(got, weight[idx], dtype=vram.float32)
    close(F.embedding(put(idx, device), put(weight, device), padding_idx=2), weight[idx])
    close(
        F.embedding(put(idx, device).t(), put(weight, device).t().contiguous().t()), weight[idx.T]
    )
    close(F.embedding(put(np.array(4), device), put(weight, device)), weight[4])
    empty = F.embedding(put(np.zeros((0, 2), np.int64), device), put(weight, device))
    assert empty.shape == (0, 2, 3)
    half = F.embedding(put(idx, device), put(weight, device).half())
    close(half, weight.astype(np.float16)[idx].astype(np.float32), dtype=vram.float16)


def test_embedding_errors():
    w = vram.zeros(3, 2, device="sim:0")
    idx = vram.tensor([1], device="sim:0")
    with pytest.raises(RuntimeError, match="'indices' to have one of the following scalar types"):
        F.embedding(vram.tensor([1.0], device="sim:0"), w)
    with pytest.raises(RuntimeError, match="'weight' must be 2-D"):
        F.embedding(idx, vram.zeros(3, device="sim:0"))
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        F.embedding(idx, w, padding_idx=3)
    with pytest.raises(AssertionError, match="Padding_idx"):
        F.embedding(idx, w, padding_idx=-4)
    with pytest.raises(NotImplementedError, match="max_norm"):
        F.embedding(idx, w, max_norm=1.0)
    with pytest.raises(TypeError, match="'weight' must be Tensor"):
        F.embedding(idx, np.zeros((3, 2)))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_one_hot(device):
    labels = np.array([[0, 3], [2, 1]], np.int64)
    got = F.one_hot(put(labels, device))
    np.testing.assert_array_equal(got.numpy(), np.eye(4, dtype=np.int64)[labels])
    assert got.dtype == vram.int64
    got = F.one_hot(put(labels, device).t(), num_classes=6)
    np.testing.assert_array_equal(got.numpy(), np.eye(6, dtype=np.int64)[labels.T])
    empty = F.one_hot(put(np.zeros((0,), np.int64), device), 3)
    assert empty.shape == (0, 3) and empty.dtype == vram.int64
    with pytest.raises(RuntimeError, match="Class values must be non-negative."):
        F.one_hot(put(np.array([1, -1]), device))
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes."):
        F.one_hot(put(np.array([3]), device), 3)
    with pytest.raises(RuntimeError, match="Can not infer total number of classes"):
        F.one_hot(put(np.zeros((0,), np.int64), device))
    with pytest.raises(RuntimeError, match="only applicable to index tensor of type LongTensor"):
        F.one_hot(put(np.array([1], np.int32), device))


# ---- pad --------------------------------------------------------------------------------


def numpy_constant_pad(a: np.ndarray, pad: tuple[int, ...], value) -> np.ndarray:
    """Negative pads crop, positive pads fill with ``value``."""
    for k in range(len(pad) // 2):
        d = a.ndim - 1 - k
        before, after = pad[2 * k], pad[2 * k + 1]
        index = [slice(None)] * a.ndim
        index[d] = slice(max(-before, 0), a.shape[d] - max(-after, 0))
        a = a[tuple(index)]
        widths = [(0, 0)] * a.ndim
        widths[d] = (max(before, 0), max(after, 0))
        a = np.pad(a, widths, constant_values=value)
    return a


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize(
    "pad", [(1, 2), (0, 0, 2, 1), (-1, 2, 1, -2), (1, 1, 1, 1, 1, 1), (-3, -1)], ids=str
)
def test_constant_pad(pad, device):
    a = normal((2, 3, 4))
    close(F.pad(put(a, device), pad), numpy_constant_pad(a, pad, 0))
    close(F.pad(put(a, device), pad, value=-1.5), numpy_constant_pad(a, pad, -1.5))
    t = put(a.transpose(2, 0, 1).copy(), device).permute(1, 2, 0)  # non-contiguous
    close(F.pad(t, pad, "constant", 7.0), numpy_constant_pad(a, pad, 7.0))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_constant_pad_dtypes_and_empty(device):
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = F.pad(put(ints, device), (1, 1), value=2.7)  # the value truncates, as PyTorch's cast
    np.testing.assert_array_equal(got.numpy(), numpy_constant_pad(ints, (1, 1), 2))
    assert got.dtype == vram.int32
    half = F.pad(put(ints, device).half(), (0, 2), value=0.5)
    close(half, numpy_constant_pad(ints.astype(np.float32), (0, 2), 0.5), dtype=vram.float16)
    bf = F.pad(put(ints, device).to(vram.bfloat16), (1, 0, 0, 1))
    close(bf, numpy_constant_pad(ints.astype(np.float32), (1, 0, 0, 1), 0), dtype=vram.bfloat16)
    empty = F.pad(put(np.zeros((0, 2), np.float32), device), (1, 1))
    assert empty.shape == (0, 4)
    grown = F.pad(put(np.zeros((0, 2), np.float32), device), (0, 0, 1, 1), value=3.0)
    close(grown, np.full((2, 2), 3.0, np.float32))


def numpy_mode_pad(a: np.ndarray, pad: tuple[int, ...], mode: str) -> np.ndarray:
    """PyTorch's reflect / replicate / circular for non-negative pads."""
    widths = [(0, 0)] * a.ndim
    for k in range(len(pad) // 2):
        widths[a.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return np.pad(
        a, widths, mode={"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    )


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_mode_pads(mode, device):
    img = normal((2, 3, 4, 5))
    for x, pad in ((img[0], (3, 1)), (img, (2, 1, 0, 3)), (img[None], (1, 1, 2, 0, 0, 2))):
        close(F.pad(put(x, device), pad, mode=mode), numpy_mode_pad(x, pad, mode))
    t = put(img[0].transpose(0, 2, 1).copy(), device).transpose(1, 2)  # non-contiguous
    close(F.pad(t, (2, 2), mode=mode), numpy_mode_pad(img[0], (2, 2), mode))
    close(F.pad(put(img[0], device), (0, 0), mode=mode), img[0])


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_mode_pads_with_negative_pads(device):
    row = np.arange(5, dtype=np.float32).reshape(1, 1, 5)
    want = {
        ("reflect", (3, -1)): [3, 2, 1, 0, 1, 2, 3],
        ("reflect", (-1, 3)): [1, 2, 3, 4, 3, 2, 1],
        ("replicate", (-2, 2)): [2, 3, 4, 4, 4],
        ("circular", (-2, 3)): [2, 3, 4, 2, 3, 4],  # circular crops first, then wraps
        ("circular", (1, -1)): [3, 0, 1, 2, 3],
    }
    for (mode, pad), values in want.items():
        close(F.pad(put(row, device), pad, mode=mode), np.array([[values]], np.float32))


def test_pad_errors():
    a = vram.zeros(3, 4, device="sim:0")
    b = vram.zeros(1, 3, 4, device="sim:0")
    with pytest.raises(RuntimeError, match="Padding length must be divisible by 2"):
        F.pad(a, (1,))
    with pytest.raises(RuntimeError, match="Padding length should be less than or equal to two"):
        F.pad(a, (1, 1, 1, 1, 1, 1))
    with pytest.raises(RuntimeError, match="resulted in a negative output size"):
        F.pad(a, (-3, -2))
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode bogus"):
        F.pad(b, (1, 1), mode="bogus")
    with pytest.raises(RuntimeError, match="Padding size should be less than the corresponding"):
        F.pad(b, (4, 1), mode="reflect")
    with pytest.raises(RuntimeError, match="Padding value causes wrapping around more than once"):
        F.pad(b, (5, 1), mode="circular")
    with pytest.raises(RuntimeError, match='Padding mode "replicate" doesn\'t take in value'):
        F.pad(b, (1, 1), mode="replicate", value=3)
    with pytest.raises(NotImplementedError, match="Padding size 4 is not supported for 2D input"):
        F.pad(a, (1, 1, 1, 1), mode="reflect")
    with pytest.raises(TypeError, match="'pad'"):
        F.pad(a, (1.5, 1))


# ---- normalize and rms_norm -----------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_normalize(device):
    x = normal((4, 5))
    x[1] = 0  # a zero row stays zero (eps keeps the division finite)
    norms = np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    close(F.normalize(put(x, device)), x / norms)
    close(F.normalize(put(x, device), p=1, dim=-2), x / np.abs(x).sum(0, keepdims=True))
    close(F.normalize(put(x.T.copy(), device).t(), dim=1), x / norms)
    rows = [0, 2, 3]
    half = F.normalize(put(x[rows], device).half(), dim=1)
    close(half, x[rows] / norms[rows], rtol=2e-3, dtype=vram.float16)
    # eps rounds to 0 in float16, so a zero row is 0 / 0, as in PyTorch
    assert np.isnan(F.normalize(put(x, device).half()).float().numpy()[1]).all()
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        F.normalize(put(np.ones((2, 2), np.int64), device))


def numpy_rms_norm(x: np.ndarray, k: int, weight=None, eps=None) -> np.ndarray:
    wide = x.astype(np.float64)
    axes = tuple(range(x.ndim - k, x.ndim))
    eps = np.finfo(np.float32).eps if eps is None else eps
    out = wide / np.sqrt((wide * wide).mean(axes, keepdims=True) + eps)
    return out if weight is None else out * weight


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_rms_norm(device):
    x, w = normal((3, 4, 5)), normal((4, 5), 1)
    close(F.rms_norm(put(x, device), (5,)), numpy_rms_norm(x, 1), dtype=vram.float32)
    close(F.rms_norm(put(x, device), [4, 5], put(w, device)), numpy_rms_norm(x, 2, w))
    close(F.rms_norm(put(x, device), 5, eps=0.5), numpy_rms_norm(x, 1, eps=0.5))
    t = put(x.transpose(2, 1, 0).copy(), device).permute(2, 1, 0)
    close(F.rms_norm(t, (5,)), numpy_rms_norm(x, 1))
    small = x * 1e-4  # eps None: float32's epsilon for float16 inputs (computed in float32)
    close(
        F.rms_norm(put(small, device).half(), (5,)),
        numpy_rms_norm(small.astype(np.float16), 1),
        rtol=2e-3,
        dtype=vram.float16,
    )
    close(F.rms_norm(put(x, device).to(vram.bfloat16), (5,)), numpy_rms_norm(x, 1), rtol=2e-2)
    d = F.rms_norm(put(x, device).double(), (5,))
    np.testing.assert_allclose(d.numpy(), numpy_rms_norm(x, 1, eps=np.finfo(np.float64).eps))
    assert F.rms_norm(put(np.zeros((0, 5), np.float32), device), (5,)).shape == (0, 5)


def test_rms_norm_errors():
    x = vram.zeros(3, 4, device="sim:0")
    with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[3\], expected input with"):
        F.rms_norm(x, (3,))
    with pytest.raises(RuntimeError, match="Expected weight to be of same shape as normalized"):
        F.rms_norm(x, (4,), weight=vram.ones(3, device="sim:0"))
    with pytest.raises(NotImplementedError, match="\"rms_norm\" not implemented for 'Long'"):
        F.rms_norm(x.long(), (4,))


# ---- mse_loss, l1_loss ----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_and_l1(reduction, device):
    x, y = normal((3, 4)), normal((3, 4), 1)
    close(
        F.mse_loss(put(x, device), put(y, device), reduction=reduction),
        reduce((x - y) ** 2, reduction),
    )
    close(
        F.l1_loss(put(x, device).t(), put(y.T, device), reduction=reduction),
        reduce(np.abs(x - y).T, reduction),
    )
    half = F.mse_loss(put(x, device).half(), put(y, device).half(), reduction=reduction)
    xh, yh = x.astype(np.float16).astype(np.float64), y.astype(np.float16).astype(np.float64)
    close(half, reduce((xh - yh) ** 2, reduction), rtol=4e-3, dtype=vram.float16)


def test_loss_broadcast_warning_and_errors():
    x = vram.zeros(3, 4, device="sim:0")
    with pytest.warns(UserWarning, match="Using a target size"):
        F.mse_loss(x, x[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.l1_loss(x, x)
    with pytest.raises(ValueError, match="bogus is not a valid value for reduction"):
        F.mse_loss(x, x, reduction="bogus")
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.mse_loss(x.long(), x.long())
    with pytest.raises(RuntimeError, match="mean"):
        F.l1_loss(x.long(), x.long())
    assert F.l1_loss(x.long(), x.long(), reduction="sum").dtype == vram.int64
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        assert F.mse_loss(x, x, reduce=False).shape == (3, 4)


# ---- nll_loss, cross_entropy ----------------------------------------------------------------


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(np.float64)
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def numpy_nll(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    """PyTorch's nll_loss: the class axis is 1 (0 for a 1-D input)."""
    axis = 0 if logp.ndim == 1 else 1
    counts = target != ignore_index
    safe = np.where(counts, target, 0)
    picked = np.take_along_axis(logp, np.expand_dims(safe, axis), axis).squeeze(axis)
    w = np.ones(logp.shape[axis]) if weight is None else weight.astype(np.float64)
    wt = np.where(counts, w[safe], 0.0)
    loss = -picked * wt
    if reduction == "mean":
        return np.asarray(loss.sum() / wt.sum())
    return np.asarray(loss.sum()) if reduction == "sum" else loss


def numpy_cross_entropy(x, target, weight=None, ignore_index=-100, reduction="mean", ls=0.0):
    axis = 0 if x.ndim == 1 else 1
    logp = log_softmax(x, axis)
    classes = x.shape[axis]
    w = np.ones(classes) if weight is None else weight.astype(np.float64)
    shape = [1] * x.ndim
    shape[axis] = classes
    wb = w.reshape(shape)
    if target.dtype.kind == "f":
        t = target * (1 - ls) + ls / classes
        loss = -(logp * t * wb).sum(axis)
        if reduction == "mean":
            return np.asarray(loss.sum() / (x.size / classes))
        return np.asarray(loss.sum()) if reduction == "sum" else loss
    nll = numpy_nll(logp, target, weight, ignore_index, reduction)
    counts = target != ignore_index
    smooth = np.where(counts, -(logp * wb).sum(axis), 0.0)
    if reduction == "mean":
        smooth = smooth.sum() / np.where(counts, w[np.where(counts, target, 0)], 0).sum()
    elif reduction == "sum":
        smooth = smooth.sum()
    return (1 - ls) * nll + smooth * (ls / classes)


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss(reduction, device):
    logp = log_softmax(normal((5, 4)), 1).astype(np.float32)
    target = np.array([1, -100, 3, 0, 3])
    weight = np.random.default_rng(2).random(4).astype(np.float32)
    lp, t = put(logp, device), put(target, device)
    close(F.nll_loss(lp, t, reduction=reduction), numpy_nll(logp, target, reduction=reduction))
    close(
        F.nll_loss(lp, t, put(weight, device), reduction=reduction),
        numpy_nll(logp, target, weight, reduction=reduction),
    )
    close(  # ignore_index a real class, K dims, non-contiguous input
        F.nll_loss(
            put(logp.T.copy(), device).t().reshape(5, 4, 1),
            t.reshape(5, 1).abs() % 4,
            ignore_index=3,
            reduction=reduction,
        ),
        numpy_nll(logp.reshape(5, 4, 1), (np.abs(target) % 4).reshape(5, 1), None, 3, reduction),
    )
    close(
        F.nll_loss(put(logp[0], device), put(np.array(2), device), reduction=reduction),
        numpy_nll(logp[0], np.array(2), reduction=reduction),
    )
    u8 = F.nll_loss(lp, put(np.array([1, 0, 3, 0, 2], np.uint8), device), reduction=reduction)
    close(u8, numpy_nll(logp, np.array([1, 0, 3, 0, 2]), reduction=reduction))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_nll_loss_edges(device):
    logp = put(log_softmax(normal((3, 4)), 1).astype(np.float32), device)
    every_ignored = F.nll_loss(logp, put(np.full(3, -100), device))
    assert np.isnan(every_ignored.item())  # 0 / 0, as PyTorch
    empty = F.nll_loss(
        put(np.zeros((0, 4), np.float32), device),
        put(np.zeros(0, np.int64), device),
        reduction="none",
    )
    assert empty.shape == (0,)
    half = F.nll_loss(logp.half(), put(np.array([0, 1, 2]), device))
    assert half.dtype == vram.float16


def test_nll_loss_errors():
    x = vram.zeros(3, 4, device="sim:0")
    t = vram.tensor([1, 2, 3], device="sim:0")
    with pytest.raises(
        ValueError, match=r"Expected input batch_size \(3\) to match target batch_size \(2\)"
    ):
        F.nll_loss(x, t[:2])
    with pytest.raises(RuntimeError, match="expected target dtype to be Long or Byte, but got Int"):
        F.nll_loss(x, t.int())
    with pytest.raises(
        RuntimeError, match="weight tensor should be defined either for all 4 classes"
    ):
        F.nll_loss(x, t, weight=vram.ones(3, device="sim:0"))
    with pytest.raises(ValueError, match=r"Expected 1 or more dimensions \(got 0\)"):
        F.nll_loss(x[0, 0], t[0])
    with pytest.raises(ValueError, match="x is not a valid value for reduction"):
        F.nll_loss(x, t, reduction="x")
    with pytest.raises(RuntimeError, match=r"Expected target size \[3, 1\], got \[3\]"):
        F.nll_loss(x.reshape(3, 4, 1), t)
    with pytest.raises(RuntimeError, match="multi-target not supported"):
        F.nll_loss(x, t.reshape(3, 1))
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        F.nll_loss(x, t, weight=vram.ones(4, device="sim:0").double())


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.25])
def test_cross_entropy_class_targets(smoothing, reduction, device):
    x = normal((5, 4)) * 3
    target = np.array([1, -100, 3, 0, 3])
    weight = np.random.default_rng(2).random(4).astype(np.float32)
    for w in (None, weight):
        got = F.cross_entropy(
            put(x, device),
            put(target, device),
            None if w is None else put(w, device),
            reduction=reduction,
            label_smoothing=smoothing,
        )
        close(
            got,
            numpy_cross_entropy(x, target, w, reduction=reduction, ls=smoothing),
            dtype=vram.float32,
        )
    x3 = normal((2, 4, 3))  # [N, C, d]
    t3 = np.array([[0, 1, 2], [3, 3, 1]])
    got = F.cross_entropy(
        put(x3, device),
        put(t3, device),
        ignore_index=1,
        reduction=reduction,
        label_smoothing=smoothing,
    )
    close(got, numpy_cross_entropy(x3, t3, None, 1, reduction, smoothing))
    close(
        F.cross_entropy(
            put(x[0], device),
            put(np.array(2), device),
            reduction=reduction,
            label_smoothing=smoothing,
        ),
        numpy_cross_entropy(x[0], np.array(2), None, -100, reduction, smoothing),
    )


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", [vram.float16, vram.bfloat16], ids=str)
def test_cross_entropy_half_dtypes(dt, device):
    """log_softmax in the input's dtype (rounded there), the mean accumulated in float32."""
    x = normal((6, 5)) * 2
    target = np.array([0, 4, 2, 2, -100, 1])
    xh = put(x, device).to(dt)
    logp = log_softmax(xh.float().numpy(), 1).astype(np.float32)
    logp = put(logp, device).to(dt).float().numpy()  # rounded to the input's dtype
    got = F.cross_entropy(xh, put(target, device))
    assert got.dtype == dt
    close(
        got, numpy_nll(logp.astype(np.float64), target), rtol=1e-2 if dt == vram.bfloat16 else 1e-3
    )


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_probability_targets(reduction, device):
    x = normal((4, 5))
    p = np.random.default_rng(3).random((4, 5)).astype(np.float32)
    p /= p.sum(1, keepdims=True)
    w = np.random.default_rng(4).random(5).astype(np.float32)
    for weight, ls in ((None, 0.0), (w, 0.1)):
        got = F.cross_entropy(
            put(x, device),
            put(p, device),
            None if weight is None else put(weight, device),
            reduction=reduction,
            label_smoothing=ls,
        )
        close(got, numpy_cross_entropy(x, p, weight, reduction=reduction, ls=ls))


def test_cross_entropy_errors():
    x = vram.zeros(3, 4, device="sim:0")
    t = vram.tensor([1, 2, 3], device="sim:0")
    with pytest.raises(
        RuntimeError, match=r"label_smoothing must be between 0.0 and 1.0. Got: 1.5"
    ):
        F.cross_entropy(x, t, label_smoothing=1.5)
    with pytest.raises(
        RuntimeError, match="ignore_index is not supported for floating point target"
    ):
        F.cross_entropy(x, x, ignore_index=1)
    with pytest.raises(RuntimeError, match="probability 'target'"):
        F.cross_entropy(x, x[:2])
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.cross_entropy(x.long(), t)


# ---- binary_cross_entropy_with_logits -------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_with_logits(reduction, device):
    x = normal((3, 4)) * 30  # large logits: the stable form stays finite
    y = np.random.default_rng(5).random((3, 4)).astype(np.float32)
    w = np.random.default_rng(6).random(4).astype(np.float32)
    pw = np.random.default_rng(7).random(4).astype(np.float32) * 3
    xd = x.astype(np.float64)
    log_sig = np.minimum(xd, 0) - np.log1p(np.exp(-np.abs(xd)))
    log_not_sig = log_sig - xd  # log(1 - sigmoid(x))
    plain = -(y * log_sig + (1 - y) * log_not_sig)
    close(
        F.binary_cross_entropy_with_logits(put(x, device), put(y, device), reduction=reduction),
        reduce(plain, reduction),
        rtol=1e-4,
    )
    weighted = -(pw * y * log_sig + (1 - y) * log_not_sig) * w
    got = F.binary_cross_entropy_with_logits(
        put(x, device),
        put(y, device),
        put(w, device),
        reduction=reduction,
        pos_weight=put(pw, device),
    )
    close(got, reduce(weighted, reduction), rtol=1e-4)
    with pytest.raises(ValueError, match="Target size"):
        F.binary_cross_entropy_with_logits(put(x, device), put(y[:2], device))
