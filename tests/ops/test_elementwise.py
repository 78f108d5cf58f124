"""Elementwise ops on the simulated GPU and the host, checked against NumPy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import vram
from vram._dtypes import all_dtypes
from vram.ops import result_type

SIM = vram.device("sim:0")
SIM1 = vram.device("sim:1")
CPU = vram.device("cpu")
UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}
OPERATORS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}
_NO_BOOL = [d for d in all_dtypes if d != vram.bool_]
SUPPORTED = {  # the dtypes each op computes in (as PyTorch's)
    "add": list(all_dtypes),
    "sub": _NO_BOOL,
    "mul": list(all_dtypes),
    "div": [d for d in all_dtypes if d.is_floating_point or d.is_complex],
}
CASES = [(op, dt) for op in UFUNCS for dt in SUPPORTED[op]]
IDS = [f"{op}-{dt.name}" for op, dt in CASES]


def random(dt: vram.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt == vram.bool_:
        return rng.random(shape) > 0.5
    if dt.is_complex:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt.np)
    if dt.is_floating_point:
        return (rng.random(shape) * 4 + 0.5).astype(dt.np)  # away from 0: division is tame
    info = np.iinfo(dt.np)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt.np)


def expected(op: str, a: np.ndarray, b, dt: vram.dtype) -> np.ndarray:
    """NumPy's answer computed in the opmath type (float32 for float16 and bfloat16)."""
    math = np.dtype(np.float32) if dt in (vram.float16, vram.bfloat16) else dt.np
    with np.errstate(all="ignore"):
        if isinstance(b, np.ndarray):
            b = b.astype(math)
        else:
            b = np.array(b).astype(dt.np if dt.np.kind in "iub" else math)
        return np.asarray(UFUNCS[op](a.astype(math), b)).astype(dt.np)


def check(result: vram.Tensor, want: np.ndarray) -> None:
    got = result.numpy()
    assert got.dtype == want.dtype
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(
            got.astype(np.complex128), want.astype(np.complex128), rtol=1e-6, atol=0
        )


# ---- each op, each dtype -----------------------------------------------------------------


@pytest.mark.parametrize("device", [SIM, CPU], ids=str)
@pytest.mark.parametrize(("op", "dt"), CASES, ids=IDS)
def test_tensor_op_tensor_matches_numpy(op, dt, device):
    a, b = random(dt, (5, 7), 1), random(dt, (5, 7), 2)
    result = OPERATORS[op](vram.tensor(a, device=device), vram.tensor(b, device=device))
    assert result.device == device and result.dtype == dt
    check(result, expected(op, a, b, dt))


@pytest.mark.parametrize(("op", "dt"), CASES, ids=IDS)
def test_tensor_op_scalar_both_ways_matches_numpy(op, dt):
    a = random(dt, (4, 3), 3)
    scalar = True if dt == vram.bool_ else (2 + 1j if dt.is_complex else 3)
    t = vram.tensor(a, device=SIM)
    check(OPERATORS[op](t, scalar), expected(op, a, scalar, dt))
    flipped = OPERATORS[op](scalar, t)
    math = np.float32 if dt in (vram.float16, vram.bfloat16) else dt.np
    with np.errstate(all="ignore"):
        s = np.array(scalar).astype(dt.np if dt.np.kind in "iub" else math)
        want = np.asarray(UFUNCS[op](s, a.astype(math))).astype(dt.np)
    check(flipped, want)


@pytest.mark.parametrize(("op", "dt"), CASES, ids=IDS)
def test_in_place_ops_on_strided_views_match_numpy(op, dt):
    a, b = random(dt, (6, 8), 4), random(dt, (4, 3), 5)
    t = vram.tensor(a, device=SIM)
    view = t[1:5, ::3]
    address = view.data_ptr()
    getattr(view, f"{op}_")(vram.tensor(b, device=SIM))
    assert view.data_ptr() == address
    want = a.copy()
    want[1:5, ::3] = expected(op, a[1:5, ::3], b, dt)
    check(t, want)


