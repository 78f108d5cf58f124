"""Zero-copy interop without a GPU: DLPack with NumPy both ways, sim memory through DLPack,
capsule lifetimes, and the CUDA Array Interface on a stand-in producer."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import vram
from vram import _interop
from vram._dtypes import all_dtypes

SIM = vram.device("sim:0")
CPU = vram.device("cpu")
NUMPY_DLPACK_DTYPES = [d for d in all_dtypes if d != vram.bfloat16]  # NumPy has no bfloat16


def values(dt: vram.dtype) -> np.ndarray:
    array = np.arange(12).reshape(3, 4) % 5
    return (array > 1) if dt == vram.bool_ else array.astype(dt.np)


# ---- DLPack with NumPy -----------------------------------------------------------------


@pytest.mark.parametrize("dt", NUMPY_DLPACK_DTYPES, ids=lambda d: d.name)
def test_numpy_to_vram_shares_memory(dt):
    array = values(dt)
    t = vram.from_dlpack(array)
    assert t.device == CPU and t.dtype == dt and t.shape == (3, 4)
    assert t.data_ptr() == array.ctypes.data
    array[0, 0] = 1
    assert t.numpy()[0, 0] == 1
    t[2, 3] = 0
    assert array[2, 3] == 0


@pytest.mark.parametrize("dt", NUMPY_DLPACK_DTYPES, ids=lambda d: d.name)
def test_vram_to_numpy_shares_memory(dt):
    t = vram.tensor(values(dt), device=CPU)
    array = np.from_dlpack(t)
    assert array.dtype == dt.np and array.shape == (3, 4)
    assert array.ctypes.data == t.data_ptr()
    array[1, 1] = 1
    assert t.numpy()[1, 1] == 1
    t[0, 2] = 0
    assert array[0, 2] == 0


def test_strided_views_keep_their_strides_both_ways():
    array = np.arange(30, dtype=np.float32).reshape(5, 6)[1::2, ::3]
    t = vram.from_dlpack(array)
    assert t.stride() == (12, 3)
    np.testing.assert_array_equal(t.numpy(), array)
    back = np.from_dlpack(vram.from_numpy(np.arange(12.0).reshape(3, 4)).t()[:, 1:])
    assert back.strides == (8, 32)
    np.testing.assert_array_equal(back, np.arange(12.0).reshape(3, 4).T[:, 1:])


def test_sim_tensors_export_their_simulated_memory_as_cpu_memory():
    t = vram.arange(6, dtype=vram.float32, device=SIM)
    assert t.__dlpack_device__() == (1, 0)
    with vram.sim.deferred():
        t.mul_(2)  # queued: exporting synchronizes the stream first
        array = np.from_dlpack(t)
    assert array.tolist() == [0, 2, 4, 6, 8, 10]
    array[0] = 100  # a write through NumPy lands in the simulated device memory
    assert t.numpy()[0] == 100
    t.fill_(7)  # and a device write shows in NumPy
    assert array.tolist() == [7] * 6


def test_an_export_keeps_the_tensor_alive_until_the_consumer_lets_go():
    t = vram.arange(4, dtype=vram.float64, device=SIM)
    owner = weakref.ref(t._storage)
    array = np.from_dlpack(t)
    del t
    gc.collect()
    assert owner() is not None and array.tolist() == [0, 1, 2, 3]
    del array
    gc.collect()
    assert owner() is None and not _interop._exports


def test_an_unconsumed_capsule_lets_go_of_its_tensor():
    t = vram.zeros(3, device=CPU)
    ref = weakref.ref(t)
    for max_version in (None, (1, 0)):
        capsule = t.__dlpack__(max_version=max_version)
        del capsule
    del t
    gc.collect()
    assert ref() is None and not _interop._exports


@pytest.mark.parametrize("dt", all_dtypes, ids=lambda d: d.name)
def test_vram_to_vram_through_a_capsule(dt):
    source = vram.tensor(values(dt), device=CPU)
    for capsule in (source.__dlpack__(), source.__dlpack__(max_version=(1, 0))):
        t = vram.from_dlpack(capsule)
        assert t.dtype == dt and t.data_ptr() == source.data_ptr()
        np.testing.assert_array_equal(t.numpy(), values(dt))


def test_a_capsule_is_consumed_once():
    capsule = np.arange(3).__dlpack__()
    vram.from_dlpack(capsule)
    with pytest.raises(ValueError, match="already consumed"):
        vram.from_dlpack(capsule)


def test_an_imported_capsule_is_released_with_the_last_tensor():
    array = np.arange(3.0)
    t = vram.from_dlpack(array)
    view = t[1:]
    ref = weakref.ref(t._storage.owner)
    del t
    gc.collect()
    assert ref() is not None and view.tolist() == [1.0, 2.0]
    del view
    gc.collect()
    assert ref() is None


def test_dlpack_export_options():
    t = vram.zeros(2, device=CPU)
    with pytest.raises(BufferError, match="stream"):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="copy"):
        t.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="dl_device"):
        t.__dlpack__(dl_device=(2, 0))
    assert t.__dlpack_device__() == (1, 0)


def test_from_dlpack_rejects_other_objects():
    with pytest.raises(TypeError, match="x: expected a DLPack producer"):
        vram.from_dlpack([1, 2, 3])


# ---- asarray -----------------------------------------------------------------------------


def test_asarray_shares_numpy_memory_and_copies_when_asked():
    array = np.zeros(3, np.float32)
    shared = vram.asarray(array)
    shared[0] = 1
    assert array[0] == 1
    copied = vram.asarray(array, copy=True)
    copied[1] = 1
    assert array[1] == 0
    assert vram.asarray(array, device=SIM).device == SIM
    with pytest.raises(ValueError, match="copy=False"):
        vram.asarray(array, device=SIM, copy=False)
    t = vram.zeros(2, device=SIM)
    assert vram.asarray(t) is t


def test_asarray_of_data_goes_to_the_current_device():
    with vram.device("sim:1"):
        t = vram.asarray([1, 2])
    assert t.device == vram.device("sim:1") and t.dtype == vram.int64
    with pytest.raises(ValueError, match="obj"):
        vram.asarray([1, 2], copy=False)


# ---- the CUDA Array Interface --------------------------------------------------------------


class Producer:
    """A stand-in for a CuPy array or PyTorch CUDA tensor: only the interface itself."""

    def __init__(self, **fields):
        self.__cuda_array_interface__ = {"version": 3, "stream": None, **fields}


def test_a_cuda_array_interface_producer_is_wrapped_without_a_copy():
    producer = Producer(shape=(3, 4), typestr="<f2", data=(0x7000_0000, False), strides=(16, 4))
    t = vram.asarray(producer)
    assert t.device.type == "cuda"
    assert t.shape == (3, 4) and t.dtype == vram.float16 and t.stride() == (8, 2)
    assert t.data_ptr() == 0x7000_0000
    ref = weakref.ref(producer)
    del producer
    gc.collect()
    assert ref() is not None  # the tensor keeps the producer (and its memory) alive
    assert not hasattr(t._storage.owner, "free")  # vram never frees memory it did not allocate
    del t
    gc.collect()
    assert ref() is None


def test_contiguous_producers_and_bad_ones():
    t = vram.from_dlpack(Producer(shape=(2, 3), typestr="<i8", data=(0x1000, False)))
    assert t.stride() == (3, 1) and t.dtype == vram.int64
    with pytest.raises(TypeError, match="typestr"):
        vram.asarray(Producer(shape=(2,), typestr="<u4", data=(0x1000, False)))
    with pytest.raises(TypeError, match="mask"):
        vram.asarray(Producer(shape=(2,), typestr="<f4", data=(0x1000, False), mask=object()))


def test_only_cuda_tensors_have_the_cuda_array_interface():
    assert not hasattr(vram.zeros(2, device=SIM), "__cuda_array_interface__")
    assert not hasattr(vram.zeros(2, device=CPU), "__cuda_array_interface__")
