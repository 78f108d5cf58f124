"""Reductions on the simulated GPU and the host, checked against NumPy under PyTorch's rules
(accumulate types, result dtypes, empty inputs, NaN, ties, errors)."""

from __future__ import annotations

import itertools
import math
import warnings

import ml_dtypes
import numpy as np
import pytest

import vram
from vram._dtypes import all_dtypes
from vram.ops import _plans

SIM = vram.device("sim:0")
CPU = vram.device("cpu")
BF16 = np.dtype(ml_dtypes.bfloat16)
NARROW = (vram.float16, vram.bfloat16)
FLOATS = [vram.float16, vram.bfloat16, vram.float32, vram.float64]
REAL = [d for d in all_dtypes if not d.is_complex]
INTEGRAL = [d for d in all_dtypes if d.np.kind in "iub"]


def sample(dt: vram.dtype, shape: tuple[int, ...], seed: int = 0, low: float = -2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt is vram.bool_:
        return rng.random(shape) > 0.5
    if dt.is_complex:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt.np)
    if dt.is_floating_point:
        return (rng.random(shape) * (2 - low) + low).astype(dt.np)
    return rng.integers(-5 if dt.np.kind == "i" else 0, 6, size=shape).astype(dt.np)


def on(array: np.ndarray, device=SIM) -> vram.Tensor:
    return vram.tensor(array, device=device)


def acc_np(dt: vram.dtype) -> np.dtype:
    if dt in NARROW:
        return np.dtype(np.float32)
    if dt.np.kind in "iub":
        return np.dtype(np.int64)
    return dt.np


def close(got: vram.Tensor, want: np.ndarray, dt: vram.dtype | None = None) -> None:
    """Equal for integers and bool; within the dtype's rounding for floating point."""
    values = got.numpy()
    assert values.shape == np.shape(want)
    if values.dtype.kind in "iub":
        np.testing.assert_array_equal(values, want)
        return
    rtol = {
        BF16: 2e-2,
        np.dtype(np.float16): 2e-3,
        np.dtype(np.float32): 1e-5,
        np.dtype(np.complex64): 1e-5,
    }.get(values.dtype, 1e-12)
    np.testing.assert_allclose(
        values.astype(np.complex128), np.asarray(want).astype(np.complex128), rtol=rtol, atol=rtol
    )


AXES = [None, 0, -1, (0, 2), (2, 1)]


def np_axis(axis):
    return tuple(axis) if isinstance(axis, tuple) else axis


# ---- sum, prod, mean ------------------------------------------------------------------------


@pytest.mark.parametrize("dt", all_dtypes, ids=str)
def test_sum_matches_numpy_with_torch_dtypes(dt):
    a = sample(dt, (3, 4, 5), seed=1)
    want_dtype = vram.int64 if dt.np.kind in "iub" else dt
    for axis in AXES:
        got = vram.sum(on(a), axis)
        assert got.dtype is want_dtype
        close(got, a.astype(acc_np(dt)).sum(axis=np_axis(axis)).astype(want_dtype.np))


@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_keepdim_shapes(keepdim):
    t = on(sample(vram.float32, (3, 4, 5)))
    assert vram.sum(t, (0, 2), keepdim).shape == ((1, 4, 1) if keepdim else (4,))
    assert t.sum(keepdim=keepdim).shape == ((1, 1, 1) if keepdim else ())
    assert vram.sum(t, ()).shape == ()  # torch's "() is every dim"


def test_sum_dtype_converts_each_element_first():
    a = np.array([1.0001, 2.0001, 3.0001], np.float32)
    got = vram.sum(on(a), dtype=vram.float16)
    assert got.dtype is vram.float16
    assert got.item() == np.float16(a.astype(np.float16).astype(np.float32).sum())
    assert vram.sum(on(np.arange(5, dtype=np.int32)), dtype=vram.float64).item() == 10.0
    assert vram.sum(on(np.array([1.7, 2.9], np.float32)), dtype=vram.int32).item() == 3


