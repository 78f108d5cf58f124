"""Tensors on the simulated GPU and the host: factories, views, copies, streams, bad input."""

from __future__ import annotations

import gc
import weakref

import ml_dtypes
import numpy as np
import pytest

import vram
from vram._dtypes import all_dtypes

SIM = vram.device("sim:0")
SIM1 = vram.device("sim:1")


def sample(dt: vram.dtype, shape: tuple[int, ...] = (2, 3), seed: int = 0) -> np.ndarray:
    """Values every dtype holds exactly (small integers; booleans; complex with imag parts)."""
    values = np.random.default_rng(seed).integers(-8, 8, size=shape)
    if dt == vram.bool_:
        return values > 0
    if dt == vram.uint8:
        values = np.abs(values)
    array = values.astype(dt.np)
    return array + 1j * array if dt.is_complex else array


# ---- factories -----------------------------------------------------------------------


def test_empty_has_the_shape_dtype_and_contiguous_strides():
    t = vram.empty(2, 3, 4, dtype=vram.float16, device=SIM)
    assert t.shape == (2, 3, 4)
    assert t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4
    assert t.stride() == (12, 4, 1) and t.stride(0) == 12
    assert t.storage_offset() == 0
    assert t.dtype == vram.float16 and t.device == SIM
    assert t.numel() == 24 and t.nbytes == 48 and t.element_size() == 2
    assert t.dim() == t.ndim == 3 and len(t) == 2
    assert t.is_contiguous()


def test_size_may_be_a_tuple_or_a_list():
    assert vram.empty((2, 3), device=SIM).shape == (2, 3)
    assert vram.zeros([4], device=SIM).shape == (4,)
    assert vram.empty((), device=SIM).shape == ()


def test_factories_default_to_float32_on_the_current_device():
    with vram.device("sim:1"):
        t = vram.zeros(3)
    assert t.device == SIM1 and t.dtype == vram.float32


def test_zeros_ones_full():
    np.testing.assert_array_equal(vram.zeros(2, 2, device=SIM).numpy(), np.zeros((2, 2)))
    ones = vram.ones(3, dtype=vram.int8, device=SIM)
    assert ones.dtype == vram.int8
    np.testing.assert_array_equal(ones.numpy(), [1, 1, 1])
    full = vram.full((2,), 7, device=SIM)
    assert full.dtype == vram.int64
    np.testing.assert_array_equal(full.numpy(), [7, 7])
    assert vram.full((1,), 2.5, device=SIM).dtype == vram.float32
    assert vram.full((1,), True, device=SIM).dtype == vram.bool_
    assert vram.full((1,), 1j, device=SIM).dtype == vram.complex64


def test_arange():
    np.testing.assert_array_equal(vram.arange(5, device=SIM).numpy(), np.arange(5))
    assert vram.arange(5, device=SIM).dtype == vram.int64
    t = vram.arange(1, 2, 0.25, device=SIM)
    assert t.dtype == vram.float32
    np.testing.assert_array_equal(t.numpy(), [1.0, 1.25, 1.5, 1.75])
    np.testing.assert_array_equal(vram.arange(5, 0, -2, device=SIM).numpy(), [5, 3, 1])
    assert vram.arange(3, dtype=vram.float64, device="cpu").numpy().dtype == np.float64


def test_tensor_infers_pytorch_dtypes():
    assert vram.tensor([1, 2], device=SIM).dtype == vram.int64
    assert vram.tensor([1.0, 2], device=SIM).dtype == vram.float32
    assert vram.tensor([True], device=SIM).dtype == vram.bool_
    assert vram.tensor([1j], device=SIM).dtype == vram.complex64
    assert vram.tensor(np.zeros(2), device=SIM).dtype == vram.float64  # arrays keep theirs
    assert vram.tensor(3.5, device=SIM).shape == ()
    assert vram.tensor([[1, 2]], dtype="float16", device=SIM).dtype == vram.float16


def test_tensor_copies_its_data():
    data = np.arange(3.0)
    t = vram.tensor(data, device="cpu")
    data[0] = 9
    assert t.numpy()[0] == 0
    u = vram.tensor(t, device=SIM)
    assert u.device == SIM and u.numpy().tolist() == [0, 1, 2]


