"""diagonal, diag, diag_embed, trace, outer, flip, roll, einsum and tensordot on the simulated
GPU and the host, checked against NumPy, with torch's errors."""

from __future__ import annotations

import numpy as np
import pytest
from index_helpers import DEVICES, equal, put, random

import vram

FLOATS = [vram.float32, vram.float16, vram.bfloat16, vram.float64]


def close(got: vram.Tensor, want: np.ndarray, rtol: float = 1e-5) -> None:
    array = got.numpy()
    assert array.shape == np.shape(want), (array.shape, np.shape(want))
    np.testing.assert_allclose(array.astype(np.float64), want, rtol=rtol, atol=rtol)


def normal(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- diagonals ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_diagonal_is_a_view_for_every_offset_and_dims(device):
    a = random(vram.int32, (3, 4, 5))
    t = put(a, device)
    for offset in (-4, -2, -1, 0, 1, 3, 5, 9):
        for d1, d2 in ((0, 1), (1, 0), (0, -1), (-1, 1), (2, 0)):
            got = t.diagonal(offset, d1, d2)
            equal(got, np.diagonal(a, offset, d1 % 3, d2 % 3))
            assert got._storage is t._storage
    view = vram.diagonal(t, 1, 1, 2)
    view.fill_(100)  # writes through to the tensor
    a[:, np.arange(4), np.arange(4) + 1] = 100
    equal(t, a)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_diagonal_of_non_contiguous_and_empty(device):
    a = random(vram.float32, (6, 5))
    t = put(a, device)[::2].t()  # [5, 3] with strides (1, 10)
    equal(t.diagonal(), np.diagonal(a[::2].T))
    equal(t.diagonal(-2), np.diagonal(a[::2].T, -2))
    empty = put(np.zeros((0, 3), np.float32), device)
    assert empty.diagonal().shape == (0,)
    assert put(a, device).diagonal(10).shape == (0,)


def test_diagonal_errors():
    t = vram.zeros(3, 3, device="sim:0")
    with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 1, 1"):
        t.diagonal(0, 1, 1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        t.diagonal(0, 0, 2)
    with pytest.raises(TypeError, match="offset"):
        vram.diagonal(t, 1.5)
    with pytest.raises(TypeError, match="input"):
        vram.diagonal(np.zeros((2, 2)))


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", [vram.float32, vram.int64, vram.bool_, vram.bfloat16], ids=str)
def test_diag_both_ways(dt, device):
    v = random(dt, (4,))
    for k in (-2, 0, 3):
        equal(vram.diag(put(v, device), k), np.diag(v, k))
    m = random(dt, (4, 6), 1)
    for k in (-3, 0, 2, 7):
        got = put(m, device).diag(k)
        equal(got, np.diag(m, k))
        assert got.is_contiguous()
    equal(put(m, device).t().diag(1), np.diag(m.T, 1))  # non-contiguous
    equal(vram.diag(put(np.zeros(0, dt.np), device)), np.zeros((0, 0), dt.np))


def test_diag_rejects_other_ranks():
    with pytest.raises(RuntimeError, match=r"diag\(\): Supports 1D or 2D tensors. Got 3D"):
        vram.diag(vram.zeros(2, 2, 2, device="sim:0"))
    with pytest.raises(RuntimeError, match="Got 0D"):
        vram.diag(vram.zeros((), device="sim:0"))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_diag_embed(device):
    a = random(vram.float32, (2, 3))
    for offset, d1, d2 in ((0, -2, -1), (1, 0, 2), (-1, 2, 0), (2, 1, 0)):
        got = vram.diag_embed(put(a, device), offset, d1, d2)
        n = 3 + abs(offset)
        want = np.zeros((2, n, n), np.float32)
        for b in range(2):
            want[b] = np.diag(a[b], offset)
        # torch puts the diagonal's dims at d1 and d2, the batch dim in the free place
        order = {(-2, -1): (0, 1, 2), (0, 2): (1, 0, 2), (2, 0): (2, 0, 1), (1, 0): (2, 1, 0)}
        source_of = order[(d1, d2)]
        equal(got, np.transpose(want, source_of))
    with pytest.raises(RuntimeError, match="cannot be identical"):
        put(a, device).diag_embed(0, 1, -2)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_trace_dtypes(device):
    a = random(vram.int32, (4, 6))
    got = vram.trace(put(a, device))
    equal(got, np.array(np.trace(a), np.int64))  # integers sum to int64 as torch
    f = normal((5, 3))
    close(put(f, device).t().trace(), np.trace(f.T))
    h = put(f, device).half().trace()
    assert h.dtype == vram.float16
    equal(vram.trace(put(np.zeros((0, 3), np.float32), device)), np.array(0, np.float32))
    with pytest.raises(RuntimeError, match="trace: expected a matrix, but got tensor with dim 3"):
        vram.trace(put(np.zeros((2, 2, 2), np.float32), device))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_outer_promotes(device):
    x, y = random(vram.int32, (3,)), normal((4,))
    got = vram.outer(put(x, device), put(y, device))
    equal(got, np.outer(x, y).astype(np.float32))
    equal(put(x, device).outer(put(x, device)), np.outer(x, x))
    equal(vram.ger(put(x, device)[::2], put(y, device)), np.outer(x[::2], y).astype(np.float32))
    with pytest.raises(RuntimeError, match="outer: Expected 1-D argument self, but got 2-D"):
        vram.outer(put(np.zeros((2, 2), np.float32), device), put(y, device))
    with pytest.raises(RuntimeError, match="argument vec2, but got 0-D"):
        vram.outer(put(y, device), put(np.float32(1), device))


# ---- flip and roll --------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", [vram.float32, vram.int8, vram.bool_, vram.float16], ids=str)
def test_flip_every_dims(dt, device):
    a = random(dt, (3, 4, 2))
    t = put(a, device)
    for dims in ((0,), (-1,), (0, 2), (2, 1, 0), ()):
        got = vram.flip(t, dims)
        equal(got, np.flip(a, dims) if dims else a)
        assert got.data_ptr() != t.data_ptr()  # a copy, as PyTorch's
    equal(t.flip(0, -1), np.flip(a, (0, 2)))
    equal(t.permute(2, 0, 1).flip([1]), np.flip(a.transpose(2, 0, 1), 1))  # non-contiguous
    equal(t.fliplr(), np.fliplr(a))
    equal(t.flipud(), np.flipud(a))
    equal(put(np.zeros((0, 3), dt.np), device).flip(0, 1), np.zeros((0, 3), dt.np))
    equal(vram.flip(put(np.array(5, dt.np), device), (0,)), np.array(5, dt.np))


def test_flip_errors():
    t = vram.zeros(2, 3, device="sim:0")
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times in the list of dims"):
        vram.flip(t, (0, -2))
    with pytest.raises(IndexError, match="Dimension out of range"):
        t.flip(2)
    with pytest.raises(RuntimeError, match="Input must be >= 2-d."):
        vram.fliplr(vram.zeros(3, device="sim:0"))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_roll(device):
    a = random(vram.int64, (3, 5))
    t = put(a, device)
    for shifts, dims in ((1, 0), (-2, 1), (7, -1), ((1, -3), (0, 1)), ((2, 2), (1, 1)), (0, 0)):
        got = vram.roll(t, shifts, dims)
        equal(got, np.roll(a, shifts, dims))
        assert got.data_ptr() != t.data_ptr()
    for shifts in (3, -11, (4,), 0):
        equal(t.roll(shifts), np.roll(a, shifts))  # flattened
    equal(t.t().roll(2, 1), np.roll(a.T, 2, 1))
    equal(t.t().roll(4), np.roll(a.T, 4))
    equal(put(np.zeros((0, 4), np.int64), device).roll(1, 1), np.zeros((0, 4), np.int64))
    equal(vram.roll(put(np.array(3.0, np.float32), device), 1), np.array(3.0, np.float32))


def test_roll_errors():
    t = vram.zeros(2, 3, device="sim:0")
    with pytest.raises(RuntimeError, match="shifts and dimensions must align. shifts: 2, dims:1"):
        vram.roll(t, (1, 2), (0,))
    with pytest.raises(RuntimeError, match="`shifts` required"):
        vram.roll(t, ())
    with pytest.raises(TypeError, match="shifts"):
        vram.roll(t, 1.5)
    with pytest.raises(IndexError, match="Dimension out of range"):
        t.roll(1, 2)


# ---- einsum and tensordot -------------------------------------------------------------------

EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(6,), (6,)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ba", [(3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ijk->", [(2, 3, 4)]),
    ("ijk->j", [(2, 3, 4)]),
    ("ij,ij,ij->i", [(3, 4), (3, 4), (3, 4)]),
    ("iij->ji", [(3, 3, 2)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("Ba,a", [(3, 4), (4,)]),
    ("ij, jk -> ki", [(3, 4), (4, 5)]),
    ("i,i", [(1,), (5,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (6, 4, 5)]),
    ("...d,...d->...", [(2, 3, 4), (3, 4)]),
    ("b...,b...->...b", [(2, 3, 4), (2, 3, 4)]),
    ("i...,i...->...", [(2, 3), (2, 3)]),
    ("...,...", [(2, 3), (2, 3)]),
    ("...ij->...ji", [(2, 3, 4)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("...ij,jk->ik", [(2, 3, 4), (4, 5)]),
    ("ij->...ij", [(3, 4)]),
]


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize(("equation", "shapes"), EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_matches_numpy(equation, shapes, device):
    arrays = [normal(s, k) for k, s in enumerate(shapes)]
    if equation == "i,i":  # a size-1 dimension broadcasts, as in PyTorch
        want = np.einsum("i,i", np.broadcast_to(arrays[0], (5,)), arrays[1])
    elif equation == "...ij,jk->ik":  # PyTorch sums what the ellipsis covers (NumPy refuses)
        want = np.einsum("...ij,jk->...ik", *arrays).sum(0)
    else:
        want = np.einsum(equation, *arrays)
    close(vram.einsum(equation, *[put(a, device) for a in arrays]), want)
    close(vram.einsum(equation, [put(a, device) for a in arrays]), want)  # a list of operands


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_einsum_non_contiguous_empty_and_half(device):
    a, b = normal((5, 3)), normal((4, 5))
    ta, tb = put(a, device).t(), put(b, device).t()  # [3, 5], [5, 4]
    close(vram.einsum("ij,jk->ik", ta, tb), a.T @ b.T)
    close(vram.einsum("ij,jk->ik", ta[::2], tb), a.T[::2] @ b.T)
    empty = vram.einsum("ij,jk->ik", put(np.zeros((0, 5), np.float32), device), tb)
    equal(empty, np.zeros((0, 4), np.float32))
    zero_sum = vram.einsum(
        "ij,jk->ik",
        put(np.zeros((3, 0), np.float32), device),
        put(np.zeros((0, 4), np.float32), device),
    )
    equal(zero_sum, np.zeros((3, 4), np.float32))
    h = vram.einsum("ij,jk->ik", ta.half(), tb.half())
    assert h.dtype == vram.float16
    close(h, a.T.astype(np.float16).astype(np.float32) @ b.T.astype(np.float16), rtol=2e-2)
    i = vram.einsum("ii->", put(random(vram.int32, (3, 3)), device))
    assert i.dtype == vram.int64  # the sum promotes, as torch's einsum


def test_einsum_errors():
    x, y = vram.zeros(3, 4, device="sim:0"), vram.zeros(4, 3, device="sim:0")
    cases = [
        (("ij,jk->ik", x, x), "subscript j has size 3 for operand 1 which does not broadcast"),
        (("ii->i", x), "subscript i is repeated for operand 0 but the sizes don't match, 4 != 3"),
        (("ij->jj", x), "output subscript j appears more than once in the output"),
        (("ij->k", x), "output subscript k does not appear in the equation for any input"),
        (("ij,jk", x), "fewer operands were provided than specified in the equation"),
        (("ij", x, y), "more operands were provided than specified in the equation"),
        (("ijk", x), r"number of subscripts in the equation \(3\) does not match the number"),
        (("i1", x), "invalid subscript given at index 1 in the equation string"),
    ]
    for args, message in cases:
        with pytest.raises(RuntimeError, match=message):
            vram.einsum(*args)
    ellipsis_cases = [
        (("..ij", x), "found '.' for operand 0 that is not part of any ellipsis"),
        (("...i...", x), "found '.' for operand 0 for which an ellipsis was already found"),
        (("...ijk", x), r"number of subscripts in the equation \(3\) is more than the number"),
        (("ij->i.j", x), "found '.' for output that is not part of any ellipsis"),
        (("...j,...j->...", x, vram.zeros(2, 4, device="sim:0")), "covered by ellipsis"),
    ]
    for args, message in ellipsis_cases:
        with pytest.raises(RuntimeError, match=message):
            vram.einsum(*args)
    with pytest.raises(TypeError, match="operands"):
        vram.einsum("ij", np.zeros((3, 4)))
    with pytest.raises(TypeError, match="equation"):
        vram.einsum(x, y)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_tensordot(device):
    a, b = normal((2, 3, 4)), normal((3, 4, 5), 1)
    ta, tb = put(a, device), put(b, device)
    close(vram.tensordot(ta, tb), np.tensordot(a, b))
    d = normal((4, 6), 3)
    close(vram.tensordot(ta, put(d, device), 1), np.tensordot(a, d, 1))
    close(vram.tensordot(ta, tb, ([1, -1], [0, 1])), np.tensordot(a, b, ([1, 2], [0, 1])))
    close(vram.tensordot(ta, tb, 0), np.tensordot(a, b, 0))
    c = normal((4, 2), 2)
    close(
        vram.tensordot(ta, put(c, device), ([2, 0], [0, 1])), np.tensordot(a, c, ([2, 0], [0, 1]))
    )
    with pytest.raises(RuntimeError, match="contracted dimensions need to match"):
        vram.tensordot(ta, tb, ([0], [0]))
    with pytest.raises(RuntimeError, match="both dimension lists should have same length"):
        vram.tensordot(ta, tb, ([0, 1], [0]))