@pytest.mark.parametrize("dt", all_dtypes, ids=str)
def test_prod_matches_numpy(dt):
    a = sample(dt, (4, 6), seed=2, low=0.5)
    if dt.is_floating_point:
        a = (a / 1.5).astype(dt.np)
    for axis in (None, 1):
        got = vram.prod(on(a), axis)
        close(got, a.astype(acc_np(dt)).prod(axis=axis).astype(got.dtype.np))
    assert vram.prod(on(a)).dtype is (vram.int64 if dt.np.kind in "iub" else dt)


def test_prod_takes_one_dim():
    with pytest.raises(TypeError, match="argument 'dim' must be int"):
        vram.prod(on(np.ones((2, 2), np.float32)), (0, 1))


@pytest.mark.parametrize("dt", [*FLOATS, vram.complex64, vram.complex128], ids=str)
def test_mean_matches_numpy(dt):
    a = sample(dt, (3, 5, 4), seed=3)
    for axis in (None, 1, (0, 2)):
        got = vram.mean(on(a), axis)
        assert got.dtype is dt
        close(got, a.astype(acc_np(dt)).mean(axis=axis).astype(dt.np))


def test_mean_of_integers_needs_a_floating_dtype():
    t = on(np.arange(6, dtype=np.int32))
    with pytest.raises(RuntimeError, match="Input dtype must be either a floating point.*Got: Int"):
        vram.mean(t)
    with pytest.raises(RuntimeError, match="Optional dtype must be.*Got: Long"):
        vram.mean(on(np.ones(3, np.float32)), dtype=vram.int64)
    assert vram.mean(t, dtype=vram.float32).item() == 2.5


# ---- amax, amin, max, min, argmax, argmin -------------------------------------------------


@pytest.mark.parametrize("dt", REAL, ids=str)
def test_amax_amin_match_numpy(dt):
    a = sample(dt, (4, 3, 5), seed=4)
    for axis in (None, 1, (0, 2)):
        np.testing.assert_array_equal(
            vram.amax(on(a), () if axis is None else axis).numpy(), a.max(axis)
        )
        np.testing.assert_array_equal(
            vram.amin(on(a), () if axis is None else axis).numpy(), a.min(axis)
        )
    assert vram.amax(on(a)).dtype is dt


def test_max_and_min_propagate_nan():
    a = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -1.0]], np.float32)
    assert math.isnan(vram.amax(on(a)).item()) and math.isnan(vram.min(on(a)).item())
    np.testing.assert_array_equal(vram.amax(on(a), 1).numpy(), [np.nan, 5.0])
    result = vram.max(on(a), 1)
    np.testing.assert_array_equal(result.values.numpy(), [np.nan, 5.0])
    np.testing.assert_array_equal(result.indices.numpy(), [1, 1])


@pytest.mark.parametrize(
    "dt", [vram.float32, vram.bfloat16, vram.int32, vram.int8, vram.bool_], ids=str
)
def test_max_with_dim_gives_values_and_first_indices(dt):
    a = sample(dt, (6, 7), seed=5)
    for dim, keepdim in ((0, False), (1, True), (-1, False)):
        values, indices = vram.max(on(a), dim, keepdim)
        np.testing.assert_array_equal(values.numpy(), a.max(dim, keepdims=keepdim))
        np.testing.assert_array_equal(
            indices.numpy(), np.expand_dims(a.argmax(dim), dim) if keepdim else a.argmax(dim)
        )
        assert indices.dtype is vram.int64 and values.dtype is dt
    low = vram.min(on(a), dim=1)
    np.testing.assert_array_equal(low.indices.numpy(), a.argmin(1))
    assert type(low) is vram.return_types.min and low[0] is low.values