def test_from_numpy_shares_memory_both_ways():
    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = vram.from_numpy(array)
    assert t.device == vram.device("cpu") and t.dtype == vram.int32
    assert t.data_ptr() == array.ctypes.data
    array[1, 2] = 42
    assert t.numpy()[1, 2] == 42
    t[0, 0] = -1
    assert array[0, 0] == -1


def test_from_numpy_keeps_strides_and_the_array_alive():
    array = np.arange(24, dtype=np.float64).reshape(4, 6)[::2, 1::2]
    t = vram.from_numpy(array)
    assert t.stride() == (12, 2) and not t.is_contiguous()
    np.testing.assert_array_equal(t.numpy(), array)
    ref = weakref.ref(array.base)
    del array
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(t.numpy(), np.arange(24.0).reshape(4, 6)[::2, 1::2])


# ---- dtype and stride round trips ------------------------------------------------------


@pytest.mark.parametrize("dt", all_dtypes, ids=lambda d: d.name)
def test_every_dtype_round_trips_through_the_device(dt):
    values = sample(dt, (3, 4))
    t = vram.tensor(values, device=SIM)
    assert t.dtype == dt
    back = t.numpy()
    assert back.dtype == dt.np
    np.testing.assert_array_equal(back, values)
    np.testing.assert_array_equal(t.cpu().numpy(), values)
    np.testing.assert_array_equal(t.to(SIM1).numpy(), values)


@pytest.mark.parametrize("dt", all_dtypes, ids=lambda d: d.name)
def test_every_dtype_round_trips_through_strided_views(dt):
    values = sample(dt, (4, 6), seed=1)
    t = vram.tensor(values, device=SIM)
    for index in [(slice(None, None, 2), slice(1, None, 2)), (slice(1, 3), 2), (Ellipsis, 5)]:
        np.testing.assert_array_equal(t[index].numpy(), values[index])
    np.testing.assert_array_equal(t.t().numpy(), values.T)
    np.testing.assert_array_equal(t.t().contiguous().numpy(), values.T)
    strided_host = vram.from_numpy(values[::-1].copy()[::2])
    np.testing.assert_array_equal(strided_host.to(SIM).numpy(), values[::-1][::2])


def test_numpy_of_a_cpu_tensor_is_a_view_and_of_a_device_tensor_a_copy():
    host = vram.zeros(3, device="cpu")
    host.numpy()[0] = 5
    assert host.numpy()[0] == 5
    dev = vram.zeros(3, device=SIM)
    dev.numpy()[0] = 5
    assert dev.numpy()[0] == 0


# ---- views -----------------------------------------------------------------------------


def test_view_and_reshape():
    t = vram.arange(12, device=SIM)
    v = t.view(3, 4)
    assert v.shape == (3, 4) and v.stride() == (4, 1) and v.data_ptr() == t.data_ptr()
    assert t.view(-1, 6).shape == (2, 6)
    assert t.view((2, 2, 3)).shape == (2, 2, 3)
    np.testing.assert_array_equal(v.numpy(), np.arange(12).reshape(3, 4))
    transposed = v.t()
    with pytest.raises(RuntimeError, match="reshape"):
        transposed.view(12)
    flat = transposed.reshape(12)
    assert flat.is_contiguous() and flat.data_ptr() != t.data_ptr()
    np.testing.assert_array_equal(flat.numpy(), np.arange(12).reshape(3, 4).T.reshape(12))
    assert v.reshape(2, 6).data_ptr() == t.data_ptr()  # a view where strides allow


def test_view_of_a_non_contiguous_tensor_where_strides_allow():
    base = vram.arange(24, device=SIM).view(4, 6)[:, :4]  # rows of 4 with a gap
    v = base.view(4, 2, 2)
    assert v.stride() == (6, 2, 1)
    np.testing.assert_array_equal(v.numpy(), np.arange(24).reshape(4, 6)[:, :4].reshape(4, 2, 2))


