"""backend:cudaMallocAsync: PyTorch's CUDAMallocAsyncAllocator, on the driver's stream-ordered
memory pool.

``backend:cudaMallocAsync`` in VRAM_ALLOC_CONF (or PYTORCH_CUDA_ALLOC_CONF), read when a
device's allocator is made, gives an ``AsyncAllocator``: every request is a cudaMallocAsync
from the device's default memory pool on the request's stream, every free a cudaFreeAsync.
The driver caches, splits and reuses memory in stream order; this module is PyTorch's
policy around it:

- The pool keeps what it holds: the first use of the device sets its release threshold to
  the maximum (and the three reuse flags on), as PyTorch does. Memory goes back to the
  device only at ``empty_cache()``, which synchronizes the device and trims the pool to 0.
- A free is queued on the stream the memory was allocated on: work queued there before
  still runs first, later requests on that stream may reuse it at once, other streams once
  the free has run. After ``record_stream`` the free is queued instead on a side stream of
  the device (PyTorch's "unifying" free stream) that first waits for the allocation stream
  and for every recorded stream, as they are at the free. (vram) ``record_use`` is the
  precise form: the side stream waits for the event recorded at the last use instead.
- ``set_per_process_memory_fraction`` caps the bytes asked for by live allocations (not
  the pool's reserve) at that share of the device's total. A request over the cap, or one
  the driver cannot serve, raises OutOfMemoryError with PyTorch's message. (vram) Before it
  raises, the free-memory callbacks run, and the request is tried again if one freed some.
- ``memory_stats()`` has every key of the native backend. As in PyTorch only six are filled,
  from the pool's attributes: allocated_bytes and active_bytes of "all" (current, peak:
  the pool's used memory) and reserved_bytes of "all" (its reserved memory); the others
  are 0, max_split_size too. ``reset_peak_memory_stats`` resets the pool's high
  watermarks; ``reset_accumulated_memory_stats`` has no effect (a warning says so).
- As in PyTorch: memory snapshots, memory history and out-of-memory observers raise
  RuntimeError; the native backend's settings (max_split_size_mb, expandable_segments,
  per_process_memory_fraction, ...) are ignored, with a warning; ``use_mem_pool`` routes
  nothing: allocations still come from the device's pool.

The pool is the device's, shared with any other library of the process that uses it
(CuPy's or PyTorch's cudaMallocAsync): its used and reserved bytes count theirs too.

Locking: one lock (``_lock``), as the native allocator: public methods take it and never
call one another; finalizers never take it (``free_later``: the next call frees).
"""

from __future__ import annotations

import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .._device import Device
from .._errors import CudaError, OutOfMemoryError
from .._streams import Stream
from .._units import format_size
from ..driver import Driver
from ._allocation import FreesDropped
from ._config import AllocatorConfig, _items, default_config
from ._stats import DeviceStats

__all__ = ["AsyncAllocator", "ignored_settings", "SNAPSHOT_UNSUPPORTED"]

_UINT64_MAX = (1 << 64) - 1  # PyTorch's release threshold: keep everything
_ONE_EXA = 1 << 60  # bytes: PyTorch refuses a request this large before asking the driver
_REUSE = (
    "reuse_follow_event_dependencies",
    "reuse_allow_opportunistic",
    "reuse_allow_internal_dependencies",
)

# the settings keys of the native backend (the pinned_* keys are the host allocator's)
_NATIVE_ONLY = (
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "expandable_segments",
    "release_lock_on_cudamalloc",
    "graph_capture_record_stream_reuse",
    "per_process_memory_fraction",
    "cross_stream_reuse",
    "expandable_page_mb",
)

SNAPSHOT_UNSUPPORTED = (
    "Calling snapshot with backend:cudaMallocAsync is not meaningful. (For backend:native, "
    "snapshot returns a detailed summary of all blocks tracked by the allocator, but the "
    "cudaMallocAsync backend does not track individual blocks.)"
)


def ignored_settings(text: str) -> list[str]:
    """The native backend's keys that the settings string ``text`` names: this backend
    ignores them (PyTorch warns of them as it parses)."""
    return [key for key, _ in _items(text) if key in _NATIVE_ONLY]


