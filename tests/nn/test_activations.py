"""torch.nn.functional's activations (relu6 ... glu) on the simulated GPU and the host,
against references written here from their definitions, and the edge values PyTorch gives
(taken from PyTorch and written out)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vram
import vram.nn.functional as F

SIM = vram.device("sim:0")
CPU = vram.device("cpu")
NAN, INF = math.nan, math.inf
FLOATS = [vram.float16, vram.bfloat16, vram.float32, vram.float64]
LAYOUTS = [(dt, SIM) for dt in FLOATS] + [(vram.float32, CPU)]  # the host: its own launcher
LAYOUT_IDS = [f"{dt.name}-{device}" for dt, device in LAYOUTS]
TOLERANCE = {vram.float16: 2e-3, vram.bfloat16: 1.6e-2, vram.float32: 2e-6, vram.float64: 1e-12}
ALPHA, SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _softplus(x, beta=1.0, threshold=20.0):
    return np.where(x * beta > threshold, x, np.log1p(np.exp(x * beta)) / beta)


REFERENCES = {  # in float64, from the definitions
    "relu6": (F.relu6, lambda x: np.minimum(np.maximum(x, 0), 6)),
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda t: F.elu(t, 1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x))),
    "selu": (F.selu, lambda x: SCALE * np.where(x > 0, x, ALPHA * np.expm1(x))),
    "celu": (lambda t: F.celu(t, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x / 0.5))),
    "softplus": (lambda t: F.softplus(t, 2.0, 3.0), lambda x: _softplus(x, 2.0, 3.0)),
    "hardtanh": (lambda t: F.hardtanh(t, -2.0, 1.5), lambda x: np.clip(x, -2.0, 1.5)),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    "mish": (F.mish, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    "logsigmoid": (F.logsigmoid, lambda x: -np.log1p(np.exp(-x))),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x))),
    "threshold": (lambda t: F.threshold(t, 0.5, -7.0), lambda x: np.where(x > 0.5, x, -7.0)),
}


@pytest.mark.parametrize(("dt", "device"), LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_activations_match_their_definitions(name, dt, device):
    fn, reference = REFERENCES[name]
    x = np.random.default_rng(0).uniform(-8, 8, size=(6, 9)).astype(dt.np)
    t = vram.tensor(x, device=device)
    want = reference(x.astype(np.float64))
    tol = TOLERANCE[dt] if dt != vram.float64 or name not in ("hardswish", "hardsigmoid") else 1e-7
    for got, expect in ((fn(t), want), (fn(t[:, ::2]), want[:, ::2]), (fn(t.t()), want.T)):
        assert got.dtype == dt and got.device == device
        np.testing.assert_allclose(got.numpy().astype(np.float64), expect, rtol=tol, atol=tol)
    zero_dim = fn(t[1, 2])
    assert zero_dim.shape == ()
    np.testing.assert_allclose(float(zero_dim.item()), want[1, 2], rtol=tol, atol=tol)


EDGES = [0.0, -0.0, 1.0, -1.0, 3.0, -3.0, 7.0, 25.0, -25.0, INF, -INF, NAN]
EDGE_RESULTS = {  # PyTorch's float32 results on EDGES (default arguments)
    "relu6": [0.0, -0.0, 1.0, 0.0, 3.0, 0.0, 6.0, 6.0, 0.0, 6.0, 0.0, NAN],
    "leaky_relu": [0.0, -0.0, 1.0, -0.01, 3.0, -0.03, 7.0, 25.0, -0.25, INF, -INF, NAN],
    "elu": [0.0, -0.0, 1.0, -0.63212055, 3.0, -0.95021296, 7.0, 25.0, -1.0, INF, -1.0, NAN],
    "selu": [
        0.0, -0.0, 1.050701, -1.1113307, 3.152103, -1.6705687, 7.354907, 26.267525, -1.7580993,
        INF, -1.7580993, NAN,
    ],
    "celu": [0.0, -0.0, 1.0, -0.63212055, 3.0, -0.95021296, 7.0, 25.0, -1.0, INF, -1.0, NAN],
    "softplus": [
        0.6931472, 0.6931472, 1.3132616, 0.31326169, 3.0485873, 0.04858735, 7.0009117, 25.0,
        1.3887944e-11, INF, 0.0, NAN,
    ],
    "hardtanh": [0.0, -0.0, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, NAN],
    "hardswish": [0.0, -0.0, 0.6666667, -0.33333334, 3.0, -0.0, 7.0, 25.0, -0.0, INF, NAN, NAN],
    "hardsigmoid": [0.5, 0.5, 0.6666667, 0.33333334, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, NAN],
    "mish": [
        0.0, -0.0, 0.86509836, -0.3034014, 2.9865351, -0.14564747, 6.9999886, 25.0,
        -3.471986e-10, INF, NAN, NAN,
    ],
    "logsigmoid": [
        -0.6931472, -0.6931472, -0.31326169, -1.3132617, -0.04858735, -3.0485873,
        -0.00091146649, -1.3887944e-11, -25.0, 0.0, -INF, NAN,
    ],
    "softsign": [
        0.0, -0.0, 0.5, -0.5, 0.75, -0.75, 0.875, 0.96153843, -0.96153843, NAN, NAN, NAN,
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EDGE_RESULTS))
def test_edge_values_are_pytorchs(name):
    got = getattr(F, name)(vram.tensor(EDGES, device=SIM)).numpy()
    want = np.array(EDGE_RESULTS[name], dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0, equal_nan=True)
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


def test_arguments_change_the_results_as_pytorchs():
    x = vram.tensor(EDGES, device=SIM)
    np.testing.assert_allclose(
        F.softplus(x, beta=2, threshold=5).numpy(),
        np.array(
            [0.34657359, 0.34657359, 1.0634640, 0.063464, 3.0, 0.0012378426, 7.0, 25.0,
             9.6437495e-23, INF, 0.0, NAN],
            np.float32,
        ),
        rtol=2e-6,
    )  # fmt: skip
    got = F.threshold(x, 1.0, NAN).numpy()
    assert np.isnan(got[[0, 1, 2, 3, 5, 8, 10, 11]]).all() and got[4] == 3.0
    np.testing.assert_array_equal(F.threshold(x, NAN, 2.0).numpy(), x.numpy())


def test_integer_inputs_where_pytorch_takes_them():
    ints = vram.tensor([1, 2, 3], device=SIM)
    assert F.threshold(ints, 1.5, 7).tolist() == [7, 2, 3]
    assert F.threshold(ints, 2, 7.9).tolist() == [7, 7, 3]
    assert F.hardtanh(vram.tensor([-3, 0, 3], device=SIM), -1.5, 2.5).tolist() == [-1, 0, 2]
    assert F.hardtanh(vram.tensor([0, 5], dtype=vram.uint8, device=SIM), -0.5, 2).tolist() == [0, 2]
    r6 = F.relu6(vram.tensor([-3, 0, 3, 9], device=SIM))
    assert r6.dtype == vram.int64 and r6.tolist() == [0, 0, 3, 6]
    soft = F.softsign(vram.tensor([1, 2], device=SIM))
    assert soft.dtype == vram.float32 and soft.tolist() == pytest.approx([0.5, 2 / 3])
    for fn in (F.leaky_relu, F.elu, F.selu, F.celu, F.softplus, F.hardswish, F.mish, F.glu):
        with pytest.raises(NotImplementedError, match="not implemented for vram.int64"):
            fn(vram.tensor([[1, 2]], device=SIM))


def test_bad_arguments_are_refused_as_pytorch_refuses_them():
    x = vram.ones(2, 3, device=SIM)
    with pytest.raises(RuntimeError, match="Bool inputs not supported for hardtanh"):
        F.relu6(vram.tensor([True], device=SIM))
    with pytest.raises(RuntimeError, match="unsigned type with negative limits"):
        F.hardtanh(vram.tensor([1], dtype=vram.uint8, device=SIM))
    with pytest.raises(RuntimeError, match="cannot be converted to vram.uint8 without overflow"):
        F.threshold(vram.tensor([1], dtype=vram.uint8, device=SIM), 1.3, -7.0)
    with pytest.raises(RuntimeError, match="cannot be converted to vram.int8 without overflow"):
        F.hardtanh(vram.tensor([1], dtype=vram.int8, device=SIM), -1000, 1000)
    with pytest.raises(RuntimeError, match="cannot be converted to vram.float16 without overflow"):
        F.threshold(vram.tensor([1.0], dtype=vram.float16, device=SIM), 1, 1e6)
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        F.hardtanh(x, 2, -2)
    with pytest.raises(RuntimeError, match="alpha cannot be 0 for CELU"):
        F.celu(x, 0.0)
    with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension 1 is"):
        F.glu(x)
    with pytest.raises(RuntimeError, match="glu does not support scalars"):
        F.glu(vram.tensor(1.0, device=SIM))
    with pytest.raises(TypeError, match="'input' must be Tensor, not list"):
        F.mish([1.0])
    with pytest.raises(TypeError, match="'negative_slope' must be a number, not str"):
        F.leaky_relu(x, "0.1")


def test_in_place_forms_write_the_input():
    for fn, reference in (
        (lambda t: F.leaky_relu(t, 0.5, inplace=True), lambda v: np.where(v > 0, v, 0.5 * v)),
        (lambda t: F.elu(t, inplace=True), lambda v: np.where(v > 0, v, np.expm1(v))),
        (lambda t: F.hardtanh(t, -1, 1, inplace=True), lambda v: np.clip(v, -1, 1)),
        (lambda t: F.relu6(t, inplace=True), lambda v: np.clip(v, 0, 6)),
        (lambda t: F.threshold(t, 0.0, 9.0, inplace=True), lambda v: np.where(v > 0, v, 9.0)),
        (lambda t: F.hardswish(t, inplace=True), lambda v: v * np.clip(v + 3, 0, 6) / 6),
        (
            lambda t: F.selu(t, inplace=True),
            lambda v: SCALE * np.where(v > 0, v, ALPHA * np.expm1(v)),
        ),
    ):
        values = np.array([[-2.0, -0.5, 0.5, 8.0]] * 2, np.float32)
        t = vram.tensor(values, device=SIM)
        view = t[:, 1:]
        assert fn(view) is view
        want = values.copy()
        want[:, 1:] = reference(values[:, 1:].astype(np.float64))
        np.testing.assert_allclose(t.numpy(), want, rtol=2e-6)


def test_glu_halves_along_dim():
    x = vram.arange(8.0, device=SIM).reshape(2, 4)
    v = np.arange(8.0).reshape(2, 4)
    sigmoid = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    np.testing.assert_allclose(F.glu(x, 0).numpy(), v[:1] * sigmoid(v[1:]), rtol=1e-6)
    np.testing.assert_allclose(F.glu(x).numpy(), v[:, :2] * sigmoid(v[:, 2:]), rtol=1e-6)
    np.testing.assert_allclose(F.glu(x, -2).numpy(), v[:1] * sigmoid(v[1:]), rtol=1e-6)
    half = F.glu(x.to(vram.float16).t(), 0)
    assert half.dtype == vram.float16 and half.shape == (2, 2)


def test_every_activation_kernel_is_in_the_warm_list():
    from vram.ops import _activations, warm

    found = " ".join(entry for _, entry in warm.pointwise_instances(None, ["float16"]))
    for op in _activations.ACTIVATIONS.values():
        assert f"vram::{op.functor}<float>" in found, op.name


def test_activation_instances_compile_for_sm_90():
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    from vram.ops import _activations, _pointwise, warm

    found = warm.pointwise_instances(
        list(_activations.ACTIVATIONS), ["float32", "bfloat16", "float64", "int32"]
    )
    names = tuple(sorted({entry for _, entry in found if "pointwise_flat" in entry}))
    assert len(names) >= len(_activations.ACTIVATIONS) * 3
    program = compile_program(_pointwise.source(), "sm_90", names)
    assert program.kind == "cubin"


CACHED = {  # the activations whose out-of-place form takes the ops' cached path
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": F.sigmoid,
    "tanh": F.tanh,
}


@pytest.mark.parametrize("dt", FLOATS + [vram.int32], ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(CACHED))
def test_the_cached_activation_path_is_the_general_one(name, dt):
    """F's cached path (``_math.unary_fast``) against ``_math.unary`` (the general path),
    bit for bit, for contiguous, strided, transposed, 0-dim and empty inputs, twice each
    (the second call from the cache)."""
    from vram.ops import _math

    if dt is vram.int32 and name != "relu":
        pytest.skip("PyTorch refuses integer input here")
    x = vram.tensor(np.random.default_rng(1).uniform(-4, 4, (5, 8)).astype(dt.np), device=SIM)
    for t in (x, x[:, ::3], x.t(), x[2, 3], x[:0]):
        for _ in range(2):
            got, want = CACHED[name](t), _math.unary(name, t)
            assert (got.dtype, got.shape, got.stride()) == (want.dtype, want.shape, want.stride())
            assert np.array_equal(got.numpy(), want.numpy(), equal_nan=True)
