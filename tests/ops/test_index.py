"""index_select, gather, scatter, scatter_add, masked_fill, nonzero, masked_select and
advanced indexing (``t[idx]``, ``t[mask]``, ``t[idx] = v``, index_put_) on the simulated GPU
and the host, checked against NumPy, with torch's errors."""

from __future__ import annotations

import numpy as np
import pytest
from index_helpers import CPU, DEVICES, DTYPES, SIM, equal, put, random

import vram
from vram._errors import CudaError

IDS = [d.name for d in DTYPES]


# ---- index_select ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_index_select_every_dtype_and_dim(dt, device):
    a = random(dt, (4, 5, 3), 1)
    t = put(a, device)
    idx = np.array([3, 0, 0, 2, 1])
    for dim in (0, 1, 2, -1, -3):
        picked = idx[idx < a.shape[dim]]
        got = vram.index_select(t, dim, put(picked, device))
        equal(got, np.take(a, picked, axis=dim))
    equal(t.index_select(1, put(idx.astype(np.int32), device)), np.take(a, idx, axis=1))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_index_select_layouts_zero_size_and_zero_dim(device):
    a = random(vram.float32, (6, 8), 2)
    t = put(a, device)
    idx = put(np.array([5, 1, 4, 4, 0, 2]), device)
    # non-contiguous input and index
    equal(t.t().index_select(0, idx[::2]), a.T[[5, 4, 0]])
    equal(t[::2, 1::3].index_select(1, idx[4:6]), a[::2, 1::3][:, [0, 2]])
    # a 0-dim index keeps the dimension (of size 1)
    equal(t.index_select(0, put(np.array(3), device)), a[[3]])
    # empty index, empty input
    equal(t.index_select(1, put(np.zeros(0, np.int64), device)), a[:, :0])
    empty = put(np.zeros((0, 3), np.float32), device)
    equal(empty.index_select(1, put(np.array([2, 0]), device)), np.zeros((0, 2), np.float32))
    # a 0-dim input takes one index
    scalar = put(np.array(7.0, np.float32), device)
    equal(scalar.index_select(0, put(np.array([0]), device)), np.array(7.0, np.float32))


def test_index_select_errors():
    t = vram.zeros(3, 4, device=SIM)
    with pytest.raises(RuntimeError, match="Expected dtype int32 or int64 for index"):
        t.index_select(0, vram.tensor([0.0], device=SIM))
    with pytest.raises(IndexError, match="Index is supposed to be a vector"):
        t.index_select(0, vram.tensor([[0]], device=SIM))
    with pytest.raises(IndexError, match="Dimension out of range"):
        t.index_select(2, vram.tensor([0], device=SIM))
    with pytest.raises(RuntimeError, match="found at least two devices"):
        t.index_select(0, vram.tensor([0], device=CPU))
    with pytest.raises(RuntimeError, match="Index to scalar can have only 1 value, got 2"):
        vram.tensor(1.0, device=SIM).index_select(0, vram.tensor([0, 0], device=SIM))
    with pytest.raises(TypeError, match="argument 'index' must be Tensor"):
        vram.index_select(t, 0, [0])


def test_an_index_out_of_range_raises_torchs_error_on_cpu_and_a_device_assert_on_sim():
    host = vram.zeros(3, 4, device=CPU)
    with pytest.raises(IndexError, match="index out of range in self"):
        host.index_select(0, vram.tensor([0, 3], device=CPU))
    with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 0 with size 3"):
        host.gather(0, vram.tensor([[0, -1]], device=CPU))
    device = vram.zeros(3, 4, device=SIM)
    result = device.index_select(0, vram.tensor([0, 3], device=SIM))  # queued: no error yet
    with pytest.raises(CudaError, match="CUDA_ERROR_ASSERT") as raised:
        result.numpy()
    assert "index out of range in self" in str(raised.value)
    assert raised.value.call == "index_select"


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_a_bad_index_writes_nothing(device):
    t = vram.zeros(3, device=device)
    index = vram.tensor([0, 1, 7], device=device)
    with pytest.raises(RuntimeError, match="index 7 is out of bounds for dimension 0 with size 3"):
        t.scatter_(0, index, vram.ones(3, device=device))
        vram.current_stream(device).synchronize() if device.type != "cpu" else None
    equal(t, np.zeros(3, np.float32))