def test_max_of_two_tensors_is_maximum():
    a, b = sample(vram.float32, (3, 4), 1), sample(vram.float32, (4,), 2)
    np.testing.assert_array_equal(vram.max(on(a), on(b)).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(on(a).min(on(b)).numpy(), np.minimum(a, b))


def test_argmax_indexes_the_flattened_tensor_in_its_own_order():
    a = sample(vram.float32, (5, 6), seed=6)
    t = on(a).t()  # not contiguous: the index is of t's row-major order
    assert vram.argmax(t).item() == a.T.argmax()
    assert vram.argmin(t).item() == a.T.argmin()
    np.testing.assert_array_equal(vram.argmax(t, 0).numpy(), a.T.argmax(0))
    assert vram.argmax(t, keepdim=True).shape == (1, 1)
    np.testing.assert_array_equal(t.argmin(1, keepdim=True).numpy(), a.T.argmin(1)[:, None])


def test_argmax_ties_take_the_first_and_nan_wins():
    assert vram.argmax(on(np.array([3.0, 1.0, 3.0], np.float32))).item() == 0
    assert vram.argmin(on(np.array([1, 0, 0, 1], np.int16))).item() == 1
    nan = np.array([1.0, np.nan, 3.0, np.nan], np.float32)
    assert vram.argmax(on(nan)).item() == 1 and vram.argmin(on(nan)).item() == 1


def test_extremes_reject_what_torch_rejects():
    empty = on(np.empty((0, 3), np.float32))
    with pytest.raises(RuntimeError, match=r"amax\(\): Expected reduction dim to be specified"):
        vram.amax(empty)
    with pytest.raises(IndexError, match=r"amax\(\): Expected reduction dim 0 to have non-zero"):
        vram.amax(empty, 0)
    assert vram.amax(empty, 1).shape == (0,)
    with pytest.raises(RuntimeError, match=r"max\(\): Expected reduction dim to be specified"):
        vram.max(empty)
    with pytest.raises(IndexError, match=r"max\(\): Expected reduction dim 0 to have non-zero"):
        vram.max(empty, 0)
    assert vram.max(empty, 1).indices.shape == (0,)
    with pytest.raises(IndexError, match=r"argmax\(\): Expected reduction dim to be specified"):
        vram.argmax(empty)
    with pytest.raises(RuntimeError, match="does not support bool input"):
        vram.argmax(on(np.array([True])))
    complex_ = on(np.ones(2, np.complex64))
    with pytest.raises(NotImplementedError, match="ComplexFloat"):
        vram.amax(complex_)
    with pytest.raises(RuntimeError, match="does not support complex input"):
        vram.max(complex_, 0)
    with pytest.raises(TypeError, match="argument 'dim' must be int"):
        vram.argmax(on(np.ones((2, 2), np.float32)), (0, 1))


def test_aminmax():
    a = sample(vram.float32, (3, 4), 7)
    low, high = vram.aminmax(on(a), dim=1)
    np.testing.assert_array_equal(low.numpy(), a.min(1))
    np.testing.assert_array_equal(high.numpy(), a.max(1))
    assert vram.aminmax(on(a)).max.item() == a.max()


# ---- var, std -------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", [*FLOATS, vram.complex64, vram.complex128], ids=str)
def test_var_and_std_match_numpy(dt):
    a = sample(dt, (4, 6, 5), seed=8)
    real = {vram.complex64: vram.float32, vram.complex128: vram.float64}.get(dt, dt)
    values = a.astype(acc_np(dt))
    for axis, correction in ((None, 1), (1, 0), ((0, 2), 2.5), (2, 1)):
        want = values.var(axis=axis, ddof=correction)
        got = vram.var(on(a), axis, correction=correction)
        assert got.dtype is real
        close(got, want.astype(real.np))
        close(vram.std(on(a), axis, correction=correction), np.sqrt(want).astype(real.np))


def test_var_keeps_torchs_older_arguments():
    a = sample(vram.float64, (4, 5), 9)
    t = on(a)
    close(vram.var(t, True), a.var(ddof=1))  # torch.var(t, unbiased)
    close(vram.var(t, 1, False, True), a.var(1, ddof=0, keepdims=True))  # (dim, unbiased, keepdim)
    close(t.std(0, unbiased=False), a.std(0))
    with pytest.raises(TypeError, match="not both"):
        vram.var(t, unbiased=True, correction=1)


def test_var_mean_and_std_mean_in_one_pass():
    a = sample(vram.float32, (5, 7), 10)
    var, mean = vram.var_mean(on(a), 1)
    close(var, a.var(1, ddof=1))
    close(mean, a.mean(1))
    std, mean = vram.std_mean(on(a), dim=None, correction=0, keepdim=True)
    close(std, a.std(keepdims=True))
    c = sample(vram.complex64, (6,), 11)
    var, mean = vram.var_mean(on(c))
    assert var.dtype is vram.float32 and mean.dtype is vram.complex64
    close(mean, c.mean())


def test_var_warns_of_no_degrees_of_freedom_and_gives_nan():
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        assert math.isnan(vram.var(on(np.ones(1, np.float32))).item())
    with pytest.warns(UserWarning, match="degrees of freedom"):
        assert np.isnan(vram.std(on(np.empty((0, 3), np.float32)), 0).numpy()).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vram.var(on(np.ones(2, np.float32)))


def test_var_of_integers_raises_as_torch():
    with pytest.raises(RuntimeError, match="std and var only support floating point and complex"):
        vram.var(on(np.arange(3, dtype=np.int64)))


# ---- norms ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", [*FLOATS, vram.complex64], ids=str)
def test_vector_norm_matches_numpy(dt):
    a = sample(dt, (4, 6), seed=12)
    a[0, 0] = 0
    values = np.abs(a.astype(np.complex128 if dt.is_complex else np.float64))
    for ord_, axis in itertools.product([2, 1, math.inf, -math.inf, 0, 3, 0.5, -1], (None, 1)):
        if ord_ == math.inf:
            want = values.max(axis=axis)
        elif ord_ == -math.inf:
            want = values.min(axis=axis)
        elif ord_ == 0:
            want = (values != 0).sum(axis=axis).astype(np.float64)
        else:
            with np.errstate(divide="ignore"):
                want = (values**ord_).sum(axis=axis) ** (1 / ord_)
        got = vram.linalg.vector_norm(on(a), ord_, axis)
        real = vram.float32 if dt is vram.complex64 else dt
        assert got.dtype is real
        close(got, want.astype(real.np))


def test_norm_and_its_dtypes():
    a = sample(vram.float32, (3, 4), 13)
    close(vram.norm(on(a)), np.linalg.norm(a))
    close(on(a).norm(1), np.abs(a).sum())
    close(on(a).norm(dim=1, keepdim=True), np.linalg.norm(a, axis=1, keepdims=True))
    close(vram.norm(on(a), "fro", (0, 1)), np.linalg.norm(a))
    assert vram.norm(on(a), dtype=vram.float64).dtype is vram.float64
    assert vram.norm(on(a.astype(np.float16))).dtype is vram.float16
    with pytest.raises(NotImplementedError, match="nuc"):
        vram.norm(on(a), "nuc")
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        vram.norm(on(np.arange(3)))
    with pytest.raises(RuntimeError, match="without narrowing to the specified dtype"):
        vram.linalg.vector_norm(on(a), dtype=vram.float16)
    with pytest.raises(RuntimeError, match="dtype should be complex for complex inputs"):
        vram.linalg.vector_norm(on(np.ones(2, np.complex64)), dtype=vram.float32)
    empty = on(np.empty((0, 2), np.float32))
    assert vram.norm(empty).item() == 0.0
    with pytest.raises(RuntimeError, match="cannot compute the inf norm on an empty tensor"):
        vram.linalg.vector_norm(empty, math.inf)
    with pytest.raises(RuntimeError, match="cannot compute the -1 norm on the dimension 0"):
        vram.linalg.vector_norm(empty, -1, 0)


# ---- all, any, logsumexp ------------------------------------------------------------------


@pytest.mark.parametrize("dt", all_dtypes, ids=str)
def test_all_any_match_numpy(dt):
    a = sample(dt, (4, 5), seed=14)
    a[1] = 0
    out = np.uint8 if dt is vram.uint8 else np.bool_
    for axis in (None, 0, (0, 1)):
        got = vram.all(on(a), axis)
        assert got.numpy().dtype == out
        np.testing.assert_array_equal(got.numpy(), np.all(a != 0, axis=axis).astype(out))
        np.testing.assert_array_equal(
            vram.any(on(a), axis).numpy(), np.any(a != 0, axis=axis).astype(out)
        )
    assert vram.all(on(np.array([np.nan], np.float32))).item() is True


@pytest.mark.parametrize("dt", [*FLOATS, vram.int32, vram.bool_], ids=str)
def test_logsumexp_matches_numpy(dt):
    a = sample(dt, (3, 8, 2), seed=15)
    result = vram.get_default_dtype() if dt.np.kind in "iub" else dt
    for axis in (1, (0, 2), -1):
        values = a.astype(np.float64)
        want = np.log(np.exp(values).sum(axis=axis))
        got = vram.logsumexp(on(a), axis)
        assert got.dtype is result
        close(got, want.astype(result.np))


def test_logsumexp_of_infinities_and_nan():
    inf, nan = np.inf, np.nan
    rows = np.array([[inf, 1.0], [-inf, -inf], [inf, -inf], [nan, 1.0], [-inf, 2.0]], np.float32)
    got = vram.logsumexp(on(rows), 1).numpy()
    np.testing.assert_array_equal(got[:3], [inf, -inf, inf])
    assert math.isnan(got[3]) and got[4] == 2.0
    np.testing.assert_array_equal(
        vram.logsumexp(on(np.empty((0, 2), np.float32)), 0).numpy(), [-inf, -inf]
    )


# ---- empty, 0-dim, layouts, sizes ---------------------------------------------------------


def test_empty_inputs_give_torchs_identities():
    e = on(np.empty((0, 3), np.float32))
    assert vram.sum(e).item() == 0.0 and vram.prod(e).item() == 1.0
    assert math.isnan(vram.mean(e).item())
    np.testing.assert_array_equal(vram.sum(e, 0).numpy(), [0, 0, 0])
    assert vram.sum(e, 1).shape == (0,)
    assert vram.all(e).item() is True and vram.any(e).item() is False
    assert vram.sum(on(np.empty(0, np.int32))).dtype is vram.int64


def test_zero_dim_inputs():
    t = on(np.array(5.0, np.float32))
    for dims in (None, 0, -1, (0,)):
        assert vram.sum(t, dims).item() == 5.0
    assert vram.sum(t, 0, keepdim=True).shape == ()
    assert vram.argmax(t).item() == 0 and vram.max(t, 0).values.item() == 5.0
    with pytest.raises(IndexError, match=r"expected to be in range of \[-1, 0\], but got 1"):
        vram.sum(t, 1)


def test_bad_dims_raise_as_torch():
    t = on(np.ones((2, 3), np.float32))
    with pytest.raises(IndexError, match=r"range of \[-2, 1\], but got 2"):
        vram.sum(t, 2)
    with pytest.raises(IndexError, match="but got -3"):
        t.mean(-3)
    with pytest.raises(RuntimeError, match="dim 1 appears multiple times in the list of dims"):
        vram.sum(t, [1, -1])
    with pytest.raises(TypeError, match="argument 'dim' must be int or tuple of ints, not str"):
        vram.amax(t, "a")
    with pytest.raises(TypeError, match="argument 'keepdim' must be bool"):
        vram.sum(t, 0, 1)
    with pytest.raises(TypeError, match="argument 'input' must be Tensor, not int"):
        vram.sum(3)


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t.transpose(0, 2),
        lambda t: t[:, ::2],
        lambda t: t[1:, 1:, 1:],
        lambda t: t[:, :1].expand(3, 5, 4),
        lambda t: t.permute(1, 2, 0),
    ],
    ids=["transposed", "strided", "offset", "expanded", "permuted"],
)
def test_non_contiguous_inputs(view):
    a = sample(vram.float64, (3, 5, 4), 16)
    t, reference = view(on(a)), view(vram.tensor(a, device=CPU)).numpy()
    for axis in (None, 0, 1, 2, (0, 2)):
        close(vram.sum(t, axis), reference.sum(axis))
        close(vram.var(t, axis), reference.var(axis, ddof=1))
        np.testing.assert_array_equal(
            vram.amax(t, () if axis is None else axis).numpy(), reference.max(axis)
        )
    np.testing.assert_array_equal(vram.argmax(t, 1).numpy(), reference.argmax(1))
    assert vram.argmax(t).item() == reference.argmax()