def test_broadcasting_a_row_and_a_column():
    row = vram.tensor([1.0, 2.0, 3.0], device=SIM)
    col = vram.tensor([[10.0], [20.0]], device=SIM)
    np.testing.assert_array_equal((row + col).numpy(), [[11, 12, 13], [21, 22, 23]])
    np.testing.assert_array_equal((col - row).numpy(), [[9, 8, 7], [19, 18, 17]])


def test_non_contiguous_inputs():
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = vram.tensor(values, device=SIM)
    np.testing.assert_array_equal((t.t() * t.t()).numpy(), values.T * values.T)
    np.testing.assert_array_equal(
        (t[:, ::2] + t[:, 1::2]).numpy(), values[:, ::2] + values[:, 1::2]
    )


def test_integers_wrap_and_division_by_zero_gives_infinities():
    t = vram.tensor([127, -128], dtype=vram.int8, device=SIM)
    assert (t + 1).tolist() == [-128, -127]
    assert (vram.tensor([250], dtype=vram.uint8, device=SIM) + 10).tolist() == [4]
    r = vram.tensor([1.0, -1.0, 0.0], device=SIM) / 0
    assert r.numpy()[0] == np.inf and r.numpy()[1] == -np.inf and np.isnan(r.numpy()[2])


def test_half_precision_computes_in_float32_and_rounds_once():
    a = vram.tensor([1.0], dtype=vram.float16, device=SIM)
    assert (a + 1e-4).tolist() == [1.0]  # 1.0001 rounds to 1.0 in float16
    assert (a + 1e-3).numpy()[0] == np.float16(1.001)
    b = vram.tensor([1.0], dtype=vram.bfloat16, device=SIM)
    assert (b * 3).numpy()[0] == ml_dtypes.bfloat16(3.0)


# ---- promotion -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        (vram.int32, vram.float32, vram.float32),
        (vram.int64, vram.float16, vram.float16),
        (vram.int8, vram.uint8, vram.int16),
        (vram.bool_, vram.int8, vram.int8),
        (vram.float16, vram.bfloat16, vram.float32),
        (vram.bfloat16, vram.float64, vram.float64),
        (vram.float64, vram.complex64, vram.complex128),
        (vram.float32, vram.complex64, vram.complex64),
        (vram.int16, vram.int64, vram.int64),
    ],
)
def test_tensor_tensor_promotion(a, b, want):
    x, y = vram.zeros(2, dtype=a, device=SIM), vram.zeros(2, dtype=b, device=SIM)
    assert result_type(x, y) == want == result_type(y, x)
    assert (x + y).dtype == want


@pytest.mark.parametrize(
    ("dt", "scalar", "want"),
    [
        (vram.int32, 2, vram.int32),
        (vram.int32, 2.5, vram.float32),
        (vram.float16, 2.5, vram.float16),
        (vram.bool_, 2, vram.int64),
        (vram.bool_, True, vram.bool_),
        (vram.uint8, 1.0, vram.float32),
        (vram.float32, 1j, vram.complex64),
        (vram.float64, 1j, vram.complex128),
        (vram.int64, 1j, vram.complex64),
    ],
)
def test_tensor_scalar_promotion(dt, scalar, want):
    x = vram.zeros(2, dtype=dt, device=SIM)
    assert result_type(x, scalar) == want
    assert (x + scalar).dtype == want


def test_zero_dim_tensors_promote_as_pytorch_does():
    x = vram.zeros(3, dtype=vram.float32, device=SIM)
    zero_dim = vram.tensor(2.0, dtype=vram.float64, device=SIM)
    assert (x * zero_dim).dtype == vram.float32  # same category: the dimensioned tensor wins
    # a higher category: the zero-dimensional tensor's own dtype (not the default float)
    assert (vram.zeros(3, dtype=vram.int32, device=SIM) * zero_dim).dtype == vram.float64
    half = vram.tensor(1.0, dtype=vram.float16, device=SIM)
    assert result_type(vram.zeros(3, dtype=vram.int64, device=SIM), half) == vram.float16


