"""Device memory: the caching allocator and PyTorch's memory functions (torch.cuda.memory)."""

from .._units import format_size
from ._allocation import Allocation
from ._api import *  # noqa: F403
from ._api import __all__ as _api_all
from ._async import AsyncAllocator
from ._caching import DeviceCachingAllocator
from ._config import AllocatorConfig, parse_config
from ._config import _items as config_items  # a settings string's key:value pairs
from ._counting import DeviceCalls, count_device_calls
from ._host import (
    CachingHostAllocator,
    PinnedAllocation,
    allocate_pinned,
    host_allocator,
    host_empty_cache,
    host_memory_stats,
    host_record_event,
    is_pinned,
    reset_accumulated_host_memory_stats,
    reset_peak_host_memory_stats,
)
from ._labels import clear_label, label_of, set_label
from ._oom_report import MemoryReport, memory_report
from ._pools import MemPool, PrivatePool, use_mem_pool
from ._registry import allocate, allocator_for, made_allocator
from ._sanitizer import StreamRace, StreamRaceWarning, stream_races
from ._snapshot import _dump_snapshot, _record_memory_history, _snapshot, memory_snapshot
from ._workspace import current_workspace, get_workspace

__all__ = [
    "Allocation",
    "DeviceCalls",
    "count_device_calls",
    "_dump_snapshot",
    "_record_memory_history",
    "_snapshot",
    "memory_snapshot",
    "get_workspace",
    "current_workspace",
    "CachingHostAllocator",
    "PinnedAllocation",
    "allocate_pinned",
    "host_allocator",
    "host_empty_cache",
    "host_memory_stats",
    "host_record_event",
    "is_pinned",
    "reset_accumulated_host_memory_stats",
    "reset_peak_host_memory_stats",
    "AllocatorConfig",
    "config_items",
    "AsyncAllocator",
    "DeviceCachingAllocator",
    "MemPool",
    "PrivatePool",
    "MemoryReport",
    "memory_report",
    "StreamRace",
    "StreamRaceWarning",
    "stream_races",
    "allocate",
    "allocator_for",
    "made_allocator",
    "format_size",
    "set_label",
    "clear_label",
    "label_of",
    "parse_config",
    "use_mem_pool",
    *_api_all,
]