@dataclass(slots=True)
class _Usage:
    """What the allocator knows of a live allocation (PyTorch's PtrUsage)."""

    size: int  # bytes asked for
    stream: int  # the stream it was allocated on
    recorded: set[int] | None = None  # record_stream's other streams
    # record_use: (device, stream) -> the event recorded at the last use there
    uses: dict[tuple[int, int], int] | None = None


class _Counters:
    """What count_device_calls reads: the device synchronizations of empty_cache."""

    __slots__ = ("num_sync_all_streams",)

    def __init__(self) -> None:
        self.num_sync_all_streams = 0


class AsyncAllocator(FreesDropped):
    """The cudaMallocAsync backend of one device (cuda:N or sim:N); see the module
    docstring. It offers the methods of DeviceCachingAllocator."""

    no_caching = False
    backend = "cudaMallocAsync"

    def __init__(
        self, device: Device, config: AllocatorConfig | None = None, driver: Driver | None = None
    ) -> None:
        self.device = device
        self.index: int = device.index  # type: ignore[assignment]
        self.driver: Driver = driver or device.driver
        self.config = config or default_config()
        self._lock = threading.Lock()
        self._dropped: deque = deque()  # pointers (and work) finalizers left for the next call
        self._allocated: dict[int, _Usage] = {}  # ptr -> its usage; guarded by _lock
        self.used_bytes = 0  # bytes asked for by live allocations (PyTorch's used bytes)
        self.allowed_memory_maximum: int | None = None  # the memory-fraction cap, if set
        self.fraction = 1.0
        self.free_memory_callbacks: list[Callable[[], object]] = []
        self.recorder: Any = None  # count_device_calls' counters, or None
        self.private_pools: dict[tuple[int, int], Any] = {}  # MemPools made on the device
        self.routes: list[tuple[Any, Callable[[int], bool]]] = []  # use_mem_pool's, unused
        self.stats = _Counters()
        self._ready = False  # the pool is set up (PyTorch's lazy_init_device)
        self._unifier = 0  # the side stream of frees after record_stream / record_use
        self._event = 0  # an event for making one stream wait for another
        self._warned: set[str] = set()
        self._warn_ignored(self.config)

    # ====================================================================== public API
    def malloc(self, size: int, stream: int) -> int:
        """cudaMallocAsync ``size`` bytes on ``stream``; OutOfMemoryError when the memory
        fraction's cap or the device refuses."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            ptr = self._malloc(size, stream)
        if not ptr and self.free_memory_callbacks and self._run_free_memory_callbacks():
            with self._lock:
                ptr = self._malloc(size, stream)
        if ptr:
            return ptr
        with self._lock:
            error = self._out_of_memory(size, stream)
        try:
            raise error
        finally:  # (no cycle through this frame: see DeviceCachingAllocator.malloc)
            del error

    def record_stream(self, ptr: int, stream: int) -> None:
        """The allocation at ``ptr`` is used on ``stream`` too: its free waits for the work
        queued there by then (PyTorch's recordStream)."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            usage = self._live(ptr, "record_stream")
            if stream == usage.stream:
                self._warn_once(
                    "record_stream",
                    "record_stream: the memory was allocated on that stream; recording it "
                    "is unnecessary and has no effect",
                )
            elif usage.recorded is None:
                usage.recorded = {stream}
            else:
                usage.recorded.add(stream)

    def record_use(self, ptr: int, stream: int, device: int | None = None) -> None:
        """The last use of ``ptr`` on ``stream`` is queued now (pytorch#181191's record_use):
        its free waits for that use, not for everything queued on ``stream`` by then.
        ``device``: the stream's device when it is a peer of this one (None: this device)."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            usage = self._live(ptr, "record_use")
            device = self.index if device is None else device
            if stream == usage.stream and device == self.index:
                return
            if usage.uses is None:
                usage.uses = {}
            event = usage.uses.get((device, stream))
            if event is None:  # recorded on the stream's own device, waited on from this one
                event = usage.uses[device, stream] = self.driver.event_create(device)
            self.driver.event_record(event, stream)

    def empty_cache(self) -> None:
        """Synchronize the device, then give every unused byte of the pool back to it
        (cudaMemPoolTrimTo 0). Synchronizes."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            if not self._ready:
                return
            self.driver.device_synchronize(self.index)
            self.stats.num_sync_all_streams += 1
            self.driver.mempool_trim_to(self.index, 0)

    def set_memory_fraction(self, fraction: float) -> None:
        """Cap the bytes of live allocations at ``fraction`` of the device's total memory."""
        with self._lock:
            self._init()
            total = self.driver.mem_get_info(self.index)[1]
            self.fraction = fraction
            self.allowed_memory_maximum = int(fraction * total)

    def set_config(self, config: AllocatorConfig) -> None:
        with self._lock:
            self.config = config
            self._warn_ignored(config)

    def memory_stats(self) -> dict[str, int]:
        """The native backend's keys; the pool's used and reserved bytes in the six that
        PyTorch fills for this backend, 0 elsewhere (all 0 before the first use)."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            out = DeviceStats().as_dict(0)
            if self._ready:
                read, index = self.driver.mempool_attribute, self.index
                used, used_high = read(index, "used_mem_current"), read(index, "used_mem_high")
                for name in ("allocated_bytes", "active_bytes"):
                    out[f"{name}.all.current"] = used
                    out[f"{name}.all.peak"] = used_high
                out["reserved_bytes.all.current"] = read(index, "reserved_mem_current")
                out["reserved_bytes.all.peak"] = read(index, "reserved_mem_high")
            return out

    def memory_allocated(self) -> int:
        """The pool's used bytes (allocated_bytes.all.current)."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            if not self._ready:
                return 0
            return self.driver.mempool_attribute(self.index, "used_mem_current")

    def reset_peak(self) -> None:
        """Reset the pool's high watermarks to their current values."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            self.driver.mempool_set_attribute(self.index, "reserved_mem_high", 0)
            self.driver.mempool_set_attribute(self.index, "used_mem_high", 0)

    def reset_accumulated(self) -> None:
        """No effect for this backend (PyTorch's: a warning says so)."""
        with self._lock:
            self._warn_once(
                "reset_accumulated",
                "For backend:cudaMallocAsync, resetAccumulatedStats has no effect.",
            )

    def add_route(self, pool: Any, takes: Callable[[int], bool]) -> Any:
        """Kept for use_mem_pool, as PyTorch's backend does: the requests still come from
        the device's pool."""
        with self._lock:
            route = (pool, takes)
            self.routes.insert(0, route)
            return route

    def remove_route(self, route: Any) -> None:
        with self._lock:
            self.routes.remove(route)

    def set_recorder(self, recorder: Any) -> None:
        """The event hook (count_device_calls' counters), or None. Call under ``locked()``."""
        self.recorder = recorder

    def add_free_memory_callback(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` before raising OutOfMemoryError (without the lock)."""
        with self._lock:
            self.free_memory_callbacks.append(callback)

    def remove_free_memory_callback(self, callback: Callable[[], object]) -> None:
        """Stop calling ``callback`` (ValueError if it was not added)."""
        with self._lock:
            if callback not in self.free_memory_callbacks:
                raise ValueError(f"callback: {callback!r} is not registered on {self.device}")
            self.free_memory_callbacks.remove(callback)

    def attach_oom_observer(self, observer: Callable[[int, int, int, int], None]) -> None:
        """RuntimeError, as PyTorch's backend:cudaMallocAsync."""
        raise RuntimeError(
            "cudaMallocAsync does not yet support attach_out_of_memory_observer "
            "(as PyTorch's backend:cudaMallocAsync)"
        )

    def add_private_pool(self, private: Any) -> None:
        """Keep a MemPool made on the device (its requests still come from the device's
        pool, as in PyTorch's backend)."""
        with self._lock:
            self.private_pools[private.id] = private

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the lock, with dropped allocations freed."""
        with self._lock:
            if self._dropped:
                self._free_dropped()
            yield

    def all_blocks(self) -> list:
        """RuntimeError: this backend tracks no blocks (PyTorch's snapshot says so)."""
        raise RuntimeError(SNAPSHOT_UNSUPPORTED)

    # ===================================================================== the steps
    def _init(self) -> None:
        """PyTorch's lazy_init_device: the pool keeps everything it reserves, reuse follows
        every rule the driver has, and a side stream is taken for multi-stream frees."""
        if self._ready:
            return
        driver, index = self.driver, self.index
        driver.mempool_set_attribute(index, "release_threshold", _UINT64_MAX)
        for flag in _REUSE:
            driver.mempool_set_attribute(index, flag, 1)
        self._unifier = Stream(self.device).cuda_stream
        self._event = driver.event_create(index)
        self._ready = True

    def _malloc(self, size: int, stream: int) -> int:
        """A pointer, or 0 when the cap or the device has no room."""
        if size >= _ONE_EXA:
            raise OutOfMemoryError(
                f"{self.device.type.upper()} out of memory. Tried to allocate more than 1EB memory."
            )
        self._init()
        limit = self.allowed_memory_maximum
        if limit is not None and self.used_bytes + size > limit:
            return 0
        try:
            ptr = self.driver.malloc_async(self.index, size, stream)
        except CudaError as error:
            if not error.is_out_of_memory:
                raise
            return 0
        self._allocated[ptr] = _Usage(size, stream)
        self.used_bytes += size
        if self.recorder is not None:
            self._trace("alloc", ptr, size, stream)
        return ptr

    def _free(self, ptr: int) -> None:
        """cudaFreeAsync on the allocation's stream, or, after record_stream / record_use,
        on the side stream once it has waited for every stream that used the memory."""
        usage = self._live(ptr, "free")
        driver, index = self.driver, self.index
        if usage.recorded is None and usage.uses is None:
            driver.free_async(index, ptr, usage.stream)
        else:
            unifier = self._unifier
            recorded = usage.recorded or set()
            for stream in (usage.stream, *sorted(recorded)):
                driver.event_record(self._event, stream)
                driver.stream_wait_event(unifier, self._event)
            for (device, stream), event in (usage.uses or {}).items():
                if device != index or stream not in recorded:
                    driver.stream_wait_event(unifier, event)
            driver.free_async(index, ptr, unifier)
            for event in (usage.uses or {}).values():
                driver.event_destroy(event)
        del self._allocated[ptr]
        self.used_bytes -= usage.size
        if self.recorder is not None:
            self._trace("free_requested", ptr, usage.size, usage.stream)

    def _live(self, ptr: int, what: str) -> _Usage:
        usage = self._allocated.get(ptr)
        if usage is None:
            raise ValueError(f"{what}: ptr {ptr:#x} is not a live allocation of {self.device}")
        return usage

    def _run_free_memory_callbacks(self) -> bool:
        """Call the free-memory callbacks (the lock is not held); True if one freed some.
        A callback that raises is reported and counts as False."""
        freed = False
        for callback in list(self.free_memory_callbacks):
            try:
                freed = bool(callback()) or freed
            except Exception as exc:
                warnings.warn(
                    f"free-memory callback {callback!r} raised {exc!r}; ignored",
                    RuntimeWarning,
                    stacklevel=3,
                )
        return freed

    def _out_of_memory(self, size: int, stream: int) -> OutOfMemoryError:
        """PyTorch's OutOfMemoryError of this backend, with its message."""
        free, total = self.driver.mem_get_info(self.index)
        self._trace("oom", free, size, stream)
        limit = self.allowed_memory_maximum
        return OutOfMemoryError(
            f"Allocation on device {self.device} would exceed allowed memory. (out of memory)"
            f"\nCurrently allocated     : {format_size(self.used_bytes)}"
            f"\nRequested               : {format_size(size)}"
            f"\nDevice limit            : {format_size(total)}"
            f"\nFree (according to CUDA): {format_size(free)}"
            "\nvram limit (set by user-supplied memory fraction)"
            f"\n                        : {format_size(_UINT64_MAX if limit is None else limit)}"
        )

    def _trace(self, action: str, addr: int, size: int, stream: int) -> None:
        if self.recorder is not None:
            self.recorder.record(self, action, addr, size, stream)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, UserWarning, stacklevel=3)

    def _warn_ignored(self, config: AllocatorConfig) -> None:
        keys = ignored_settings(config.text)
        if keys:
            warnings.warn(
                f"backend:cudaMallocAsync ignores {', '.join(keys)} (settings of the native "
                "backend)",
                UserWarning,
                stacklevel=4,
            )
