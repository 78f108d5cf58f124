"""The pointwise engine on a real GPU, against PyTorch on the same inputs.

Every op of vram.ops._math, every dtype it takes, contiguous, strided, broadcast and
zero-size operands, numbers standing for operands, in-place and out= forms.
"""

from __future__ import annotations

import numpy as np
import pytest

import vram
from vram.ops import _math

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not vram.cuda.is_available() or not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU and PyTorch with CUDA", allow_module_level=True)

DEV = vram.device("cuda:0")
TORCH_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
KINDS = {
    0: ["bool"],
    1: ["int8", "int16", "int32", "int64", "uint8"],
    2: ["float16", "bfloat16", "float32", "float64"],
    3: ["complex64", "complex128"],
}


def random(name: str, shape: tuple[int, ...], seed: int, positive: bool = False):
    rng = np.random.default_rng(seed)
    if name == "bool":
        return torch.from_numpy(rng.random(shape) > 0.5)
    if name.startswith("complex"):
        values = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        return torch.from_numpy(values).to(TORCH_DTYPES[name])
    if name in ("float16", "bfloat16", "float32", "float64"):
        values = rng.random(shape) * 4 + 0.25 if positive else rng.standard_normal(shape) * 3
        return torch.from_numpy(values).to(TORCH_DTYPES[name])
    low, high = (1, 9) if positive else (-9, 10)
    if name == "uint8":
        low = max(low, 0)
    return torch.from_numpy(rng.integers(low, high, size=shape)).to(TORCH_DTYPES[name])


def to_vram(t) -> vram.Tensor:
    return vram.asarray(t.cuda().contiguous() if t.device.type == "cpu" else t)


def check(got: vram.Tensor, want, exact: bool) -> None:
    assert got.dtype.name == str(want.dtype).replace("torch.", ""), (got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape)
    g = (
        torch.utils.dlpack.from_dlpack(got.contiguous())
        if got.numel()
        else want.new_empty(want.shape)
    )
    if not got.numel():
        return
    if not (want.is_floating_point() or want.is_complex()):
        assert torch.equal(g, want), (g, want)
        return
    if exact:
        torch.testing.assert_close(g, want, rtol=0, atol=0, equal_nan=True)
        return
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(want.dtype, 2e-6)
    torch.testing.assert_close(g, want, rtol=tol, atol=tol, equal_nan=True)


UNARY = [name for name in _math.UNARY if name not in ("gelu", "gelu_tanh", "silu")]
TORCH_UNARY = {"gelu": None}


@pytest.mark.parametrize("name", UNARY)
def test_unary_ops_match_torch_for_every_dtype(name):
    op = _math.UNARY[name]
    fn = getattr(vram, name)
    tfn = getattr(torch, name)
    for kind in sorted(op.kinds):
        for dt in KINDS[kind]:
            x = random(dt, (33, 17), 1, positive=name in ("log", "log2", "log10", "sqrt", "rsqrt"))
            want = tfn(x.cuda())
            got = fn(to_vram(x))
            exact = name in (
                "neg",
                "abs",
                "floor",
                "ceil",
                "round",
                "trunc",
                "sign",
                "logical_not",
                "bitwise_not",
                "isnan",
                "isinf",
                "isfinite",
                "relu",
                "square",
                "frac",
            )
            check(got, want, exact)


BINARY = [
    "add",
    "sub",
    "mul",
    "div",
    "remainder",
    "fmod",
    "maximum",
    "minimum",
    "atan2",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "floor_divide",
    "pow",
    "hypot",
    "copysign",
    "logaddexp",
    "logaddexp2",
    "xlogy",
    "heaviside",
    "clamp_min",
    "clamp_max",
]
EXACT_BINARY = ("eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum", "copysign")
EXACT_BINARY += ("heaviside", "clamp_min", "clamp_max")