def test_transpose_t_permute_expand():
    t = vram.arange(6, device=SIM).view(2, 3)
    assert t.t().shape == (3, 2) and t.t().stride() == (1, 3) and not t.t().is_contiguous()
    assert t.transpose(0, 1).stride() == (1, 3)
    assert t.transpose(-1, -2).shape == (3, 2)
    three = vram.empty(2, 3, 4, device=SIM)
    assert three.permute(2, 0, 1).shape == (4, 2, 3)
    assert three.permute(2, 0, 1).stride() == (1, 12, 4)
    assert three.T.shape == (4, 3, 2)
    row = vram.arange(3, device=SIM)
    e = row.expand(2, 3)
    assert e.stride() == (0, 1)
    np.testing.assert_array_equal(e.numpy(), [[0, 1, 2], [0, 1, 2]])
    assert row.view(3, 1).expand(-1, 4).shape == (3, 4)
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions"):
        three.t()
    with pytest.raises(RuntimeError, match="expanded size of the tensor \\(4\\) must match"):
        row.expand(2, 4)


def test_slicing_with_ints_slices_steps_none_and_ellipsis():
    values = np.arange(60).reshape(3, 4, 5)
    t = vram.tensor(values, device=SIM)
    cases = [
        1,
        -1,
        (1, 2),
        (slice(None), 1),
        (slice(0, 3, 2), slice(None), slice(1, 5, 3)),
        (Ellipsis, 0),
        (0, Ellipsis, slice(1, 3)),
        (None, 1),
        (slice(None), None, 2),
        (slice(5, 10),),
    ]
    for index in cases:
        np.testing.assert_array_equal(t[index].numpy(), values[index], err_msg=str(index))
    s = t[1, 1:3, ::2]
    assert s.storage_offset() == 20 + 5
    assert s.stride() == (5, 2)
    assert s.data_ptr() == t.data_ptr() + 25 * 8


def test_bad_indices_raise():
    t = vram.zeros(3, 4, device=SIM)
    with pytest.raises(IndexError, match="out of bounds for dimension 1"):
        t[0, 4]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        t[::-1]
    with pytest.raises(TypeError, match="index"):
        t["a"]
    with pytest.raises(TypeError, match="0-d"):
        len(vram.zeros((), device=SIM))


def test_setitem_writes_through_the_view():
    t = vram.zeros(3, 4, dtype=vram.int32, device=SIM)
    t[1] = 7
    t[:, 0] = vram.tensor([1, 2, 3], dtype=vram.int32, device=SIM)
    expected = np.zeros((3, 4), np.int32)
    expected[1] = 7
    expected[:, 0] = [1, 2, 3]
    np.testing.assert_array_equal(t.numpy(), expected)


def test_contiguous_returns_self_or_a_copy():
    t = vram.zeros(2, 3, device=SIM)
    assert t.contiguous() is t
    c = t.t().contiguous()
    assert c is not t and c.is_contiguous() and c.stride() == (2, 1)
    assert vram.zeros(4, 1, device=SIM).expand(4, 1).is_contiguous()
    assert vram.zeros(0, 3, device=SIM).t().is_contiguous()


# ---- copies and conversions ------------------------------------------------------------


def test_copy_between_non_contiguous_tensors_with_a_cast():
    src = vram.tensor(np.arange(12).reshape(3, 4), dtype=vram.int16, device=SIM)
    dst = vram.zeros(8, 6, dtype=vram.float64, device=SIM)
    dst[::2, 1:4].copy_(src.t())  # a transposed (4, 3) view into a strided target
    expected = np.zeros((8, 6))
    expected[::2, 1:4] = np.arange(12).reshape(3, 4).T
    np.testing.assert_array_equal(dst.numpy(), expected)


def test_copy_broadcasts_the_source():
    dst = vram.zeros(2, 3, device=SIM)
    dst.copy_(vram.tensor([1.0, 2.0, 3.0], device=SIM))
    np.testing.assert_array_equal(dst.numpy(), [[1, 2, 3], [1, 2, 3]])
    with pytest.raises(RuntimeError, match=r"size of tensor a \(3\) must match .* b \(4\)"):
        dst.copy_(vram.zeros(4, device=SIM))
    with pytest.raises(
        RuntimeError, match=r"output with shape \[2, 3\] doesn't match .* \[2, 2, 3\]"
    ):
        dst.copy_(vram.zeros(2, 1, 3, device=SIM))


