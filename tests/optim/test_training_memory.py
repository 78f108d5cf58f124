"""A 1,000-step training loop of a small MLP on sim (GEMMs from vram.blas, a square
activation, gradients by hand): memory_allocated is the same after every step from the first
on, and the loss goes down."""

from __future__ import annotations

import numpy as np
import pytest

import vram
from vram.optim import SGD, AdamW

BATCH, IN, HIDDEN, OUT = 16, 8, 32, 4


def mlp_step(params, x, target, ones):
    """Forward and backward of y = W2 (W1 x + b1)^2 + b2 with a mean squared error; sets
    each parameter's .grad and returns the loss."""
    w1, b1, w2, b2 = params
    z = vram.addmm(b1.expand(BATCH, HIDDEN), x, w1.t())
    h = z * z
    y = vram.addmm(b2.expand(BATCH, OUT), h, w2.t())
    diff = y - target
    dy = diff * (2.0 / (BATCH * OUT))
    w2.grad = vram.mm(dy.t(), h)
    b2.grad = vram.mm(ones, dy).reshape(OUT)
    dz = vram.mm(dy, w2) * (z * 2.0)
    w1.grad = vram.mm(dz.t(), x)
    b1.grad = vram.mm(ones, dz).reshape(HIDDEN)
    return float((diff.numpy() ** 2).mean())


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: AdamW(ps, lr=1e-2, fused=True),
        lambda ps: SGD(ps, lr=1e-2, momentum=0.9, foreach=True),
    ],
    ids=["adamw-fused", "sgd-foreach"],
)
def test_memory_allocated_is_flat_after_the_first_step(sim0, make):
    rng = np.random.default_rng(0)
    params = [
        vram.tensor(rng.standard_normal((HIDDEN, IN)).astype(np.float32) * 0.3, device=sim0),
        vram.zeros(HIDDEN, device=sim0),
        vram.tensor(rng.standard_normal((OUT, HIDDEN)).astype(np.float32) * 0.3, device=sim0),
        vram.zeros(OUT, device=sim0),
    ]
    x = vram.tensor(rng.standard_normal((BATCH, IN)).astype(np.float32), device=sim0)
    target = vram.tensor(rng.standard_normal((BATCH, OUT)).astype(np.float32), device=sim0)
    ones = vram.ones((1, BATCH), device=sim0)
    opt = make(params)
    losses, allocated = [], []
    for _ in range(1000):
        losses.append(mlp_step(params, x, target, ones))
        opt.step()
        opt.zero_grad()
        allocated.append(vram.memory_allocated(sim0))
    assert len(set(allocated)) == 1, f"memory_allocated changed: {sorted(set(allocated))}"
    assert losses[-1] < 0.5 * losses[0]