def test_true_division_of_integers_gives_float32():
    r = vram.tensor([3, 4], device=SIM) / vram.tensor([2, 8], device=SIM)
    assert r.dtype == vram.float32
    assert r.tolist() == [1.5, 0.5]
    assert (vram.tensor([True], device=SIM) / 2).dtype == vram.float32


# ---- fill, copy, cast --------------------------------------------------------------------


@pytest.mark.parametrize("dt", all_dtypes, ids=lambda d: d.name)
def test_fill_every_dtype(dt):
    value = True if dt == vram.bool_ else (1.5 - 2j if dt.is_complex else 3)
    t = vram.empty(2, 3, dtype=dt, device=SIM)
    t.fill_(value)
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3), value, dtype=dt.np))
    t[:, 1].zero_()
    assert not t.numpy()[:, 1].any()


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize("source", all_dtypes, ids=lambda d: d.name)
def test_copy_casts_between_every_pair_of_dtypes(source):
    values = np.array([[0, 1, 2], [3, 1, 0]]).astype(source.np)
    src = vram.tensor(values, device=SIM)
    for target in all_dtypes:
        dst = vram.zeros(3, 2, dtype=target, device=SIM)
        dst.t().copy_(src)  # strided destination
        np.testing.assert_array_equal(
            dst.numpy(), values.T.astype(target.np), err_msg=f"{source} -> {target}"
        )


def test_complex_to_real_keeps_the_real_part_and_to_bool_tests_both_parts():
    z = vram.tensor([1.5 + 2j, 0 + 1j, 0j], device=SIM)
    assert z.to(vram.float32).tolist() == [1.5, 0.0, 0.0]
    assert z.to(vram.bool_).tolist() == [True, True, False]


def test_a_cast_keeps_the_layout_of_a_dense_tensor():
    t = vram.tensor([[1.7, -2.2], [3.9, 4.0]], device=SIM).t()
    c = t.to(vram.int32)
    assert c.dtype == vram.int32
    assert c.tolist() == [[1, 3], [-2, 4]]


# ---- bad input ---------------------------------------------------------------------------


def test_mismatched_devices_are_refused_as_pytorch_refuses_them():
    with pytest.raises(RuntimeError, match="same device.*sim:0 and cpu"):
        vram.ones(2, device=SIM) + vram.ones(2, device=CPU)
    with pytest.raises(RuntimeError, match="same device.*sim:0 and sim:1"):
        vram.ones(2, device=SIM) * vram.ones(2, device=SIM1)
    # a zero-dimensional cpu tensor is a number to a device op, as in PyTorch
    r = vram.ones(2, device=SIM) * vram.tensor(3.0, device=CPU)
    assert r.device == SIM and r.tolist() == [3.0, 3.0]


def test_nothing_is_queued_when_an_op_is_refused():
    stream = vram.current_stream(SIM)
    a = vram.ones(2, dtype=vram.int32, device=SIM)
    other_device, other_shape = vram.ones(2, device=SIM1), vram.ones(3, device=SIM)
    with vram.sim.deferred():
        for bad in (
            lambda: a + other_device,
            lambda: a + other_shape,
            lambda: a.add_(0.5),
            lambda: a.fill_(1j),
        ):
            with pytest.raises((TypeError, RuntimeError)):
                bad()
        assert vram.sim.pending(stream) == 0


def test_wrong_shapes_are_refused_with_pytorchs_messages():
    with pytest.raises(
        RuntimeError, match=r"size of tensor a \(2\) must match the size of tensor b \(3\)"
    ):
        vram.ones(2, device=SIM) + vram.ones(3, device=SIM)
    with pytest.raises(
        RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"
    ):
        vram.ones(3, device=SIM).add_(vram.ones(2, 3, device=SIM))