@pytest.mark.parametrize("name", BINARY)
def test_binary_ops_match_torch_for_every_dtype_and_layout(name):
    op = _math.BINARY[{"floor_divide": "div_floor"}.get(name, name)]
    for kind in sorted(op.kinds):
        for dt in KINDS[kind]:
            if name in ("remainder", "fmod", "floor_divide") and kind == 1:
                positive = True  # integer division by zero is undefined
            else:
                positive = name in ("pow", "div")
            a = random(dt, (16, 24), 2, positive=positive)
            b = random(dt, (16, 24), 3, positive=positive)
            if name == "pow" and kind == 1:
                b = b.clamp(0, 3)
            va, vb = to_vram(a), to_vram(b)
            ta, tb = a.cuda(), b.cuda()
            exact = (kind <= 1 and name != "xlogy") or name in EXACT_BINARY
            check(getattr(vram, name)(va, vb), getattr(torch, name)(ta, tb), exact)
            # transposed, broadcast row, strided slices
            check(getattr(vram, name)(va.t(), vb.t()), getattr(torch, name)(ta.t(), tb.t()), exact)
            check(getattr(vram, name)(va, vb[:1]), getattr(torch, name)(ta, tb[:1]), exact)
            check(
                getattr(vram, name)(va[:, ::3], vb[:, 1::3]),
                getattr(torch, name)(ta[:, ::3], tb[:, 1::3]),
                exact,
            )


@pytest.mark.parametrize(
    "dt", ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8", "bool"]
)
def test_numbers_standing_for_operands(dt):
    a = random(dt, (100,), 4, positive=True)
    va, ta = to_vram(a), a.cuda()
    number = True if dt == "bool" else 3
    check(va + number, ta + number, dt not in ("float16", "bfloat16"))
    check(va * 2.5, ta * 2.5, False)
    check(va < 2, ta < 2, True)
    if dt != "bool":
        check(7 - va, 7 - ta, dt not in ("float16", "bfloat16"))
        check(va**2, ta**2, False)


def test_in_place_and_out_forms():
    a, b = random("float32", (64, 64), 5), random("float32", (64,), 6)
    va, ta = to_vram(a), a.cuda()
    va += to_vram(b)
    ta += b.cuda()
    check(va, ta, True)
    h = to_vram(random("float16", (64, 64), 7))
    h += to_vram(random("float64", (64, 64), 8))  # computed in float64, rounded once
    out = vram.empty(64, 64, device=DEV)
    vram.mul(va, 2, out=out)
    check(out, ta * 2, True)


def test_ternary_ops():
    c = random("bool", (40, 30), 9)
    a, b = random("float32", (40, 30), 10), random("float32", (30,), 11)
    check(
        vram.where(to_vram(c), to_vram(a), to_vram(b)),
        torch.where(c.cuda(), a.cuda(), b.cuda()),
        True,
    )
    check(vram.where(to_vram(c), to_vram(a), 0.5), torch.where(c.cuda(), a.cuda(), 0.5), True)
    check(vram.clamp(to_vram(a), -0.5, 0.5), torch.clamp(a.cuda(), -0.5, 0.5), True)
    lo = random("float32", (40, 30), 12)
    check(vram.clamp(to_vram(a), min=to_vram(lo)), torch.clamp(a.cuda(), min=lo.cuda()), True)
    t1, t2 = random("float32", (40, 30), 13), random("float32", (40, 30), 14, positive=True)
    check(
        vram.addcmul(to_vram(a), to_vram(t1), to_vram(t2), value=0.5),
        torch.addcmul(a.cuda(), t1.cuda(), t2.cuda(), value=0.5),
        False,
    )
    check(
        vram.addcdiv(to_vram(a), to_vram(t1), to_vram(t2), value=0.5),
        torch.addcdiv(a.cuda(), t1.cuda(), t2.cuda(), value=0.5),
        False,
    )
    check(vram.lerp(to_vram(a), to_vram(t1), 0.3), torch.lerp(a.cuda(), t1.cuda(), 0.3), False)
    check(
        vram.lerp(to_vram(a), to_vram(t1), to_vram(t2)),
        torch.lerp(a.cuda(), t1.cuda(), t2.cuda()),
        False,
    )


