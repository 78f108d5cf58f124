"""The pointwise math beyond arithmetic (erfc ... rad2deg, sgn, logit, hypot ... heaviside,
clamp_min/max, isclose, allclose, equal) on the simulated GPU and the host, against
references written here from the definitions (NumPy and Python's math), and the edge values
PyTorch gives (taken from PyTorch and written out)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import vram
from vram.ops import _math

SIM = vram.device("sim:0")
CPU = vram.device("cpu")
NAN, INF = math.nan, math.inf
FLOATS = [vram.float16, vram.bfloat16, vram.float32, vram.float64]
LAYOUTS = [(dt, SIM) for dt in FLOATS] + [(vram.float32, CPU)]  # the host: its own launcher
LAYOUT_IDS = [f"{dt.name}-{device}" for dt, device in LAYOUTS]
# where each dtype's result must land: float16 and bfloat16 compute in float32, round once
TOLERANCE = {
    vram.float16: 1e-3,
    vram.bfloat16: 8e-3,
    vram.float32: 2e-6,
    vram.float64: 1e-12,
}


def _lgamma(v: float) -> float:
    if math.isnan(v):
        return v
    if math.isinf(v) or (v <= 0 and v == math.floor(v)):
        return INF
    return math.lgamma(v)


def _digamma(v: float) -> float:
    """The derivative of lgamma by central differences (away from the poles)."""
    h = 1e-5 * max(1.0, abs(v))
    return (math.lgamma(v + h) - math.lgamma(v - h)) / (2 * h)


def _pyfunc(f):
    return lambda x: np.frompyfunc(f, 1, 1)(x).astype(np.float64)


# name -> (reference in float64, the inputs' domain)
UNARY = {
    "erfc": (_pyfunc(math.erfc), (-3, 3)),
    "lgamma": (_pyfunc(_lgamma), (0.1, 8)),
    "digamma": (_pyfunc(_digamma), (0.3, 12)),
    "sinh": (np.sinh, (-4, 4)),
    "cosh": (np.cosh, (-4, 4)),
    "asin": (np.arcsin, (-1, 1)),
    "acos": (np.arccos, (-1, 1)),
    "atan": (np.arctan, (-5, 5)),
    "asinh": (np.arcsinh, (-5, 5)),
    "acosh": (np.arccosh, (1, 6)),
    "atanh": (np.arctanh, (-0.95, 0.95)),
    "sinc": (np.sinc, (-3, 3)),
    "deg2rad": (lambda x: x * (math.pi / 180), (-400, 400)),
    "rad2deg": (lambda x: x * (180 / math.pi), (-7, 7)),
    "square": (lambda x: x * x, (-9, 9)),
    "frac": (lambda x: x - np.trunc(x), (-9, 9)),
    "sgn": (lambda x: np.sign(x), (-3, 3)),
}


def _values(dt: vram.dtype, low: float, high: float, shape=(6, 7), seed=0) -> np.ndarray:
    values = np.random.default_rng(seed).uniform(low, high, size=shape)
    return values.astype(dt.np)


def _close(got: vram.Tensor, want: np.ndarray, dt: vram.dtype, tol: float | None = None) -> None:
    assert got.dtype == dt
    tol = TOLERANCE[dt] if tol is None else tol
    np.testing.assert_allclose(
        got.numpy().astype(np.float64), want, rtol=tol, atol=tol, equal_nan=True
    )


@pytest.mark.parametrize(("dt", "device"), LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_match_their_definitions(name, dt, device):
    reference, (low, high) = UNARY[name]
    x = _values(dt, low, high)
    got = getattr(vram, name)(vram.tensor(x, device=device))
    want = reference(x.astype(np.float64))
    # the central differences give digamma to about 1e-10
    _close(got, want, dt, 1e-9 if name == "digamma" and dt == vram.float64 else None)


@pytest.mark.parametrize("dt", [vram.float32, vram.float64], ids=lambda d: d.name)
def test_erfinv_inverts_erf(dt):
    y = np.linspace(-0.999, 0.999, 41).astype(dt.np)
    got = vram.erfinv(vram.tensor(y, device=SIM)).numpy().astype(np.float64)
    back = np.array([math.erf(v) for v in got])
    np.testing.assert_allclose(back, y.astype(np.float64), rtol=0, atol=4 * TOLERANCE[dt])


EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, INF, -INF, NAN]
# PyTorch's float32 results on EDGES, written out
EDGE_RESULTS = {
    "sgn": [0.0, 0.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 0.0],
    "sign": [0.0, 0.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 0.0],
    "frac": [0.0, 0.0, 0.0, 0.0, 0.5, -0.5, NAN, NAN, NAN],
    "sinc": [1.0, 1.0, -2.7827534e-08, -2.7827534e-08, 0.63661975, 0.12732396, NAN, NAN, NAN],
    "logit": [-INF, -INF, INF, NAN, 0.0, NAN, NAN, NAN, NAN],
    "erfinv": [0.0, -0.0, INF, -INF, 0.47693628, NAN, NAN, NAN, NAN],
    "lgamma": [INF, INF, 0.0, INF, 0.5723649, -0.05624372, INF, INF, NAN],
    "digamma": [-INF, INF, -0.5772159, NAN, -1.9635108, 1.1031567, INF, NAN, NAN],
    "square": [0.0, 0.0, 1.0, 1.0, 0.25, 6.25, INF, INF, NAN],
    "erfc": [1.0, 1.0, 0.1572992, 1.8427008, 0.4795001, 1.999593, 0.0, 2.0, NAN],
    "atanh": [0.0, -0.0, INF, -INF, 0.54930615, NAN, NAN, NAN, NAN],
    "acosh": [NAN, NAN, 0.0, NAN, NAN, NAN, INF, NAN, NAN],
    "asinh": [0.0, -0.0, 0.8813736, -0.8813736, 0.4812118, -1.6472312, INF, -INF, NAN],
    "deg2rad": [0.0, -0.0, 0.017453292, -0.017453292, 0.008726646, -0.04363323, INF, -INF, NAN],
    "rad2deg": [0.0, -0.0, 57.29578, -57.29578, 28.64789, -143.23946, INF, -INF, NAN],
}


@pytest.mark.parametrize("name", sorted(EDGE_RESULTS))
def test_edge_values_are_pytorchs(name):
    got = getattr(vram, name)(vram.tensor(EDGES, device=SIM)).numpy()
    want = np.array(EDGE_RESULTS[name], dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0, equal_nan=True)
    # the sign of zero where the result is zero
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


def test_digamma_and_lgamma_at_poles_and_below_zero():
    x = vram.tensor([-1.0, -2.0, -0.5, -1.5, 1e-8], dtype=vram.float64, device=SIM)
    got = vram.digamma(x).numpy()
    assert np.isnan(got[:2]).all()
    np.testing.assert_allclose(got[2:4], [_digamma(-0.5), _digamma(-1.5)], rtol=1e-8)
    assert got[4] == pytest.approx(-1e8 - 0.5772156649, rel=1e-12)
    assert vram.lgamma(x).numpy()[:2].tolist() == [INF, INF]


def test_logit_with_eps_clamps_first():
    x = vram.tensor([0.0, 1.0, 0.3, -1.0, NAN], device=SIM)
    got = vram.logit(x, eps=0.1).numpy()
    lo, hi = math.log(0.1 / 0.9), math.log(0.9 / 0.1)
    np.testing.assert_allclose(got[:4], [lo, hi, math.log(0.3 / 0.7), lo], rtol=1e-6)
    assert np.isnan(got[4])
    t = vram.tensor([0.25], device=SIM)
    assert t.logit_(0.3) is t
    assert t.tolist() == pytest.approx([math.log(0.3 / 0.7)])
    assert vram.logit(vram.tensor([1, 2], device=SIM), eps=0.1).dtype == vram.float32


# ---- dtypes ------------------------------------------------------------------------------

FLOAT_VALUED = [
    "erfc", "erfinv", "lgamma", "digamma", "sinh", "cosh", "asin", "acos", "atan",
    "asinh", "acosh", "atanh", "sinc", "deg2rad", "rad2deg", "logit",
]  # fmt: skip


@pytest.mark.parametrize("name", FLOAT_VALUED)
def test_integers_and_bool_compute_in_the_default_float(name):
    ints = vram.tensor([0, 1, 2, -3], dtype=vram.int32, device=SIM)
    got = getattr(vram, name)(ints)
    assert got.dtype == vram.float32
    want = getattr(vram, name)(ints.to(vram.float32))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert getattr(vram, name)(vram.tensor([True, False], device=SIM)).dtype == vram.float32
    with pytest.raises(RuntimeError, match="result type vram.float32 can't be cast.*int32"):
        getattr(ints, f"{name}_")()


def test_integer_results_of_square_sgn_and_their_in_place_forms():
    x = vram.tensor([-3, 0, 5], dtype=vram.int16, device=SIM)
    assert vram.square(x).tolist() == [9, 0, 25] and vram.square(x).dtype == vram.int16
    assert vram.sgn(x).tolist() == [-1, 0, 1]
    big = vram.tensor([200], dtype=vram.int16, device=SIM)
    assert vram.square(big).tolist() == [(40000 + 2**15) % 2**16 - 2**15]  # wraps
    b = vram.tensor([True, False], device=SIM)
    assert vram.square(b).dtype == vram.int64 and vram.square(b).tolist() == [1, 0]
    assert vram.sgn(b).dtype == vram.bool_ and vram.sgn(b).tolist() == [True, False]
    with pytest.raises(RuntimeError, match="vram.int64 can't be cast.*vram.bool"):
        b.square_()
    x.square_()
    assert x.tolist() == [9, 0, 25]


def test_sgn_of_complex_numbers_is_the_unit_direction():
    z = vram.tensor([3 + 4j, 0j, -2j], device=SIM)
    got = vram.sgn(z).numpy()
    np.testing.assert_allclose(got, [0.6 + 0.8j, 0, -1j], rtol=1e-7)


def test_dtypes_pytorch_refuses():
    ints = vram.tensor([1, 2], device=SIM)
    for fn in (vram.frac, lambda t: vram.hypot(t, t), lambda t: vram.logaddexp(t, t)):
        with pytest.raises(NotImplementedError, match="not implemented for vram.int64"):
            fn(ints)
    with pytest.raises(RuntimeError, match="The `\\+` operator, on a bool tensor"):
        vram.positive(vram.tensor([True], device=SIM))
    with pytest.raises(TypeError, match="hypot.*'other' must be Tensor, not float"):
        vram.hypot(vram.ones(2, device=SIM), 2.0)
    with pytest.raises(TypeError, match="copysign.*'input' must be Tensor, not float"):
        vram.copysign(2.0, vram.ones(2, device=SIM))
    with pytest.raises(RuntimeError, match="different dtypes"):
        vram.heaviside(vram.ones(2, device=SIM), vram.ones(2, dtype=vram.float64, device=SIM))
    with pytest.raises(RuntimeError, match="complex tensors"):
        z = vram.ones(2, dtype=vram.complex64, device=SIM)
        vram.heaviside(z, z)


def test_positive_is_the_tensor_itself():
    t = vram.tensor([1.0, -2.0], device=SIM)
    assert vram.positive(t) is t and t.positive() is t


def test_half_precision_rounds_once_from_float32():
    x = np.array([0.3, 1.7, -2.2], dtype=np.float16)
    got = vram.sinh(vram.tensor(x, device=SIM)).numpy()
    np.testing.assert_array_equal(got, np.sinh(x.astype(np.float32)).astype(np.float16))
    xb = np.array([0.3, 1.7, -2.2], dtype=ml_dtypes.bfloat16)
    got = vram.atan(vram.tensor(xb, device=SIM)).numpy()
    np.testing.assert_array_equal(got, np.arctan(xb.astype(np.float32)).astype(xb.dtype))


# ---- binary ------------------------------------------------------------------------------

A = [0.0, -0.0, 1.0, -1.0, NAN, INF, -INF, 2.0]
B = [-0.0, 0.0, -1.0, NAN, 1.0, NAN, INF, -3.0]
BINARY_RESULTS = {  # PyTorch's float32 results on (A, B)
    "copysign": [-0.0, 0.0, -1.0, 1.0, NAN, INF, INF, -2.0],
    "hypot": [0.0, 0.0, 1.4142135, NAN, NAN, INF, INF, 3.6055512],
    "logaddexp": [0.6931472, 0.6931472, 1.1269280, NAN, NAN, NAN, INF, 2.0067153],
    "logaddexp2": [1.0, 1.0, 1.3219281, NAN, NAN, NAN, INF, 2.0443940],
    "xlogy": [0.0, 0.0, NAN, NAN, NAN, NAN, -INF, NAN],
    "heaviside": [-0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0],
}


@pytest.mark.parametrize("name", sorted(BINARY_RESULTS))
def test_binary_edge_values_are_pytorchs(name):
    got = getattr(vram, name)(vram.tensor(A, device=SIM), vram.tensor(B, device=SIM)).numpy()
    want = np.array(BINARY_RESULTS[name], dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0, equal_nan=True)
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


def test_more_binary_edges():
    x, y = (
        vram.tensor([0.0, 0.0, 0.0, 1.0], device=SIM),
        vram.tensor([0.0, NAN, -1.0, 0.0], device=SIM),
    )
    np.testing.assert_array_equal(vram.xlogy(x, y).numpy(), [0.0, NAN, 0.0, -INF])
    inf = vram.tensor([INF, -INF, INF], device=SIM)
    ninf = vram.tensor([INF, -INF, -INF], device=SIM)
    assert vram.logaddexp(inf, ninf).tolist() == [INF, -INF, INF]
    assert vram.logaddexp2(inf, ninf).tolist() == [INF, -INF, INF]
    ints = vram.tensor([-2, 0, 3], device=SIM)
    assert vram.heaviside(ints, vram.tensor([7, 7, 7], device=SIM)).tolist() == [0, 7, 1]
    got = vram.copysign(ints, vram.tensor([1, -1, -1], device=SIM))
    assert got.dtype == vram.float32
    np.testing.assert_array_equal(got.numpy(), np.array([2.0, -0.0, -3.0], np.float32))
    assert np.signbit(vram.copysign(vram.tensor([3], device=SIM), -0.0).numpy()).all()


BINARY_REFS = {
    "hypot": np.hypot,
    "copysign": np.copysign,
    "logaddexp": np.logaddexp,
    "logaddexp2": np.logaddexp2,
    "xlogy": lambda a, b: a * np.log(b),  # positive inputs here
}


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(BINARY_REFS))
def test_binary_ops_broadcast_strided_and_numbers(name, dt):
    a = _values(dt, 0.2, 4, shape=(5, 8), seed=1)
    b = _values(dt, 0.2, 4, shape=(8,), seed=2)
    ref = BINARY_REFS[name]
    fn = getattr(vram, name)
    ta, tb = vram.tensor(a, device=SIM), vram.tensor(b, device=SIM)
    wide = lambda v: v.astype(np.float64)  # noqa: E731
    _close(fn(ta, tb), ref(wide(a), wide(b)), dt)  # a row broadcast
    _close(fn(ta[:, ::2], tb[1::2]), ref(wide(a)[:, ::2], wide(b)[1::2]), dt)  # strided
    _close(fn(ta.t(), tb[:5]), ref(wide(a).T, wide(b)[:5]), dt)  # transposed
    zero_dim = tb[0]  # a 0-dim view
    _close(fn(ta, zero_dim), ref(wide(a), wide(b[:1])), dt)
    if name in ("copysign", "xlogy"):
        number = -1.5 if name == "copysign" else 1.5
        _close(fn(ta, number), ref(wide(a), number), dt)
    if name == "xlogy":
        _close(fn(2.5, ta), ref(2.5, wide(a)), dt)


def test_in_place_and_out_forms():
    a = vram.tensor([[3.0, -4.0], [0.0, 1.0]], device=SIM)
    b = vram.tensor([5.0, 2.0], device=SIM)
    out = vram.empty(2, 2, device=SIM)
    assert vram.hypot(a, b, out=out) is out
    np.testing.assert_allclose(out.numpy(), np.hypot(a.numpy(), b.numpy()), rtol=1e-7)
    view = a[:, 1]
    view.copysign_(vram.tensor([1.0, -1.0], device=SIM))
    assert a.tolist() == [[3.0, 4.0], [0.0, -1.0]]
    a.clamp_min_(0.5).clamp_max_(3.5)
    assert a.tolist() == [[3.0, 3.5], [0.5, 0.5]]
    c = vram.tensor([0.5, 1.0], device=SIM)
    c.xlogy_(vram.tensor([2.0, 1.0], device=SIM))
    assert c.tolist() == pytest.approx([0.5 * math.log(2), 0.0])
    h = vram.tensor([-1.0, 0.0], device=SIM)
    h.heaviside_(vram.tensor([9.0, 9.0], device=SIM))
    assert h.tolist() == [0.0, 9.0]
    assert vram.tensor([1.0], device=SIM).logaddexp(vram.tensor([1.0], device=SIM)).tolist() == [
        pytest.approx(1 + math.log(2))
    ]
    r = vram.empty(2, device=SIM)
    vram.asin(vram.tensor([0.5, 1.0], device=SIM), out=r)
    assert r.tolist() == pytest.approx([math.asin(0.5), math.pi / 2])
    assert vram.arcsin is vram.asin
    t = vram.tensor([0.5], device=SIM)
    assert t.arctanh().tolist() == pytest.approx([math.atanh(0.5)])


def test_clamp_min_and_clamp_max_keep_nan_and_take_tensors():
    x = vram.tensor([NAN, -1.0, 2.0, 5.0], device=SIM)
    np.testing.assert_array_equal(vram.clamp_min(x, 0.0).numpy(), [NAN, 0.0, 2.0, 5.0])
    np.testing.assert_array_equal(vram.clamp_max(x, 3).numpy(), [NAN, -1.0, 2.0, 3.0])
    lo = vram.tensor([0.0, 0.0, NAN, 9.0], device=SIM)
    np.testing.assert_array_equal(x.clamp_min(lo).numpy(), [NAN, 0.0, NAN, 9.0])
    assert vram.clamp_min(vram.tensor([1, 5], device=SIM), 2).tolist() == [2, 5]
    assert vram.clamp_min(vram.tensor([1, 5], device=SIM), 2.5).dtype == vram.float32


# ---- isclose, allclose, equal ------------------------------------------------------------


def _torch_isclose(a, b, rtol, atol, equal_nan):
    """PyTorch's composite, in NumPy (float inputs)."""
    with np.errstate(all="ignore"):
        close = a == b
        if equal_nan:
            close |= np.isnan(a) & np.isnan(b)
        actual = np.abs(a - b)
        return close | (np.isfinite(actual) & (actual <= atol + np.abs(rtol * b)))