# ---- gather and scatter ------------------------------------------------------------------------


def gather_expected(a: np.ndarray, dim: int, index: np.ndarray) -> np.ndarray:
    out = np.empty(index.shape, a.dtype)
    for pos in np.ndindex(index.shape):
        at = list(pos)
        at[dim] = index[pos]
        out[pos] = a[tuple(at)]
    return out


def scatter_expected(a, dim, index, src, op=None):
    out = a.copy()
    for pos in np.ndindex(index.shape):
        at = list(pos)
        at[dim] = index[pos]
        at = tuple(at)
        value = src[pos] if isinstance(src, np.ndarray) else src
        out[at] = value if op is None else op(out[at], value)
    return out


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_gather_every_dtype(dt, device):
    a = random(dt, (4, 5), 3)
    rng = np.random.default_rng(4)
    for dim in (0, 1, -1):
        index = rng.integers(0, a.shape[dim], (3, 4))
        got = vram.gather(put(a, device), dim, put(index, device))
        equal(got, gather_expected(a, dim % 2, index))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_gather_layouts_and_edges(device):
    a = random(vram.int64, (5, 6, 7), 5)
    rng = np.random.default_rng(6)
    index = rng.integers(-0, 6, (7, 4, 5)).transpose(2, 1, 0)  # non-contiguous, [5, 4, 7]
    t = put(a, device)
    got = t.gather(1, put(np.ascontiguousarray(index.transpose(2, 1, 0)), device).permute(2, 1, 0))
    equal(got, gather_expected(a, 1, index))
    equal(
        t.permute(2, 0, 1).gather(0, put(index[:4, :3, :2], device)),
        gather_expected(a.transpose(2, 0, 1), 0, index[:4, :3, :2]),
    )
    equal(t.gather(2, put(np.zeros((0, 6, 2), np.int64), device)), np.zeros((0, 6, 2), np.int64))
    scalar = put(np.array(4), device)
    equal(scalar.gather(0, put(np.array(0), device)), np.array(4))
    small = (index % 5)[:2]
    equal(t.gather(0, put(small.astype(np.int32), device)), gather_expected(a, 0, small))


def test_gather_errors():
    t = vram.zeros(3, 4, device=SIM)
    with pytest.raises(RuntimeError, match="gather\\(\\): Expected dtype int32/int64 for index"):
        t.gather(0, vram.zeros(1, 1, device=SIM))
    with pytest.raises(RuntimeError, match="same number of dimensions as input"):
        t.gather(0, vram.tensor([0], device=SIM))
    with pytest.raises(RuntimeError, match="Size does not match at dimension 1"):
        t.gather(0, vram.zeros(5, 5, dtype=vram.int64, device=SIM))


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_scatter_scatter_add_and_multiply_every_dtype(dt, device):
    a = random(dt, (4, 5), 7)
    src = random(dt, (3, 5), 8)
    rng = np.random.default_rng(9)
    unique = np.stack([rng.permutation(4)[:3] for _ in range(5)], axis=1)  # no repeats
    repeated = rng.integers(0, 4, (3, 5))
    t = put(a, device)
    equal(t.scatter(0, put(unique, device), put(src, device)), scatter_expected(a, 0, unique, src))
    equal(t, a)  # out of place
    add = np.logical_or if dt == vram.bool_ else np.add
    want = scatter_expected(a, 0, repeated, src, add)
    equal(t.scatter_add(0, put(repeated, device), put(src, device)), want)
    equal(vram.scatter_add(t, 0, put(repeated, device), put(src, device)), want)
    equal(t.scatter(0, put(repeated, device), put(src, device), reduce="add"), want)
    if dt != vram.complex128:
        mul = np.logical_and if dt == vram.bool_ else np.multiply
        got = t.scatter(0, put(repeated, device), put(src, device), reduce="multiply")
        equal(got, scatter_expected(a, 0, repeated, src, mul))
    value = a.dtype.type(1)
    few = unique.T[:4, :2]
    equal(t.scatter(1, put(few, device), value), scatter_expected(a, 1, few, value))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_scatter_in_place_layouts_and_value(device):
    a = random(vram.float32, (6, 5), 10)
    t = put(a.T.copy(), device).t()  # a transposed destination
    index = put(np.array([[5, 0, 3], [1, 2, 4]]), device)
    src = put(random(vram.float32, (4, 5), 11), device)[1:3, ::2]  # a strided source
    assert t.scatter_(0, index, src) is t
    equal(t, scatter_expected(a, 0, np.array([[5, 0, 3], [1, 2, 4]]), src.numpy()))
    t.scatter_(1, put(np.array([[0], [4]]), device), 2.5)
    want = scatter_expected(a, 0, np.array([[5, 0, 3], [1, 2, 4]]), src.numpy())
    equal(t, scatter_expected(want, 1, np.array([[0], [4]]), np.float32(2.5)))
    ints = put(np.zeros(4, np.int64), device)
    ints.scatter_(0, put(np.array([1, 1, 3]), device), 2.7, reduce="add")  # 2.7 -> 2
    equal(ints, np.array([0, 4, 0, 2]))


