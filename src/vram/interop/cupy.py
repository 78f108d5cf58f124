"""CuPy on vram's caching allocator.

``use_vram()`` makes ``malloc`` CuPy's allocator (``cupy.cuda.set_allocator``);
``use_cupy()`` gives CuPy back the allocator it had. For one block of code,
``with cupy.cuda.using_allocator(vram.interop.cupy.malloc):`` (CuPy's own context manager,
for the current thread).

Stream-aware: each allocation is made for CuPy's current stream, as CuPy's own memory pool
does, mapped to a vram stream (``vram.interop.peer_stream``), so a block freed by CuPy is
reused on that stream at once and on other streams only as vram's rules allow. The memory
is given back to vram when CuPy drops its last reference to it.
"""

from __future__ import annotations

import threading

import cupy

from .._device import Device
from ..memory import allocate
from ._streams import enter_device, peer_stream

__all__ = ["malloc", "use_vram", "use_cupy"]

_previous: list[object] = []  # CuPy's allocator before use_vram()
_lock = threading.Lock()


def malloc(size: int) -> cupy.cuda.MemoryPointer:
    """CuPy's allocator interface: ``size`` bytes on CuPy's current device, for its current
    stream, from vram's caching allocator."""
    device_id = cupy.cuda.runtime.getDevice()
    device = Device("cuda", device_id)
    enter_device(device)
    stream = peer_stream(cupy.cuda.get_current_stream().ptr, device)
    allocation = allocate(size, device, stream)
    memory = cupy.cuda.UnownedMemory(allocation.ptr, size, allocation, device_id)
    return cupy.cuda.MemoryPointer(memory, 0)


def use_vram() -> None:
    """Make vram CuPy's allocator for every thread (a no-op when it already is)."""
    with _lock:
        current = cupy.cuda.get_allocator()
        if current is malloc:
            return
        _previous.append(current)
        cupy.cuda.set_allocator(malloc)


def use_cupy() -> None:
    """Give CuPy back the allocator it had before ``use_vram()`` (its default memory pool
    if it had none recorded). Memory vram handed to CuPy stays valid until CuPy drops it."""
    with _lock:
        previous = _previous.pop() if _previous else cupy.get_default_memory_pool().malloc
        _previous.clear()
        cupy.cuda.set_allocator(previous)
