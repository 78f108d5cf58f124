"""DeviceAllocator: what every device allocator offers (the caching allocator, its uncached
form, and the cudaMallocAsync backend), so that the registry, the memory API, the tensors
and the tools ask for one declared type instead of one class.

Every method takes the allocator's lock unless its docstring says "call under
``locked()``"; none calls another. Finalizers use ``free_later`` and ``later`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from .._device import Device
from ..driver import Driver
from ._config import AllocatorConfig

__all__ = ["DeviceAllocator"]


@runtime_checkable
class DeviceAllocator(Protocol):
    """A device's allocator (PyTorch's CUDAAllocator, for one device)."""

    device: Device
    index: int
    driver: Driver
    config: AllocatorConfig
    no_caching: bool  # True: every request is a device allocation of its own
    fraction: float  # the memory fraction set (1.0: none)
    allowed_memory_maximum: int | None  # bytes the fraction allows, or None
    recorder: Any  # the event hook (count_device_calls, history), or None
    private_pools: dict[tuple[int, int], Any]  # MemPools and graph pools by id

    # ---- memory ---------------------------------------------------------------------------
    def malloc(self, size: int, stream: int) -> int:
        """A device pointer to at least ``size`` bytes for ``stream``; OutOfMemoryError."""
        ...

    def free(self, ptr: int) -> None:
        """Give ``ptr`` back (ValueError for a pointer it did not hand out)."""
        ...

    def free_later(self, ptr: int) -> None:
        """``free`` at the next call, without the lock (for finalizers)."""
        ...

    def later(self, work: Callable[[], None]) -> None:
        """Run ``work`` under the lock at the next call (for finalizers)."""
        ...

    def record_stream(self, ptr: int, stream: int) -> None:
        """PyTorch's recordStream: ``ptr`` is used on ``stream`` too."""
        ...

    def record_use(self, ptr: int, stream: int, device: int | None = None) -> None:
        """pytorch#181191's record_use: the last use of ``ptr`` on ``stream`` is queued now."""
        ...

    def empty_cache(self) -> None:
        """Give cached memory back to the device. Synchronizes."""
        ...

    # ---- settings and statistics ------------------------------------------------------------
    def set_memory_fraction(self, fraction: float) -> None: ...

    def set_config(self, config: AllocatorConfig) -> None: ...

    def memory_stats(self) -> dict[str, int]:
        """PyTorch's flat memory_stats dict."""
        ...

    def memory_allocated(self) -> int: ...

    def reset_peak(self) -> None: ...

    def reset_accumulated(self) -> None: ...

    # ---- routes, hooks and the state ----------------------------------------------------------
    def add_route(self, pool: Any, takes: Callable[[int], bool]) -> Any:
        """Requests on the streams ``takes(stream)`` accepts go to private ``pool``."""
        ...

    def remove_route(self, route: Any) -> None: ...

    def add_private_pool(self, private: Any) -> None: ...

    def set_recorder(self, recorder: Any) -> None:
        """The event hook, or None. Call under ``locked()``."""
        ...

    def add_free_memory_callback(self, callback: Callable[[], object]) -> None: ...

    def remove_free_memory_callback(self, callback: Callable[[], object]) -> None: ...

    def attach_oom_observer(self, observer: Callable[[int, int, int, int], None]) -> None: ...

    def locked(self) -> AbstractContextManager[None]:
        """Hold the lock (with dropped allocations freed) to read the state."""
        ...

    def all_blocks(self) -> list:
        """Every block, by address (RuntimeError where blocks are not tracked). Call under
        ``locked()``."""
        ...