def test_scatter_errors():
    t = vram.zeros(2, 3, device=SIM)
    index = vram.tensor([[0]], device=SIM)
    with pytest.raises(RuntimeError, match="scatter\\(\\): Expected dtype int32/int64 for index"):
        t.scatter(1, vram.zeros(1, 1, device=SIM), 1.0)
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        t.scatter_add(1, index, vram.ones(2, 3, dtype=vram.float64, device=SIM))
    with pytest.raises(RuntimeError, match="same number of dimensions as self"):
        t.scatter_(1, vram.tensor([0], device=SIM), vram.ones(2, 3, device=SIM))
    with pytest.raises(RuntimeError, match="to be no larger size than src \\[2, 3\\]"):
        t.scatter_(1, vram.zeros(1, 4, dtype=vram.int64, device=SIM), vram.ones(2, 3, device=SIM))
    with pytest.raises(RuntimeError, match="reduce argument must be either add or multiply"):
        t.scatter(1, index, 1.0, reduce="sum")
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        vram.zeros(3, device=SIM).expand(2, 3).scatter_(1, index, 1.0)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        t.scatter_(1, index, t)


# ---- masked_fill -------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_masked_fill_every_dtype(dt, device):
    a = random(dt, (3, 4), 12)
    mask = random(vram.bool_, (4,), 13)
    t = put(a, device)
    value = a.dtype.type(5)
    equal(t.masked_fill(put(mask, device), 5), np.where(mask, value, a))
    assert t.masked_fill_(put(mask, device), 5) is t
    equal(t, np.where(mask, value, a))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_masked_fill_values_broadcasts_and_conversions(device):
    a = random(vram.float32, (3, 4), 14)
    mask = random(vram.bool_, (3, 1), 15)
    t = put(a, device)
    equal(t.masked_fill(put(mask, device), vram.tensor(2.0, device=device)), np.where(mask, 2, a))
    equal(t.masked_fill(put(mask, device), vram.tensor(3.0, device=CPU)), np.where(mask, 3, a))
    equal(t.masked_fill(put(mask, device), vram.tensor(9, device=device)), np.where(mask, 9, a))
    wide = put(np.zeros(4, np.float32), device).masked_fill(put(np.ones((3, 4), bool), device), 1.5)
    equal(wide, np.full((3, 4), 1.5, np.float32))
    ints = put(np.zeros(3, np.int8), device)
    equal(
        ints.masked_fill(put(np.array([1, 0, 1], bool), device), 2.9), np.array([2, 0, 2], np.int8)
    )
    flags = put(np.zeros(3, bool), device)
    equal(flags.masked_fill(put(np.ones(3, bool), device), 2), np.ones(3, bool))
    equal(t.t().masked_fill(put(mask.T, device), -1), np.where(mask.T, -1, a.T).astype(np.float32))