def test_in_place_results_must_cast_to_the_tensor():
    with pytest.raises(
        RuntimeError, match="float32 can't be cast to the desired output type vram.int64"
    ):
        vram.ones(2, dtype=vram.int64, device=SIM).div_(2)
    t = vram.ones(2, dtype=vram.float16, device=SIM)
    t += vram.ones(2, dtype=vram.float64, device=SIM)  # computed in float64, stored as float16
    assert t.dtype == vram.float16 and t.tolist() == [2, 2]


def test_bool_subtraction_is_refused():
    b = vram.tensor([True], device=SIM)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
        b - b


def test_bad_operands_and_fill_values():
    t = vram.zeros(2, dtype=vram.int8, device=SIM)
    with pytest.raises(TypeError, match="expected a vram.Tensor or a number, got str"):
        t + "1"
    with pytest.raises(TypeError, match="expected a vram.Tensor or a number, got ndarray"):
        t + np.zeros(2)
    with pytest.raises(RuntimeError, match="value 300 cannot be converted to vram.int8"):
        t.fill_(300)
    with pytest.raises(TypeError, match="value"):
        vram.zeros(2, device=SIM).fill_(1j)


# ---- where -----------------------------------------------------------------------------------


def _where_cases(device):
    """(condition, input, other) calls of where: every form the fast path keys on."""
    rng = np.random.default_rng(7)
    mask = rng.random((3, 5)) > 0.5
    c = vram.tensor(mask, device=device)
    f32 = vram.tensor(random(vram.float32, (3, 5), 1), device=device)
    f16 = vram.tensor(random(vram.float16, (5,), 2), device=device)
    i8 = vram.tensor(random(vram.int8, (3, 1), 3), device=device)
    wide = vram.tensor(random(vram.float32, (5, 6), 4), device=device)
    zero_dim = vram.tensor(2.5, device=device)
    return [
        (c, f32, f32 * 2),
        (c, f32, f16),  # promoted, broadcast
        (c, i8, f16),
        (c, wide.t()[:3], f32),  # a transposed view
        (c.t().contiguous().t(), f32, f16),  # a non-contiguous condition
        (c, f32, 0.5),
        (c, 7, i8),
        (c, f16, True),
        (c, 1, 0),
        (c, 1.0, 0),
        (c, i8, zero_dim),  # a zero-dimensional tensor promotes as PyTorch's
        (c[:0], f32[:0], 1.0),  # zero-size
    ]


@pytest.mark.parametrize("device", [SIM, CPU], ids=str)
def test_where_matches_numpy_with_pytorchs_dtypes(device):
    for condition, a, b in _where_cases(device):
        got = vram.where(condition, a, b)
        want_dtype = result_type(a, b)
        values = [v.numpy() if isinstance(v, vram.Tensor) else v for v in (a, b)]
        want = np.where(condition.numpy(), *values).astype(want_dtype.np)
        assert got.dtype == want_dtype and got.device == device
        check(got, want)


@pytest.mark.parametrize("dt", all_dtypes, ids=lambda d: d.name)
def test_where_every_dtype(dt):
    mask = np.arange(8) % 3 == 0
    a, b = random(dt, (8,), 5), random(dt, (8,), 6)
    got = vram.where(
        vram.tensor(mask, device=SIM), vram.tensor(a, device=SIM), vram.tensor(b, device=SIM)
    )
    check(got, np.where(mask, a, b))
    t = vram.tensor(a, device=SIM)
    assert t.where(vram.tensor(mask, device=SIM), 0).dtype == result_type(t, 0)


