"""scaled_dot_product_attention on the simulated GPU and the host, against NumPy under
PyTorch's rules: the composite for every float dtype, the fused kernel's reference against
the composite (the differential test of the fast path), masks, causal, scale, broadcast
batch dims, grouped-query attention, empty inputs and PyTorch's errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import vram
import vram.nn.functional as F
from vram.nn._attention import composite
from vram.ops import _attention

SIM = vram.device("sim:0")
CPU = vram.device("cpu")
BF16 = ml_dtypes.bfloat16
SDPA = F.scaled_dot_product_attention


def sample(shape: tuple[int, ...], dt=np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dt)


def on(array: np.ndarray, device=SIM) -> vram.Tensor:
    return vram.tensor(array, device=device)


def sdpa_np(q, k, v, mask=None, causal=False, scale=None, gqa=False) -> np.ndarray:
    """PyTorch's math path in float64."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    if gqa and q.shape[-3] != k.shape[-3]:
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
    if gqa and q.shape[-3] != v.shape[-3]:
        v = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q * scale) @ np.swapaxes(k, -1, -2)
    if causal:
        lq, s = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((lq, s), bool)), scores, -np.inf)
    if mask is not None:
        mask = np.asarray(mask)
        scores = scores + (np.where(mask, 0, -np.inf) if mask.dtype == np.bool_ else mask)
    top = scores.max(-1, keepdims=True)
    dead = top == -np.inf
    weights = np.exp(scores - np.where(dead, 0, top))
    weights /= np.where(dead, 1, weights.sum(-1, keepdims=True))
    return weights @ v


def close(got: vram.Tensor, want: np.ndarray, tol: float) -> None:
    values = got.numpy().astype(np.float64)
    assert values.shape == want.shape
    np.testing.assert_allclose(values, want, rtol=tol, atol=tol)


TOL = {np.float64: 1e-12, np.float32: 2e-5, np.float16: 4e-3, BF16: 3e-2}

# (query, key, value shapes, options, mask (shape, kind) or None)
CASES = {
    "4d": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), {}, None),
    "2d": ((4, 8), (6, 8), (6, 3), {}, None),
    "broadcast batch": ((2, 1, 3, 4, 8), (2, 2, 1, 5, 8), (1, 5, 6), {}, None),
    "key broadcast over heads": ((2, 3, 4, 8), (2, 1, 5, 8), (2, 1, 5, 8), {}, None),
    "causal L < S": ((1, 2, 3, 8), (1, 2, 6, 8), (1, 2, 6, 8), {"is_causal": True}, None),
    "causal L > S": ((1, 2, 6, 8), (1, 2, 3, 8), (1, 2, 3, 4), {"is_causal": True}, None),
    "bool mask": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8), {}, ((4, 5), "bool")),
    "bool mask per head": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8), {}, ((3, 1, 5), "bool")),
    "float mask": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8), {"scale": 0.3}, ((2, 1, 4, 1), "f")),
    "negative scale": ((2, 4, 8), (2, 5, 8), (2, 5, 8), {"scale": -0.5}, None),
    "gqa": ((2, 6, 4, 8), (2, 2, 5, 8), (2, 3, 5, 8), {"enable_gqa": True}, None),
    "masked rows": ((1, 2, 4, 8), (1, 2, 5, 8), (1, 2, 5, 8), {}, ((4, 5), "rows")),
}