def test_masked_fill_errors():
    t = vram.zeros(3, device=SIM)
    with pytest.raises(RuntimeError, match="boolean masks, but got mask with dtype long int"):
        t.masked_fill(vram.tensor([1, 0, 1], device=SIM), 1)
    with pytest.raises(RuntimeError, match="0-dimensional value tensor, but got tensor with 1"):
        t.masked_fill(vram.ones(3, dtype=vram.bool_, device=SIM), vram.ones(1, device=SIM))
    with pytest.raises(RuntimeError, match="cannot be converted to type int8_t without overflow"):
        vram.zeros(3, dtype=vram.int8, device=SIM).masked_fill(
            vram.ones(3, dtype=vram.bool_, device=SIM), 300
        )
    with pytest.raises(RuntimeError, match="cannot be converted to type c10::Half"):
        vram.zeros(3, dtype=vram.float16, device=SIM).masked_fill(
            vram.ones(3, dtype=vram.bool_, device=SIM), 1e6
        )
    with pytest.raises(RuntimeError, match="output with shape \\[3\\]"):
        t.masked_fill_(vram.ones(2, 3, dtype=vram.bool_, device=SIM), 1.0)


# ---- nonzero, argwhere, masked_select ----------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_nonzero_every_dtype(dt, device):
    a = random(dt, (5, 6), 16)
    a.flat[::3] = 0
    equal(vram.nonzero(put(a, device)), np.argwhere(a))
    equal(put(a, device).argwhere(), np.argwhere(a))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_nonzero_and_masked_select_layouts_and_edges(device):
    rng = np.random.default_rng(17)
    big = rng.random((300, 41)) > 0.6  # many chunks
    t = put(big, device)
    equal(t.nonzero(), np.argwhere(big))
    equal(t.t().nonzero(), np.argwhere(big.T))
    equal(t[::3, 5:].nonzero(), np.argwhere(big[::3, 5:]))
    rows, cols = t.nonzero(as_tuple=True)
    equal(rows, np.nonzero(big)[0])
    equal(cols, np.nonzero(big)[1])
    values = rng.standard_normal((300, 41)).astype(np.float32)
    equal(put(values, device).masked_select(t), values[big])
    equal(vram.masked_select(put(values, device).t(), t.t()), values.T[big.T])
    row_mask = big[0]  # broadcast over the rows
    want = values[np.broadcast_to(row_mask, values.shape)]
    equal(put(values, device).masked_select(put(row_mask, device)), want)
    nan = put(np.array([0.0, np.nan, -0.0, 1.0], np.float32), device)
    equal(nan.nonzero(), np.array([[1], [3]]))
    equal(vram.nonzero(put(np.array(3.0), device)), np.zeros((1, 0), np.int64))
    equal(vram.nonzero(put(np.array(0.0), device)), np.zeros((0, 0), np.int64))
    equal(vram.nonzero(put(np.zeros((0, 3)), device)), np.zeros((0, 2), np.int64))
    (only,) = vram.nonzero(put(np.array(3.0), device), as_tuple=True)
    equal(only, np.zeros(1, np.int64))
    equal(put(np.array(2.0), device).masked_select(put(np.array(True), device)), np.array([2.0]))


def test_masked_select_errors():
    t = vram.zeros(3, device=SIM)
    with pytest.raises(RuntimeError, match="expected BoolTensor for mask"):
        t.masked_select(vram.ones(3, dtype=vram.uint8, device=SIM))
    with pytest.raises(RuntimeError, match="must match the size"):
        t.masked_select(vram.ones(4, dtype=vram.bool_, device=SIM))


def test_nonzero_synchronizes_a_deferred_stream():
    sim = vram.sim.driver()
    t = vram.zeros(4, device=SIM)
    sim.deferred_depth += 1
    try:
        t.fill_(1.0)  # queued, not run
        equal(t.nonzero(), np.arange(4).reshape(4, 1))
    finally:
        sim.deferred_depth -= 1


# ---- advanced indexing -------------------------------------------------------------------------


