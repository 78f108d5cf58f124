"""Errors that name the argument, raised at the call (issue 12): factories, fill, pinned memory."""

from __future__ import annotations

import math
import re

import pytest

import vram
from vram.memory import allocate_pinned, host_record_event, is_pinned


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((math.inf,), "end: must be finite, got inf"),
        ((math.nan,), "end: must be finite, got nan"),
        ((-math.inf, 3), "start: must be finite, got -inf"),
        ((0, 3, math.nan), "step: must be finite, got nan"),
    ],
)
def test_arange_of_a_value_that_is_not_finite(args, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        vram.arange(*args, device="cpu")


@pytest.mark.parametrize("device", ["cpu", "sim:0"])
@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        (vram.int32, math.nan),
        (vram.int32, math.inf),
        (vram.int64, -math.inf),
        (vram.int32, 1e30),
        (vram.uint8, 256.0),
        (vram.int8, -129.5),
    ],
)
def test_fill_of_an_integer_tensor_with_what_it_cannot_hold(device, dtype, value):
    t = vram.zeros(4, dtype=dtype, device=device)
    with vram.sim.deferred():  # the error is raised at the call, not when the work runs
        with pytest.raises(RuntimeError, match=re.escape(f"value: value {value} cannot be con")):
            t.fill_(value)
    assert t.numpy().tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("device", ["cpu", "sim:0"])
def test_fill_of_an_integer_tensor_truncates_a_float_that_fits(device):
    t = vram.zeros(3, dtype=vram.int8, device=device)
    assert t.fill_(-128.9).numpy().tolist() == [-128] * 3
    assert t.fill_(127.5).numpy().tolist() == [127] * 3
    f = vram.zeros(2, dtype=vram.float32, device=device).fill_(math.nan)
    assert all(math.isnan(v) for v in f.numpy().tolist())  # a float tensor holds NaN


def test_pinned_memory_functions_name_a_bad_argument():
    with pytest.raises(TypeError, match=r"^ptr: expected a host address \(an int\), got 'x'$"):
        is_pinned("x")
    with pytest.raises(ValueError, match=r"^ptr: expected a host address \(an int >= 0\)"):
        is_pinned(-1)
    pinned = allocate_pinned(64)
    with pytest.raises(TypeError, match=r"^stream: expected a vram.Stream, got 'x'$"):
        host_record_event(pinned.ptr, "x")
    with pytest.raises(TypeError, match=r"^ptr: expected a host address"):
        host_record_event(None, vram.current_stream("sim:0"))
    assert is_pinned(pinned.ptr) and not is_pinned(0)


@pytest.mark.parametrize(
    ("nbytes", "error", "message"),
    [
        (2**70, ValueError, r"^nbytes: 1180591620717411303424 bytes is more than this host's"),
        ("x", TypeError, r"^nbytes: expected an int number of bytes, got 'x'$"),
        (1.5, TypeError, r"^nbytes: expected an int number of bytes, got 1.5$"),
        (-1, ValueError, r"^nbytes: must be non-negative, got -1$"),
    ],
)
def test_allocate_pinned_names_a_bad_size(nbytes, error, message):
    with pytest.raises(error, match=message):
        allocate_pinned(nbytes)
