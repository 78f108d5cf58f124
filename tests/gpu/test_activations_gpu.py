"""nn.functional's activations (relu6 ... glu) on a real GPU, against PyTorch on the same
inputs: every dtype each takes, contiguous, strided and transposed inputs, in-place forms."""

from __future__ import annotations

import numpy as np
import pytest

import vram
import vram.nn.functional as F

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not vram.cuda.is_available() or not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU and PyTorch with CUDA", allow_module_level=True)

TF = torch.nn.functional
FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int32", "int64", "uint8")
CASES = {  # name -> (vram call, torch call, dtypes beyond the floating ones)
    "relu6": (F.relu6, TF.relu6, INTS),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2), ()),
    "elu": (lambda x: F.elu(x, 1.5), lambda x: TF.elu(x, 1.5), ()),
    "selu": (F.selu, TF.selu, ()),
    "celu": (lambda x: F.celu(x, 0.5), lambda x: TF.celu(x, 0.5), ()),
    "softplus": (lambda x: F.softplus(x, 2.0, 3.0), lambda x: TF.softplus(x, 2.0, 3.0), ()),
    "hardtanh": (lambda x: F.hardtanh(x, -2.0, 1.5), lambda x: TF.hardtanh(x, -2.0, 1.5), ()),
    "hardswish": (F.hardswish, TF.hardswish, ()),
    "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid, ()),
    "mish": (F.mish, TF.mish, ()),
    "logsigmoid": (F.logsigmoid, TF.logsigmoid, ()),
    "softsign": (F.softsign, TF.softsign, ("int64",)),
    "threshold": (
        lambda x: F.threshold(x, 1.3, 7.0),
        lambda x: TF.threshold(x, 1.3, 7.0),
        INTS,
    ),
    "glu": (lambda x: F.glu(x, 0), lambda x: TF.glu(x, 0), ()),
}
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-6, torch.float64: 1e-12}


def _random(dt: str, shape: tuple[int, ...], seed: int):
    rng = np.random.default_rng(seed)
    if dt in FLOATS:
        values = rng.standard_normal(shape) * 4
        values.flat[:6] = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 25.0]
        return torch.from_numpy(values).to(getattr(torch, dt)).cuda()
    return (
        torch.from_numpy(rng.integers(0 if dt == "uint8" else -9, 10, size=shape))
        .to(getattr(torch, dt))
        .cuda()
    )


def _check(got: vram.Tensor, want) -> None:
    assert got.dtype.name == str(want.dtype).replace("torch.", "")
    assert tuple(got.shape) == tuple(want.shape)
    g = torch.utils.dlpack.from_dlpack(got.contiguous())
    if not want.is_floating_point():
        assert torch.equal(g, want)
        return
    tol = TOL[want.dtype]
    torch.testing.assert_close(g, want, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_activations_match_torch(name):
    fn, tfn, extra = CASES[name]
    for dt in FLOATS + tuple(extra):
        if name == "relu6" and dt == "uint8":
            continue  # hardtanh's negative limit is refused for uint8 in both
        x = _random(dt, (36, 18), 1)  # glu halves dim 0 of each view
        v = vram.asarray(x)
        _check(fn(v), tfn(x))
        _check(fn(v.t()), tfn(x.t()))
        _check(fn(v[::2, 1::3]), tfn(x[::2, 1::3]))


def test_in_place_forms_match_torch():
    for name, kwargs in (
        ("leaky_relu", {"negative_slope": 0.3}),
        ("elu", {"alpha": 0.7}),
        ("selu", {}),
        ("celu", {"alpha": 2.0}),
        ("hardtanh", {"min_val": -0.5, "max_val": 0.5}),
        ("relu6", {}),
        ("hardswish", {}),
        ("hardsigmoid", {}),
        ("mish", {}),
        ("threshold", {"threshold": 0.1, "value": 3.0}),
    ):
        x = _random("float32", (64, 40), 2)
        v = vram.asarray(x.clone())
        view, tview = v[:, 3:], x[:, 3:]
        assert getattr(F, name)(view, inplace=True, **kwargs) is view
        getattr(TF, name)(tview, inplace=True, **kwargs)
        _check(v, x)
