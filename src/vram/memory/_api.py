"""PyTorch's memory functions (torch.cuda.memory), over vram's caching allocators."""

from __future__ import annotations

import warnings
from collections.abc import Callable

from .._device import Device, as_device, current_device_obj
from .._streams import Stream, current_place, current_stream
from .._units import summary_size
from ._caching import DeviceCachingAllocator
from ._config import apply_settings, default_config, set_default_config
from ._registry import _allocators, allocator_for
from ._sanitizer import sync_sanitizer
from ._workspace import release_idle_workspaces, workspace_stats

__all__ = [
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "record_stream",
    "record_use",
    "memory_allocated",
    "memory_reserved",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "empty_cache",
    "set_per_process_memory_fraction",
    "get_per_process_memory_fraction",
    "set_allocator_settings",
    "get_allocator_settings",
    "get_allocator_backend",
    "register_free_memory_callback",
    "unregister_free_memory_callback",
    "attach_out_of_memory_observer",
    "enable_peer_access",
    "memory_summary",
]

# ptr -> its allocator, for caching_allocator_delete(ptr), which is given no device
_raw_owner: dict[int, DeviceCachingAllocator] = {}


def _device(device: object) -> Device:
    found = as_device(device)
    if found.type == "cpu":
        raise ValueError("device: the cpu device has no caching allocator")
    return found


def _stream_handle(stream: object, device: Device, argument: str = "stream") -> int:
    """The driver handle of ``stream`` (None: the current stream) on ``device``.

    A raw int must be a stream the device's driver knows: one vram made, the default
    stream, or one adopted with ``vram.ExternalStream``.
    """
    if stream is None:
        return current_stream(device).cuda_stream
    if isinstance(stream, Stream):
        if stream.device != device:
            raise ValueError(f"{argument}: {stream} belongs to {stream.device}, not {device}")
        return stream.cuda_stream
    if type(stream) is not int:
        raise TypeError(f"{argument}: expected a vram.Stream or a stream handle, got {stream!r}")
    owner = device.driver.stream_device(stream)
    if owner != device.index:
        where = "no stream" if owner is None else f"a stream of {device.type}:{owner}"
        raise ValueError(
            f"{argument}: {stream:#x} is {where} known to {device}; pass a vram.Stream "
            "(wrap another library's stream in vram.ExternalStream)"
        )
    return stream


def caching_allocator_alloc(size: int, device: object = None, stream: object = None) -> int:
    """Allocate ``size`` bytes with the caching allocator; returns the device pointer.

    ``stream`` (current stream if None) is the stream the memory will be used on.
    """
    if type(size) is not int or size <= 0:
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"size must be an int, got {type(size).__name__}")
        if size < 0:
            raise ValueError(f"size must be non-negative, got {size}")
    if device is None and stream is None:  # the common call: current device and stream
        found, handle = current_place()
    else:
        found = _device(device)
        handle = _stream_handle(stream, found)
    if not size:
        return 0
    allocator = _allocators.get(found) or allocator_for(found)
    ptr = allocator.malloc(size, handle)
    _raw_owner[ptr] = allocator
    return ptr


def caching_allocator_delete(ptr: int) -> None:
    """Free memory from caching_allocator_alloc (a null pointer is ignored)."""
    try:
        allocator = _raw_owner.pop(ptr)
    except (KeyError, TypeError):
        if type(ptr) is not int:
            raise TypeError(f"ptr: expected an int device pointer, got {ptr!r}") from None
        if ptr != 0:
            raise ValueError(
                f"ptr: {ptr:#x} was not allocated by caching_allocator_alloc"
            ) from None
        return
    allocator.free(ptr)


def _raw_device(ptr: int, what: str) -> Device:
    if type(ptr) is not int:
        raise TypeError(f"{what}: ptr must be an int device pointer, got {ptr!r}")
    allocator = _raw_owner.get(ptr)
    if allocator is None:
        raise ValueError(f"{what}: ptr {ptr:#x} was not allocated by caching_allocator_alloc")
    return allocator.device


def record_stream(ptr: int, stream: Stream) -> None:
    """record_stream for raw allocations: ``ptr`` is used on ``stream`` too."""
    device = _raw_device(ptr, "record_stream")
    if stream is None:
        raise TypeError("record_stream: stream must be a vram.Stream or a stream handle, not None")
    allocator_for(device).record_stream(ptr, _stream_handle(stream, device))


