"""multi_tensor_apply: metadata layout, launches per list size, tiles, large tensors split into
entries, and the kernels compiled by NVRTC with their metadata in the kernel parameters."""

from __future__ import annotations

import numpy as np
import pytest

import vram
from vram.driver._work import Kernel
from vram.ops import _multi_tensor as mt


def kernel(step):
    """A kernel for the plans' own tests: no CUDA source (sim runs its reference only)."""
    return Kernel("test", "", mt.list_reference(step))


@pytest.fixture
def launches(monkeypatch):
    """``launches()`` starts counting the work queued on sim streams (a sim kernel launch
    is one enqueue) and returns the list that grows by one per launch."""
    sim = vram.sim.driver()
    original = sim.enqueue

    def start():
        counted = []

        def enqueue(stream, fn, touches=()):
            counted.append(stream)
            original(stream, fn, touches)

        monkeypatch.setattr(sim, "enqueue", enqueue)
        return counted

    return start


def test_the_metadata_fits_the_large_kernel_parameter_space():
    for depth, extra in [(1, False), (2, False), (3, True), (4, True), (5, True)]:
        n = mt.capacity(depth, extra)
        size = mt.meta_dtype(depth, n, extra).itemsize
        assert size <= mt.LARGE_PARAMS - mt.RESERVED
        assert mt.meta_dtype(depth, n + 1, extra).itemsize > mt.LARGE_PARAMS - mt.RESERVED
    assert mt.capacity(4, True) == 677  # Adam: params, grads, exp_avgs, exp_avg_sqs + steps
    assert mt.capacity(4, True, mt.SMALL_PARAMS) == 79


def test_the_layout_is_the_c_struct():
    dt = mt.meta_dtype(3, 10, True)
    assert dt.fields["addresses"][1] == 0
    assert dt.fields["extra"][1] == 3 * 10 * 8
    assert dt.fields["numel"][1] == 4 * 10 * 8
    assert dt.fields["first_tile"][1] == 4 * 10 * 8 + 40
    assert dt.fields["ntensors"][1] == 4 * 10 * 8 + 80
    assert dt.itemsize == 4 * 10 * 8 + 88  # padded to 8 bytes


def test_two_hundred_tensors_take_one_launch(sim0, launches):
    tensors = [vram.zeros(1000 + i, device=sim0) for i in range(200)]
    plan = mt.TensorListPlan([tensors, tensors, tensors, tensors], tensors)
    assert len(plan.launches) == 1
    meta = plan.launches[0].meta
    assert meta["ntensors"] == 200
    assert list(meta["numel"][:3]) == [1000, 1001, 1002]
    assert meta["addresses"][0][5] == tensors[5].data_ptr()
    assert plan.launches[0].blocks == 200  # one tile each
    counted = launches()
    seen = []
    plan.launch(kernel(lambda arrays, extra, aligned: seen.append((len(arrays), extra))), "k")
    assert len(counted) == 1
    assert len(seen) == 200 and all(n == 4 for n, _ in seen)
    assert all(extra.shape == (1,) for _, extra in seen)  # the extra tensors, an element each


def test_tiles_and_the_tensors_a_launch_can_take(sim0):
    sizes = [0, mt.TILE * 2 + 1, 5, mt.TILE]
    tensors = [vram.zeros(n, device=sim0) for n in sizes]
    plan = mt.TensorListPlan([tensors])
    meta = plan.launches[0].meta
    assert meta["ntensors"] == 3  # the empty tensor is skipped
    assert list(meta["first_tile"][:3]) == [0, 3, 4]
    assert plan.launches[0].blocks == 5
    many = [vram.zeros(1, device=sim0) for _ in range(mt.capacity(1, False) + 1)]
    assert len(mt.TensorListPlan([many]).launches) == 2


def test_a_large_tensor_takes_several_entries(sim0, monkeypatch):
    monkeypatch.setattr(mt, "MAX_ENTRY", mt.TILE)
    x = vram.arange(3 * mt.TILE + 7, dtype=vram.float32, device=sim0)
    y = vram.zeros(3 * mt.TILE + 7, dtype=vram.float64, device=sim0)
    plan = mt.TensorListPlan([[x], [y]])
    meta = plan.launches[0].meta
    assert meta["ntensors"] == 4
    assert list(meta["numel"][:4]) == [mt.TILE] * 3 + [7]
    assert meta["addresses"][0][1] == x.data_ptr() + mt.TILE * 4
    assert meta["addresses"][1][1] == y.data_ptr() + mt.TILE * 8

    def double(arrays, extra, aligned):
        arrays[1][...] = arrays[0] * 2

    plan.launch(kernel(double), "k")
    np.testing.assert_array_equal(y.numpy(), np.arange(3 * mt.TILE + 7) * 2.0)


