"""mm, matmul, bmm, addmm, baddbmm and linear on the simulated GPU, against NumPy in fp64.

The sim computes in fp32 (fp64 for fp64) from the exact inputs and rounds once to the
output dtype, as cuBLAS with CUBLAS_COMPUTE_32F; the bounds are relative to the largest
magnitude of the exact result.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import vram

DTYPES = [vram.float16, vram.bfloat16, vram.float32, vram.float64]
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-13}
SHAPES = {  # (M, K, N)
    "square": (16, 16, 16),
    "tall": (37, 8, 5),
    "wide": (3, 11, 29),
    "vector-like": (1, 9, 1),
}


def rand(shape, dt, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dt.np)


def exact(x):
    return np.asarray(x).astype(np.float64)


def check(got, want, dt):
    got = vram.Tensor.numpy(got) if isinstance(got, vram.Tensor) else got
    assert got.dtype == dt.np
    want = np.asarray(want, dtype=np.float64)
    scale = max(np.max(np.abs(want), initial=0.0), 1e-30)
    err = np.max(np.abs(got.astype(np.float64) - want), initial=0.0)
    assert err <= RTOL[dt.name] * scale, f"error {err:.3g} > {RTOL[dt.name]:.1g} * {scale:.3g}"


def on(device, array):
    return vram.tensor(array, device=device)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", list(SHAPES), ids=str)
def test_mm_matches_numpy(sim0, dt, shape):
    m, k, n = SHAPES[shape]
    a, b = rand((m, k), dt, 1), rand((k, n), dt, 2)
    check(vram.mm(on(sim0, a), on(sim0, b)), exact(a) @ exact(b), dt)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_transposed_and_strided_operands(sim0, dt):
    x, y = rand((9, 6), dt, 3), rand((7, 9), dt, 4)
    xt, yt = on(sim0, x).t(), on(sim0, y).t()  # [6, 9] and [9, 7], transposed views
    check(xt @ yt, exact(x).T @ exact(y).T, dt)
    wide = rand((6, 20), dt, 5)
    sliced = on(sim0, wide)[:, 1:19:2]  # [6, 9], strided in both dimensions
    check(sliced @ yt, exact(wide)[:, 1:19:2] @ exact(y).T, dt)
    row = rand((1, 9), dt, 6)
    expanded = on(sim0, row).expand(6, 9)  # every row the same memory
    check(expanded @ yt, exact(np.broadcast_to(row, (6, 9))) @ exact(y).T, dt)


def test_out_may_be_any_layout(sim0):
    dt = vram.float32
    a, b = rand((4, 5), dt, 7), rand((5, 3), dt, 8)
    col_major = vram.empty((3, 4), device=sim0).t()
    assert vram.mm(on(sim0, a), on(sim0, b), out=col_major) is col_major
    check(col_major, exact(a) @ exact(b), dt)
    big = vram.zeros((8, 6), device=sim0)
    strided = big[::2, ::2]
    vram.mm(on(sim0, a), on(sim0, b), out=strided)
    check(strided, exact(a) @ exact(b), dt)
    assert np.all(big.numpy()[1::2] == 0) and np.all(big.numpy()[:, 1::2] == 0)


def test_zero_size_dimensions(sim0):
    dt = vram.float32
    empty_k = vram.mm(vram.empty((3, 0), device=sim0), vram.empty((0, 4), device=sim0))
    assert empty_k.shape == (3, 4) and np.all(empty_k.numpy() == 0)
    assert vram.mm(vram.empty((0, 5), device=sim0), vram.ones((5, 4), device=sim0)).shape == (0, 4)
    assert vram.mm(vram.ones((3, 5), device=sim0), vram.empty((5, 0), device=sim0)).shape == (3, 0)
    bias = on(sim0, rand((4,), dt, 9))
    got = vram.addmm(bias, vram.empty((3, 0), device=sim0), vram.empty((0, 4), device=sim0), beta=2)
    check(got, np.broadcast_to(2 * exact(bias.numpy()), (3, 4)), dt)
    batched = vram.bmm(vram.empty((2, 3, 0), device=sim0), vram.empty((2, 0, 4), device=sim0))
    assert batched.shape == (2, 3, 4) and np.all(batched.numpy() == 0)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_addmm_with_epilogues(sim0, dt):
    a, b, bias = rand((6, 5), dt, 10), rand((5, 7), dt, 11), rand((7,), dt, 12)
    ref = 0.5 * exact(bias) + 2.0 * (exact(a) @ exact(b))
    args = (on(sim0, bias), on(sim0, a), on(sim0, b))
    check(vram.addmm(*args, beta=0.5, alpha=2.0), ref, dt)
    check(vram.addmm(*args, beta=0.5, alpha=2.0, activation="relu"), np.maximum(ref, 0), dt)
    gelu = 0.5 * ref * (1 + np.tanh(np.sqrt(2 / np.pi) * (ref + 0.044715 * ref**3)))
    check(vram.addmm(*args, beta=0.5, alpha=2.0, activation="gelu"), gelu, dt)


RESIDUALS = {  # name -> (input's shape, bias's shape, transposed input): fused or not
    "residual and row": ((6, 7), (7,), False),  # one library call
    "residual and a [1, N] row": ((6, 7), (1, 7), False),
    "transposed residual": ((6, 7), (7,), True),  # not out's layout: the product, then the row
    "row input, column bias": ((7,), (6, 1), False),
    "broadcast input row": ((1, 7), (7,), False),
}


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("form", list(RESIDUALS))
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("beta", [1, 0.5, 0])
def test_addmm_bias_adds_a_row_to_the_product_and_input(sim0, dt, form, activation, beta):
    """``addmm(x, a, b, bias=r)`` is ``act(beta * x + a @ b + r)`` in every form: the
    residual and row of one library call, and the rest (the product, then the row); the
    remembered plan's calls equal the checked one's."""
    in_shape, bias_shape, transposed = RESIDUALS[form]
    x = rand(in_shape[::-1] if transposed else in_shape, dt, 30)  # (stored [N, M], read .t())
    a, b, r = rand((6, 5), dt, 31), rand((5, 7), dt, 32), rand(bias_shape, dt, 33)
    x_dev = on(sim0, x).t() if transposed else on(sim0, x)
    x_exact = exact(x).T if transposed else exact(x)
    want = beta * x_exact + 1.5 * (exact(a) @ exact(b)) + exact(r)
    if activation == "relu":
        want = np.maximum(want, 0)
    elif activation == "gelu":
        want = 0.5 * want * (1 + np.tanh(np.sqrt(2 / np.pi) * (want + 0.044715 * want**3)))
    args = (x_dev, on(sim0, a), on(sim0, b))
    calls = [
        vram.addmm(*args, beta=beta, alpha=1.5, activation=activation, bias=on(sim0, r))
        for _ in range(3)
    ]
    for got in calls:
        assert got.shape == (6, 7) and got.stride() == (7, 1)
        check(got, want, dt)
        np.testing.assert_array_equal(got.numpy(), calls[0].numpy())


def test_addmm_bias_with_out_k_zero_and_bad_arguments(sim0):
    dt = vram.float32
    x, r = on(sim0, rand((3, 2), dt, 40)), on(sim0, rand((2,), dt, 41))
    a, b = on(sim0, rand((3, 4), dt, 42)), on(sim0, rand((4, 2), dt, 43))
    out = vram.empty((3, 2), device=sim0)
    assert vram.addmm(x, a, b, bias=r, out=out) is out
    check(out, exact(x.numpy()) + exact(a.numpy()) @ exact(b.numpy()) + exact(r.numpy()), dt)
    in_place = x.clone()  # out is input: read before it is written
    vram.addmm(in_place, a, b, beta=2, bias=r, out=in_place)
    check(in_place, 2 * exact(x.numpy()) + exact(a.numpy()) @ exact(b.numpy()) + r.numpy(), dt)
    empty_k = vram.addmm(x, vram.empty((3, 0), device=sim0), vram.empty((0, 2), device=sim0),
                         bias=r, activation="relu")  # fmt: skip
    check(empty_k, np.maximum(exact(x.numpy()) + exact(r.numpy()), 0), dt)
    with pytest.raises(RuntimeError, match=r"addmm: 'bias' of shape \(3,\) cannot be broadcast"):
        vram.addmm(x, a, b, bias=vram.ones(3, device=sim0))
    with pytest.raises(TypeError, match="addmm: argument 'bias'"):
        vram.addmm(x, a, b, bias=[1.0, 2.0])
    with pytest.raises(RuntimeError, match="bias"):
        vram.addmm(x, a, b, bias=vram.ones(2, dtype=vram.float16, device=sim0))


def test_addmm_beta_zero_ignores_nan_in_input(sim0):
    a, b = rand((3, 4), vram.float32, 13), rand((4, 2), vram.float32, 14)
    bias = vram.full((3, 2), float("nan"), device=sim0)
    got = vram.addmm(bias, on(sim0, a), on(sim0, b), beta=0)
    check(got, exact(a) @ exact(b), vram.float32)


def test_addmm_in_place_and_full_bias(sim0):
    dt = vram.float32
    a, b, c = rand((3, 4), dt, 15), rand((4, 2), dt, 16), rand((3, 2), dt, 17)
    out = on(sim0, c)
    assert vram.addmm(out, on(sim0, a), on(sim0, b), beta=3.0, out=out) is out
    check(out, 3 * exact(c) + exact(a) @ exact(b), dt)


def test_bmm_and_baddbmm(sim0):
    dt = vram.float32
    x, y, c = rand((3, 4, 5), dt, 18), rand((3, 5, 2), dt, 19), rand((4, 1), dt, 20)
    check(vram.bmm(on(sim0, x), on(sim0, y)), exact(x) @ exact(y), dt)
    got = vram.baddbmm(on(sim0, c), on(sim0, x), on(sim0, y), beta=0.25, alpha=-1.0)
    check(got, 0.25 * exact(c) - exact(x) @ exact(y), dt)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ((5,), (5,)),
        ((5,), (5, 3)),
        ((4, 5), (5,)),
        ((2, 4, 5), (5, 3)),
        ((2, 4, 5), (5,)),
        ((5,), (2, 5, 3)),
        ((2, 1, 4, 5), (3, 5, 6)),
        ((1, 4, 5), (3, 5, 6)),
    ],
    ids=str,
)
def test_matmul_broadcasts_like_numpy(sim0, left, right):
    dt = vram.float32
    a, b = rand(left, dt, 21), rand(right, dt, 22)
    want = np.matmul(exact(a), exact(b))
    got = vram.matmul(on(sim0, a), on(sim0, b))
    assert got.shape == want.shape
    check(got, want, dt)


def test_linear(sim0):
    dt = vram.float32
    x, w, bias = rand((2, 3, 5), dt, 23), rand((4, 5), dt, 24), rand((4,), dt, 25)
    got = vram.nn.functional.linear(on(sim0, x), on(sim0, w), on(sim0, bias))
    assert got.shape == (2, 3, 4)
    check(got, exact(x) @ exact(w).T + exact(bias), dt)
    check(
        vram.nn.functional.linear(on(sim0, x[0, 0]), on(sim0, w)), exact(x[0, 0]) @ exact(w).T, dt
    )


def test_tensor_methods(sim0):
    dt = vram.float32
    a, b = on(sim0, rand((3, 4), dt, 26)), on(sim0, rand((4, 2), dt, 27))
    want = exact(a.numpy()) @ exact(b.numpy())
    for got in (a @ b, a.matmul(b), a.mm(b)):
        check(got, want, dt)


def test_bf16_accumulates_in_fp32_and_rounds_once(sim0):
    # 1 + 2**-8 + 2**-8: in fp32 it is 1 + 2**-7, a bf16 value; summed in bf16 each
    # 1 + 2**-8 is a tie that rounds to even (1.0), and the result would be 1.0
    a = np.array([[1.0, 2.0**-8, 2.0**-8]], dtype=ml_dtypes.bfloat16)
    b = np.ones((3, 1), dtype=ml_dtypes.bfloat16)
    got = vram.mm(on(sim0, a), on(sim0, b)).numpy()
    assert got.dtype == vram.bfloat16.np and float(got[0, 0]) == 1 + 2.0**-7


def test_work_is_queued_on_the_current_stream(sim0):
    a, b = vram.ones((2, 3), device=sim0), vram.ones((3, 2), device=sim0)
    side = vram.Stream(sim0)
    with vram.sim.deferred():
        with vram.stream(side):
            c = a @ b
        assert vram.sim.pending(side) == 1
    assert np.all(c.numpy() == 3)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_mm_cached_plans_equal_the_general_gemm(sim0, dt):
    """Note [mm's plans]: a repeated problem (looked up by signature ids, its result made as
    the pointwise ops make theirs) gives what the checked path and ``gemm`` itself give:
    the same values, layout and signature id, into a new tensor or ``out``."""
    from vram.blas import _functions, _ops
    from vram.ops._pointwise import signature_id

    _functions.clear_plans()
    a = on(sim0, rand((6, 5), dt, 1))
    b = on(sim0, rand((7, 5), dt, 2)).t()  # a transposed operand
    general = vram.Tensor._empty((6, 7), dt, sim0)
    _ops.gemm(general, a, b, None, 0.0, 1.0, 0)
    checked = vram.mm(a, b)
    assert len(_functions._plans.mm) == 1
    cached = [vram.mm(a, b) for _ in range(2)]
    out = vram.empty((6, 7), dtype=dt, device=sim0)
    vram.mm(a, b, out=out)  # checked, then cached
    vram.mm(a, b, out=out)
    assert len(_functions._plans.mm) == 2
    assert [t._sig for t in cached] == [signature_id(general)] * 2  # named by the plan
    for got in (checked, *cached, out):
        assert (got.dtype, got.shape, got.stride(), got.device) == (dt, (6, 7), (7, 1), sim0)
        assert signature_id(got) == signature_id(general)
        np.testing.assert_array_equal(got.numpy(), general.numpy())
    assert cached[0].data_ptr() != cached[1].data_ptr()
