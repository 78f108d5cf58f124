"""Adam and AdamW on sim: the fused, foreach and for-loop paths against a reference written
from PyTorch's documented algorithm (float64, rounding the state to the tensors' dtypes
after each step), state layout, gradient scaling, tensor lr, launches per step, errors."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import vram
from vram.optim import Adam, AdamW

IMPLS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}
SHAPES = [(7,), (33, 40), (3, 5)]
CONFIGS = {
    "plain": {},
    "amsgrad+wd": {"amsgrad": True, "weight_decay": 0.1},
    "maximize+wd": {"maximize": True, "weight_decay": 0.05},
    "adamw+amsgrad": {"decoupled_weight_decay": True, "weight_decay": 0.1, "amsgrad": True},
}


def reference_adam(
    params,
    grads_per_step,
    *,
    lr=1e-2,
    betas=(0.9, 0.999),
    eps=1e-8,
    weight_decay=0.0,
    amsgrad=False,
    maximize=False,
    decoupled_weight_decay=False,
    dtype=np.float64,
    state_dtype=None,
):
    """torch.optim.Adam's documented algorithm in float64; params and state are rounded to
    ``dtype`` (state: ``state_dtype``) after every step, as tensors of that dtype hold them."""
    state_dtype = dtype if state_dtype is None else state_dtype

    def keep(x, dt):
        return np.asarray(x).astype(dt).astype(np.float64)

    b1, b2 = betas
    ps = [keep(p, dtype) for p in params]
    ms = [np.zeros_like(p) for p in ps]
    vs = [np.zeros_like(p) for p in ps]
    vmax = [np.zeros_like(p) for p in ps]
    for t, grads in enumerate(grads_per_step, start=1):
        for i, g in enumerate(grads):
            g = -keep(g, dtype) if maximize else keep(g, dtype)
            if weight_decay:
                if decoupled_weight_decay:
                    ps[i] = ps[i] - lr * weight_decay * ps[i]
                else:
                    g = g + weight_decay * ps[i]
            ms[i] = b1 * ms[i] + (1 - b1) * g
            vs[i] = b2 * vs[i] + (1 - b2) * g * g
            m_hat = ms[i] / (1 - b1**t)
            if amsgrad:
                vmax[i] = np.maximum(vmax[i], vs[i])
                v_hat = vmax[i] / (1 - b2**t)
            else:
                v_hat = vs[i] / (1 - b2**t)
            ps[i] = keep(ps[i] - lr * m_hat / (np.sqrt(v_hat) + eps), dtype)
            ms[i], vs[i], vmax[i] = (
                keep(ms[i], state_dtype),
                keep(vs[i], state_dtype),
                keep(vmax[i], state_dtype),
            )
    return ps


def data(steps=8, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(steps)]
    return params, grads


def run(optimizer_class, params, grads, device="sim:0", **options):
    ps = [vram.tensor(p, device=device) for p in params]
    opt = optimizer_class(ps, **options)
    for step in grads:
        for p, g in zip(ps, step, strict=True):
            p.grad = vram.tensor(g, device=device)
        opt.step()
    return opt, ps


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("config", CONFIGS)
def test_float32_follows_the_documented_algorithm(impl, config):
    params, grads = data()
    options = dict(CONFIGS[config])
    wanted = reference_adam(params, grads, lr=1e-2, **options)
    _, ps = run(Adam, params, grads, lr=1e-2, **IMPLS[impl], **options)
    for p, w in zip(ps, wanted, strict=True):
        np.testing.assert_allclose(p.numpy(), w, rtol=2e-6, atol=2e-6)


def test_the_three_paths_agree_to_float32_rounding():
    params, grads = data(steps=20)
    results = {
        impl: run(Adam, params, grads, lr=1e-3, amsgrad=True, **opts)[1]
        for impl, opts in IMPLS.items()
    }
    for impl in ("foreach", "for-loop"):
        for a, b in zip(results["fused"], results[impl], strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64], ids=str)
def test_fused_low_and_double_precision(dtype):
    params, grads = data(dtype=dtype)
    _, ps = run(AdamW, params, grads, lr=1e-2, weight_decay=0.1, fused=True)
    wanted = reference_adam(
        params, grads, lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True, dtype=dtype
    )
    tolerance = {np.float16: 2e-3, ml_dtypes.bfloat16: 2e-2, np.float64: 1e-12}[dtype]
    for p, w in zip(ps, wanted, strict=True):
        assert p.dtype.np == np.dtype(dtype)
        np.testing.assert_allclose(p.numpy().astype(np.float64), w, rtol=tolerance, atol=tolerance)


def test_float32_moments_for_bfloat16_parameters():
    params, grads = data(dtype=ml_dtypes.bfloat16)
    opt, ps = run(Adam, params, grads, lr=1e-2, fused=True, state_dtype=vram.float32)
    state = opt.state[ps[0]]
    assert state["exp_avg"].dtype == vram.float32 and ps[0].dtype == vram.bfloat16
    wanted = reference_adam(
        params, grads, lr=1e-2, dtype=ml_dtypes.bfloat16, state_dtype=np.float32
    )
    for p, w in zip(ps, wanted, strict=True):
        np.testing.assert_allclose(p.numpy().astype(np.float64), w, rtol=2e-2, atol=2e-2)
    with pytest.raises(ValueError, match="only float32 moments .* with fused=True"):
        run(Adam, params, grads[:1], foreach=True, state_dtype=vram.float32)


@pytest.mark.parametrize("impl", ["fused", "foreach"])
def test_the_state_has_pytorchs_layout(impl):
    params, grads = data(steps=3)
    opt, ps = run(Adam, params, grads, amsgrad=True, **IMPLS[impl])
    state = opt.state[ps[1]]
    assert sorted(state) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
    step = state["step"]
    assert step.shape == () and step.dtype == vram.float32 and step.item() == 3.0
    assert str(step.device) == ("sim:0" if impl == "fused" else "cpu")
    assert state["exp_avg"].shape == (33, 40) and state["exp_avg"].device == ps[1].device
    group = opt.state_dict()["param_groups"][0]
    assert group["params"] == [0, 1, 2] and group["betas"] == (0.9, 0.999)
    assert (
        group["foreach"] == IMPLS[impl].get("foreach") and group["decoupled_weight_decay"] is False
    )


def test_a_parameter_without_gradient_is_skipped(sim0):
    a, b = vram.ones(3, device=sim0), vram.ones(3, device=sim0)
    opt = Adam([a, b], lr=0.1, fused=True)
    a.grad = vram.ones(3, device=sim0)
    opt.step()
    assert b not in opt.state and b.tolist() == [1.0] * 3
    assert a.tolist() == pytest.approx([0.9] * 3, rel=1e-6)  # the first step moves by lr


def test_grad_scale_unscales_and_found_inf_skips_the_step(sim0):
    params, grads = data(steps=2)
    wanted = reference_adam(params, grads[:1], lr=1e-2)
    ps = [vram.tensor(p, device=sim0) for p in params]
    opt = Adam(ps, lr=1e-2, fused=True)
    opt.grad_scale = vram.tensor([4.0], device=sim0)
    for p, g in zip(ps, grads[0], strict=True):
        p.grad = vram.tensor(g * 4, device=sim0)
    opt.step()
    np.testing.assert_allclose(ps[0].numpy(), wanted[0], rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(ps[0].grad.numpy(), grads[0][0])  # written back unscaled
    opt.found_inf = vram.tensor([1.0], device=sim0)
    before = [p.numpy() for p in ps]
    opt.step()
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(ps, before, strict=True))
    assert opt.state[ps[0]]["step"].item() == 1.0  # PyTorch's step += 1, then -= found_inf
    plain = Adam(ps, foreach=True)
    plain.grad_scale = opt.grad_scale
    with pytest.raises(RuntimeError, match="only supported with fused=True"):
        plain.step()


@pytest.mark.parametrize("impl", ["fused", "capturable foreach"])
def test_a_device_tensor_lr_is_read_by_the_kernels(sim0, impl):
    params, grads = data(steps=4)
    lr = vram.tensor(1e-2, device=sim0)
    options = {"fused": True} if impl == "fused" else {"foreach": True, "capturable": True}
    ps = [vram.tensor(p, device=sim0) for p in params]
    opt = Adam(ps, lr=lr, **options)
    for k, step in enumerate(grads):
        if k == 2:
            lr.fill_(1e-3)  # a scheduler changing the tensor in place
        for p, g in zip(ps, step, strict=True):
            p.grad = vram.tensor(g, device=sim0)
        opt.step()
    first = reference_adam(params, grads[:2], lr=1e-2)
    assert not np.allclose(ps[0].numpy(), first[0])
    assert str(opt.state[ps[0]]["step"].device) == "sim:0"


def test_fused_steps_take_two_launches_for_two_hundred_tensors(sim0, monkeypatch):
    ps = [vram.zeros(100 + i, device=sim0) for i in range(200)]
    for p in ps:
        p.grad = vram.ones(p.shape, device=sim0)
    opt = Adam(ps, fused=True)
    opt.step()  # the first step also makes the state
    counted = []
    sim = vram.sim.driver()
    original = sim.enqueue
    monkeypatch.setattr(
        sim, "enqueue", lambda s, fn, touches=(): (counted.append(s), original(s, fn, touches))
    )
    opt.step()
    assert len(counted) == 2  # steps += 1, then the update
    cached = dict(opt._fused_plans._groups)
    opt.step()
    assert dict(opt._fused_plans._groups) == cached  # the same plan, no rebuild
    ps[3].grad = vram.ones(ps[3].shape, device=sim0)  # a new gradient: a new plan
    opt.step()
    assert dict(opt._fused_plans._groups) != cached
    assert opt.state[ps[3]]["step"].item() == 4.0


def test_fused_groups_span_devices(sim0):
    a = vram.ones(4, device=sim0)
    b = vram.ones(4, device="sim:1")
    opt = Adam([a, b], lr=0.5, fused=True)
    a.grad = vram.ones(4, device=sim0)
    b.grad = vram.ones(4, device="sim:1")
    opt.step()
    assert a.tolist() == b.tolist() == pytest.approx([0.5] * 4)
    assert str(opt.state[b]["step"].device) == "sim:1"


def test_bad_input_raises_as_torch_optim(sim0):
    p = vram.zeros(3, device=sim0)
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        Adam([p], lr=-1)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: 1.0"):
        Adam([p], betas=(0.9, 1.0))
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together."):
        Adam([p], fused=True, foreach=True)
    with pytest.raises(ValueError, match="lr as a Tensor is not supported for capturable=False"):
        Adam([p], lr=vram.tensor(0.1), foreach=True)
    with pytest.raises(ValueError, match="differentiable=True needs autograd"):
        Adam([p], differentiable=True)
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        Adam([])
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        Adam(p)
    bad = {
        "different size": vram.zeros(4, device=sim0),
        "different type": vram.zeros(3, dtype=vram.float64, device=sim0),
        "different device": vram.zeros(3, device="sim:1"),
    }
    for message, grad in bad.items():
        p.grad = grad
        with pytest.raises(
            RuntimeError, match=f"parameter 0 of group 0: assigned grad has data .*{message}"
        ):
            Adam([p], fused=True).step()
    ints = vram.zeros(3, dtype=vram.int32, device=sim0)
    ints.grad = vram.zeros(3, dtype=vram.int32, device=sim0)
    with pytest.raises(
        RuntimeError, match="`fused=True` requires all the params to be floating point"
    ):
        Adam([ints], fused=True).step()


def test_bias_correction_uses_the_step_count():
    params, grads = data(steps=1)
    _, ps = run(Adam, params, grads, lr=0.1, fused=True)
    # the first Adam step moves every element by lr (times sign), whatever the gradient's size
    moved = (params[0] - ps[0].numpy()) / np.sign(grads[0][0])
    np.testing.assert_allclose(moved, 0.1, rtol=1e-5)
    assert math.isclose(float(moved.mean()), 0.1, rel_tol=1e-5)
