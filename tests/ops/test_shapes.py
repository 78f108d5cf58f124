"""cat, stack, repeat, tile, tril, triu and torch's function forms of the views, on the
simulated GPU and the host, checked against NumPy, with torch's errors."""

from __future__ import annotations

import numpy as np
import pytest
from index_helpers import CPU, DEVICES, DTYPES, SIM, equal, put, random

import vram
from vram.ops import _shapes

IDS = [d.name for d in DTYPES]


# ---- cat and stack -----------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_cat_every_dtype_and_dim(dt, device):
    parts = [random(dt, (2, n, 3), n) for n in (1, 4, 2)]
    for dim in (1, -2):
        equal(vram.cat([put(p, device) for p in parts], dim), np.concatenate(parts, 1))
    same = [random(dt, (2, 3), k) for k in range(3)]
    for dim in (0, 1, -1):
        equal(vram.cat(tuple(put(p, device) for p in same), dim=dim), np.concatenate(same, dim))


def rows_launches(plan: _shapes.CatPlan) -> bool:
    return plan.fast is not None


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_cat_one_launch_and_the_copies_agree(device):
    """The fast path (one cat_rows launch for contiguous inputs of the result's dtype) and
    the simple one (a copy per input) give the same tensor, for every unit size."""
    for dt, cols in ((vram.float32, (4, 8)), (vram.float16, (3, 5)), (vram.int8, (16, 32))):
        parts = [random(dt, (3, c), c) for c in cols]
        fast_inputs = [put(p, device) for p in parts]
        slow_inputs = [put(np.ascontiguousarray(p.T), device).t() for p in parts]
        fast = vram.cat(fast_inputs, 1)
        slow = vram.cat(slow_inputs, 1)
        key_fast = ("cat", 1, tuple(map(_signature, fast_inputs)), None)
        key_slow = ("cat", 1, tuple(map(_signature, slow_inputs)), None)
        assert rows_launches(vram.ops._plans.PLANS[key_fast])
        assert not rows_launches(vram.ops._plans.PLANS[key_slow])
        equal(fast, np.concatenate(parts, 1))
        equal(slow, fast.numpy())


def _signature(t):
    return (t.dtype, t._shape, t._stride, t.device)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_cat_units_follow_alignment(device):
    """A view that starts off a 16-byte boundary takes the element-size launch."""
    base = put(np.arange(40, dtype=np.float32), device)
    aligned, odd = base[:8].view(2, 4), base[1:9].view(2, 4)
    other = put(np.arange(8, dtype=np.float32).reshape(2, 4) + 100, device)
    equal(vram.cat([aligned, other], 1), np.concatenate([aligned.numpy(), other.numpy()], 1))
    equal(vram.cat([odd, other], 1), np.concatenate([odd.numpy(), other.numpy()], 1))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_cat_promotes_skips_1d_empties_and_takes_many_inputs(device):
    a = random(vram.int32, (2, 3), 1)
    b = random(vram.float16, (2, 2), 2)
    got = vram.cat([put(a, device), put(b, device)], 1)
    equal(got, np.concatenate([a.astype(np.float16), b], 1))
    empty64 = put(np.zeros(0, np.float64), device)
    equal(vram.cat([put(a, device), empty64], 1), a.astype(np.float64))
    equal(vram.cat([empty64, empty64]), np.zeros(0, np.float64))
    many = [random(vram.float32, (2, 1 + k % 3), k) for k in range(70)]  # two launches
    equal(vram.cat([put(m, device) for m in many], 1), np.concatenate(many, 1))
    equal(vram.concat([put(a, device)] * 2), np.concatenate([a, a]))
    equal(vram.concatenate([put(a, device)] * 2, dim=1), np.concatenate([a, a], 1))
    zero_rows = put(np.zeros((0, 3), np.int32), device)
    equal(vram.cat([zero_rows, put(a, device)]), a)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_cat_into_out(device):
    a, b = random(vram.float32, (2, 3), 3), random(vram.float32, (1, 3), 4)
    out = put(np.zeros((3, 3), np.float64), device)
    assert vram.cat([put(a, device), put(b, device)], out=out) is out
    equal(out, np.concatenate([a, b]).astype(np.float64))
    strided = put(np.zeros((3, 6), np.float32), device)[:, ::2]
    vram.cat([put(a, device), put(b, device)], out=strided)
    equal(strided, np.concatenate([a, b]))