CASES = {  # index, what NumPy reads (where PyTorch and NumPy agree)
    "int tensor": lambda i, m: (i, i),
    "second dim": lambda i, m: ((slice(None), i), (slice(None), i)),
    "after ellipsis": lambda i, m: ((Ellipsis, i[:2]), (Ellipsis, i[:2])),
    "two tensors": lambda i, m: ((i, i[::-1]), (i, i[::-1])),
    "separated": lambda i, m: ((i[:2], slice(None), i[:2]), (i[:2], slice(None), i[:2])),
    "2-d index": lambda i, m: (i.reshape(2, 2), i.reshape(2, 2)),
    "broadcast": lambda i, m: ((i[:, None], i[None, :3]), (i[:, None], i[None, :3])),
    "none first": lambda i, m: ((None, i), (None, i)),
    "slice then": lambda i, m: ((slice(1, 3), i[:3]), (slice(1, 3), i[:3])),
    "list": lambda i, m: ([0, 2, -1], [0, 2, -1]),
    "negative": lambda i, m: (-i - 1, -i - 1),
    "mask": lambda i, m: (m, m),
    "leading mask": lambda i, m: (m[:, :, 0], m[:, :, 0]),
    "middle mask": lambda i, m: ((slice(None), m[0, :, 0]), (slice(None), m[0, :, 0])),
    "mask and int": lambda i, m: ((m[:, 0, 0], i[:1]), (m[:, 0, 0], i[:1])),
    "bool list": lambda i, m: ([True, False, True, True], [True, False, True, True]),
}


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_reading_through_tensors_lists_and_masks_matches_numpy(case, device):
    a = random(vram.int32, (4, 4, 4), 18)
    mask = random(vram.bool_, (4, 4, 4), 19)
    index, want = CASES[case](np.array([3, 0, 2, 2]), mask)

    def on_device(item):
        return put(item, device) if isinstance(item, np.ndarray) else item

    got_index = tuple(map(on_device, index)) if isinstance(index, tuple) else on_device(index)
    equal(put(a, device)[got_index], a[want])


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_reading_where_torch_differs_from_numpy(device):
    a = random(vram.int64, (2, 3, 4), 20)
    t = put(a, device)
    i = put(np.array([3, 1]), device)
    equal(t[0, :, i], a[0][:, [3, 1]])  # an int selects first (numpy moves the result first)
    equal(t[[[0, 1], [2, 0]]], a[[0, 1], [2, 0]])  # a list of lists reads as a tuple
    equal(t[put(np.array(1), device)], a[1])  # a 0-dim index: a copy without the dim
    equal(t[:, put(np.array(True), device)], a[:, None])
    equal(t[put(np.array(False), device)], a[None][:0])


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_reading_and_writing_every_dtype(dt, device):
    a = random(dt, (5, 3), 21)
    t = put(a, device)
    idx = np.array([4, 0, 4])
    equal(t[put(idx, device)], a[idx])
    equal(t[put(idx.astype(np.int32), device), 1:], a[idx, 1:])
    mask = random(vram.bool_, (5, 3), 22)
    equal(t[put(mask, device)], a[mask])
    b = a.copy()
    b[[1, 3]] = a[[0, 2]]
    t[put(np.array([1, 3]), device)] = put(a[[0, 2]], device)
    equal(t, b)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_reading_non_contiguous_and_zero_size(device):
    a = random(vram.float32, (6, 7), 23)
    t = put(a, device)
    idx = put(np.array([[5, 1, 2, 0]]), device)
    equal(t.t()[idx[0, ::2]], a.T[[5, 2]])
    equal(t[1::2][:, idx[0, 1:]], a[1::2][:, [1, 2, 0]])
    equal(t[put(np.zeros(0, np.int64), device)], a[[]].reshape(0, 7))
    equal(t[:, put(np.zeros((2, 0), np.int64), device)], a[:, np.zeros((2, 0), int)])
    empty = put(np.zeros((0, 3), np.float32), device)
    equal(empty[put(np.zeros((0, 3), bool), device)], np.zeros(0, np.float32))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_writing_through_tensors_lists_and_masks(device):
    a = random(vram.float32, (4, 5), 24)
    t = put(a, device)
    want = a.copy()
    mask = a > 0
    t[put(mask, device)] = 0.5  # masked_fill_
    want[mask] = 0.5
    equal(t, want)
    t[put(mask, device)] = vram.tensor(1.5, device=CPU)
    want[mask] = 1.5
    equal(t, want)
    count = int(mask.sum())
    t[put(mask, device)] = put(np.arange(count, dtype=np.float32), device)
    want[mask] = np.arange(count)
    equal(t, want)
    t[:, [0, 3]] = put(np.array([[7.0, 8.0]], np.float32), device)  # broadcast over rows
    want[:, [0, 3]] = [7.0, 8.0]
    equal(t, want)
    t[[0, 2], [1, 4]] = 9  # a number, cast
    want[[0, 2], [1, 4]] = 9
    equal(t, want)
    t[put(np.array([3]), device)] = put(np.ones((1, 1, 5), np.float64), device)  # leading 1s
    want[[3]] = 1
    equal(t, want)
    t[1:3, put(np.array([True, False, True, False, False]), device)] = put(
        np.array([-1.0, -2.0], np.float32), device
    )
    want[1:3, [0, 2]] = [-1.0, -2.0]
    equal(t, want)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_index_put_with_accumulate_adds_every_repeat(device):
    a = random(vram.int64, (4, 3), 25)
    t = put(a, device)
    rows = np.array([0, 2, 0, 0, 3])
    values = random(vram.int64, (5, 3), 26)
    got = t.index_put((put(rows, device),), put(values, device), accumulate=True)
    want = a.copy()
    np.add.at(want, rows, values)
    equal(got, want)
    equal(t, a)
    t.index_put_((put(rows, device), put(np.array([1]), device)), put(np.array(5), device), True)
    want = a.copy()
    np.add.at(want, (rows, 1), 5)
    equal(t, want)
    halves = put(np.zeros(3, np.float16), device)
    halves.index_put_(
        (put(np.array([1, 1, 1, 2]), device),), put(np.ones(4, np.float16), device), True
    )
    equal(halves, np.array([0, 3, 1], np.float16))
    none_first = put(np.zeros((2, 3), np.float32), device)
    none_first.index_put_(
        (None, put(np.array([2, 0]), device)), put(np.ones(2, np.float32), device)
    )
    equal(none_first, np.array([[1, 0, 1], [1, 0, 1]], np.float32))


