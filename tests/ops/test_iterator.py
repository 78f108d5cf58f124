"""The TensorIterator: broadcast shapes, output layouts as PyTorch makes them, launch layouts,
overlap rules; and a property test of the pointwise engine over random shapes, strides and
dtypes on the simulated GPU against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vram
from vram.ops import _iterator as it
from vram.ops._math import BINARY
from vram.ops._pointwise import VEC_LOOP, plan_for

SIM = vram.device("sim:0")


def test_broadcast_shapes_and_pytorchs_message():
    assert it.broadcast_shape([(3, 1), (1, 4), (4,)]) == (3, 4)
    assert it.broadcast_shape([(), (2, 3)]) == (2, 3)
    assert it.broadcast_shape([(0, 1), (1, 5)]) == (0, 5)
    with pytest.raises(
        RuntimeError,
        match=r"tensor a \(3\) must match the size of tensor b \(4\) at non-singleton dimension 1",
    ):
        it.broadcast_shape([(2, 3), (2, 4)])


@pytest.mark.parametrize(
    ("make", "strides"),
    [
        (lambda: (vram.ones(2, 3, device=SIM), vram.ones(2, 3, device=SIM)), (3, 1)),
        # both transposed: the result is transposed too (PyTorch's fast setup)
        (lambda: (vram.ones(3, 2, device=SIM).t(), vram.ones(3, 2, device=SIM).t()), (1, 2)),
        # one of each: the first input's order wins the permutation
        (lambda: (vram.ones(3, 2, device=SIM).t(), vram.ones(2, 3, device=SIM)), (1, 2)),
        (lambda: (vram.ones(2, 3, device=SIM), vram.ones(3, 2, device=SIM).t()), (3, 1)),
        # a broadcast row with a transposed matrix
        (lambda: (vram.ones(3, device=SIM), vram.ones(3, 2, device=SIM).t()), (1, 2)),
    ],
)
def test_new_outputs_take_the_inputs_layout_as_pytorch(make, strides):
    a, b = make()
    assert (a + b).stride() == strides


def test_a_permuted_dense_input_keeps_its_strides():
    t = vram.ones(2, 3, 4, device=SIM).permute(2, 0, 1)
    assert vram.exp(t).stride() == t.stride()


def test_layouts_coalesce_to_flat_or_strided():
    contiguous = it.plan_layout((4, 5, 6), [(30, 6, 1), (30, 6, 1)])
    assert contiguous.kind == "flat" and contiguous.sizes == (120,)
    transposed = it.plan_layout((4, 5), [(5, 1), (1, 4)])
    assert transposed.kind == "strided" and transposed.index32
    assert sorted(transposed.sizes) == [4, 5]
    broadcast = it.plan_layout((4, 5), [(5, 1), (0, 1)])
    assert broadcast.kind == "strided" and broadcast.sizes == (5, 4)
    assert broadcast.strides == ((1, 5), (1, 0))
    huge = it.plan_layout((1 << 31 + 1,), [(1,), (1,)])
    assert not huge.index32


def test_too_many_dimensions_that_cannot_merge():
    shape = (2,) * 17
    strides = tuple(3 ** (i + 1) for i in reversed(range(17)))  # gaps between every dim
    with pytest.raises(RuntimeError, match="17 dimensions that cannot be merged"):
        it.plan_layout(shape, [strides])


def test_an_expanded_output_and_partial_overlap_are_refused():
    t = vram.zeros(1, device=SIM).expand(4)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        t.add_(1)
    a = vram.arange(6.0, device=SIM)
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to"):
        a[1:].add_(a[:-1])
    a.add_(a)  # the same elements: allowed
    assert a.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_plans_are_kept_per_signature():
    a, b = vram.ones(8, device=SIM), vram.ones(8, device=SIM)
    first = plan_for(BINARY["add"], (a, b), None)
    assert plan_for(BINARY["add"], (vram.ones(8, device=SIM), b), None) is first
    assert (
        plan_for(BINARY["add"], (a, vram.ones(8, dtype=vram.float64, device=SIM)), None)
        is not first
    )


def test_a_plans_launches_name_the_kernel_instances():
    a = vram.ones(64, device=SIM)
    plan = plan_for(BINARY["mul"], (a, 2.0), None)
    entries = [launch.entry for launch in plan.launches]
    assert entries == [
        "vram::pointwise_flat<1, vram::ScalarB<vram::Mul<float>>, float, float, char, char>",
        f"vram::pointwise_vec<4, {VEC_LOOP.unroll}, 1, vram::ScalarB<vram::Mul<float>>, float, "
        "float, char, char>",
    ]


# ---- the property test --------------------------------------------------------------------

_DTYPES = [vram.float32, vram.float64, vram.float16, vram.int32, vram.int64, vram.int8, vram.bool_]
_OPS = {
    "add": (lambda a, b: a + b, np.add),
    "mul": (lambda a, b: a * b, np.multiply),
    "maximum": (vram.maximum, np.maximum),
    "lt": (lambda a, b: a < b, np.less),
    "eq": (lambda a, b: a == b, np.equal),
}


@st.composite
def operand(draw, shape):
    """A tensor whose values have ``shape`` seen through a random strided view: a larger
    base with steps, a transposition, or a broadcast dimension."""
    dt = draw(st.sampled_from(_DTYPES))
    steps = [draw(st.integers(1, 3)) for _ in shape]
    base_shape = [max(n, 1) * s for n, s in zip(shape, steps, strict=True)]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    values = (
        (rng.standard_normal(base_shape) * 4).astype(dt.np)
        if dt is not vram.bool_
        else rng.random(base_shape) > 0.5
    )
    base = vram.tensor(values, device=SIM)
    view = (
        base[tuple(slice(0, n * s, s) for n, s in zip(shape, steps, strict=True))]
        if shape
        else base
    )
    host = (
        values[tuple(slice(0, n * s, s) for n, s in zip(shape, steps, strict=True))]
        if shape
        else values
    )
    if len(shape) >= 2 and draw(st.booleans()):
        view = view.transpose(0, 1).contiguous().transpose(0, 1)
    if shape and draw(st.booleans()):
        k = draw(st.integers(0, len(shape) - 1))
        view = view.narrow(k, 0, min(1, shape[k]))  # a broadcast dimension (or none)
        host = host[(slice(None),) * k + (slice(0, 1),)]
    return view, np.asarray(host)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_shapes_strides_and_dtypes_match_numpy(data):
    shape = tuple(data.draw(st.lists(st.integers(0, 5), max_size=4)))
    (a, ha), (b, hb) = data.draw(operand(shape)), data.draw(operand(shape))
    name = data.draw(st.sampled_from(sorted(_OPS)))
    fn, ufunc = _OPS[name]
    result = fn(a, b)
    dt = vram.result_type(a, b)
    if name in ("lt", "eq"):
        want = ufunc(ha.astype(dt.np), hb.astype(dt.np))
    else:
        math_np = np.float32 if dt in (vram.float16, vram.bfloat16) else dt.np
        with np.errstate(all="ignore"):
            want = ufunc(ha.astype(math_np), hb.astype(math_np)).astype(dt.np)
    assert result.shape == want.shape
    got = result.numpy()
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-6 if want.dtype != np.float16 else 1e-3)
    else:
        np.testing.assert_array_equal(got, want)