def test_cat_errors():
    a = vram.zeros(2, 3, device=SIM)
    with pytest.raises(ValueError, match="expected a non-empty list of Tensors"):
        vram.cat([])
    with pytest.raises(TypeError, match="expected Tensor as element 1 in argument 0"):
        vram.cat([a, 1])
    with pytest.raises(RuntimeError, match="zero-dimensional tensor \\(at position 0\\)"):
        vram.cat([vram.zeros((), device=SIM)])
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0"):
        vram.cat([a, vram.zeros(2, 4, device=SIM)])
    with pytest.raises(RuntimeError, match="same number of dimensions: got 2 and 3"):
        vram.cat([a, vram.zeros(2, 3, 1, device=SIM)], 1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        vram.cat([a, a], 2)
    with pytest.raises(RuntimeError, match="found at least two devices"):
        vram.cat([a, vram.zeros(2, 3, device=CPU)])
    with pytest.raises(TypeError, match="can't be cast to the desired output type Long"):
        vram.cat([a, a], out=vram.zeros(4, 3, dtype=vram.int64, device=SIM))
    with pytest.raises(RuntimeError, match="the input tensors cannot refer to any of the output"):
        big = vram.zeros(4, 3, device=SIM)
        vram.cat([big[:2], big[2:]], out=big)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_stack(device):
    parts = [random(vram.int64, (2, 3), k) for k in range(4)]
    for dim in (0, 1, 2, -1):
        equal(vram.stack([put(p, device) for p in parts], dim), np.stack(parts, dim % 3))
    equal(vram.stack([put(p, device).t() for p in parts], 1), np.stack([p.T for p in parts], 1))
    with pytest.raises(RuntimeError, match="stack expects a non-empty TensorList"):
        vram.stack([])
    with pytest.raises(RuntimeError, match="but got \\[2, 3\\] at entry 0 and \\[3, 2\\]"):
        vram.stack([put(parts[0], device), put(parts[0].T.copy(), device)])
    with pytest.raises(IndexError, match="Dimension out of range"):
        vram.stack([put(parts[0], device)], 3)


# ---- repeat and tile ---------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_repeat_every_dtype(dt, device):
    a = random(dt, (2, 3), 5)
    t = put(a, device)
    equal(t.repeat(2, 3), np.tile(a, (2, 3)))
    equal(t.repeat(2, 1, 2), np.tile(a, (2, 1, 2)))
    equal(t.t().repeat((1, 2)), np.tile(a.T, (1, 2)))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_repeat_and_tile_edges(device):
    a = random(vram.float32, (3, 1), 6)
    t = put(a, device)
    equal(t.repeat(0, 2), np.zeros((0, 2), np.float32))
    equal(put(np.array(5.0, np.float32), device).repeat(2, 3), np.full((2, 3), 5.0, np.float32))
    equal(t.expand(3, 4).repeat(1, 2), np.tile(np.broadcast_to(a, (3, 4)), (1, 2)))
    equal(vram.tile(t, (2,)), np.tile(a, (1, 2)))
    equal(t.tile(2, 1, 3), np.tile(a, (2, 1, 3)))
    with pytest.raises(RuntimeError, match="can not be smaller than number of dimensions"):
        t.repeat(2)
    with pytest.raises(RuntimeError, match="negative dimension -2: \\[3, -2\\]"):
        t.repeat(1, -2)
    with pytest.raises(TypeError, match="missing 1 required positional"):
        t.repeat()


# ---- tril and triu -----------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_tril_triu_every_dtype(dt, device):
    a = random(dt, (4, 5), 7)
    t = put(a, device)
    for k in (-5, -1, 0, 2, 6):
        equal(t.tril(k), np.tril(a, k))
        equal(vram.triu(t, k), np.triu(a, k))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_tril_triu_batches_layouts_in_place_and_empty(device):
    a = random(vram.float32, (3, 4, 5), 8)
    t = put(a, device)
    equal(t.tril(1), np.tril(a, 1))
    equal(t.transpose(1, 2).triu(-1), np.triu(a.transpose(0, 2, 1), -1))
    equal(t[:, ::2, 1:].tril(), np.tril(a[:, ::2, 1:]))
    view = t.permute(2, 1, 0)
    assert view.tril_(-1) is view
    equal(t, np.tril(a.transpose(2, 1, 0), -1).transpose(2, 1, 0))
    c = put(a, device)
    c.triu_(2)
    equal(c, np.triu(a, 2))
    equal(put(np.zeros((0, 3), np.float32), device).tril(), np.zeros((0, 3), np.float32))
    with pytest.raises(RuntimeError, match="tril: input tensor must have at least 2 dimensions"):
        put(np.zeros(3), device).tril()
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        put(np.zeros(3), device).expand(3, 3).triu_()


# ---- the function forms of the views -----------------------------------------------------------


def test_view_functions_are_the_methods():
    t = vram.zeros(2, 1, 3, device=SIM)
    assert vram.permute(t, (2, 0, 1)).shape == (3, 2, 1)
    assert vram.transpose(t, 0, 2).shape == (3, 1, 2)
    assert vram.swapaxes(t, 0, 1).shape == vram.swapdims(t, 0, 1).shape == (1, 2, 3)
    assert vram.t(vram.zeros(2, 3, device=SIM)).shape == (3, 2)
    assert vram.flatten(t).shape == (6,) and vram.flatten(t, 1).shape == (2, 3)
    assert vram.unflatten(t, 2, (3, 1)).shape == (2, 1, 3, 1)
    assert vram.squeeze(t).shape == (2, 3) and vram.squeeze(t, 1).shape == (2, 3)
    assert vram.unsqueeze(t, 0).shape == (1, 2, 1, 3)
    assert vram.narrow(t, 2, 1, 2).shape == (2, 1, 2)
    assert vram.select(t, 2, 0).shape == (2, 1)
    assert vram.movedim(t, 0, 2).shape == vram.moveaxis(t, 0, 2).shape == (1, 3, 2)
    assert [p.shape for p in vram.split(t, 2, 2)] == [(2, 1, 2), (2, 1, 1)]
    assert [p.shape for p in vram.chunk(t, 2)] == [(1, 1, 3), (1, 1, 3)]
    assert len(vram.unbind(t, 2)) == 3
    assert vram.reshape(t, (3, 2)).shape == (3, 2)
    with pytest.raises(TypeError, match="argument 'input' must be Tensor"):
        vram.permute([1, 2], (0,))