@pytest.mark.parametrize(
    ("src_device", "dst_device"),
    [("cpu", "sim:0"), ("sim:0", "cpu"), ("sim:0", "sim:1"), ("sim:1", "sim:0")],
)
def test_copy_across_devices_with_strides_and_casts(src_device, dst_device):
    values = np.arange(24, dtype=np.float32).reshape(4, 6)
    src = vram.tensor(values, device=src_device)[:, 1::2]
    dst = vram.zeros(3, 8, dtype=vram.float64, device=dst_device)
    dst[:, :4].copy_(src.t())
    expected = np.zeros((3, 8))
    expected[:, :4] = values[:, 1::2].T
    np.testing.assert_array_equal(dst.numpy(), expected)


def test_to_device_and_dtype():
    t = vram.tensor([1.5, 2.5], device=SIM)
    assert t.to(SIM) is t
    assert t.to(vram.float32) is t
    assert t.to("sim:0", copy=True) is not t
    as_int = t.to(vram.int32)
    assert as_int.dtype == vram.int32 and as_int.numpy().tolist() == [1, 2]
    both = t.to("cpu", vram.float64)
    assert both.device == vram.device("cpu") and both.dtype == vram.float64
    assert t.to(device="sim:1", dtype="float16").device == SIM1
    assert t.to(both).device == vram.device("cpu") and t.to(both).dtype == vram.float64
    assert t.to("sim:1", non_blocking=True).numpy().tolist() == [1.5, 2.5]
    assert t.cpu().device == vram.device("cpu")


def test_clone_fill_zero_item_tolist():
    t = vram.arange(4, device=SIM)
    c = t.clone()
    c.fill_(3)
    assert t.tolist() == [0, 1, 2, 3] and c.tolist() == [3, 3, 3, 3]
    c.zero_()
    assert c.tolist() == [0, 0, 0, 0]
    assert vram.tensor([2.5], device=SIM).item() == 2.5
    with pytest.raises(
        RuntimeError, match="a Tensor with 4 elements cannot be converted to Scalar"
    ):
        t.item()


def test_repr_shows_values_device_and_dtype():
    text = repr(vram.tensor([1.0, 2.0], dtype=vram.float16, device=SIM))
    assert text == "tensor([1., 2.], device='sim:0', dtype=vram.float16)"
    assert repr(vram.tensor([1, 2], device="cpu")) == "tensor([1, 2])"


def test_data_ptr_is_a_device_pointer_into_sim_memory():
    t = vram.tensor([1, 2, 3], dtype=vram.int32, device=SIM)
    raw = vram.sim.driver().view(t.data_ptr(), t.nbytes)
    np.testing.assert_array_equal(raw.view(np.int32), [1, 2, 3])
    assert t[1:].data_ptr() == t.data_ptr() + 4


def test_empty_tensors():
    t = vram.zeros(0, 3, device=SIM)
    assert t.numel() == 0 and t.numpy().shape == (0, 3)
    assert (t + 1).shape == (0, 3)
    assert t.to("cpu").shape == (0, 3)


def test_bfloat16_values_use_ml_dtypes():
    t = vram.tensor([1.0, 2.5], dtype=vram.bfloat16, device=SIM)
    assert t.numpy().dtype == ml_dtypes.bfloat16


# ---- streams and the simulator ----------------------------------------------------------


def test_a_queued_fill_is_not_visible_until_the_stream_runs():
    t = vram.zeros(4, device=SIM)
    stream = vram.current_stream(SIM)
    raw = vram.sim.driver().view(t.data_ptr(), t.nbytes).view(np.float32)
    with vram.sim.deferred():
        t.fill_(3)
        assert vram.sim.pending(stream) == 1
        assert raw.tolist() == [0, 0, 0, 0]
        assert t.numpy().tolist() == [3, 3, 3, 3]  # .numpy() synchronizes the stream
        assert vram.sim.pending(stream) == 0


def test_arithmetic_queues_on_the_current_stream():
    side = vram.Stream(SIM)
    a = vram.ones(3, device=SIM)
    with vram.sim.deferred():
        with vram.stream(side):
            b = a + 1
            assert vram.sim.pending(side) == 1
            assert vram.sim.pending(vram.default_stream(SIM)) == 0
            assert b.numpy().tolist() == [2, 2, 2]


def test_record_stream_and_record_use_take_a_stream_of_the_tensors_device():
    t = vram.zeros(4, device=SIM)
    side = vram.Stream(SIM)
    t.record_stream(side)
    t.record_use(side)
    with pytest.raises(ValueError, match="stream"):
        t.record_stream(vram.Stream(SIM1))
    with pytest.raises(TypeError, match="stream"):
        t.record_stream("sim:0")