def record_use(ptr: int, stream: Stream) -> None:
    """record_use for raw allocations: the last use of ``ptr`` on ``stream`` is queued now
    (``stream`` may be a peer device's). A null pointer, or a stream of another kind of
    device, is ignored with a warning.
    """
    if not isinstance(stream, Stream):
        raise TypeError(f"stream: expected a vram.Stream, got {type(stream).__name__}")
    if ptr == 0:
        warnings.warn("record_use: null pointer ignored", RuntimeWarning, stacklevel=2)
        return
    device = _raw_device(ptr, "record_use")
    if stream.device.type != device.type:
        warnings.warn(
            f"record_use: {stream} is on {stream.device}, not {device}; ignored",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    if stream.device == device:
        allocator_for(device).record_use(ptr, stream.cuda_stream)
    else:  # a peer's stream: its event is that device's
        allocator_for(device).record_use(ptr, stream.cuda_stream, stream.device.index)


def memory_stats(device: object = None) -> dict[str, int]:
    """PyTorch's memory_stats: a flat dict of the allocator's counters, with vram's
    ``workspace_bytes.all.*`` (library workspaces) among them."""
    found = _device(device)
    stats = allocator_for(found).memory_stats()  # sorted by key
    stats.update(sorted(workspace_stats(found).items()))  # "workspace_bytes.*": sorted last
    return stats


def memory_allocated(device: object = None) -> int:
    """Bytes occupied by live allocations (rounded sizes), in O(1)."""
    found = current_device_obj() if device is None else _device(device)
    return (_allocators.get(found) or allocator_for(found)).memory_allocated()


def max_memory_allocated(device: object = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: object = None) -> int:
    """Bytes the allocator holds from the device."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: object = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: object = None) -> None:
    allocator_for(_device(device)).reset_peak()


def reset_max_memory_allocated(device: object = None) -> None:
    allocator_for(_device(device)).reset_peak()


def reset_accumulated_memory_stats(device: object = None) -> None:
    allocator_for(_device(device)).reset_accumulated()


def empty_cache(device: object = None) -> None:
    """Return every whole free segment to the device, after freeing the library workspaces
    no queued work uses. Synchronizes pending frees."""
    found = _device(device)
    allocator = allocator_for(found)
    if getattr(allocator, "lifetimes", None) is not None and allocator.lifetimes.captures:
        raise RuntimeError(
            f"empty_cache: a CUDA graph is being captured on {found}; empty_cache synchronizes "
            "and frees device memory, which a capture forbids. Call it before capture_begin "
            "or after capture_end"
        )
    release_idle_workspaces(found)
    allocator.empty_cache()


def set_per_process_memory_fraction(fraction: float, device: object = None) -> None:
    """Cap what the allocator may reserve at ``fraction`` of the device's memory."""
    if not isinstance(fraction, float):
        raise TypeError(f"fraction must be a float, got {type(fraction).__name__}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    allocator_for(_device(device)).set_memory_fraction(fraction)


def get_per_process_memory_fraction(device: object = None) -> float:
    return allocator_for(_device(device)).fraction


def set_allocator_settings(settings: str) -> None:
    """Apply a VRAM_ALLOC_CONF-style string on top of the current settings, for every
    device's allocator now and for those created later.

    As in PyTorch, max_split_size_mb, roundup_power2_divisions and
    garbage_collection_threshold return to their defaults unless ``settings`` names them.
    """
    config = apply_settings(settings, default_config())
    set_default_config(config)
    for allocator in _allocators.values():
        allocator.set_config(config)
        sync_sanitizer(allocator)  # stream_sanitizer on or off


def get_allocator_settings(device: object = None) -> dict:
    """The current settings as a snapshot's allocator_settings dict."""
    return allocator_for(_device(device)).config.settings()


def get_allocator_backend() -> str:
    """The device allocators' backend (PyTorch's torch.cuda.get_allocator_backend):
    "native", vram's caching allocator, or "cudaMallocAsync", the driver's stream-ordered
    pool; the ``backend`` key of VRAM_ALLOC_CONF (PYTORCH_CUDA_ALLOC_CONF), read when an
    allocator is made."""
    return default_config().backend


def register_free_memory_callback(callback: Callable[[], bool], device: object = None) -> None:
    """Call ``callback()`` before the allocator grows; it returns True if it freed memory.

    It runs without the allocator's lock, so it may free memory. One that raises is
    reported with a RuntimeWarning and counts as having freed nothing.
    """
    if not callable(callback):
        raise TypeError(f"callback: expected a callable, got {callback!r}")
    allocator_for(_device(device)).add_free_memory_callback(callback)


def unregister_free_memory_callback(callback: Callable[[], bool], device: object = None) -> None:
    """Stop calling ``callback`` (ValueError if it was not registered)."""
    allocator_for(_device(device)).remove_free_memory_callback(callback)


def attach_out_of_memory_observer(
    observer: Callable[[int, int, int, int], None], device: object = None
) -> None:
    """Call ``observer(device, alloc_size, device_limit, device_free)`` before an OOM raises
    (without the allocator's lock; one that raises is ignored)."""
    if not callable(observer):
        raise TypeError(f"observer: expected a callable, got {observer!r}")
    allocator = allocator_for(_device(device))
    if getattr(allocator, "backend", "native") != "native":
        raise RuntimeError(
            "cudaMallocAsync does not yet support attach_out_of_memory_observer "
            "(as PyTorch's backend:cudaMallocAsync)"
        )
    allocator.attach_oom_observer(observer)


def enable_peer_access(peer: object, device: object = None) -> None:
    """Let kernels on ``device`` (the current device if None) read and write ``peer``'s
    memory: the driver's peer access (cuCtxEnablePeerAccess), and ``peer``'s allocator maps
    its expandable pages for ``device`` too (PyTorch's enablePeerAccess). Enabling it twice
    is harmless; ValueError where the two devices cannot reach each other."""
    found, other = _device(device), _device(peer)
    if found.type != other.type or found == other:
        raise ValueError(f"peer: {other} cannot be a peer of {found}")
    driver = found.driver
    if not driver.can_access_peer(found.index, other.index):
        raise ValueError(f"peer: {found} cannot access {other}'s memory (no peer access)")
    driver.enable_peer_access(found.index, other.index)
    allocator_for(other).add_peer(found.index)


def _format_count(count: int, reference: int) -> str:
    prefixes = [" ", "K", "M"]
    prefix = prefixes[0]
    for new_prefix in prefixes[1:]:
        if reference < 750 * 1000:
            break
        prefix = new_prefix
        count //= 1000
        reference /= 1000
    return f"{count:7d} {prefix} "


_METRICS = [
    ("allocated_bytes", "Allocated memory", summary_size),
    ("active_bytes", "Active memory", summary_size),
    ("requested_bytes", "Requested memory", summary_size),
    ("reserved_bytes", "GPU reserved memory", summary_size),
    ("inactive_split_bytes", "Non-releasable memory", summary_size),
    ("allocation", "Allocations", _format_count),
    ("active", "Active allocs", _format_count),
    ("segment", "GPU reserved segments", _format_count),
    ("inactive_split", "Non-releasable allocs", _format_count),
]


def memory_summary(device: object = None, abbreviated: bool = False) -> str:
    """PyTorch's memory_summary table for the device's allocator."""
    found = _device(device)
    stats = memory_stats(found)
    rule, heavy = "-" * 75, "=" * 75
    lines = [
        heavy,
        f" {'':16} vram memory summary, device {str(found):<21} ",
        rule,
        f"  {'':9} OOMs: {stats['num_ooms']:<17d} | {'':6} "
        f"device malloc retries: {stats['num_alloc_retries']:<5d}  ",
        heavy,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]
    for key, name, fmt in _METRICS:
        lines.append(rule)
        rows = [("all", name)]
        if not abbreviated:
            rows += [
                ("large_pool", "      from large pool"),
                ("small_pool", "      from small pool"),
            ]
        ref = None
        for pool, label in rows:
            values = [stats[f"{key}.{pool}.{f}"] for f in ("current", "peak", "allocated", "freed")]
            ref = ref or values
            cells = " | ".join(fmt(v, r) for v, r in zip(values, ref, strict=True))
            lines.append(f" {label:<21} | {cells} ")
    for key, name in (
        ("oversize_allocations", "Oversize allocations"),
        ("oversize_segments", "Oversize GPU segments"),
    ):
        lines.append(rule)
        values = [stats[f"{key}.{f}"] for f in ("current", "peak", "allocated", "freed")]
        cells = " | ".join(_format_count(v, v) for v in values)
        lines.append(f" {name:<21} | {cells} ")
    lines.append(heavy)
    return "|" + "|\n|".join(line.ljust(75) for line in lines) + "|\n"