def _mask(spec, dt, seed):
    if spec is None:
        return None
    shape, kind = spec
    rng = np.random.default_rng(seed)
    if kind == "bool":
        return rng.random(shape) > 0.3
    if kind == "rows":  # rows 0 and 2 take no key
        mask = rng.random(shape) > 0.3
        mask[0] = mask[2] = False
        return mask
    return rng.standard_normal(shape).astype(dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", CASES)
def test_composite_matches_numpy(dt, name):
    qs, ks, vs, options, spec = CASES[name]
    q, k, v = sample(qs, dt, 1), sample(ks, dt, 2), sample(vs, dt, 3)
    mask = _mask(spec, dt, 4)
    got = SDPA(on(q), on(k), on(v), None if mask is None else on(mask), **options)
    want = sdpa_np(
        q,
        k,
        v,
        mask,
        options.get("is_causal", False),
        options.get("scale"),
        options.get("enable_gqa", False),
    )
    assert got.numpy().dtype == dt
    close(got, want, TOL[dt])


def test_fully_masked_rows_give_zeros():
    """PyTorch's safe softmax: a row of no key is zeros, not NaN, on both paths."""
    mask = np.ones((4, 70), bool)
    mask[1] = False
    for dt, dim in ((np.float32, 8), (BF16, 64)):
        q, k, v = (
            sample((1, 2, 4, dim), dt),
            sample((1, 2, 70, dim), dt, 1),
            sample((1, 2, 70, dim), dt, 2),
        )
        got = SDPA(on(q), on(k), on(v), on(mask)).numpy().astype(np.float64)
        assert np.all(got[:, :, 1] == 0)
        np.testing.assert_allclose(got, sdpa_np(q, k, v, mask), rtol=3e-2, atol=3e-2)
    float_mask = np.zeros((4, 70), np.float32)
    float_mask[3] = -np.inf
    q, k, v = sample((2, 4, 8)), sample((2, 70, 8), seed=1), sample((2, 70, 8), seed=2)
    got = SDPA(on(q), on(k), on(v), on(float_mask)).numpy()
    assert np.all(got[:, 3] == 0) and np.all(np.isfinite(got))


# ---- low precision: the fused kernel's reference and the composite ------------------------


FUSED_CASES = {
    "plain": ((1, 2, 70, "D"), (1, 2, 90, "D"), {}, None),
    "causal": ((1, 2, 80, "D"), (1, 2, 80, "D"), {"is_causal": True}, None),
    "causal L > S": ((1, 2, 130, "D"), (1, 2, 40, "D"), {"is_causal": True}, None),
    "bool mask": ((2, 2, 33, "D"), (2, 2, 65, "D"), {}, ((2, 1, 33, 65), "bool")),
    "own-dtype mask": ((1, 3, 20, "D"), (1, 3, 64, "D"), {}, ((20, 64), "own")),
    "float32 mask": ((1, 3, 20, "D"), (1, 3, 64, "D"), {"scale": 0.2}, ((3, 1, 64), "f32")),
    "gqa": ((2, 4, 30, "D"), (2, 2, 50, "D"), {"enable_gqa": True}, None),
    "key broadcast": ((2, 3, 30, "D"), (1, 1, 50, "D"), {}, None),
    "3d": ((3, 40, "D"), (3, 50, "D"), {"is_causal": True}, None),
    "2d": ((40, "D"), (50, "D"), {}, None),
}


@pytest.mark.parametrize("dim", _attention.HEAD_DIMS)
@pytest.mark.parametrize("name", FUSED_CASES)
def test_fused_reference_matches_composite(dim, name, fused_calls):
    """The fused kernel (its reference on sim) against the composite and NumPy."""
    for dt in (BF16, np.float16):
        fused_calls.clear()
        _fused_matches_composite(dt, dim, *FUSED_CASES[name], fused_calls)


def _fused_matches_composite(dt, dim, qs, ks, options, spec, fused_calls) -> None:
    qs = tuple(dim if n == "D" else n for n in qs)
    ks = tuple(dim if n == "D" else n for n in ks)
    q, k, v = sample(qs, dt, 1), sample(ks, dt, 2), sample(ks, dt, 3)
    mask = None
    if spec is not None:
        shape, kind = spec
        mask = _mask((shape, "bool" if kind == "bool" else "f"), np.float32, 4)
        mask = mask.astype(dt) if kind == "own" else mask
    tensors = [on(a) for a in (q, k, v)]
    mask_t = None if mask is None else on(mask)
    got = SDPA(*tensors, mask_t, **options)
    assert len(fused_calls) == 1
    causal = options.get("is_causal", False)
    scale = options.get("scale", 1 / np.sqrt(dim))
    groups = qs[-3] // ks[-3] if options.get("enable_gqa") else 1
    reference = composite(*tensors, mask_t, causal, scale, groups, groups)
    step = 2**-7 if dt is BF16 else 2**-10  # one rounding step of the dtype
    np.testing.assert_allclose(
        got.numpy().astype(np.float64),
        reference.numpy().astype(np.float64),
        rtol=step,
        atol=step / 4,
    )
    want = sdpa_np(q, k, v, mask, causal, scale, options.get("enable_gqa", False))
    close(got, want, TOL[dt])


def test_fused_reads_heads_split_from_one_projection(fused_calls):
    """q, k and v as views of one [B, T, 3, H, D] projection: no copy in, and the output
    laid out [B, T, H, D] so that merging the heads back is a view."""
    b, t, h, d = 2, 50, 3, 64
    qkv = on(sample((b, t, 3, h, d), BF16)).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    out = SDPA(q, k, v, is_causal=True)
    assert len(fused_calls) == 1
    assert out.shape == (b, h, t, d) and out.stride() == (t * h * d, d, h * d, 1)
    merged = out.transpose(1, 2).reshape(b, t, h * d)
    assert merged.data_ptr() == out.data_ptr()
    close(out, sdpa_np(q.numpy(), k.numpy(), v.numpy(), causal=True), TOL[BF16])


def test_misaligned_pointers_take_the_composite(fused_calls):
    q, k, v = (
        sample((1, 2, 16, 64), BF16),
        sample((1, 2, 24, 64), BF16, 1),
        sample((1, 2, 24, 64), BF16, 2),
    )
    flat = on(np.concatenate([np.zeros(1, BF16), q.ravel()]))
    shifted = flat[1:].view(1, 2, 16, 64)  # 2 bytes past a 16-byte boundary
    got = SDPA(shifted, on(k), on(v))
    assert not fused_calls
    aligned = SDPA(on(q), on(k), on(v))
    assert len(fused_calls) == 1
    np.testing.assert_allclose(
        got.numpy().astype(np.float64), aligned.numpy().astype(np.float64), rtol=2**-7, atol=2**-9
    )


@pytest.mark.parametrize("dt", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_low_precision_composite_computes_in_float32(dt):
    """Head dim 8 takes the composite: widened to float32, rounded once at the end."""
    q, k, v = sample((2, 3, 5, 8), dt), sample((2, 3, 7, 8), dt, 1), sample((2, 3, 7, 8), dt, 2)
    got = SDPA(on(q), on(k), on(v), is_causal=True)
    assert got.dtype is on(q).dtype
    close(got, sdpa_np(q, k, v, causal=True), TOL[dt])


def test_scale_is_given_per_call(fused_calls):
    """One plan serves every scale (the kernel takes it as an argument)."""
    q, k, v = (on(sample((1, 1, 20, 64), BF16, seed)) for seed in range(3))
    for scale in (0.05, 0.5, None):
        close(
            SDPA(q, k, v, scale=scale),
            sdpa_np(q.numpy(), k.numpy(), v.numpy(), scale=scale),
            TOL[BF16],
        )
    assert len(fused_calls) == 3 and len({id(plan) for plan in fused_calls}) == 1


def test_plans_follow_the_flags_and_every_operand(fused_calls):
    """Calls interleaved over the flags (NumPy's bools as Python's) and the operands'
    layouts each take their own plan, twice over (the second time from the cache)."""
    q, k, v = (sample((1, 2, 20, 64), BF16, seed) for seed in range(3))
    kt = on(np.ascontiguousarray(k.transpose(0, 1, 3, 2))).transpose(-2, -1)  # other strides
    cases = [(True, on(k)), (False, on(k)), (np.True_, on(k)), (np.False_, kt), (True, kt)]
    firsts = []
    for round_ in range(2):
        for i, (causal, key) in enumerate(cases):
            got = SDPA(on(q), key, on(v), is_causal=causal)
            close(got, sdpa_np(q, k, v, causal=bool(causal)), TOL[BF16])
            if round_:
                assert np.array_equal(got.numpy(), firsts[i])
            else:
                firsts.append(got.numpy())
    assert np.array_equal(firsts[0], firsts[2])  # np.True_ is True
    assert len({id(plan) for plan in fused_calls}) == 2  # one per flag of aligned operands


def test_the_host_device_runs_both_paths():
    for dt, dim in ((np.float32, 16), (BF16, 64)):
        q, k, v = sample((2, 9, dim), dt), sample((2, 11, dim), dt, 1), sample((2, 11, dim), dt, 2)
        got = SDPA(on(q, CPU), on(k, CPU), on(v, CPU), is_causal=True)
        assert got.device == CPU
        close(got, sdpa_np(q, k, v, causal=True), TOL[dt])


def test_deferred_streams_run_the_work_when_synchronized():
    q, k, v = (on(sample((1, 2, 30, 64), BF16, seed)) for seed in range(3))
    with vram.sim.deferred():
        out = SDPA(q, k, v, is_causal=True)
    close(out, sdpa_np(q.numpy(), k.numpy(), v.numpy(), causal=True), TOL[BF16])


def test_empty_dims():
    q, k, v = sample((2, 3, 4, 8)), sample((2, 3, 5, 8), seed=1), sample((2, 3, 5, 6), seed=2)
    assert SDPA(on(q[:, :, :0]), on(k), on(v)).shape == (2, 3, 0, 6)
    no_keys = SDPA(on(q), on(k[:, :, :0]), on(v[:, :, :0]))
    assert no_keys.shape == (2, 3, 4, 6) and np.all(no_keys.numpy() == 0)
    no_features = SDPA(on(q[..., :0]), on(k[..., :0]), on(v)).numpy()
    means = np.broadcast_to(v.mean(-2, keepdims=True), (2, 3, 4, 6))
    np.testing.assert_allclose(no_features, means, rtol=1e-6)
    assert SDPA(on(q[:0]), on(k[:0]), on(v[:0])).shape == (0, 3, 4, 6)
    bf = sample((1, 1, 4, 64), BF16)
    assert np.all(SDPA(on(bf), on(bf[:, :, :0]), on(bf[:, :, :0])).numpy() == 0)


# ---- errors ----------------------------------------------------------------------------------


def _qkv(dt=np.float32, qs=(2, 3, 4, 8), ks=(2, 3, 5, 8), vs=(2, 3, 5, 6)):
    return on(sample(qs, dt)), on(sample(ks, dt, 1)), on(sample(vs, dt, 2))


ERRORS = {
    "query not a tensor": (lambda q, k, v: SDPA(1, k, v), TypeError,
                           "argument 'query' (position 1) must be Tensor, not int"),
    "mask not a tensor": (lambda q, k, v: SDPA(q, k, v, 3), TypeError,
                          "argument 'attn_mask' must be Tensor, not int"),
    "dtypes": (lambda q, k, v: SDPA(q, k.half(), v), RuntimeError,
               "query.dtype: float key.dtype: c10::Half and value.dtype: float instead."),
    "devices": (lambda q, k, v: SDPA(q, k.cpu(), v), RuntimeError,
                "same device type, but got query.device: sim:0 key.device: cpu"),
    "1-d": (lambda q, k, v: SDPA(q[0, 0, 0], k[0, 0], v[0, 0]), RuntimeError,
            "query.dim: 1 key.dim: 2 and value.dim: 2 instead."),
    "mask dtype": (lambda q, k, v: SDPA(q, k, v, on(np.ones((4, 5), np.int32))), RuntimeError,
                   "attn_mask.dtype: int and  query.dtype: float instead."),
    "mask and causal": (lambda q, k, v: SDPA(q, k, v, on(np.ones((4, 5), bool)), is_causal=True),
                        RuntimeError, "Explicit attn_mask should not be set when is_causal=True"),
    "integers": (lambda q, k, v: SDPA(q.long(), k.long(), v.long()), RuntimeError,
                 "expected scalar type Float but found Long"),
    "complex": (lambda q, k, v: SDPA(*(t.to(vram.complex64) for t in (q, k, v))),
                NotImplementedError, "not implemented for 'ComplexFloat'"),
    "key features": (lambda q, k, v: SDPA(q, k[..., :7], v), RuntimeError,
                     "'key' has 7 features in its last dimension, but 'query' has 8"),
    "value positions": (lambda q, k, v: SDPA(q, k, v[..., :4, :]), RuntimeError,
                        "'value' has 4 positions"),
    "batch": (lambda q, k, v: SDPA(q, on(sample((3, 3, 5, 8))), v), RuntimeError,
              "The size of tensor a (2) must match the size of tensor b (3) at non-singleton"),
    "mask size": (lambda q, k, v: SDPA(q, k, v, on(np.ones((3, 5), bool))), RuntimeError,
                  "The size of tensor a (4) must match the size of tensor b (3)"),
    "mask rank": (lambda q, k, v: SDPA(q, k, v, on(np.ones((7, 2, 3, 4, 5), bool))),
                  RuntimeError, "output with shape [2, 3, 4, 5] doesn't match the broadcast"),
    "gqa heads": (lambda q, k, v: SDPA(q, k[:, :2], v[:, :2], enable_gqa=True), RuntimeError,
                  "Number of heads in key and value must divide the number of heads in query"),
    "gqa 2-d": (lambda q, k, v: SDPA(q[0, 0], k[0, 0], v[0, 0], enable_gqa=True), IndexError,
                "expected to be in range of [-2, 1], but got -3"),
    "causal type": (lambda q, k, v: SDPA(q, k, v, is_causal=1), TypeError,
                    "argument 'is_causal' must be bool, not int"),
    "gqa type": (lambda q, k, v: SDPA(q, k, v, enable_gqa=None), TypeError,
                 "argument 'enable_gqa' must be bool, not NoneType"),
    "scale type": (lambda q, k, v: SDPA(q, k, v, scale="a"), TypeError,
                   "argument 'scale' must be float, not str"),
    "dropout type": (lambda q, k, v: SDPA(q, k, v, dropout_p="a"), TypeError,
                     "argument 'dropout_p' must be float, not str"),
    "dropout range": (lambda q, k, v: SDPA(q, k, v, dropout_p=2.0), RuntimeError,
                      "dropout probability has to be between 0 and 1, but got 2"),
    "dropout": (lambda q, k, v: SDPA(q, k, v, dropout_p=0.1), NotImplementedError,
                "dropout_p > 0 needs random numbers"),
}  # fmt: skip


def test_errors():
    q, k, v = _qkv()
    for name, (call, error, message) in ERRORS.items():
        with pytest.raises(error) as info:
            call(q, k, v)
        assert message in str(info.value), name


def test_bad_calls_leave_good_ones_working():
    """An error raised while a plan is built keeps nothing; the same call then works."""
    q, k, v = _qkv()
    with pytest.raises(RuntimeError):
        SDPA(q, k, v, on(np.ones((4, 5), bool)), is_causal=True)
    close(
        SDPA(q, k, v, is_causal=True),
        sdpa_np(q.numpy(), k.numpy(), v.numpy(), causal=True),
        TOL[np.float32],
    )
