"""The plug-ins' logic without a GPU: peer streams as vram streams, PyTorch's pluggable
allocator callbacks (called through their C function pointers) on sim:0, and how each peer
library accepts vram's plug-in (CuPy's allocator switch, Numba's EMM interface check,
nvmath's allocator protocol)."""

from __future__ import annotations

import ctypes
import warnings

import pytest

import vram
from vram.interop import peer_stream
from vram.interop._pluggable import _ALLOC, _FREE, Callbacks


# -------------------------------------------------------------------- peer streams
def test_the_default_handle_is_the_devices_default_stream(sim0):
    assert peer_stream(0, sim0) is vram.default_stream(sim0)
    assert peer_stream(None, "sim:1") is vram.default_stream("sim:1")


def test_a_foreign_handle_becomes_one_external_stream(sim0):
    handle = vram.sim.driver().stream_create(0)  # made outside vram's Stream, as a peer would
    stream = peer_stream(handle, sim0)
    assert isinstance(stream, vram.ExternalStream)
    assert (stream.cuda_stream, stream.device) == (handle, sim0)
    assert peer_stream(handle, sim0) is stream  # one vram stream per (device, handle)


def test_peer_stream_rejects_what_is_no_stream_of_the_device(sim0):
    other = vram.sim.driver().stream_create(1)
    with pytest.raises(ValueError):
        peer_stream(other, sim0)
    with pytest.raises(TypeError, match="handle"):
        peer_stream(-1, sim0)
    with pytest.raises(TypeError, match="handle"):
        peer_stream("0x10", sim0)
    with pytest.raises(ValueError, match="cpu"):
        peer_stream(0, "cpu")


# ---------------------------------------------- PyTorch's pluggable allocator callbacks
@pytest.fixture
def c_callbacks(sim0):
    """(callbacks, alloc, free): Callbacks on sim devices, called as PyTorch calls them."""
    callbacks = Callbacks("sim", current_device=lambda: 0)
    alloc_address, free_address = callbacks.addresses
    return callbacks, _ALLOC(alloc_address), _FREE(free_address)


def test_alloc_and_free_through_the_c_pointers_move_vrams_stats(c_callbacks, sim0):
    callbacks, alloc, free = c_callbacks
    ptr = alloc(1000, 0, None)  # what torch.empty(250, device=...) asks for
    stats = vram.memory.memory_stats(sim0)
    assert stats["allocated_bytes.all.current"] == 1024  # 1000 rounded to 512 B
    assert stats["requested_bytes.all.current"] == 1000
    free(ptr, 1000, 0, None)
    assert vram.memory.memory_stats(sim0)["allocated_bytes.all.current"] == 0
    assert (callbacks.alloc_calls, callbacks.free_calls) == (1, 1)
    assert callbacks.seconds > 0


def test_alloc_is_made_for_the_stream_torch_passes(c_callbacks, sim0):
    _, alloc, free = c_callbacks
    handle = vram.sim.driver().stream_create(0)
    ptr = alloc(4096, 0, handle)
    segments = vram.memory.memory_snapshot()
    (segment,) = [s for s in segments if s["address"] <= ptr < s["address"] + s["total_size"]]
    assert segment["stream"] == handle
    free(ptr, 4096, 0, handle)


def test_a_failed_alloc_returns_null_and_keeps_the_error(c_callbacks, sim0):
    callbacks, alloc, _ = c_callbacks
    vram.sim.inject_malloc_failure(above_bytes=1 << 20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert alloc(64 << 20, 0, None) is None
    assert isinstance(callbacks.error, vram.OutOfMemoryError)
    assert any("alloc of 67108864 bytes failed" in str(w.message) for w in caught)


def test_zero_bytes_and_null_are_no_ops(c_callbacks, sim0):
    _, alloc, free = c_callbacks
    assert alloc(0, 0, None) is None
    free(None, 0, 0, None)
    assert vram.memory.memory_stats(sim0)["allocation.all.allocated"] == 0


def test_free_of_another_devices_memory_restores_the_current_device(sim0):
    seen = []
    callbacks = Callbacks("sim", current_device=lambda: seen.append("asked") or 0)
    ptr = callbacks.alloc(2048, 1, None)
    callbacks.free(ptr, 2048, 1, None)
    assert seen == ["asked"]  # PyTorch's current device was read to put it back
    assert vram.memory.memory_stats("sim:1")["allocated_bytes.all.current"] == 0


def test_c_pointers_stay_valid_for_the_callbacks_life(c_callbacks):
    callbacks, _, _ = c_callbacks
    alloc_address, free_address = callbacks.addresses
    assert alloc_address == ctypes.cast(callbacks.c_alloc, ctypes.c_void_p).value
    assert free_address != alloc_address


# ------------------------------------------------------------ the peers accept them
def test_cupy_allocator_switches_to_vram_and_back():
    cupy = pytest.importorskip("cupy")
    from vram.interop import cupy as plugin

    before = cupy.cuda.get_allocator()
    plugin.use_vram()
    plugin.use_vram()  # twice is once
    assert cupy.cuda.get_allocator() is plugin.malloc
    plugin.use_cupy()
    assert cupy.cuda.get_allocator() == before


def test_numba_accepts_the_emm_plugin():
    numba_cuda = pytest.importorskip("numba.cuda")
    from numba.cuda.cudadrv import driver as numba_driver

    from vram.interop import numba as plugin

    previous = numba_driver._memory_manager
    try:
        numba_cuda.set_memory_manager(plugin._numba_memory_manager)  # checks the interface
        assert numba_driver._memory_manager is plugin.VramMemoryManager
    finally:
        numba_driver._memory_manager = previous


def test_nvmath_takes_vram_as_its_allocator():
    pytest.importorskip("nvmath")
    from nvmath.linalg.advanced import MatmulOptions
    from nvmath.memory import BaseCUDAMemoryManagerAsync

    from vram.interop.nvmath import VramAllocator

    allocator = VramAllocator(device_id=0)
    assert isinstance(allocator, BaseCUDAMemoryManagerAsync)  # nvmath then passes its stream
    assert MatmulOptions(allocator=allocator).allocator is allocator
    with pytest.raises(TypeError, match="device_id"):
        VramAllocator(device_id=-1)