@pytest.mark.parametrize("device", [SIM, CPU], ids=str)
def test_where_fast_path_equals_the_general_path(device, monkeypatch):
    """The operator path (plans by signature id, ``ternary_operator``) and ``run`` (the
    general path) give the same tensor for every form; the first is taken for each."""
    from vram.ops import _math, _pointwise

    taken = []
    ternary, call = _pointwise.PointwisePlan.ternary, _pointwise.PointwisePlan.__call__

    def count_ternary(plan, *args):
        taken.append("ternary")
        return ternary(plan, *args)

    def count_call(plan, *args):
        taken.append("call")
        return call(plan, *args)

    for condition, a, b in _where_cases(device):
        general = _pointwise.run(_math.WHERE, (condition, a, b))
        monkeypatch.setattr(_pointwise.PointwisePlan, "ternary", count_ternary)
        monkeypatch.setattr(_pointwise.PointwisePlan, "__call__", count_call)
        taken.clear()
        fast = [vram.where(condition, a, b) for _ in range(2)]  # built, then looked up
        monkeypatch.undo()
        forms = "ternary" if isinstance(a, vram.Tensor) and isinstance(b, vram.Tensor) else "call"
        assert taken == [forms, forms]
        for got in fast:
            assert (got.dtype, got.shape, got.stride()) == (
                general.dtype,
                general.shape,
                general.stride(),
            )
            np.testing.assert_array_equal(got.numpy(), general.numpy())


def test_where_with_a_cpu_scalar_and_odd_operands_takes_the_general_path():
    c = vram.tensor([True, False, True], device=SIM)
    a = vram.tensor([1.0, 2.0, 3.0], device=SIM)
    check(vram.where(c, a, vram.tensor(9.0, device=CPU)), np.float32([1, 9, 3]))
    check(vram.where(c, np.float64(4.0), a), np.float32([4, 2, 4]))
    with pytest.raises(TypeError, match="expected a vram.Tensor or a number, got str"):
        vram.where(c, a, "x")


def test_where_refuses_what_pytorch_refuses():
    a = vram.ones(2, device=SIM)
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean tensor"):
        vram.where(a, a, a)
    with pytest.raises(TypeError, match="argument 'condition' must be Tensor, not list"):
        vram.where([True, False], a, a)
    with pytest.raises(RuntimeError, match="same device"):
        vram.where(vram.tensor([True, False], device=SIM), a, vram.ones(2, device=SIM1))


@pytest.mark.parametrize("device", [SIM, CPU], ids=str)
def test_binary_operators_equal_the_general_path(device):
    """``a + b``, ``a - b``, ``a * b`` (plans by signature id, ``PointwisePlan.binary``)
    against ``run`` (the general path): the same dtype, layout and values, and the result's
    signature id the one its layout has. Operators of one op with other fields share the
    plan: interleaved, each call converts its own fields."""
    from vram.ops import _math, _pointwise

    f32 = vram.tensor(random(vram.float32, (3, 5), 8), device=device)
    f16 = vram.tensor(random(vram.float16, (5,), 9), device=device)
    i8 = vram.tensor(random(vram.int8, (3, 1), 10), device=device)
    wide = vram.tensor(random(vram.float32, (5, 6), 11), device=device)
    add_twice = _pointwise.binary_operator(_math.BINARY["add"], (2,))  # a + 2 * b
    for a, b in ((f32, f32), (f32, f16), (i8, f16), (wide.t()[:3], f32), (f32[:0], f32[:0])):
        for name, fields in (("add", (1,)), ("sub", (1,)), ("mul", ())):
            general = _pointwise.run(_math.BINARY[name], (a, b), fields)
            operator = getattr(vram.Tensor, f"__{name}__")
            for _ in range(2):  # built, then looked up
                got = operator(a, b)
                assert (got.dtype, got.shape, got.stride()) == (
                    general.dtype, general.shape, general.stride()
                )  # fmt: skip
                np.testing.assert_array_equal(got.numpy(), general.numpy())
                found, got._sig = got._sig, 0
                assert _pointwise.signature_id(got) == found
        twice = _pointwise.run(_math.BINARY["add"], (a, b), (2,))
        for _ in range(2):
            np.testing.assert_array_equal(add_twice(a, b).numpy(), twice.numpy())
            np.testing.assert_array_equal(
                (a + b).numpy(), _pointwise.run(_math.BINARY["add"], (a, b), (1,)).numpy()
            )