def test_copy_between_every_pair_of_dtypes_and_zero_size():
    for src in TORCH_DTYPES:
        x = random(src, (7, 5), 15, positive=True)
        for dst in TORCH_DTYPES:
            if src.startswith("complex") and not dst.startswith("complex"):
                continue
            got = to_vram(x).to(getattr(vram, {"bool": "bool_"}.get(dst, dst)))
            check(got, x.cuda().to(TORCH_DTYPES[dst]), True)
    empty = vram.empty(0, 3, device=DEV)
    assert (empty + 1).shape == (0, 3)


def test_large_vectorized_and_unaligned():
    a = random("float32", (1 << 20,), 16)
    va, ta = to_vram(a), a.cuda()
    check(va[1:] + va[:-1], ta[1:] + ta[:-1], True)  # 4-byte aligned: the scalar loop
    check(vram.exp(va), torch.exp(ta), False)
    h = random("bfloat16", (1 << 20,), 17)
    check(to_vram(h) * 3, h.cuda() * 3, True)


def test_logit_isclose_allclose_equal_and_positive():
    for dt in ("float16", "bfloat16", "float32", "float64", "int32"):
        x = random(dt, (33, 17), 18, positive=True)
        if dt != "int32":
            x = x / 10
        for eps in (None, 0.05, 0.3):
            check(vram.logit(to_vram(x), eps), torch.logit(x.cuda(), eps), False)
    for dt in ("float16", "bfloat16", "float32", "float64", "int64", "uint8", "bool"):
        a = random(dt, (40, 30), 19)
        b = a.clone()
        if dt not in ("bool",):
            b[::3] += 1 if dt in ("int64", "uint8") else 1e-3
        if dt.startswith("float") or dt == "bfloat16":
            a[0, :3] = torch.tensor([float("nan"), float("inf"), float("nan")])
            b[0, :3] = torch.tensor([float("nan"), float("inf"), 1.0])
        for rtol, atol, equal_nan in ((1e-5, 1e-8, False), (1e-2, 1e-3, True), (0.0, 0.0, False)):
            va, vb, ta, tb = to_vram(a), to_vram(b), a.cuda(), b.cuda()
            check(
                vram.isclose(va, vb, rtol, atol, equal_nan),
                torch.isclose(ta, tb, rtol, atol, equal_nan),
                True,
            )
            check(
                vram.isclose(va[:, ::2], vb[0, ::2]),
                torch.isclose(ta[:, ::2], tb[0, ::2]),
                True,
            )
            assert vram.allclose(va, vb, rtol, atol, equal_nan) == torch.allclose(
                ta, tb, rtol, atol, equal_nan
            )
        assert vram.equal(to_vram(a), to_vram(b)) == torch.equal(a.cuda(), b.cuda())
        assert vram.equal(to_vram(a).t(), to_vram(a.t().contiguous())) == torch.equal(
            a.cuda().t(), a.t().contiguous().cuda()
        )
    x = to_vram(random("float32", (8,), 20))
    assert vram.positive(x) is x


def test_sgn_of_complex_and_edge_values():
    z = random("complex64", (64,), 21)
    z[:2] = 0
    check(vram.sgn(to_vram(z)), torch.sgn(z.cuda()), False)
    edges = torch.tensor(
        [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, float("inf"), float("-inf"), float("nan")]
    )
    for name in ("sgn", "frac", "sinc", "erfinv", "lgamma", "digamma", "square", "erfc", "atanh"):
        check(getattr(vram, name)(to_vram(edges)), getattr(torch, name)(edges.cuda()), False)
    a = torch.tensor([0.0, -0.0, 1.0, -1.0, float("nan"), float("inf"), float("-inf"), 2.0])
    b = torch.tensor([-0.0, 0.0, -1.0, float("nan"), 1.0, float("nan"), float("inf"), -3.0])
    for name in ("copysign", "hypot", "logaddexp", "logaddexp2", "xlogy", "heaviside"):
        got = getattr(vram, name)(to_vram(a), to_vram(b))
        want = getattr(torch, name)(a.cuda(), b.cuda())
        check(got, want, False)
        g = torch.utils.dlpack.from_dlpack(got)
        assert torch.equal(torch.signbit(g[want == 0]), torch.signbit(want[want == 0])), name