@pytest.mark.parametrize("dt", [vram.float32, vram.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose_matches_pytorchs_composite(dt, equal_nan):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((7, 9)).astype(dt.np)
    b = (a * (1 + rng.uniform(-3e-5, 3e-5, a.shape))).astype(dt.np)
    a[0, :4], b[0, :4] = [NAN, INF, INF, NAN], [NAN, INF, -INF, 1.0]
    got = vram.isclose(
        vram.tensor(a, device=SIM), vram.tensor(b, device=SIM), 1e-5, 1e-7, equal_nan
    )
    assert got.dtype == vram.bool_
    want = _torch_isclose(a, b, dt.np.type(1e-5), dt.np.type(1e-7), equal_nan)
    np.testing.assert_array_equal(got.numpy(), want)
    assert 0 < want.sum() < want.size  # both answers occur
    # broadcast and strided
    got = vram.isclose(vram.tensor(a, device=SIM)[:, ::2], vram.tensor(b[0, ::2], device=SIM))
    np.testing.assert_array_equal(
        got.numpy(), _torch_isclose(a[:, ::2], b[0, ::2], dt.np.type(1e-5), dt.np.type(1e-8), False)
    )


def _vram_composite(a, b, rtol, atol, equal_nan):
    """PyTorch's isclose composite written with vram's ops (the kernel's differential)."""
    close = vram.eq(a, b)
    if equal_nan:
        close = close | (vram.isnan(a) & vram.isnan(b))
    actual = (a - b).abs()
    return close | (vram.isfinite(actual) & (actual <= (b * rtol).abs() + atol))


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_isclose_kernel_equals_the_composite_of_vram_ops(dt):
    rng = np.random.default_rng(4)
    a = rng.standard_normal(400).astype(dt.np)
    b = (a.astype(np.float64) + rng.uniform(-4e-3, 4e-3, a.shape)).astype(dt.np)
    a[:3], b[:3] = [NAN, INF, NAN], [NAN, INF, 1.0]
    ta, tb = vram.tensor(a, device=SIM), vram.tensor(b, device=SIM)
    for rtol, atol, equal_nan in ((1e-5, 1e-8, False), (1e-2, 1e-3, True), (0.0, 0.0, True)):
        got = vram.isclose(ta, tb, rtol, atol, equal_nan).numpy()
        np.testing.assert_array_equal(got, _vram_composite(ta, tb, rtol, atol, equal_nan).numpy())


def test_isclose_of_integers_and_bool_and_half():
    ten = vram.tensor([10, 10, 10], device=SIM)
    other = vram.tensor([11, 12, 10], device=SIM)
    assert vram.isclose(ten, other, rtol=0.1, atol=0).tolist() == [True, False, True]
    assert vram.isclose(ten, other, rtol=0.15, atol=0.5).tolist() == [True, True, True]
    assert vram.isclose(ten, other, rtol=0, atol=0).tolist() == [False, False, True]
    b = vram.tensor([True, False], device=SIM)
    assert vram.isclose(b, vram.tensor([True, True], device=SIM)).tolist() == [True, False]
    h = vram.tensor([1.0], dtype=vram.float16, device=SIM)
    assert vram.isclose(h, vram.tensor([1.001], dtype=vram.float16, device=SIM)).tolist() == [False]
    assert vram.isclose(h, h + 1e-3, atol=1e-3).tolist() == [True]


def test_isclose_refuses_what_pytorch_refuses():
    f, d = vram.ones(2, device=SIM), vram.ones(2, dtype=vram.float64, device=SIM)
    with pytest.raises(RuntimeError, match="Float did not match Double"):
        vram.isclose(f, d)
    with pytest.raises(RuntimeError, match="Float did not match Double"):
        vram.allclose(f, d)
    with pytest.raises(RuntimeError, match="rtol must be greater than or equal to zero"):
        vram.isclose(f, f, rtol=-1)
    with pytest.raises(RuntimeError, match="atol must be greater than or equal to zero"):
        vram.isclose(f, f, atol=-1)
    with pytest.raises(TypeError, match="'other' must be Tensor, not float"):
        vram.isclose(f, 1.0)
    with pytest.raises(RuntimeError, match=r"size of tensor a \(2\) must match"):
        vram.isclose(f, vram.ones(3, device=SIM))


def test_allclose_and_equal_give_python_bools():
    a = vram.tensor([1.0, 2.0, NAN], device=SIM)
    result = vram.allclose(a[:2], vram.tensor([1.0, 2.0 + 1e-6], device=SIM))
    assert result is True
    assert vram.allclose(a, a) is False and vram.allclose(a, a, equal_nan=True) is True
    assert a.allclose(a, equal_nan=True) is True
    assert vram.allclose(vram.ones(2, 3, device=SIM), vram.ones(3, device=SIM)) is True
    assert vram.equal(a[:2], vram.tensor([1.0, 2.0], device=SIM)) is True
    assert vram.equal(a, a) is False  # NaN is never equal
    assert vram.equal(vram.ones(2, device=SIM), vram.ones(3, device=SIM)) is False
    assert vram.equal(vram.ones(2, 3, device=SIM), vram.ones(3, device=SIM)) is False
    assert vram.equal(vram.ones(2, device=SIM), vram.ones(2, dtype=vram.int64, device=SIM))
    assert vram.tensor([0.0], device=SIM).equal(vram.tensor([-0.0], device=SIM)) is True
    assert vram.equal(vram.empty(0, device=SIM), vram.empty(0, device=SIM)) is True
    with pytest.raises(TypeError, match="'other' must be Tensor, not float"):
        vram.equal(a, 1.0)
    with pytest.raises(RuntimeError, match="same device"):
        vram.equal(vram.ones(2, device=SIM), vram.ones(2, device=CPU))


# ---- the kernels ---------------------------------------------------------------------------

NEW_OPS = [
    *sorted(UNARY), "erfinv", "hypot", "copysign", "logaddexp", "logaddexp2", "xlogy",
    "heaviside",
]  # fmt: skip


def test_every_new_op_is_in_the_op_table_and_the_warm_list():
    from vram.ops import warm

    for name in NEW_OPS:
        assert name in _math.UNARY or name in _math.BINARY
        assert hasattr(vram, name) and hasattr(vram.Tensor, name)
    found = warm.pointwise_instances(["sinc", "isclose", "logit"], ["float32"])
    entries = " ".join(entry for _, entry in found)
    assert "vram::Sinc<float>" in entries
    assert "vram::IsClose<float>" in entries and "vram::Logit<float>" in entries


def test_a_representative_set_of_instances_compiles_for_sm_90():
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    from vram.ops import _pointwise, warm

    found = warm.pointwise_instances(
        [*NEW_OPS, "isclose", "logit"], ["float32", "float16", "float64", "complex64"]
    )
    names = tuple(
        sorted({e for _, e in found if "pointwise_flat" in e and "Scalar" not in e})
    )  # one flat instance per op and dtype: what differs between forms is the shared loops
    assert len(names) > len(NEW_OPS)
    program = compile_program(_pointwise.source(), "sm_90", names)
    assert program.kind == "cubin"
