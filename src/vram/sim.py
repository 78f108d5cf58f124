"""Controls of the simulated GPU for tests and users.

with vram.sim.deferred():        # queued work is held ...
    ...                          # ... until a stream/event is synchronized or run() drives it
vram.sim.inject_malloc_failure(nth=2)         # the 2nd device malloc from now fails
vram.sim.inject_malloc_failure(above_bytes=1 << 30)
vram.sim.clear_faults()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .driver import get_driver
from .driver._sim import SimDriver

__all__ = [
    "deferred",
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


def set_capacity(device: int, capacity: int) -> None:
    """Set a sim device's memory capacity in bytes (what mem_get_info reports as total)."""
    driver().set_capacity(device, capacity)
