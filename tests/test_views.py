"""Views with torch's names, results and errors (vram._views and the Tensor view methods),
checked against NumPy: each shares the input's memory and reads as NumPy's answer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vram

SIM = vram.device("sim:0")
CPU = vram.device("cpu")


def shared(view: vram.Tensor, base: vram.Tensor) -> bool:
    return view._storage is base._storage


def source(shape=(2, 3, 4), device=SIM) -> tuple[vram.Tensor, np.ndarray]:
    values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return vram.tensor(values, device=device), values


@pytest.mark.parametrize("device", [SIM, CPU], ids=str)
def test_view_methods_match_numpy_and_share_memory(device):
    t, a = source(device=device)
    cases = [
        (t.permute(2, 0, 1), a.transpose(2, 0, 1)),
        (t.permute((-1, 0, 1)), a.transpose(2, 0, 1)),
        (t.transpose(0, -1), a.swapaxes(0, 2)),
        (t.swapaxes(1, 2), a.swapaxes(1, 2)),
        (t.swapdims(0, 1), a.swapaxes(0, 1)),
        (t.mT, a.swapaxes(-1, -2)),
        (t.T, a.transpose(2, 1, 0)),
        (t.movedim(0, -1), np.moveaxis(a, 0, -1)),
        (t.moveaxis((0, 1), (2, 0)), np.moveaxis(a, (0, 1), (2, 0))),
        (t.unsqueeze(0), a[None]),
        (t.unsqueeze(-1), a[..., None]),
        (t.unsqueeze(2), np.expand_dims(a, 2)),
        (t[:, :1].squeeze(), a[:, :1].squeeze()),
        (t[:1, :, :1].squeeze(0), a[:1, :, :1].squeeze(0)),
        (t[:1, :, :1].squeeze((0, 2)), a[:1, :, :1].squeeze((0, 2))),
        (t[:1, :, :1].squeeze(1), a[:1, :, :1]),
        (t.narrow(2, 1, 2), a[:, :, 1:3]),
        (t.narrow(-1, -2, 2), a[:, :, 2:4]),
        (t.select(1, -1), a[:, -1]),
        (t.flatten(1), a.reshape(2, 12)),
        (t.flatten(0, 1), a.reshape(6, 4)),
        (t.flatten(1, 1), a),
        (t.unflatten(2, (2, 2)), a.reshape(2, 3, 2, 2)),
        (t.unflatten(-1, (-1, 1)), a.reshape(2, 3, 4, 1)),
        (t[0].expand(5, 3, 4), np.broadcast_to(a[0], (5, 3, 4))),
        (t[:, :1].expand(-1, 3, -1), np.broadcast_to(a[:, :1], (2, 3, 4))),
        (t[0].expand_as(t), np.broadcast_to(a[0], (2, 3, 4))),
        (t.view(6, 4), a.reshape(6, 4)),
        (t.view_as(vram.empty(4, 6, device=device)), a.reshape(4, 6)),
        (t.reshape_as(vram.empty(24, device=device)), a.reshape(24)),
    ]
    for got, want in cases:
        assert shared(got, t)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_views_of_views_keep_offsets_and_strides():
    t, a = source((4, 5, 6))
    v = t[1:, ::2].permute(2, 0, 1).narrow(0, 2, 3).unsqueeze(1).mT
    want = a[1:, ::2].transpose(2, 0, 1)[2:5][:, None].swapaxes(-1, -2)
    assert v.shape == want.shape
    np.testing.assert_array_equal(v.numpy(), want)
    assert v.storage_offset() == 30 + 2


def test_split_chunk_unbind_are_views():
    t, a = source((7, 4))
    pieces = t.split(3)
    assert [p.shape for p in pieces] == [(3, 4), (3, 4), (1, 4)]
    assert all(shared(p, t) for p in pieces)
    for got, want in zip(t.split([2, 0, 5]), np.split(a, [2, 2]), strict=True):
        np.testing.assert_array_equal(got.numpy(), want)
    assert [p.shape for p in t.chunk(3, 1)] == [(7, 2), (7, 2)]
    assert [p.shape for p in t.chunk(4)] == [(2, 4), (2, 4), (2, 4), (1, 4)]
    assert [p.shape for p in vram.zeros(6, device=SIM).chunk(4)] == [(2,), (2,), (2,)]
    assert [p.shape for p in vram.zeros(0, device=SIM).chunk(3)] == [(0,), (0,), (0,)]
    assert [p.shape for p in vram.zeros(0, device=SIM).split(2)] == [(0,)]
    rows = t.unbind()
    assert len(rows) == 7 and rows[2].shape == (4,)
    np.testing.assert_array_equal(rows[2].numpy(), a[2])
    cols = t.unbind(-1)
    np.testing.assert_array_equal(cols[3].numpy(), a[:, 3])


def test_zero_dim_and_zero_size_views():
    s = vram.tensor(5.0, device=SIM)
    assert s.unsqueeze(0).shape == (1,) and s.unsqueeze(-1).shape == (1,)
    assert s.squeeze().shape == () and s.squeeze(0).shape == () and s.squeeze(-1).shape == ()
    assert s.flatten().shape == (1,) and s.flatten().numpy().tolist() == [5.0]
    assert s.transpose(0, -1).shape == () and s.permute().shape == ()
    assert s.view(1, 1).shape == (1, 1) and s.reshape(-1).shape == (1,)
    assert s.expand(2, 3).stride() == (0, 0)
    empty = vram.zeros(0, 3, device=SIM)
    assert empty.permute(1, 0).shape == (3, 0)
    assert empty.view(3, 0, 1).shape == (3, 0, 1)
    assert empty.unflatten(1, (3, 1)).shape == (0, 3, 1)
    assert empty.narrow(0, 0, 0).shape == (0, 3)
    assert empty.unbind(0) == ()


def test_view_and_reshape_on_non_contiguous_tensors():
    t, a = source((4, 6))
    sliced = t[:, :4]
    assert shared(sliced.view(4, 2, 2), t)
    transposed = t.t()
    flat = transposed.reshape(-1)
    assert not shared(flat, t) and flat.is_contiguous()
    np.testing.assert_array_equal(flat.numpy(), a.T.reshape(-1))
    np.testing.assert_array_equal(transposed.flatten().numpy(), a.T.reshape(-1))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda t: t.permute(0, 1), RuntimeError, "input.dim\\(\\) = 3 is not equal to len"),
        (lambda t: t.permute(0, 0, 1), RuntimeError, "duplicate dims are not allowed"),
        (lambda t: t.permute(0, 1, 3), IndexError, "expected to be in range of \\[-3, 2\\]"),
        (lambda t: t.transpose(0, 3), IndexError, "but got 3"),
        (lambda t: t.t(), RuntimeError, "t\\(\\) expects a tensor with <= 2 dimensions"),
        (lambda t: t[0, 0].mT, RuntimeError, "only supported on matrices"),
        (lambda t: t.squeeze((0, 0)), RuntimeError, "dim 0 appears multiple times"),
        (lambda t: t.squeeze(3), IndexError, "Dimension out of range"),
        (lambda t: t.unsqueeze(4), IndexError, "range of \\[-4, 3\\]"),
        (lambda t: t.flatten(2, 1), RuntimeError, "start_dim cannot come after end_dim"),
        (lambda t: t.unflatten(1, ()), RuntimeError, "sizes must be non-empty"),
        (lambda t: t.unflatten(1, (2, -1)), RuntimeError, "don't multiply up to the size"),
        (lambda t: t.unflatten(1, (-1, -1)), RuntimeError, "only one dimension can be inferred"),
        (lambda t: t.narrow(2, 3, 2), RuntimeError, "start \\(3\\) \\+ length \\(2\\) exceeds"),
        (lambda t: t.narrow(2, -5, 1), IndexError, "start out of range"),
        (lambda t: t.narrow(2, 0, -1), RuntimeError, "length must be non-negative"),
        (lambda t: t.select(1, 3), IndexError, "index 3 out of range"),
        (lambda t: t.split(0), RuntimeError, "split_size can only be 0"),
        (lambda t: t.split(-1), RuntimeError, "split_size be non-negative"),
        (lambda t: t.split([1, 2]), RuntimeError, "to sum exactly to 2"),
        (lambda t: t.split([3, -1]), RuntimeError, "only non-negative entries"),
        (lambda t: t.chunk(0), RuntimeError, "greater than 0"),
        (lambda t: t.movedim((0, 1), 1), RuntimeError, "same number of dims"),
        (lambda t: t.movedim((0, 0), (1, 2)), RuntimeError, "repeated dim in `source`"),
        (lambda t: t.expand(3, 4), RuntimeError, "number of sizes provided \\(2\\)"),
        (lambda t: t.expand(2, 5, 4), RuntimeError, "expanded size of the tensor \\(5\\)"),
        (lambda t: t.expand(-1, 2, 3, 4), RuntimeError, "isn't allowed in a leading"),
        (lambda t: t.view(-1, -1), RuntimeError, "only one dimension can be inferred"),
        (lambda t: t.view(5, -1), RuntimeError, "shape '\\[5, -1\\]' is invalid for input"),
        (lambda t: t.view(-2, 12), RuntimeError, "invalid shape dimension -2"),
        (lambda t: t.permute(2, 0, 1).view(24), RuntimeError, "Use .reshape"),
    ],
)
def test_view_errors_are_torchs(call, error, message):
    t = vram.zeros(2, 3, 4, device=SIM)
    with pytest.raises(error, match=message):
        call(t)


def test_zero_dim_errors():
    s = vram.tensor(1.0, device=SIM)
    with pytest.raises(RuntimeError, match="narrow\\(\\) cannot be applied to a 0-dim tensor"):
        s.narrow(0, 0, 1)
    with pytest.raises(IndexError, match="no dimensions"):
        s.unbind()
    with pytest.raises(IndexError, match="range of \\[-1, 0\\]"):
        s.squeeze(1)


def test_basic_indexing_with_bools_ellipses_and_lists_read_as_tuples():
    t, a = source((2, 3, 4))
    assert t[True].shape == (1, 2, 3, 4)
    assert t[False].shape == (0, 2, 3, 4)
    assert t[None, ..., None].shape == (1, 2, 3, 4, 1)
    assert t[..., ...].shape == (2, 3, 4)  # PyTorch lets later ellipses stand for nothing
    np.testing.assert_array_equal(t[[0, slice(None), 1]].numpy(), a[0, :, 1])
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        t[::0]
    with pytest.raises(TypeError, match="only integers, slices"):
        t[1.5]


_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(_shapes, st.data())
def test_reshape_of_any_permuted_slice_matches_numpy(shape, data):
    """Property: view when the strides allow it (PyTorch's computeStride), a copy otherwise;
    the elements always read as NumPy's reshape."""
    values = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    t = vram.tensor(values, device=CPU)
    order = data.draw(st.permutations(range(len(shape))))
    t, values = t.permute(*order), values.transpose(order)
    numel = values.size
    divisors = [d for d in range(1, numel + 1) if numel % d == 0]
    first = data.draw(st.sampled_from(divisors))
    new_shape = (first, -1)
    got = t.reshape(new_shape)
    np.testing.assert_array_equal(got.numpy(), values.reshape(new_shape))
    if shared(got, t):
        assert got.numpy().ctypes.data == t.numpy().ctypes.data


# ---- Note [Layouts remembered] ---------------------------------------------------------------


def _fresh(t: vram.Tensor, method: str, args: tuple) -> vram.Tensor:
    """``method`` worked out with nothing remembered."""
    vram._tensor._layouts.clear()
    return getattr(t, method)(*args)


@settings(max_examples=60, deadline=None)
@given(
    perm=st.permutations([0, 1, 2, 3]),
    sizes=st.sampled_from([(24, 5), (-1, 10), (2, 12, 5), (120,), (4, 3, 2, 5)]),
    dims=st.tuples(st.integers(-4, 3), st.integers(-4, 3)),
)
def test_remembered_layouts_are_the_ones_worked_out(perm, sizes, dims):
    """view, reshape, permute and transpose on sources of several layouts: the second call
    (remembered) gives the shape, strides and values of a call worked out afresh."""
    base, values = source((2, 3, 4, 5))
    x = base.permute(*perm)
    for method, args in (("permute", tuple(perm)), ("transpose", dims), ("reshape", sizes)):
        want = _fresh(x, method, args)
        for _ in range(2):
            got = getattr(x, method)(*args)
            assert (got.shape, got.stride(), got.storage_offset()) == (
                want.shape, want.stride(), want.storage_offset()
            )  # fmt: skip
            assert shared(got, base) == shared(want, base)
            assert np.array_equal(got.numpy(), want.numpy())
            assert got._sig == _layout_id(got)  # the id carried is the one asked afresh
    if x.is_contiguous():
        assert x.view(*sizes).stride() == _fresh(x, "view", sizes).stride()


def _layout_id(t: vram.Tensor) -> int:
    return vram._tensor.layout_id(t.dtype, t.shape, tuple(t.stride()), t.device)


@pytest.mark.parametrize("device", [SIM, CPU], ids=str)
def test_views_of_one_layout_in_other_dtypes_carry_their_own_ids(device):
    """Views are remembered under the source's layout id, which names its dtype and device:
    one shape in two dtypes (or on two devices) gives views with the id of each."""
    ones = np.ones((4, 6), np.float32)
    for t in (vram.tensor(ones, device=device), vram.tensor(ones.astype(np.int64), device=device)):
        for _ in range(2):  # worked out, then remembered
            for view in (t.view(6, 4), t.reshape(2, 12), t.permute(1, 0), t.transpose(0, 1)):
                assert view.dtype == t.dtype and view.device == t.device
                assert view._sig == _layout_id(view)
                assert (view + 1).numpy().dtype == ones.astype(t.dtype.np).dtype


def test_bools_and_floats_are_refused_after_their_ints_are_remembered():
    t, _ = source((1, 3))
    t.view(1, 3), t.permute(1, 0), t.transpose(1, 0), t.reshape(3, 1)  # remembered
    for call in (
        lambda: t.view(True, 3),
        lambda: t.view(1.0, 3),
        lambda: t.permute(True, 0),
        lambda: t.transpose(True, 0),
        lambda: t.reshape(3, True),
    ):
        with pytest.raises(TypeError):
            call()
    assert t.view((1, 3)).shape == t.view([1, 3]).shape == (1, 3)  # a tuple, a list


def test_remembered_layouts_are_bounded():
    vram._tensor._layouts.clear()
    t = vram.empty(5000, device=SIM)
    bound = vram._tensor._MAX_LAYOUTS
    for n in range(1, bound + 100):  # one new source shape each: more layouts than the bound
        t[:n].view(-1, 1)
        assert len(vram._tensor._layouts) <= bound
    assert t[:7].view(-1, 1).shape == (7, 1)


@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
def test_an_int_index_is_the_general_index(perm):
    """``t[i]`` (the int fast path) against ``t[(i,)]`` and ``t[i, ...]`` (basic_index's
    general walk): the same layout and values for every i, negative ones too, and the same
    error past the ends; a bool is not taken as an int."""
    base, _ = source((3, 4, 5))
    t = base.permute(*perm)[1:]  # a strided source with an offset
    n = t.shape[0]
    for i in range(-n, n):
        for want in (t[(i,)], t[i, ...]):
            got = t[i]
            assert (got.shape, got.stride(), got.storage_offset()) == (
                want.shape, want.stride(), want.storage_offset()
            )  # fmt: skip
            assert shared(got, base) and np.array_equal(got.numpy(), want.numpy())
    for i in (n, -n - 1):
        with pytest.raises(IndexError, match=f"index {i} is out of bounds for dimension 0"):
            t[i]
    assert t[True].shape == (1, *t.shape) and t[False].shape == (0, *t.shape)
    with pytest.raises(IndexError, match="invalid index of a 0-dim tensor|too many indices"):
        t[0][0][0][0]
