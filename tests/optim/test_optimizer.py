"""The Optimizer base: parameter groups, zero_grad, state_dict / load_state_dict in PyTorch's
layout (vram to vram, NumPy in, and PyTorch's own when it is installed)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import vram
from vram.optim import SGD, Adam, AdamW


def params(device, n=3):
    return [vram.tensor(np.arange(4, dtype=np.float32) + i, device=device) for i in range(n)]


def set_grads(ps, value=1.0):
    for p in ps:
        p.grad = vram.full(p.shape, value, device=p.device)


def test_groups_take_their_own_options_and_the_defaults(sim0):
    a, b, c = params(sim0)
    opt = SGD([{"params": [a, b]}, {"params": c, "lr": 0.5}], lr=0.1, momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[1]["params"] == [c] and opt.param_groups[1]["momentum"] == 0.9
    set_grads([a, b, c])
    opt.step()
    assert a.tolist() == pytest.approx([-0.1, 0.9, 1.9, 2.9])
    assert c.tolist() == pytest.approx([1.5, 2.5, 3.5, 4.5])
    d = vram.zeros(4, device=sim0)
    opt.add_param_group({"params": [d], "lr": 1.0})
    assert opt.param_groups[2]["momentum"] == 0.9
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(TypeError, match="ordered collections"):
        opt.add_param_group({"params": {d}})
    with pytest.raises(
        TypeError,
        match="optimizer can only optimize Tensors, but one of the params is builtins.int",
    ):
        SGD([1, 2])
    assert "Parameter Group 1" in repr(opt) and "lr: 0.5" in repr(opt)


def test_named_parameters_keep_their_names(sim0):
    a, b, _ = params(sim0)
    opt = Adam([("layer.weight", a), ("layer.bias", b)])
    assert opt.param_groups[0]["param_names"] == ["layer.weight", "layer.bias"]
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["layer.weight", "layer.bias"]


@pytest.mark.parametrize("fused", [False, True])
def test_zero_grad(sim0, fused):
    ps = params(sim0)
    opt = Adam(ps, fused=fused)
    set_grads(ps, 3.0)
    opt.zero_grad(set_to_none=False)
    assert all(p.grad.tolist() == [0.0] * 4 for p in ps)
    opt.zero_grad()
    assert all(p.grad is None for p in ps)


def test_state_dict_layout_and_a_round_trip(sim0):
    ps = params(sim0)
    opt = AdamW([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.01}], fused=True, amsgrad=True)
    set_grads(ps)
    opt.step()
    sd = opt.state_dict()
    assert sorted(sd) == ["param_groups", "state"]
    assert sorted(sd["state"]) == [0, 1, 2]
    assert sd["param_groups"][0]["params"] == [0, 1] and sd["param_groups"][1]["params"] == [2]
    assert sd["state"][2]["exp_avg"] is opt.state[ps[2]]["exp_avg"]  # not a copy, as PyTorch
    copies = [p.clone() for p in ps]
    other = AdamW([{"params": copies[:2]}, {"params": copies[2:]}], fused=True, amsgrad=True)
    other.load_state_dict(copy.deepcopy(_host(sd)))
    assert other.param_groups[1]["lr"] == 0.01 and other.param_groups[0]["params"] == copies[:2]
    assert str(other.state[copies[0]]["step"].device) == "sim:0"
    for optimizer, tensors in ((opt, ps), (other, copies)):
        set_grads(tensors, -2.0)
        optimizer.step()
    for p, q in zip(ps, copies, strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    with pytest.raises(ValueError, match="different number of parameter groups"):
        SGD(copies).load_state_dict(sd)
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        AdamW([{"params": copies[:1]}, {"params": copies[2:]}]).load_state_dict(sd)


def _host(state_dict):
    """The state dict with its tensors as NumPy arrays (as if saved and loaded elsewhere)."""
    out = {"param_groups": state_dict["param_groups"], "state": {}}
    for k, v in state_dict["state"].items():
        out["state"][k] = {name: t.numpy() for name, t in v.items()}
    return out


def test_loaded_state_takes_the_parameters_dtype_and_the_steps_policy(sim0):
    p = vram.zeros(4, dtype=vram.float16, device=sim0)
    opt = Adam([p])  # foreach: step on the cpu
    state = {
        "state": {
            0: {
                "step": np.array(5.0, np.float32),
                "exp_avg": np.ones(4, np.float64),
                "exp_avg_sq": np.ones(4, np.float32),
            }
        },
        "param_groups": [dict(opt.state_dict()["param_groups"][0])],
    }
    opt.load_state_dict(state)
    loaded = opt.state[p]
    assert loaded["exp_avg"].dtype == vram.float16 and str(loaded["exp_avg"].device) == "sim:0"
    assert str(loaded["step"].device) == "cpu" and loaded["step"].item() == 5.0
    fused = Adam([p], fused=True)
    fused.load_state_dict(state | {"param_groups": [fused.state_dict()["param_groups"][0]]})
    assert str(fused.state[p]["step"].device) == "sim:0"


def test_closure_result_is_returned(sim0):
    p = vram.ones(2, device=sim0)
    opt = SGD([p], lr=0.1)

    def closure():
        p.grad = vram.ones(2, device=sim0)
        return 42.0

    assert opt.step(closure) == 42.0 and p.tolist() == pytest.approx([0.9, 0.9])


def test_pytorchs_state_dict_loads_and_training_goes_on_the_same(sim0):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    start = [rng.standard_normal(s).astype(np.float32) for s in ((5,), (4, 3))]
    grads = [[rng.standard_normal(a.shape).astype(np.float32) for a in start] for _ in range(6)]
    tp = [torch.tensor(a, requires_grad=True) for a in start]
    topt = torch.optim.Adam(tp, lr=1e-2, amsgrad=True, weight_decay=0.1, foreach=False)
    for step in grads[:3]:
        for p, g in zip(tp, step, strict=True):
            p.grad = torch.tensor(g)
        topt.step()
    vp = [vram.tensor(p.detach().numpy(), device=sim0) for p in tp]
    vopt = Adam(vp, lr=1e-2, amsgrad=True, weight_decay=0.1, foreach=False)
    vopt.load_state_dict(topt.state_dict())  # torch tensors come in through DLPack
    assert vopt.state[vp[0]]["step"].item() == 3.0
    for step in grads[3:]:
        for p, q, g in zip(tp, vp, step, strict=True):
            p.grad = torch.tensor(g)
            q.grad = vram.tensor(g, device=sim0)
        topt.step()
        vopt.step()
    for p, q in zip(tp, vp, strict=True):
        np.testing.assert_allclose(q.numpy(), p.detach().numpy(), rtol=1e-6, atol=1e-7)
    back = torch.optim.Adam([torch.tensor(q.numpy()) for q in vp], lr=1e-2, amsgrad=True)
    back.load_state_dict(_torch_state(torch, vopt.state_dict()))
    assert back.state_dict()["state"][1]["step"].item() == 6.0


def _torch_state(torch, state_dict):
    out = {"param_groups": state_dict["param_groups"], "state": {}}
    for k, v in state_dict["state"].items():
        out["state"][k] = {name: torch.from_numpy(t.numpy()) for name, t in v.items()}
    return out
