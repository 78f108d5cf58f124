"""PyTorch's _foreach_* ops on sim and cpu: results against NumPy written from PyTorch's
definitions (opmath float32 for float16/bfloat16, one rounding), in place and not, scalar
lists, broadcast one-element tensors, mixed devices and dtypes, strided tensors, errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import vram

FLOATS = [vram.float16, vram.bfloat16, vram.float32, vram.float64]
SHAPES = [(3,), (40, 33), (), (1000,)]


def opmath(dt):
    return np.float64 if dt == vram.float64 else np.float32


def arrays(dt, seed=0, positive=False):
    rng = np.random.default_rng(seed)
    out = []
    for shape in SHAPES:
        x = np.asarray(rng.standard_normal(shape))
        out.append(np.asarray(np.abs(x) + 0.5 if positive else x).astype(dt.np))
    return out


def tensors(values, device):
    return [vram.tensor(v, device=device) for v in values]


def rounded(x, dt):
    return np.asarray(x, dtype=opmath(dt)).astype(dt.np)


def check(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype.np == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.numpy(), w)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_binary_ops_with_lists_scalars_and_scalar_lists(sim0, dt):
    a, b = arrays(dt, 1), arrays(dt, 2, positive=True)
    m = opmath(dt)
    x, y = tensors(a, sim0), tensors(b, sim0)
    check(
        vram._foreach_add(x, y, alpha=0.5),
        [rounded(p.astype(m) + m(0.5) * q.astype(m), dt) for p, q in zip(a, b, strict=True)],
    )
    check(vram._foreach_sub(x, 2.0), [rounded(p.astype(m) - m(2), dt) for p in a])
    check(
        vram._foreach_mul(x, [1.0, 2.0, 3.0, 4.0]),
        [rounded(p.astype(m) * m(k), dt) for p, k in zip(a, [1, 2, 3, 4], strict=True)],
    )
    check(
        vram._foreach_div(x, y),
        [rounded(p.astype(m) / q.astype(m), dt) for p, q in zip(a, b, strict=True)],
    )
    check(vram._foreach_maximum(x, y), [np.maximum(p, q) for p, q in zip(a, b, strict=True)])
    vram._foreach_mul_(x, 3.0)
    check(x, [rounded(p.astype(m) * m(3), dt) for p in a])


@pytest.mark.parametrize("dt", [vram.bfloat16, vram.float32], ids=lambda d: d.name)
def test_pointwise_lerp_and_unary_ops(sim0, dt):
    a, b, c = arrays(dt, 1), arrays(dt, 2), arrays(dt, 3, positive=True)
    m = opmath(dt)
    x, y, z = tensors(a, sim0), tensors(b, sim0), tensors(c, sim0)
    want = [
        rounded(p.astype(m) + m(0.25) * q.astype(m) * r.astype(m), dt)
        for p, q, r in zip(a, b, c, strict=True)
    ]
    check(vram._foreach_addcmul(x, y, z, 0.25), want)
    values = [0.5, -1.0, 2.0, 3.0]
    want = [
        rounded(p.astype(m) + m(v) * q.astype(m) / r.astype(m), dt)
        for p, q, r, v in zip(a, b, c, values, strict=True)
    ]
    check(vram._foreach_addcdiv(x, y, z, values), want)
    for w in (0.1, 0.9):  # both sides of PyTorch's lerp formula
        want = []
        for p, q in zip(a, b, strict=True):
            p32, q32, wm = p.astype(m), q.astype(m), m(w)
            want.append(
                rounded(p32 + wm * (q32 - p32) if w < 0.5 else q32 - (q32 - p32) * (m(1) - wm), dt)
            )
        check(vram._foreach_lerp(x, y, w), want)
    check(vram._foreach_sqrt(z), [rounded(np.sqrt(r.astype(m)), dt) for r in c])
    check(vram._foreach_reciprocal(z), [rounded(m(1) / r.astype(m), dt) for r in c])
    check(vram._foreach_neg(x), [-p for p in a])
    check(vram._foreach_pow(z, 2.0), [rounded(np.power(r.astype(m), m(2)), dt) for r in c])
    check(vram._foreach_pow(0.9, z), [rounded(np.power(m(0.9), r.astype(m)), dt) for r in c])
    vram._foreach_zero_(x)
    check(x, [np.zeros_like(p) for p in a])


def test_in_place_ops_return_none_and_out_of_place_ones_share_one_allocation(sim0):
    x = tensors(arrays(vram.float32), sim0)
    before = vram.memory_allocated(sim0)
    out = vram._foreach_sqrt(vram._foreach_mul(x, x))
    assert vram._foreach_add_(x, 1.0) is None
    assert len({id(t._storage) for t in out}) == 1
    assert all(t.data_ptr() % 64 == 0 for t in out)
    del out
    assert vram.memory_allocated(sim0) == before


def test_a_one_element_tensor_broadcasts(sim0):
    a = arrays(vram.float32)
    x = tensors(a, sim0)
    lr = vram.tensor(0.5, device=sim0)
    check(vram._foreach_div(x, lr), [p / np.float32(0.5) for p in a])
    steps = [vram.tensor(2.0 + i, device=sim0) for i in range(4)]
    check(vram._foreach_mul(x, steps), [p * np.float32(2 + i) for i, p in enumerate(a)])
    vram._foreach_add_(x, lr, alpha=2)
    check(x, [p + np.float32(1) for p in a])


def test_mixed_devices_dtypes_and_strided_tensors(sim0):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    strided = vram.tensor(a, device=sim0).t()  # not contiguous: goes through a copy
    items = [
        vram.tensor(np.ones(5, np.float16), device=sim0),
        vram.tensor(np.ones(3, np.float32), device="sim:1"),
        strided,
        vram.tensor(np.ones(2, np.float32), device="cpu"),
    ]
    vram._foreach_mul_(items, 2.0)
    np.testing.assert_array_equal(items[0].numpy(), np.full(5, 2, np.float16))
    np.testing.assert_array_equal(items[1].numpy(), np.full(3, 2, np.float32))
    np.testing.assert_array_equal(strided.numpy(), (a * 2).T)
    np.testing.assert_array_equal(items[3].numpy(), np.full(2, 2, np.float32))
    sums = vram._foreach_add(items, items)
    assert [t.device for t in sums] == [t.device for t in items]
    np.testing.assert_array_equal(sums[2].numpy(), (a * 4).T)


def test_copy_casts_where_the_dtypes_differ(sim0):
    dst = [vram.zeros(3, device=sim0), vram.zeros(2, dtype=vram.float16, device=sim0)]
    src = [vram.tensor([1.0, 2.0, 3.0], device=sim0), vram.tensor([1.5, 2.5], device=sim0)]
    vram._foreach_copy_(dst, src)
    assert dst[0].tolist() == [1.0, 2.0, 3.0]
    assert dst[1].dtype == vram.float16 and dst[1].tolist() == [1.5, 2.5]


def test_bfloat16_rounds_once_from_float32(sim0):
    value = np.array([1.0], dtype=ml_dtypes.bfloat16)
    x = [vram.tensor(value, device=sim0)]
    vram._foreach_add_(x, 2.0**-9)  # 1 + 2**-9 rounds to 1 (ties to even)
    assert x[0].numpy()[0] == 1.0
    vram._foreach_add_(x, 2.0**-8 + 2.0**-10)
    assert x[0].numpy()[0] == ml_dtypes.bfloat16(1.0078125)


def test_errors_name_the_op_argument_and_index(sim0):
    x = [vram.zeros(3, device=sim0), vram.zeros(2, device=sim0)]
    with pytest.raises(RuntimeError, match="same number of tensors, got 2 and 1"):
        vram._foreach_add(x, [vram.zeros(3, device=sim0)])
    with pytest.raises(RuntimeError, match=r"'other'\[1\] has dtype vram.float64"):
        vram._foreach_add(x, [x[0], vram.zeros(2, dtype=vram.float64, device=sim0)])
    with pytest.raises(RuntimeError, match=r"size of 'other'\[1\] \(4,\) must match"):
        vram._foreach_mul_(x, [x[0], vram.zeros(4, device=sim0)])
    with pytest.raises(RuntimeError, match=r"'other'\[0\] is on sim:1"):
        vram._foreach_mul_(x, [vram.zeros(3, device="sim:1"), x[1]])
    with pytest.raises(RuntimeError, match=r"self\[0\] has dtype vram.int32"):
        vram._foreach_neg([vram.zeros(3, dtype=vram.int32, device=sim0)])
    with pytest.raises(RuntimeError, match="has 1 scalars for 2 tensors"):
        vram._foreach_addcdiv_(x, x, x, [1.0])
    with pytest.raises(TypeError, match="'self' must be a list of tensors, got vram.Tensor"):
        vram._foreach_sqrt(x[0])
    assert vram._foreach_add([], 1.0) == [] and vram._foreach_add_([], 1.0) is None