@pytest.mark.parametrize(
    ("shape", "axis"),
    [((300_001,), None), ((3, 100_003), 1), ((40_000, 3), 0), ((2, 30_000, 3), 1)],
    ids=["full", "rows", "columns", "middle"],
)
def test_long_ranges_split_across_blocks(shape, axis):
    """Ranges long enough to be split across blocks and combined by a second launch."""
    a = sample(vram.float32, shape, seed=17)
    t = on(a)
    close(vram.sum(t, axis), a.astype(np.float64).sum(axis).astype(np.float32))
    close(vram.var(t, axis), a.astype(np.float64).var(axis, ddof=1).astype(np.float32))
    close(
        vram.logsumexp(t, axis if axis is not None else (0,)),
        np.log(np.exp(a.astype(np.float64)).sum(axis)).astype(np.float32),
    )
    ties = np.zeros(shape, np.float32)
    ties.reshape(-1)[[7, -3]] = 1  # the same maximum twice: the first one wins across splits
    np.testing.assert_array_equal(vram.argmax(on(ties), axis).numpy(), ties.argmax(axis))
    np.testing.assert_array_equal(
        vram.amin(on(a), () if axis is None else axis).numpy(), a.min(axis)
    )


def test_misaligned_inputs_take_the_element_wise_launch():
    a = sample(vram.float32, (1001,), 18)
    t = on(a)[1:]  # 4 bytes past a 16-byte boundary
    close(vram.sum(t), a[1:].astype(np.float64).sum().astype(np.float32))
    close(vram.sum(on(a)[4:]), a[4:].astype(np.float64).sum().astype(np.float32))


