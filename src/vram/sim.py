"""Controls of the simulated GPU for tests and users.

with vram.sim.deferred():        # queued work is held ...
    ...                          # ... until a stream/event is synchronized or run() drives it
vram.sim.inject_malloc_failure(nth=2)         # the 2nd device malloc from now fails
vram.sim.inject_malloc_failure(above_bytes=1 << 30)
vram.sim.clear_faults()
with vram.sim.hold(side):        # work queued on `side` stays in flight until the block ends

vram.sim.SimDriver(capacity=..., backed=False, addresses=...)   # a device of one's own that
                                 # counts memory and backs none, placing it by one's policy
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ._device import Device, as_device
from .driver import get_driver
from .driver._sim import AddressSpace, SimDriver, check_capacity

__all__ = [
    "SimDriver",
    "AddressSpace",
    "deferred",
    "hold",
    "run",
    "inject_malloc_failure",
    "clear_faults",
    "pending",
    "set_capacity",
    "driver",
]


def driver() -> SimDriver:
    """The process's simulated-GPU driver."""
    return get_driver("sim")  # type: ignore[return-value]


@contextmanager
def deferred() -> Iterator[None]:
    """Hold work queued on every sim stream until it is synchronized or ``run()``.

    On leaving the block, whatever is still held runs, so nothing stays stuck.
    """
    sim = driver()
    with sim._lock:
        sim.deferred_depth += 1
    try:
        yield
    finally:
        with sim._lock:
            sim.deferred_depth -= 1
            last = sim.deferred_depth == 0
        if last:
            sim.run()


@contextmanager
def hold(stream: object) -> Iterator[None]:
    """Keep the work queued on a sim ``stream`` in flight while the block runs, as if it
    ran long: it (and other streams' work waiting for it) runs when the block ends, or
    earlier when the host synchronizes with it."""
    handle = getattr(stream, "cuda_stream", stream)
    if not isinstance(handle, int):
        raise TypeError(f"stream: expected a vram.Stream of a sim device, got {stream!r}")
    sim = driver()
    sim.hold(handle)
    try:
        yield
    finally:
        if sim.stream_device(handle) is not None:
            sim.release(handle)


def run() -> None:
    """Run all work queued on every sim stream."""
    driver().run()


def pending(stream: object) -> int:
    """How many work items are queued on a sim stream and have not run yet."""
    handle = getattr(stream, "cuda_stream", stream)
    if not isinstance(handle, int):
        raise TypeError(f"stream: expected a vram.Stream of a sim device, got {stream!r}")
    return driver().pending(handle)


def inject_malloc_failure(nth: int | None = None, above_bytes: int | None = None) -> None:
    """Make device mallocs fail with CUDA_ERROR_OUT_OF_MEMORY.

    ``nth``: the nth device malloc from now fails, once (1 = the next one).
    ``above_bytes``: every device malloc larger than this fails until ``clear_faults()``.
    """
    if nth is None and above_bytes is None:
        raise ValueError("inject_malloc_failure: give nth= or above_bytes=")
    if nth is not None and (type(nth) is not int or nth < 1):
        raise ValueError(f"nth must be a positive int, got {nth!r}")
    if above_bytes is not None and (type(above_bytes) is not int or above_bytes < 0):
        raise ValueError(f"above_bytes must be a non-negative int, got {above_bytes!r}")
    faults = driver().faults
    faults.calls = 0
    faults.nth = nth
    faults.above_bytes = above_bytes


def clear_faults() -> None:
    """Stop injecting device-malloc failures."""
    faults = driver().faults
    faults.nth = None
    faults.above_bytes = None
    faults.calls = 0


def set_capacity(device: object, capacity: int) -> None:
    """Set a sim device's memory capacity in bytes (what mem_get_info reports as total).

    ``device``: a sim device (``"sim:1"``, ``vram.device("sim:1")``) or its index;
    ``capacity``: an int from 1 byte to MAX_CAPACITY (the device's address space).
    """
    if isinstance(device, bool) or not isinstance(device, (int, str, Device)):
        raise TypeError(f"device: expected a sim device or its index, got {device!r}")
    found = as_device(Device("sim", device) if isinstance(device, int) else device, "device")
    if found.type != "sim":
        raise ValueError(f"device: set_capacity is for sim devices, got {found}")
    driver().set_capacity(found.index, check_capacity(capacity, "capacity"))
