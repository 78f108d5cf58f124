"""PyTorch's mm_out contract: each violation raises an error that names the argument."""

from __future__ import annotations

import numpy as np
import pytest

import vram


@pytest.fixture
def mats(sim0):
    return vram.ones((2, 3), device=sim0), vram.ones((3, 4), device=sim0)


def test_none_and_non_tensors_are_type_errors(mats):
    a, b = mats
    with pytest.raises(TypeError, match="mm: argument 'input' is None"):
        vram.mm(None, b)
    with pytest.raises(TypeError, match="mm: argument 'mat2' is None"):
        vram.mm(a, None)
    with pytest.raises(TypeError, match="argument 'mat2' must be a vram.Tensor, got ndarray"):
        vram.mm(a, np.ones((3, 4), np.float32))
    with pytest.raises(TypeError, match="mm: argument 'out' must be a vram.Tensor"):
        vram.mm(a, b, out=[1])
    with pytest.raises(TypeError, match="addmm: argument 'input' is None"):
        vram.addmm(None, a, b)


def test_operands_must_be_matrices(sim0, mats):
    a, b = mats
    with pytest.raises(RuntimeError, match=r"mm: 'input' must be a matrix \(2-D\), got a 1-D"):
        vram.mm(vram.ones(3, device=sim0), b)
    with pytest.raises(RuntimeError, match=r"mm: 'mat2' must be a matrix \(2-D\), got a 3-D"):
        vram.mm(a, vram.ones((1, 3, 4), device=sim0))
    with pytest.raises(RuntimeError, match="bmm: 'input' must be a 3-D tensor"):
        vram.bmm(a, b)


def test_inner_dimensions_and_batches_must_agree(sim0, mats):
    a, b = mats
    with pytest.raises(
        RuntimeError, match=r"'input' and 'mat2' shapes cannot be multiplied \(2x3 and 2x3\)"
    ):
        vram.mm(a, a)
    with pytest.raises(RuntimeError, match="'mat1' and 'mat2' shapes cannot be multiplied"):
        vram.addmm(vram.ones(4, device=sim0), b, b)
    x, y = vram.ones((2, 2, 3), device=sim0), vram.ones((3, 3, 4), device=sim0)
    with pytest.raises(RuntimeError, match="same number of batches, got 2 and 3"):
        vram.bmm(x, y)
    with pytest.raises(RuntimeError, match="matmul: the batch dimensions"):
        vram.matmul(x, vram.ones((3, 3, 4), device=sim0).expand(3, 3, 4))
    with pytest.raises(RuntimeError, match="matmul: both arguments need at least 1 dimension"):
        vram.matmul(vram.tensor(1.0, device=sim0), a)


def test_out_must_have_the_result_shape(sim0, mats):
    a, b = mats
    with pytest.raises(
        RuntimeError, match=r"mm: 'out' has shape \(4, 2\), but the result has shape \(2, 4\)"
    ):
        vram.mm(a, b, out=vram.empty((4, 2), device=sim0))


def test_one_dtype(sim0, mats):
    a, b = mats
    half = vram.ones((3, 4), dtype=vram.float16, device=sim0)
    with pytest.raises(RuntimeError, match="'mat2' is float16 and 'input' is float32"):
        vram.mm(a, half)
    with pytest.raises(RuntimeError, match="'out' is float16 and 'input' is float32"):
        vram.mm(a, b, out=vram.empty((2, 4), dtype=vram.float16, device=sim0))
    with pytest.raises(RuntimeError, match="'input' is float16 and 'mat1' is float32"):
        vram.addmm(vram.ones(4, dtype=vram.float16, device=sim0), a, b)
    ints = vram.ones((2, 3), dtype=vram.int32, device=sim0)
    with pytest.raises(RuntimeError, match="'input' has dtype int32; matrix products support"):
        vram.mm(ints, vram.ones((3, 4), dtype=vram.int32, device=sim0))


def test_one_device(mats):
    a, b = mats
    other = vram.ones((3, 4), device="sim:1")
    with pytest.raises(RuntimeError, match="'mat2' is on sim:1 and 'input' is on sim:0"):
        vram.mm(a, other)
    with pytest.raises(RuntimeError, match="'out' is on sim:1 and 'input' is on sim:0"):
        vram.mm(a, b, out=vram.empty((2, 4), device="sim:1"))


def test_out_must_not_overlap_an_input(sim0):
    x = vram.ones((4, 4), device=sim0)
    with pytest.raises(RuntimeError, match="mm: 'out' and 'input' share memory"):
        vram.mm(x, x, out=x)
    with pytest.raises(RuntimeError, match="'out' and 'mat2' share memory"):
        vram.mm(vram.ones((4, 4), device=sim0), x, out=x)
    expanded = vram.empty((1, 4), device=sim0).expand(4, 4)
    with pytest.raises(RuntimeError, match="'out' has more than one element at a single memory"):
        vram.mm(x, vram.ones((4, 4), device=sim0), out=expanded)


def test_interleaved_views_are_computed_safely(sim0):
    # out and input interleave in one buffer without sharing an element: allowed, and the
    # input is read before out is written
    buf = vram.tensor(np.arange(32, dtype=np.float32).reshape(4, 8), device=sim0)
    a, out = buf[:, 0::2], buf[:, 1::2]
    want = buf.numpy()[:, 0::2] @ np.eye(4, dtype=np.float32)
    vram.mm(a, vram.tensor(np.eye(4, dtype=np.float32), device=sim0), out=out)
    np.testing.assert_array_equal(buf.numpy()[:, 1::2], want)


def test_bias_must_broadcast_and_arguments_are_checked(sim0, mats):
    a, b = mats
    with pytest.raises(RuntimeError, match=r"addmm: 'input' of shape \(3,\) cannot be broadcast"):
        vram.addmm(vram.ones(3, device=sim0), a, b)
    with pytest.raises(ValueError, match="'activation' must be None, 'relu' or 'gelu'"):
        vram.addmm(vram.ones(4, device=sim0), a, b, activation="tanh")
    with pytest.raises(TypeError, match="addmm: 'beta' must be a real number"):
        vram.addmm(vram.ones(4, device=sim0), a, b, beta="2")
    with pytest.raises(RuntimeError, match="linear: 'input' has 3 features"):
        vram.nn.functional.linear(a, vram.ones((5, 4), device=sim0))


def test_a_failed_check_queues_nothing(sim0, mats):
    a, _ = mats
    stream = vram.current_stream(sim0)
    with vram.sim.deferred():
        with pytest.raises(RuntimeError):
            vram.mm(a, a)
        assert vram.sim.pending(stream) == 0
