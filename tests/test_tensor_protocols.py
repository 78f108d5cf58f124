"""Python's protocols on tensors as torch's: truth values, numbers, iteration, equality,
hashing, pickling, deep copies, NumPy, printing, and torch's conversion names."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import vram

SIM = vram.device("sim:0")
CPU = vram.device("cpu")


def test_equality_is_elementwise_and_tensors_hash_by_identity():
    a, b = vram.ones(3, device=SIM), vram.ones(3, device=SIM)
    assert (a == b).tolist() == [True, True, True]
    assert (a != b).tolist() == [False, False, False]
    assert (a == None) is False  # noqa: E711 - torch answers False, not an error
    assert len({a, b}) == 2 and {a: 1}[a] == 1


def test_truth_values_as_torch():
    assert bool(vram.ones(1, device=SIM)) is True
    assert bool(vram.zeros(1, device=SIM)) is False
    assert bool(vram.tensor(2.5, device=SIM))
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        bool(vram.ones(2, device=SIM))
    with pytest.raises(RuntimeError, match="with no values is ambiguous"):
        bool(vram.ones(0, device=SIM))


def test_numbers_out_of_one_element_tensors():
    assert float(vram.tensor([2], device=SIM)) == 2.0
    assert int(vram.tensor([2.7], device=SIM)) == 2
    assert complex(vram.tensor([1 + 2j], device=SIM)) == 1 + 2j
    assert [10, 20, 30][vram.tensor(1, device=SIM)] == 20  # __index__
    with pytest.raises(TypeError, match="only integer tensors of a single element"):
        [1, 2][vram.tensor(1.0, device=SIM)]
    with pytest.raises(
        RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"
    ):
        vram.ones(2, device=SIM).item()


def test_iteration_and_len():
    t = vram.arange(6, device=SIM).view(2, 3)
    rows = list(t)
    assert len(t) == 2 and [r.tolist() for r in rows] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(vram.tensor(1.0, device=SIM))
    with pytest.raises(TypeError, match="len"):
        len(vram.tensor(1.0, device=SIM))


@pytest.mark.parametrize("device", [SIM, CPU], ids=str)
def test_pickle_and_deepcopy_keep_values_dtype_and_device(device):
    t = vram.tensor([[1.5, 2.0], [3.0, 4.5]], dtype=vram.bfloat16, device=device).t()
    back = pickle.loads(pickle.dumps(t))
    assert back.device == device and back.dtype == vram.bfloat16
    assert back.tolist() == t.tolist()
    deep = copy.deepcopy({"weight": t, "same": t})
    assert deep["weight"] is deep["same"] and deep["weight"] is not t
    assert deep["weight"].tolist() == t.tolist() and deep["weight"].device == device


def test_numpy_functions_on_device_tensors_raise_as_torch():
    t = vram.ones(2, device=SIM)
    with pytest.raises(TypeError, match="can't convert sim:0 device type tensor to numpy"):
        np.exp(t)
    with pytest.raises(TypeError, match="Tensor.cpu"):
        np.asarray(t)
    assert np.exp(t.cpu()).tolist() == pytest.approx([np.e, np.e])
    assert t.numpy().tolist() == [1.0, 1.0]  # explicit: a copy


def test_torch_conversion_names():
    t = vram.tensor([1.7, -2.2], device=SIM)
    assert t.half().dtype == vram.float16 and t.bfloat16().dtype == vram.bfloat16
    assert t.double().dtype == vram.float64 and t.float() is t
    assert t.long().tolist() == [1, -2] and t.int().dtype == vram.int32
    assert t.bool().tolist() == [True, True] and t.byte().dtype == vram.uint8
    assert t.type() == "vram.float32" and t.type(vram.int16).dtype == vram.int16
    d = t.detach()
    assert d is not t and d.data_ptr() == t.data_ptr()
    assert vram.tensor([1.0]).cuda().device == vram.default_device()
    assert t.new_zeros(2, 3).shape == (2, 3) and t.new_full((2,), 7).tolist() == [7.0, 7.0]
    assert vram.bool is vram.bool_ and vram.get_default_dtype() == vram.float32


def test_the_cuda_namespace():
    assert vram.cuda.is_available() == vram.is_available()
    assert vram.cuda.device_count() == (vram.device_count("cuda") if vram.is_available() else 0)
    vram.cuda.synchronize()
    assert vram.cuda.memory_allocated() >= 0
    assert vram.cuda.Stream is vram.Stream and vram.cuda.tunable is not None


# the exact text torch 2.x prints for the same values (device and dtype names aside)
@pytest.mark.parametrize(
    ("make", "text"),
    [
        (
            lambda: vram.tensor([1.5, 2], dtype=vram.bfloat16, device=CPU),
            "tensor([1.5000, 2.0000], dtype=vram.bfloat16)",
        ),
        (
            lambda: vram.tensor([[1, 2], [3, 4]], dtype=vram.int32, device=CPU),
            "tensor([[1, 2],\n        [3, 4]], dtype=vram.int32)",
        ),
        (lambda: vram.tensor(3.5, device=CPU), "tensor(3.5000)"),
        (lambda: vram.tensor([1e10, 1.0], device=CPU), "tensor([1.0000e+10, 1.0000e+00])"),
        (lambda: vram.tensor([True, False], device=CPU), "tensor([ True, False])"),
        (
            lambda: vram.tensor([0.1, 0.25], dtype=vram.float16, device=CPU),
            "tensor([0.1000, 0.2500], dtype=vram.float16)",
        ),
        (
            lambda: vram.tensor([1.0, 2], dtype=vram.float64, device=CPU),
            "tensor([1., 2.], dtype=vram.float64)",
        ),
        (lambda: vram.tensor([1, 2], device=CPU), "tensor([1, 2])"),
        (lambda: vram.tensor([1 + 2j, 3 - 1j], device=CPU), "tensor([1.+2.j, 3.-1.j])"),
        (lambda: vram.zeros(0, 3, device=CPU), "tensor([], size=(0, 3))"),
        (lambda: vram.zeros(0, dtype=vram.int64, device=CPU), "tensor([], dtype=vram.int64)"),
        (
            lambda: vram.arange(2000.0, device=CPU),
            "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
            "        1.9990e+03])",
        ),
        (
            lambda: vram.tensor([float("nan"), 1.0, float("inf")], device=CPU),
            "tensor([nan, 1., inf])",
        ),
    ],
)
def test_printing_as_torch(make, text):
    assert repr(make()) == text


def test_printing_a_device_tensor_names_its_device_and_summarizes():
    t = vram.ones(40, 50, device=SIM)
    text = repr(t)
    assert text.startswith("tensor([[1., 1., 1.,  ..., 1., 1., 1.],")
    assert "        ...,\n" in text and text.endswith("device='sim:0')")


def test_launch_blocking_raises_at_the_launch_and_names_the_kernel():
    driver = vram.sim.driver()
    t = vram.ones(16 << 20, device=SIM)  # 64 MiB: a segment of its own
    view = t[-4:]  # its end: not where the next small segment goes
    storage = t._storage  # (what a use-after-free looks like to the device)
    storage.allocator.free(storage.ptr)
    storage.allocator = None  # (so that its finalizer frees nothing more)
    vram.empty_cache(SIM)  # the segment goes back: its addresses are unmapped
    blocking, driver.launch_blocking = driver.launch_blocking, True
    try:
        with pytest.raises(vram.CudaError, match=r"in exp \(vram::pointwise"):
            vram.exp(view)
    finally:
        driver.launch_blocking = blocking
