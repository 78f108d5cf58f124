"""The kernel seam: launches declared once, packed for cuLaunchKernel, queued on sim."""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

import vram
from vram.driver._work import Arg, Kernel, Launch, LibraryCall, PackedParams, View, run_on_host
from vram.ops._plans import host_view

SIM = vram.device("sim:0")


def _read(packed: PackedParams, index: int, fmt: str) -> tuple:
    """The value parameter ``index`` points at, read back as ``fmt``."""
    address = packed.pointers[index]
    size = struct.calcsize("<" + fmt)
    return struct.unpack("<" + fmt, ctypes.string_at(address, size))


def test_packed_parameters_point_at_each_value_with_its_alignment():
    layout = np.zeros((), dtype=np.dtype([("n", np.int64), ("k", np.int32)], align=True))
    layout["n"], layout["k"] = 5, -3
    params = (Arg("f"), np.int64(7), Arg("P"), Arg("dd"), 0, layout[()], b"\0", Arg("?"))
    packed = PackedParams(params)
    address = packed.fill((1.5, 0x1234_5678_9ABC, 2.0, -1.0, True))
    assert address == ctypes.addressof(packed.pointers)
    assert _read(packed, 0, "f") == (1.5,)
    assert _read(packed, 1, "q") == (7,)
    assert _read(packed, 2, "Q") == (0x1234_5678_9ABC,)
    assert _read(packed, 3, "dd") == (2.0, -1.0)
    assert _read(packed, 4, "Q") == (0,)
    assert _read(packed, 5, "qi") == (5, -3)
    assert _read(packed, 7, "?") == (True,)
    for index, align in ((0, 4), (1, 8), (2, 8), (3, 8), (5, 8)):
        assert packed.pointers[index] % align == 0
    packed.fill((2.5, 1, 0.0, 0.0, False))  # a second call overwrites the per-call values
    assert _read(packed, 0, "f") == (2.5,) and _read(packed, 1, "q") == (7,)


def test_constants_must_be_typed():
    with pytest.raises(TypeError, match="Python bool"):
        PackedParams((True,))
    with pytest.raises(TypeError, match="expected an int, a NumPy scalar or bytes"):
        PackedParams((1.5,))


def test_views_and_extents():
    view = View((2, 3), (12, 4), np.dtype(np.float32))
    assert view.extent() == (0, 24)
    assert View((0, 3), (12, 4), np.dtype(np.float32)).extent() == (0, 0)
    assert View((4,), (0,), np.dtype(np.float64)).extent() == (0, 8)


def _scale_kernel() -> Kernel:
    def reference(factor: float, out: np.ndarray, x: np.ndarray) -> None:
        out[...] = x * factor

    return Kernel("scale", "/* unused on sim */", reference)


def test_sim_queues_the_reference_on_the_stream_over_views():
    x = vram.arange(6.0, device=SIM).view(2, 3)
    out = vram.empty(3, 2, device=SIM).t()  # a strided output
    f32 = np.dtype(np.float32)
    launch = Launch(
        _scale_kernel(),
        "scale",
        params=(Arg("f"), Arg("P"), Arg("P")),
        views=(None, View((2, 3), (4, 8), f32), View((2, 3), (12, 4), f32)),
    )
    run = SIM.driver.prepare(SIM.index, launch)
    stream = vram.current_stream(SIM)
    with vram.sim.deferred():
        run(stream.cuda_stream, 3.0, out.data_ptr(), x.data_ptr())
        assert vram.sim.pending(stream) == 1  # queued, not run
    assert out.tolist() == [[0.0, 3.0, 6.0], [9.0, 12.0, 15.0]]


def test_a_launch_runs_at_once_on_host_memory():
    x = vram.arange(4.0, device="cpu")
    out = vram.empty(4, device="cpu")
    f32 = np.dtype(np.float32)
    launch = Launch(
        _scale_kernel(),
        "scale",
        params=(Arg("f"), Arg("P"), Arg("P")),
        views=(None, View((4,), (4,), f32), View((4,), (4,), f32)),
    )
    run_on_host(launch, (2.0, out.data_ptr(), x.data_ptr()), host_view)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_more_views_than_arguments_is_refused():
    with pytest.raises(ValueError, match="more views"):
        Launch(_scale_kernel(), "scale", params=(Arg("P"),), views=(None, None))


def test_a_library_calls_prepared_callable_is_cuda_or_what_bind_gives():
    """``LibraryCall.prepared``: what a launcher runs per call, ``(stream, *args)``; ``cuda``
    with the driver, the device and the launch's values around the arguments, or, with
    ``bind``, its answer for those (asked once)."""
    seen = []
    plain = LibraryCall("plain", lambda *a: seen.append(a), lambda *a: None)
    plain.prepared("driver", 3, ("v1", "v2"))(7, "x", "y")
    assert seen == [("driver", 3, 7, "x", "y", "v1", "v2")]
    binds = []

    def bind(driver, device, *values):
        binds.append((driver, device, values))
        return lambda *a: seen.append(("bound", *a))

    bound = LibraryCall("bound", lambda *a: None, lambda *a: None, bind)
    run = bound.prepared("driver", 3, ("v1",))
    run(7, "x")
    run(8, "z")
    assert binds == [("driver", 3, ("v1",))]
    assert seen[1:] == [("bound", 7, "x"), ("bound", 8, "z")]
