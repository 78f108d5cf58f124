"""softmax, log_softmax, layer_norm, cumsum and cumprod on the simulated GPU and the host,
checked against NumPy under PyTorch's rules."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import vram
import vram.nn.functional as F
from vram.ops._rows import row_layout

SIM = vram.device("sim:0")
CPU = vram.device("cpu")
FLOATS = [vram.float16, vram.bfloat16, vram.float32, vram.float64]
TOLERANCE = {
    np.dtype(np.float16): 2e-3,
    np.dtype(ml_dtypes.bfloat16): 2e-2,
    np.dtype(np.float32): 2e-6,
    np.dtype(np.float64): 1e-12,
}


def sample(dt: vram.dtype, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 3).astype(dt.np)


def on(array: np.ndarray, device=SIM) -> vram.Tensor:
    return vram.tensor(array, device=device)


def close(got: vram.Tensor, want: np.ndarray) -> None:
    values = got.numpy()
    assert values.shape == want.shape
    tol = TOLERANCE[values.dtype]
    np.testing.assert_allclose(
        values.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol
    )


def softmax_np(a: np.ndarray, axis: int, log: bool = False) -> np.ndarray:
    x = a.astype(np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    total = np.exp(shifted).sum(axis=axis, keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


# ---- softmax, log_softmax -----------------------------------------------------------------


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_matches_numpy(dt, log):
    function = F.log_softmax if log else F.softmax
    for shape, dim in [((4, 33), 1), ((3, 5, 6), 1), ((6, 7), 0), ((2, 1024), -1), ((5,), 0)]:
        a = sample(dt, shape, seed=len(shape))
        got = function(on(a), dim)
        assert got.dtype is dt and got.shape == shape and got.is_contiguous()
        close(got, softmax_np(a, dim, log).astype(dt.np))


@pytest.mark.parametrize("n", [1, 3, 31, 100, 1000, 1536, 4097, 16384, 20000])
def test_softmax_rows_of_every_layout(n):
    """Rows held by part of a warp, a warp, several warps, and read twice (online)."""
    a = sample(vram.float32, (3, n), seed=n)
    close(F.softmax(on(a), -1), softmax_np(a, 1).astype(np.float32))
    close(F.log_softmax(on(a), -1), softmax_np(a, 1, log=True).astype(np.float32))


def test_row_layouts():
    assert row_layout(1024, 64, 4, 4, 132) == row_layout(1024, 64, 4, 4, 132)
    small = row_layout(1024, 64, 4, 4, 132)
    assert not small.online and small.threads == 32 and small.items * small.vec == 32
    wide = row_layout(4096, 64, 2, 4, 132)
    assert not wide.online and wide.threads > 32 and wide.items * wide.vec * wide.threads >= 4096
    assert row_layout(100_000, 8, 4, 4, 132).online
    assert row_layout(1001, 8, 4, 4, 132).vec == 1  # rows not 16-byte multiples: no vectors


def test_softmax_dtype_argument():
    a = sample(vram.float16, (4, 9), 1)
    widened = F.softmax(on(a), 1, dtype=vram.float32)
    assert widened.dtype is vram.float32
    close(widened, softmax_np(a.astype(np.float32), 1).astype(np.float32))
    b = sample(vram.float32, (4, 9), 2)
    narrowed = vram.softmax(on(b), 1, vram.float16)  # rounded to float16 first, as torch
    close(narrowed, softmax_np(b.astype(np.float16), 1).astype(np.float16))
    ints = np.arange(12, dtype=np.int64).reshape(3, 4)
    close(on(ints).softmax(1, dtype=vram.float64), softmax_np(ints, 1))


def test_softmax_special_values():
    inf, nan = np.inf, np.nan
    rows = np.array([[1.0, inf], [-inf, -inf], [nan, 1.0], [-inf, 2.0]], np.float32)
    got = F.softmax(on(rows), 1).numpy()
    assert np.isnan(got[:3]).all()
    np.testing.assert_array_equal(got[3], [0.0, 1.0])
    logs = F.log_softmax(on(rows), 1).numpy()
    assert np.isnan(logs[:3]).all() and logs[3, 1] == 0.0 and logs[3, 0] == -inf


def test_softmax_online_rows_with_minus_infinity_first():
    a = np.full((2, 20000), -np.inf, np.float32)
    a[0, -1] = 3.0
    got = F.softmax(on(a), 1).numpy()
    assert got[0, -1] == 1.0 and (got[0, :-1] == 0).all() and np.isnan(got[1]).all()


def test_softmax_of_zero_dim_empty_and_strided_inputs():
    assert F.softmax(on(np.array(3.0, np.float32)), 0).item() == 1.0
    assert F.log_softmax(on(np.array(3.0, np.float32)), -1).item() == 0.0
    assert F.softmax(on(np.empty((0, 3), np.float32)), 1).shape == (0, 3)
    a = sample(vram.float32, (6, 5), 3)
    t = on(a).t()
    got = F.softmax(t, 1)
    assert got.is_contiguous()
    close(got, softmax_np(a.T, 1).astype(np.float32))
    close(F.softmax(on(a)[:, 1:], 1), softmax_np(a[:, 1:], 1).astype(np.float32))


def test_softmax_errors_and_implicit_dim():
    with pytest.raises(NotImplementedError, match="not implemented for 'Int'"):
        F.softmax(on(np.arange(3, dtype=np.int32)), 0)
    with pytest.raises(IndexError, match=r"range of \[-2, 1\], but got 2"):
        F.softmax(on(np.ones((2, 2), np.float32)), 2)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        got = F.softmax(on(np.ones((2, 4), np.float32)))
    np.testing.assert_allclose(got.numpy(), np.full((2, 4), 0.25))


def test_softmax_on_cpu_tensors():
    a = sample(vram.float32, (3, 8), 4)
    close(F.softmax(on(a, CPU), 1), softmax_np(a, 1).astype(np.float32))
    close(F.log_softmax(on(a, CPU), 0), softmax_np(a, 0, log=True).astype(np.float32))


# ---- layer_norm ---------------------------------------------------------------------------


def layer_norm_np(a, shape, weight=None, bias=None, eps=1e-5):
    axes = tuple(range(a.ndim - len(shape), a.ndim))
    x = a.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return y


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_layer_norm_matches_numpy(dt):
    for shape, normalized in [((4, 96), (96,)), ((2, 3, 8, 5), (8, 5)), ((3, 1000), (1000,))]:
        a = sample(dt, shape, seed=5)
        w = sample(dt, normalized, seed=6)
        b = sample(dt, normalized, seed=7)
        got = F.layer_norm(on(a), normalized, on(w), on(b), eps=1e-3)
        assert got.dtype is dt and got.shape == shape
        close(got, layer_norm_np(a, normalized, w, b, 1e-3).astype(dt.np))
        close(F.layer_norm(on(a), list(normalized)), layer_norm_np(a, normalized).astype(dt.np))


@pytest.mark.parametrize("n", [1, 7, 64, 1030, 8192, 20000])
def test_layer_norm_rows_of_every_layout(n):
    a = sample(vram.float32, (3, n), seed=n)
    w = sample(vram.float32, (n,), seed=1)
    close(F.layer_norm(on(a), (n,), on(w)), layer_norm_np(a, (n,), w).astype(np.float32))
    b = sample(vram.float32, (n,), seed=2)
    close(F.layer_norm(on(a), (n,), bias=on(b)), layer_norm_np(a, (n,), None, b).astype(np.float32))


def test_layer_norm_mixed_dtypes_and_layouts():
    a = sample(vram.bfloat16, (6, 32), 8)
    w, b = sample(vram.float32, (32,), 9), sample(vram.float32, (32,), 10)
    got = F.layer_norm(on(a), (32,), on(w), on(b))
    assert got.dtype is vram.bfloat16
    close(got, layer_norm_np(a, (32,), w, b).astype(a.dtype))
    c = sample(vram.float32, (32, 6), 11)
    close(F.layer_norm(on(c).t(), (32,)), layer_norm_np(c.T, (32,)).astype(np.float32))
    assert F.layer_norm(on(np.empty((0, 4), np.float32)), (4,)).shape == (0, 4)
    close(F.layer_norm(on(a, CPU), (32,), on(w, CPU)), layer_norm_np(a, (32,), w).astype(a.dtype))


def test_layer_norm_plans_follow_every_argument():
    """Calls of one input shape interleaved (weights, their dtypes, layouts, devices) each
    take their own plan, twice over (the second time from the cache)."""
    a = sample(vram.float32, (6, 32), 12)
    w16, w32 = sample(vram.bfloat16, (32,), 13), sample(vram.float32, (32,), 14)
    b32 = sample(vram.float32, (32,), 15)
    cases = [
        (on(a), None, None, layer_norm_np(a, (32,))),
        (on(a), on(w32), None, layer_norm_np(a, (32,), w32)),
        (on(a), on(w32), on(b32), layer_norm_np(a, (32,), w32, b32)),
        (on(a), None, on(b32), layer_norm_np(a, (32,), None, b32)),
        (on(a.T.copy()).t(), on(w32), None, layer_norm_np(a, (32,), w32)),
        (on(a, CPU), on(w32, CPU), None, layer_norm_np(a, (32,), w32)),
    ]
    for _ in range(2):
        for x, w, b, want in cases:
            got = F.layer_norm(x, (32,), w, b)
            assert got.device == x.device and got.shape == (6, 32)
            close(got, want.astype(np.float32))
    with pytest.raises(RuntimeError):
        F.layer_norm(on(a), (32,), on(w16))  # (float32 input, bfloat16 weight: refused)


@pytest.mark.parametrize("device", [SIM, CPU], ids=str)
def test_layer_norm_common_call_is_the_checked_one(device):
    """The common call's one lookup (a tuple of ints, weight, bias, a float eps) gives what
    the checked route gives (a list, NumPy numbers): bit for bit, the same result layout
    (its signature id too), weights copied where they are not contiguous."""
    a = sample(vram.bfloat16, (2, 3, 32), 16)
    w, b = sample(vram.float32, (32,), 17), sample(vram.float32, (64,), 18)[::2]
    x, weight = on(a, device), on(w, device)
    strided = on(sample(vram.float32, (64,), 18), device)[::2]
    for bias in (on(b.copy(), device), strided):
        checked = F.layer_norm(x, [np.int64(32)], weight, bias, eps=np.float64(1e-3))
        for _ in range(2):  # the plan's first result, then one of the lookup's
            common = F.layer_norm(x, (32,), weight, bias, eps=1e-3)
            assert common.shape == checked.shape and common.stride() == checked.stride()
            assert np.array_equal(common.numpy(), checked.numpy())
            found = common._sig
            common._sig = 0
            assert vram.ops._pointwise.signature_id(common) == found
        close(checked, layer_norm_np(a, (32,), w, b, 1e-3).astype(a.dtype))
    with pytest.raises(TypeError, match="'normalized_shape' must be tuple of ints"):
        F.layer_norm(x, (32.0,), weight, bias, eps=1e-3)  # (equal to (32,) as a key)
    with pytest.raises(TypeError, match="'eps' must be float"):
        F.layer_norm(x, (32,), weight, bias, eps="1e-3")


def test_layer_norm_errors():
    x = on(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="'normalized_shape' must be tuple of ints, not int"):
        F.layer_norm(x, 3)
    with pytest.raises(
        RuntimeError, match="Expected normalized_shape to be at least 1-dimensional"
    ):
        F.layer_norm(x, ())
    with pytest.raises(
        RuntimeError, match=r"expected input with shape \[\*, 2\], but got input of size\[2, 3\]"
    ):
        F.layer_norm(x, (2,))
    with pytest.raises(
        RuntimeError, match="Expected weight to be of same shape as normalized_shape"
    ):
        F.layer_norm(x, (3,), on(np.ones(2, np.float32)))
    with pytest.raises(RuntimeError, match="expected 'weight' of dtype"):
        F.layer_norm(x, (3,), on(np.ones(3, np.float64)))
    with pytest.raises(NotImplementedError, match="not implemented for 'Int'"):
        F.layer_norm(on(np.ones((2, 3), np.int32)), (3,))


# ---- cumsum, cumprod ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dt", [*FLOATS, vram.int32, vram.int8, vram.bool_, vram.uint8, vram.complex64], ids=str
)
def test_cumsum_and_cumprod_match_numpy(dt):
    rng = np.random.default_rng(12)
    for shape, dim in [((5, 37), 1), ((4, 3, 6), 1), ((70,), 0), ((3, 1500), -1)]:
        if dt is vram.bool_:
            a = rng.random(shape) > 0.3
        elif dt.np.kind in "iu":
            a = rng.integers(0, 3, shape).astype(dt.np)
        else:
            a = (rng.random(shape) * 0.2 + 0.9).astype(dt.np)
        result = vram.int64 if dt.np.kind in "iub" else dt
        accumulate = np.float32 if dt in (vram.float16, vram.bfloat16) else result.np
        for function, scan in ((vram.cumsum, np.cumsum), (vram.cumprod, np.cumprod)):
            got = function(on(a), dim)
            assert got.dtype is result
            want = scan(a.astype(accumulate), axis=dim).astype(result.np)
            if result.np.kind in "iu":
                np.testing.assert_array_equal(got.numpy(), want)
            else:
                np.testing.assert_allclose(
                    got.numpy().astype(np.complex128),
                    want.astype(np.complex128),
                    rtol=1e-2,
                    atol=1e-5,
                )


def test_cumsum_arguments():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = vram.cumsum(on(a), 0, dtype=vram.int32)
    assert got.dtype is vram.int32
    np.testing.assert_array_equal(got.numpy(), np.cumsum(a.astype(np.int32), 0))
    np.testing.assert_array_equal(on(a).t().cumsum(1).numpy(), np.cumsum(a.T, 1))
    assert vram.cumsum(on(np.array(3.0, np.float32)), 0).item() == 3.0
    assert vram.cumprod(on(np.empty((0, 3), np.float32)), 1).shape == (0, 3)
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        vram.cumsum(on(a), 0, dtype=vram.bool_)
    with pytest.raises(IndexError, match="but got 2"):
        vram.cumsum(on(a), 2)
    assert math.isclose(vram.cumsum(on(a, CPU), 1).numpy()[2, 3], 38.0)


@pytest.mark.parametrize("dt", [vram.float32, vram.int32, vram.bfloat16], ids=str)
def test_long_rows_scan_by_tiles(dt):
    """Few rows longer than two tiles: tile totals, their running sums, then the tiles."""
    rng = np.random.default_rng(13)
    for shape in ((50_001,), (2, 40_000)):
        if dt is vram.int32:
            a = rng.integers(-3, 4, shape).astype(np.int32)
        else:
            a = (rng.random(shape) * 0.002 + 0.999).astype(dt.np)
        accumulate = np.int64 if dt is vram.int32 else np.float64
        got = vram.cumsum(on(a), -1)
        want = np.cumsum(a.astype(accumulate), axis=-1)
        if dt is vram.int32:
            np.testing.assert_array_equal(got.numpy(), want)
            np.testing.assert_array_equal(
                vram.cumprod(on(np.ones(shape, np.int32)), -1).numpy(), np.ones(shape)
            )
        else:
            np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=1e-2)
            product = np.cumprod(a.astype(np.float64), axis=-1)
            np.testing.assert_allclose(
                vram.cumprod(on(a), -1).numpy().astype(np.float64), product, rtol=2e-2
            )
