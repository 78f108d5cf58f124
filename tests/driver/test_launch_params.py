"""How CudaDriver.launch lays out kernel arguments (cuLaunchKernel's kernelParams): no GPU
needed, only the bindings' module. Each argument has its own 16-byte-aligned slot, and the
pointer array points at each one's bytes."""

from __future__ import annotations

import ctypes
import struct

import ml_dtypes
import numpy as np
import pytest

_cuda = pytest.importorskip("vram.driver._cuda")


def _argument(params, address: int, i: int, nbytes: int) -> bytes:
    pointer = ctypes.c_uint64.from_address(address + 8 * i).value
    assert pointer % 16 == 0
    assert params.base <= pointer < params.base + params.NBYTES
    return ctypes.string_at(pointer, nbytes)


def test_each_argument_is_its_bytes_in_its_own_slot():
    params = _cuda._LaunchParams()
    record = struct.pack("<3q", 7, -8, 9)  # a struct passed by value
    args = (
        0x7F00_0000_1000,
        np.int32(-5),
        np.float64(2.5),
        ml_dtypes.bfloat16(1.5),
        np.bool_(True),
        record,
        ctypes.c_uint16(513),
        np.zeros((), dtype=[("a", "<i8"), ("b", "<f4")])[()],
    )
    address = params.fill(args)
    assert address == params.address
    want = [
        (0x7F00_0000_1000).to_bytes(8, "little"),
        np.int32(-5).tobytes(),
        np.float64(2.5).tobytes(),
        ml_dtypes.bfloat16(1.5).tobytes(),
        b"\x01",
        record,
        (513).to_bytes(2, "little"),
        bytes(12),
    ]
    for i, value in enumerate(want):
        assert _argument(params, address, i, len(value)) == value
    # a later launch reuses the buffer: its arguments replace the earlier ones
    address = params.fill((np.int64(-1), 3))
    assert _argument(params, address, 0, 8) == np.int64(-1).tobytes()
    assert _argument(params, address, 1, 8) == (3).to_bytes(8, "little")


def test_no_arguments_pass_no_pointer_array():
    assert _cuda._LaunchParams().fill(()) == 0


@pytest.mark.parametrize("bad", [-1, 1 << 64, True, 1.0, "x", None])
def test_arguments_that_are_not_pointers_or_typed_scalars_are_refused(bad):
    with pytest.raises(TypeError, match="NumPy scalar"):
        _cuda._LaunchParams().fill((bad,))


def test_more_arguments_than_a_launch_takes_are_refused():
    params = _cuda._LaunchParams()
    with pytest.raises(ValueError, match="args: at most"):
        params.fill((1,) * (params.COUNT + 1))
    with pytest.raises(ValueError, match="args: more than"):
        params.fill((bytes(params.NBYTES // 2),) * 3)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.int32),
        np.zeros((2, 3), np.float64),
        np.zeros(4, ml_dtypes.bfloat16),  # a dtype the buffer protocol cannot describe
        np.zeros((), np.float32),
        np.zeros(0, np.uint8),
    ],
    ids=["int32", "float64-2d", "bfloat16", "0-d", "empty"],
)
def test_host_pointer_is_the_arrays_address(array):
    """The address copies use: NumPy's own, for every dtype and shape."""
    assert _cuda._host_pointer(array, "copy", writable=True) == array.ctypes.data
    array.flags.writeable = False
    assert _cuda._host_pointer(array, "copy") == array.ctypes.data
    with pytest.raises(ValueError, match="copy: the destination host array is read-only"):
        _cuda._host_pointer(array, "copy", writable=True)


def test_host_pointer_refuses_a_strided_array():
    with pytest.raises(ValueError, match="copy: the host array must be C-contiguous"):
        _cuda._host_pointer(np.zeros((4, 4))[:, ::2], "copy")
