"""SGD on sim: fused, foreach and for-loop against torch.optim.SGD's documented algorithm,
the first-step rule of the momentum buffer, gradient scaling, errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import vram
from vram.optim import SGD

IMPLS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}
SHAPES = [(9,), (20, 30), ()]
CONFIGS = {
    "plain": {},
    "momentum+dampening": {"momentum": 0.9, "dampening": 0.1},
    "nesterov+wd": {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
    "maximize+momentum+wd": {"momentum": 0.5, "maximize": True, "weight_decay": 0.1},
}


def reference_sgd(
    params,
    grads_per_step,
    *,
    lr=0.1,
    momentum=0.0,
    dampening=0.0,
    weight_decay=0.0,
    nesterov=False,
    maximize=False,
    dtype=np.float64,
):
    """torch.optim.SGD's documented algorithm in float64, rounding params and buffers to
    ``dtype`` after every step."""

    def keep(x):
        return np.asarray(x).astype(dtype).astype(np.float64)

    ps = [keep(p) for p in params]
    bufs = [None] * len(ps)
    for grads in grads_per_step:
        for i, g in enumerate(grads):
            g = -keep(g) if maximize else keep(g)
            if weight_decay:
                g = g + weight_decay * ps[i]
            if momentum:
                bufs[i] = g if bufs[i] is None else keep(momentum * bufs[i] + (1 - dampening) * g)
                bufs[i] = keep(bufs[i])
                g = g + momentum * bufs[i] if nesterov else bufs[i]
            ps[i] = keep(ps[i] - lr * g)
    return ps


def data(steps=6, dtype=np.float32, seed=1):
    rng = np.random.default_rng(seed)
    params = [np.asarray(rng.standard_normal(s)).astype(dtype) for s in SHAPES]
    grads = [
        [np.asarray(rng.standard_normal(s)).astype(dtype) for s in SHAPES] for _ in range(steps)
    ]
    return params, grads


def run(params, grads, device="sim:0", **options):
    ps = [vram.tensor(p, device=device) for p in params]
    opt = SGD(ps, **options)
    for step in grads:
        for p, g in zip(ps, step, strict=True):
            p.grad = vram.tensor(g, device=device)
        opt.step()
    return opt, ps


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("config", CONFIGS)
def test_float32_follows_the_documented_algorithm(impl, config):
    params, grads = data()
    wanted = reference_sgd(params, grads, lr=0.1, **CONFIGS[config])
    _, ps = run(params, grads, lr=0.1, **IMPLS[impl], **CONFIGS[config])
    for p, w in zip(ps, wanted, strict=True):
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64], ids=str)
def test_fused_low_and_double_precision(dtype):
    params, grads = data(dtype=dtype)
    options = {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}
    wanted = reference_sgd(params, grads, dtype=dtype, **options)
    _, ps = run(params, grads, fused=True, **options)
    tolerance = {np.float16: 5e-3, ml_dtypes.bfloat16: 3e-2, np.float64: 1e-12}[dtype]
    for p, w in zip(ps, wanted, strict=True):
        np.testing.assert_allclose(p.numpy().astype(np.float64), w, rtol=tolerance, atol=tolerance)


def test_the_first_step_sets_the_buffer_to_the_gradient(sim0):
    p = vram.zeros(2, device=sim0)
    opt = SGD([p], lr=1.0, momentum=0.9, dampening=0.5, fused=True)
    p.grad = vram.tensor([1.0, 2.0], device=sim0)
    opt.step()
    assert opt.state[p]["momentum_buffer"].tolist() == [1.0, 2.0]  # no dampening yet
    opt.step()
    assert opt.state[p]["momentum_buffer"].tolist() == pytest.approx([1.4, 2.8])  # 0.9 b + 0.5 g
    assert p.tolist() == pytest.approx([-2.4, -4.8])


def test_parameters_that_start_later_take_their_first_step_then(sim0):
    a, b = vram.zeros(1, device=sim0), vram.zeros(1, device=sim0)
    opt = SGD([a, b], lr=1.0, momentum=0.5, fused=True)
    a.grad = vram.ones(1, device=sim0)
    opt.step()
    b.grad = vram.ones(1, device=sim0)
    opt.step()  # a: buffer 1.5; b: its first step, buffer 1
    assert opt.state[a]["momentum_buffer"].tolist() == [1.5]
    assert opt.state[b]["momentum_buffer"].tolist() == [1.0]
    assert a.tolist() == [-2.5] and b.tolist() == [-1.0]


def test_no_momentum_keeps_no_state(sim0):
    p = vram.ones(3, device=sim0)
    p.grad = vram.ones(3, device=sim0)
    opt = SGD([p], lr=0.5, fused=True)
    opt.step()
    assert p.tolist() == [0.5] * 3 and len(opt.state) == 0


def test_grad_scale_and_found_inf(sim0):
    p = vram.ones(2, device=sim0)
    opt = SGD([p], lr=1.0, momentum=0.9, fused=True)
    opt.grad_scale = vram.tensor([2.0], device=sim0)
    p.grad = vram.tensor([4.0, 8.0], device=sim0)
    opt.step()
    assert p.grad.tolist() == [2.0, 4.0] and p.tolist() == [-1.0, -3.0]
    opt.found_inf = vram.tensor([1.0], device=sim0)
    opt.step()
    assert p.tolist() == [-1.0, -3.0]


def test_a_tensor_lr(sim0):
    p = vram.ones(2, device=sim0)
    p.grad = vram.ones(2, device=sim0)
    lr = vram.tensor(0.25, device=sim0)
    for impl in IMPLS.values():
        SGD([p], lr=lr, **impl).step()
    assert p.tolist() == [0.25, 0.25]


def test_bad_input_raises_as_torch_optim(sim0):
    p = vram.zeros(3, device=sim0)
    with pytest.raises(
        ValueError, match="Nesterov momentum requires a momentum and zero dampening"
    ):
        SGD([p], momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid momentum value: -0.5"):
        SGD([p], momentum=-0.5)
    with pytest.raises(ValueError, match="Invalid weight_decay value: -1"):
        SGD([p], weight_decay=-1)
    with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
        SGD([p], lr=vram.zeros(2))
    p.grad = vram.zeros(3, dtype=vram.float16, device=sim0)
    with pytest.raises(RuntimeError, match="assigned grad has data of a different type"):
        SGD([p], fused=True).step()


def _fma32(a, b, c):
    """fma in float32 rounded once (the product of two float32 is exact in float64)."""
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("numel", [8, 7])
def test_fused_momentum_rounds_as_pytorchs_compiled_kernel(numel, maximize):
    """The second step's momentum buffer: fma(1 - dampening, g, momentum * buf rounded),
    except where PyTorch's kernel takes its vectorized path (element count a multiple of 4,
    aligned) with maximize and no weight decay: fma(momentum, buf, (1 - dampening) * g
    rounded). Values chosen so that the two roundings differ."""
    rng = np.random.default_rng(7)
    g1 = rng.standard_normal(numel).astype(np.float32)
    g2 = rng.standard_normal(numel).astype(np.float32)
    p = vram.zeros(numel, device="sim:0")
    opt = SGD([p], lr=0.5, momentum=0.9, dampening=0.1, maximize=maximize, fused=True)
    for g in (g1, g2):
        p.grad = vram.tensor(g, device="sim:0")
        opt.step()
    buf = opt.state[p]["momentum_buffer"].numpy()
    m, keep = np.float32(0.9), np.float32(1) - np.float32(0.1)
    first = -g1 if maximize else g1
    second = -g2 if maximize else g2
    if numel % 4 == 0 and maximize:
        wanted = _fma32(m, first, keep * second)
    else:
        wanted = _fma32(keep, second, m * first)
    np.testing.assert_array_equal(buf, wanted)
    other = (
        _fma32(keep, second, m * first)
        if numel % 4 == 0 and maximize
        else _fma32(m, first, keep * second)
    )
    assert (other != wanted).any()  # the data tells the two roundings apart