def test_reductions_run_on_cpu_tensors():
    a = sample(vram.float32, (4, 5), 19)
    t = on(a, CPU)
    close(vram.sum(t, 1), a.sum(1))
    assert vram.argmax(t).item() == a.argmax()
    close(t.var(), a.var(ddof=1))


def test_tensor_methods():
    a = sample(vram.float32, (3, 4), 20)
    t = on(a)
    close(t.sum(), a.sum())
    close(t.prod(1), a.prod(1))
    close(t.mean(0), a.mean(0))
    close(t.amax(1), a.max(1))
    close(t.max(), a.max())
    assert t.max(1).indices.numpy().tolist() == a.argmax(1).tolist()
    assert t.argmax().item() == a.argmax()
    close(t.std(), a.std(ddof=1))
    close(t.logsumexp(1), np.log(np.exp(a.astype(np.float64)).sum(1)).astype(np.float32))
    assert t.any().item() is True and t.all(1).dtype is vram.bool_


def test_a_repeated_call_reuses_its_plan():
    t = on(sample(vram.float32, (8, 16), 21))
    vram.sum(t, -1)
    before = len(_plans.PLANS)
    for _ in range(3):
        vram.sum(t, -1)
        vram.sum(on(sample(vram.float32, (8, 16), 22)), -1)
    assert len(_plans.PLANS) == before


