"""empty_like, zeros_like, ones_like, full_like, eye, linspace and logspace on the simulated
GPU and the host, checked against NumPy (linspace's values: PyTorch's formula)."""

from __future__ import annotations

import numpy as np
import pytest
from index_helpers import CPU, DEVICES, SIM, equal

import vram


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_like_factories_keep_shape_dtype_device_and_dense_strides(device):
    base = vram.tensor(np.arange(12, dtype=np.int32).reshape(3, 4), device=device)
    equal(vram.zeros_like(base), np.zeros((3, 4), np.int32))
    equal(vram.ones_like(base, dtype=vram.float16), np.ones((3, 4), np.float16))
    equal(vram.full_like(base, 7), np.full((3, 4), 7, np.int32))
    equal(vram.full_like(base, 2.5, dtype=vram.float64), np.full((3, 4), 2.5))
    empty = vram.empty_like(base.t())
    assert empty.shape == (4, 3) and empty.stride() == (1, 4) and empty.dtype == vram.int32
    assert vram.zeros_like(base[:, ::2]).stride() == (2, 1)  # not dense: contiguous
    assert vram.zeros_like(base[0].expand(2, 4)).stride() == (4, 1)
    moved = vram.zeros_like(base, device=CPU if device == SIM else SIM)
    assert moved.device != base.device
    equal(moved, np.zeros((3, 4), np.int32))
    with pytest.raises(TypeError, match="argument 'input' must be Tensor"):
        vram.zeros_like(np.zeros(3))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_eye(device):
    equal(vram.eye(3, device=device), np.eye(3, dtype=np.float32))
    equal(vram.eye(2, 4, dtype=vram.int64, device=device), np.eye(2, 4, dtype=np.int64))
    equal(vram.eye(4, 2, dtype=vram.bool_, device=device), np.eye(4, 2, dtype=bool))
    equal(vram.eye(0, device=device), np.zeros((0, 0), np.float32))
    with pytest.raises(RuntimeError, match="n must be greater or equal to 0, got -1"):
        vram.eye(-1)
    with pytest.raises(RuntimeError, match="m must be greater or equal to 0, got -2"):
        vram.eye(2, -2)


def formula(start, end, steps, step_type, out_type, base=None):
    """PyTorch's linspace formula in ``step_type``, stored as ``out_type``."""
    s = np.dtype(step_type).type
    i = np.arange(steps)
    delta = (s(end) - s(start)) / s(steps - 1)
    value = np.where(
        i < steps // 2,
        s(start) + delta * i.astype(step_type),
        s(end) - delta * (steps - 1 - i).astype(step_type),
    )
    if base is not None:
        value = np.power(s(base), value)
    return np.asarray(value).astype(out_type)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_linspace(device):
    for steps in (2, 5, 10, 101):
        got = vram.linspace(-1.5, 3.0, steps, device=device)
        equal(got, formula(-1.5, 3.0, steps, np.float32, np.float32))
        np.testing.assert_allclose(got.numpy(), np.linspace(-1.5, 3.0, steps), atol=1e-6)
    got = vram.linspace(0, 1, 7, dtype=vram.float64, device=device)
    equal(got, formula(0, 1, 7, np.float64, np.float64))
    equal(vram.linspace(-3, 10, 7, dtype=vram.int64, device=device), [-3, 0, 1, 3, 5, 7, 10])
    # float16 rounds at every step, as c10::Half does (these are torch.linspace's bits)
    got = vram.linspace(-2.5, 100.0, 1000, dtype=vram.float16, device=device)
    equal(got, formula(-2.5, 100.0, 1000, np.float16, np.float16))
    equal(vram.linspace(5, 5, 1, device=device), np.array([5.0], np.float32))
    equal(vram.linspace(0, 1, 0, device=device), np.zeros(0, np.float32))
    equal(vram.linspace(0, 1j, 3, device=device), np.array([0, 0.5j, 1j], np.complex64))
    equal(
        vram.linspace(vram.tensor(2.0, device=device), 4, 3, device=device),
        np.array([2, 3, 4], np.float32),
    )


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_logspace(device):
    equal(vram.logspace(0, 3, 4, device=device), np.array([1, 10, 100, 1000], np.float32))
    equal(
        vram.logspace(-2, 2, 5, base=2, dtype=vram.float64, device=device),
        formula(-2, 2, 5, np.float64, np.float64, base=2),
    )
    equal(vram.logspace(2, 3, 1, device=device), np.array([100], np.float32))


def test_linspace_errors():
    with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
        vram.linspace(0, 1, -1)
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        vram.linspace(0, 1, 3, dtype=vram.bool_)
    with pytest.raises(TypeError, match="argument 'steps' must be int"):
        vram.linspace(0, 1, 2.5)
    with pytest.raises(TypeError, match="start: expected a number"):
        vram.linspace("a", 1, 2)