def test_advanced_indexing_errors():
    t = vram.zeros(3, 4, device=SIM)
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 3"):
        t[[0, 5]]
    with pytest.raises(IndexError, match="index -6 is out of bounds for dimension 1 with size 4"):
        t[[0, 1], [0, -6]]
    with pytest.raises(IndexError, match="must be long, int, byte or bool tensors"):
        t[vram.tensor([0.0], device=SIM)]
    with pytest.raises(IndexError, match="must be long, int, byte or bool tensors"):
        t[np.array([0], np.int16)]
    with pytest.raises(IndexError, match="The shape of the mask \\[2\\] at index 0 does not match"):
        t[vram.tensor([True, False], device=SIM)]
    with pytest.raises(IndexError, match="shape mismatch: indexing tensors could not be broadcast"):
        t[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="too many indices"):
        t[[0], [0], [0]]
    with pytest.raises(RuntimeError, match="shape mismatch: value tensor of shape \\[3\\]"):
        t[[0, 1]] = vram.ones(3, device=SIM)
    with pytest.raises(RuntimeError, match="source and destination dtypes match, got Float"):
        t.index_put_((vram.tensor([0], device=SIM),), vram.ones(4, dtype=vram.float64, device=SIM))
    with pytest.raises(TypeError, match="argument 'values' must be Tensor"):
        t.index_put_((vram.tensor([0], device=SIM),), 1.0)
    device_bad = t[vram.tensor([0, 3], device=SIM)]
    with pytest.raises(CudaError, match="index 3 is out of bounds for dimension 0 with size 3"):
        device_bad.numpy()


def test_a_uint8_mask_warns_as_torchs_does():
    t = vram.arange(4, device=SIM)
    with pytest.warns(UserWarning, match="indexing with dtype torch.uint8 is now deprecated"):
        got = t[vram.tensor([1, 0, 1, 0], dtype=vram.uint8, device=SIM)]
    equal(got, np.array([0, 2]))