def test_plans_of_one_shape_never_serve_another_layout_dtype_or_device():
    """Plans are looked up by the input's signature id (dtype, shape, strides, device):
    calls that differ in one of them, interleaved, each get their own plan's answer."""
    a = sample(vram.float32, (16, 16), 23)
    inputs = [
        (on(a), a),
        (on(np.ascontiguousarray(a.T)).t(), a),  # the same values, transposed in memory
        (on(a.astype(np.float64)), a.astype(np.float64)),
        (on(a, CPU), a),
        (on(a, vram.device("sim:1")), a),
    ]
    for _ in range(2):
        for t, values in inputs:
            close(t.sum(dim=-1), values.sum(-1))
            close(vram.softmax(t, dim=0), np.exp(values) / np.exp(values).sum(0))
            result = t.sum(dim=-1)
            assert (result.device, result.dtype) == (t.device, t.dtype)


def test_reductions_queue_their_work_in_deferred_mode():
    """The work runs when the stream does: the workspace of a split reduction, freed at the
    call's end, is reused by the next call on the same stream only after it ran."""
    a, b = sample(vram.float32, (200_001,), 23), sample(vram.float32, (200_001,), 24)
    ta, tb = on(a), on(b)
    with vram.sim.deferred():
        first, second = vram.sum(ta), vram.sum(tb)
        softmax = vram.softmax(ta[:1000].view(10, 100), 1)
    close(first, a.astype(np.float64).sum().astype(np.float32))
    close(second, b.astype(np.float64).sum().astype(np.float32))
    assert softmax.shape == (10, 100)
