"""The operator registry: schemas, per-backend kernels, and checks made before queueing."""

from __future__ import annotations

import gc
import itertools
import weakref

import numpy as np
import pytest

import vram
from vram.ops._registry import Schema, declare, get_op

SIM = vram.device("sim:0")
SIM1 = vram.device("sim:1")
CPU = vram.device("cpu")
_names = itertools.count()


def fresh(schema: str, **options) -> vram.ops.Op:
    """Declare a test op under a name no other test uses."""
    return declare(schema.replace("NAME", f"test_op_{next(_names)}"), **options)


def scale_op() -> vram.ops.Op:
    """out = self * factor, with a cpu kernel for float32 and float64 only."""
    op = fresh("NAME(Tensor(a!) out, Tensor self, float factor=2.0)")

    @op.impl("cpu", dtypes=[vram.float32, vram.float64])
    def _(out, a, factor):
        out[...] = a * factor

    return op


# ---- schemas -------------------------------------------------------------------------


def test_schema_parses_types_written_arguments_and_defaults():
    schema = Schema.parse(
        "add.Scalar(Tensor(a!) out, Tensor self, Scalar other, bool reverse=False)"
    )
    assert schema.name == "add.Scalar"
    assert [p.name for p in schema.params] == ["out", "self", "other", "reverse"]
    assert [p.type for p in schema.params] == ["Tensor", "Tensor", "Scalar", "bool"]
    assert [p.written for p in schema.params] == [True, False, False, False]
    assert schema.params[3].default is False


@pytest.mark.parametrize("text", ["add", "add(Tensor)", "add(Widget w)", "add(Tensor a, b)"])
def test_bad_schemas_raise(text):
    with pytest.raises(ValueError, match="schema"):
        Schema.parse(text)


def test_bind_names_missing_unexpected_and_repeated_arguments():
    schema = Schema.parse("f(Tensor a, Scalar b, int c=3)")
    assert schema.bind((1,), {"b": 2}) == {"a": 1, "b": 2, "c": 3}
    with pytest.raises(TypeError, match="missing argument 'b'"):
        schema.bind((1,), {})
    with pytest.raises(TypeError, match="unexpected argument 'd'"):
        schema.bind((1, 2), {"d": 4})
    with pytest.raises(TypeError, match="argument 'a' twice"):
        schema.bind((1, 2), {"a": 4})
    with pytest.raises(TypeError, match="takes 3 arguments"):
        schema.bind((1, 2, 3, 4), {})


def test_declared_once():
    op = fresh("NAME(Tensor(a!) self)")
    with pytest.raises(ValueError, match="already declared"):
        declare(f"{op.name}(Tensor(a!) self)")
    assert get_op(op.name) is op
    with pytest.raises(KeyError, match="no_such_op"):
        get_op("no_such_op")


# ---- dispatch --------------------------------------------------------------------------


def test_cpu_kernels_run_at_once_on_numpy_arrays():
    op = scale_op()
    out, a = vram.zeros(3, device=CPU), vram.tensor([1.0, 2.0, 3.0], device=CPU)
    op(out, a, 3.0)
    assert out.tolist() == [3, 6, 9]


def test_sim_runs_the_cpu_kernel_queued_on_the_current_stream():
    op = scale_op()
    out, a = vram.zeros(3, device=SIM), vram.tensor([1.0, 2.0, 3.0], device=SIM)
    stream = vram.current_stream(SIM)
    with vram.sim.deferred():
        op(out, a)
        assert vram.sim.pending(stream) == 1
        raw = vram.sim.driver().view(out.data_ptr(), out.nbytes).view(np.float32)
        assert raw.tolist() == [0, 0, 0]
        stream.synchronize()
        assert raw.tolist() == [2, 4, 6]


def test_queued_sim_work_holds_pointers_not_tensors():
    op = scale_op()
    out, a = vram.zeros(3, device=SIM), vram.ones(3, device=SIM)
    with vram.sim.deferred():
        op(out, a)
        ref = weakref.ref(a)
        del a
        gc.collect()
        assert ref() is None  # as on a GPU: only the allocator's stream rules protect memory
        vram.sim.run()


def test_a_backend_without_a_kernel_raises():
    op = fresh("NAME(Tensor(a!) self)")

    @op.impl("cuda")
    def _(stream, out):
        raise AssertionError("never launched here")

    with pytest.raises(NotImplementedError, match="no kernel for sim"):
        op(vram.zeros(2, device=SIM))


def test_composite_kernels_serve_every_device():
    op = fresh("NAME(Tensor self)", elementwise=False)

    @op.impl("composite")
    def _(self):
        return self + self

    for device in (CPU, SIM):
        assert op(vram.ones(2, device=device)).tolist() == [2, 2]


def test_dtype_checks_name_the_argument():
    op = scale_op()
    with pytest.raises(TypeError, match="argument 'self' has dtype vram.float64.*'out' has"):
        op(vram.zeros(2, device=SIM), vram.zeros(2, dtype=vram.float64, device=SIM))
    with pytest.raises(TypeError, match="argument 'out' has dtype vram.int32.*supported: float32"):
        op(vram.zeros(2, dtype=vram.int32, device=SIM), vram.zeros(2, dtype=vram.int32, device=SIM))


def test_inputs_broadcast_to_the_written_tensor():
    op = scale_op()
    out = vram.zeros(2, 3, device=SIM)
    op(out, vram.tensor([1.0, 2.0, 3.0], device=SIM))
    np.testing.assert_array_equal(out.numpy(), [[2, 4, 6], [2, 4, 6]])
    with pytest.raises(ValueError, match=r"argument 'self' of shape \(2,\) cannot be broadcast"):
        op(out, vram.zeros(2, device=SIM))
    with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
        op(vram.zeros(3, device=SIM), out)  # inputs never grow the output
