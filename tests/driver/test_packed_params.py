"""The kernel parameters a prepared cuda launch packs (``driver._work.PackedParams``): what
cuLaunchKernel reads at each parameter's address, checked without a GPU."""

from __future__ import annotations

import ctypes
import struct

import numpy as np

from vram.driver._work import Arg, PackedParams


def read(packed: PackedParams, index: int, fmt: str) -> tuple:
    """The value at parameter ``index``'s address, as ``fmt``."""
    address = packed.pointers[index]
    return struct.unpack("<" + fmt, ctypes.string_at(address, struct.calcsize("<" + fmt)))


def test_per_call_arguments_and_constants_sit_where_the_pointers_say():
    layout = np.zeros((), dtype=np.dtype([("a", np.int64), ("b", np.int32)], align=True))
    layout["a"], layout["b"] = 7, -3
    params = (Arg("P"), Arg("i"), 2**40 + 5, Arg("d"), np.float32(1.5), layout[()], Arg("ff"))
    packed = PackedParams(params)
    address = packed.fill((0xDEAD_BEEF_0000, -4, 2.25, 1.0, -2.0))
    assert address == ctypes.addressof(packed.pointers)
    assert read(packed, 0, "Q") == (0xDEAD_BEEF_0000,)  # a pointer: 8 bytes, unsigned
    assert read(packed, 1, "i") == (-4,)
    assert read(packed, 2, "q") == (2**40 + 5,)  # an int constant: 8 bytes
    assert read(packed, 3, "d") == (2.25,)
    assert read(packed, 4, "f") == (1.5,)
    assert read(packed, 5, "qi") == (7, -3)  # a struct by value
    assert read(packed, 6, "ff") == (1.0, -2.0)  # a complex value: two floats
    for index, fmt in ((0, "Q"), (2, "q"), (3, "d"), (5, "q")):
        assert packed.pointers[index] % struct.calcsize(fmt) == 0  # naturally aligned
    packed.fill((1 << 63, 0, 0.0, 0.0, 0.0))  # the whole unsigned range of a pointer
    assert read(packed, 0, "Q") == (1 << 63,)