def test_dropping_the_last_tensor_frees_its_allocation():
    before = vram.memory.memory_allocated(SIM)
    t = vram.empty(1024, device=SIM)
    view = t[10:]
    ref = weakref.ref(t._storage)
    del t
    assert ref() is not None  # the view still holds the storage
    assert vram.memory.memory_allocated(SIM) == before + 4096
    del view
    assert ref() is None  # one object between the tensors and the memory: no cycle
    assert vram.memory.memory_allocated(SIM) == before


# ---- bad input -------------------------------------------------------------------------


def test_unknown_dtype_names_the_argument():
    with pytest.raises(TypeError, match="dtype"):
        vram.empty(2, dtype="float8", device=SIM)
    with pytest.raises(TypeError, match="dtype"):
        vram.zeros(2, dtype=np.uint16, device=SIM)


def test_negative_or_non_int_sizes_name_the_argument():
    with pytest.raises(ValueError, match="size"):
        vram.empty(-1, device=SIM)
    with pytest.raises(ValueError, match="size"):
        vram.zeros(2, -3, device=SIM)
    with pytest.raises(TypeError, match="size"):
        vram.ones(2.5, device=SIM)


def test_unknown_device_names_the_argument():
    with pytest.raises(ValueError, match="device"):
        vram.empty(2, device="tpu:0")
    with pytest.raises(ValueError, match="device"):
        vram.empty(2, device="sim:99")


def test_bad_view_shapes():
    t = vram.zeros(6, device=SIM)
    with pytest.raises(RuntimeError, match="invalid for input of size 6"):
        t.view(4, 2)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        t.view(-1, -1)
    with pytest.raises(TypeError, match="shape"):
        t.view(2.0, 3)


def test_tensor_of_unsupported_data():
    with pytest.raises(TypeError, match="data"):
        vram.tensor(["a", "b"], device=SIM)
    with pytest.raises(TypeError, match="make tensors"):
        vram.Tensor()


def test_from_numpy_rejects_negative_strides_and_odd_dtypes():
    with pytest.raises(ValueError, match="negative strides"):
        vram.from_numpy(np.arange(4)[::-1])
    with pytest.raises(TypeError, match="array"):
        vram.from_numpy(np.zeros(2, np.uint32))
    with pytest.raises(TypeError, match="array"):
        vram.from_numpy([1, 2])


def test_an_op_result_storage_reads_as_a_constructed_one():
    """``new_tensor``'s storage (an ``_Allocated``: owner and host from its class) against a
    Storage of allocator memory made by its constructor (``device_storage``): the same
    fields, the same record_stream and record_use, and its memory goes back when dropped;
    the first result on a device (its allocator not made yet), a zero-byte result and a
    cpu result take the constructors."""
    from vram._tensor import Storage, device_storage, new_tensor

    assert vram.memory.made_allocator(SIM1) is None  # (fresh allocators for each test)
    first = new_tensor((4,), (1,), vram.float32, SIM1, 16, 0)
    assert type(first._storage) is Storage and first._storage.allocator is not None
    vram.memory.allocator_for(SIM)
    t = new_tensor((4,), (1,), vram.float32, SIM, 16, 0, 7)
    plain = device_storage(16, SIM, 0)
    s = t._storage
    assert isinstance(s, Storage) and type(s) is not Storage
    for name in ("device", "nbytes", "owner", "host", "allocator"):
        assert getattr(s, name) == getattr(plain, name), name
    assert (t._sig, t._offset, t.grad) == (7, 0, None)
    stream = vram.Stream(SIM)
    t.record_stream(stream)
    t.record_use(stream)
    t.fill_(2.0)
    assert t.numpy().tolist() == [2.0] * 4
    before = vram.memory_allocated(SIM)
    del t, s
    gc.collect()
    assert vram.memory_allocated(SIM) == before - 512
    for device, nbytes in ((SIM, 0), (vram.device("cpu"), 16), (vram.device("cpu"), 0)):
        made = new_tensor((nbytes // 4,), (1,), vram.float32, device, nbytes, 0)
        assert type(made._storage) is Storage and made._storage.nbytes == nbytes