def test_the_plan_checks_its_lists(sim0):
    a = vram.zeros(4, device=sim0)
    other = vram.zeros(4, dtype=vram.float64, device=sim0)
    with pytest.raises(ValueError, match="tensor 1 of list 0 has dtype vram.float64"):
        mt.TensorListPlan([[a, other]])
    with pytest.raises(ValueError, match="5 elements; expected vram.float32 and 4"):
        mt.TensorListPlan([[a], [vram.zeros(5, device=sim0)]])
    with pytest.raises(ValueError, match="contiguous"):
        mt.TensorListPlan([[vram.zeros((4, 4), device=sim0).t()]])


def test_element_list_plans_split_at_their_capacity(sim0, launches):
    steps = [vram.zeros((), device=sim0) for _ in range(3)]
    plan = mt.ElementListPlan(steps)
    assert plan.n == (mt.LARGE_PARAMS - mt.RESERVED - 8) // 8
    counted = launches()
    seven = Kernel("test", "", mt.element_reference(lambda e: e.__setitem__(0, 7)))
    plan.launch(seven, "k")
    assert len(counted) == 1
    assert [s.item() for s in steps] == [7.0, 7.0, 7.0]


# ---- the CUDA kernels compile (NVRTC needs no GPU) ---------------------------------------------
@pytest.fixture(scope="module")
def nvrtc():
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    return compile_program


def test_foreach_kernels_compile_with_the_largest_metadata(nvrtc):
    from vram.ops._foreach import _source

    names = []
    for c_type in ("__half", "__nv_bfloat16", "float", "double"):
        names += [
            f"vram::foreach::apply<{c_type}, vram::foreach::AddList, 2, 2, 0, 0, "
            f"{mt.capacity(2, False)}>",
            f"vram::foreach::apply<{c_type}, vram::foreach::Addcdiv, 3, 3, 0, 1, "
            f"{mt.capacity(3, True)}>",
            f"vram::foreach::apply<{c_type}, vram::foreach::Zero, 1, 0, 0, 0, "
            f"{mt.capacity(1, False)}>",
            f"vram::foreach::apply<{c_type}, vram::foreach::DivScalar, 2, 1, 1, 2, "
            f"{mt.capacity(2, True)}>",
        ]
    program = nvrtc(_source(), "sm_90", tuple(names))
    assert program.kind == "cubin"
    assert all(program.lowered_names[name].startswith("_Z") for name in names)


def test_a_launch_packs_its_metadata_once_and_the_kernels_arguments_per_call(sim0):
    """What a GPU launch of the plan reads (driver._work.PackedParams, as the cuda driver
    prepares it): the metadata by value, the tile, then the kernel's own arguments."""
    import ctypes
    import struct

    from vram.driver._work import Arg, PackedParams
    from vram.optim import _fused

    tensors = [vram.zeros(100 + i, device=sim0) for i in range(3)]
    steps = [vram.zeros((), device=sim0) for _ in range(3)]
    plan = mt.TensorListPlan([tensors] * 4, steps)
    item = plan.launches[0]
    launch = plan._launch(_fused._ADAM, "k<{N}>", _fused._ADAM_PARAMS, (), item)
    assert launch.entry == f"k<{plan.n}>"
    packed = PackedParams(launch.params)
    packed.fill((1e-3, 0.9, 0.999, 0.01, 1e-8, 0, 0xABC0, 0, 1, 0))

    def at(index: int, fmt: str) -> tuple:
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, ctypes.string_at(packed.pointers[index], size))

    meta = item.meta.tobytes()
    assert ctypes.string_at(packed.pointers[0], len(meta)) == meta
    assert at(1, "i") == (mt.TILE,)
    assert [at(i, "d")[0] for i in range(2, 7)] == [1e-3, 0.9, 0.999, 0.01, 1e-8]
    assert [at(i, "Q")[0] for i in range(7, 10)] == [0, 0xABC0, 0]
    assert [at(i, "i")[0] for i in (10, 11)] == [1, 0]
    assert _fused._ADAM_PARAMS == (*(Arg("d"),) * 5, *(Arg("P"),) * 3, Arg("i"), Arg("i"))
