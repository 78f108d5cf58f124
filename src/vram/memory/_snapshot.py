"""Snapshots and allocation history, in PyTorch's format (torch.cuda.memory._snapshot).

A snapshot is a dict, pickled by ``_dump_snapshot``, that PyTorch's tools read as they read
their own, and that vram's tools read from PyTorch:

- ``segments``: one dict per segment (a device allocation, or a mapped run of an expandable
  segment), sorted by address: device, address, total_size, allocated_size, active_size,
  requested_size, stream, segment_type ('small' / 'large'), segment_pool_id, is_expandable,
  frames, and ``blocks`` tiling it: address, size, requested_size, frames and state
  ('active_allocated'; 'active_pending_free', freed but waiting for record_stream events;
  'inactive').
- ``device_traces``: one list per device index of the history's events, oldest first:
  action, addr, size, stream, time_us, frames, compile_context, user_metadata.
- ``allocator_settings``: the settings dict of the allocator (PyTorch's keys).

History for allocators created after ``_record_memory_history`` (Note [History hook]): the
allocator module calls the functions in ``_registry.allocator_created_hooks`` where it has
that list; where it has not, enabling history creates the allocators of every device of the
type asked for, so that each has its recorder from the start.
"""

from __future__ import annotations

import pickle
import sys

from .._device import Device, as_device
from . import _registry
from ._caching import DeviceCachingAllocator
from ._config import default_config
from ._history import History, HistorySettings, Recorder, attach, detach, frames_to_dicts
from ._labels import label_of
from ._pool import ALLOCATED, FREE, PENDING, UNMAPPED, Block
from ._registry import allocator_for

__all__ = [
    "_record_memory_history",
    "_snapshot",
    "_dump_snapshot",
    "memory_snapshot",
    "segments_of",
    "segment_rows",
]

_settings: HistorySettings | None = None  # what _record_memory_history asked for; None: off


def _record_memory_history(
    enabled: str | bool | None = "all",
    context: str | None = "all",
    stacks: str = "python",
    max_entries: int = sys.maxsize,
    device: object = None,
    clear_history: bool = False,
) -> None:
    """Start or stop recording allocation history on every device's allocator (PyTorch's).

    ``enabled``: None stops and clears; "state" keeps the stacks of live allocations; "all"
    also keeps the trace of alloc / free / segment events, the last ``max_entries`` of them.
    ``context``: which events carry stack frames (None, "state", "alloc", "all").
    ``stacks``: "python" or "all" (the same in vram: it has no C++ frames).
    """
    global _settings
    if isinstance(enabled, bool):  # PyTorch's legacy form
        enabled = "all" if enabled else None
    if enabled not in (None, "state", "all"):
        raise ValueError(f"enabled: expected 'state', 'all' or None, got {enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"context: expected 'state', 'alloc', 'all' or None, got {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks: expected 'python' or 'all', got {stacks!r}")
    if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 1:
        raise ValueError(f"max_entries: expected a positive int, got {max_entries!r}")
    found = as_device(device)
    if found.type == "cpu":
        raise ValueError("device: the cpu device has no caching allocator")
    if enabled is not None and default_config().backend != "native":
        raise RuntimeError(
            "cudaMallocAsync does not yet support recordHistory (as PyTorch's "
            "backend:cudaMallocAsync)"
        )
    if enabled is None:
        _settings = None
    else:
        _settings = HistorySettings(enabled == "all", context, stacks, max_entries)
        _watch_new_allocators(found)
    for allocator in list(_registry._allocators.values()):
        _apply(allocator, clear_history)


def _apply(allocator: DeviceCachingAllocator, clear: bool = False) -> None:
    """Give the allocator the current history settings (keeping its ring unless cleared)."""
    with allocator.locked():
        if _settings is None:
            recorder = allocator.recorder  # (the event hook: history's own Recorder)
            if isinstance(recorder, Recorder):
                recorder.history = None
                detach(allocator)
            return
        recorder = attach(allocator)
        old = None if clear else recorder.history
        recorder.history = History(_settings, old)


def _on_new_allocator(allocator: DeviceCachingAllocator) -> None:
    if _settings is not None:
        _apply(allocator)


def _watch_new_allocators(device: Device) -> None:
    hooks = getattr(_registry, "allocator_created_hooks", None)
    if hooks is not None:
        if _on_new_allocator not in hooks:
            hooks.append(_on_new_allocator)
        return
    for index in range(device.driver.device_count()):  # no hook: create them now
        allocator_for(Device(device.type, index))


# ================================================================= segments and blocks
_STATES = {ALLOCATED: "active_allocated", PENDING: "active_pending_free", FREE: "inactive"}


def _frames(block: Block) -> list[dict]:
    """A block's frames: its allocation's stack, or its label (a library workspace's, a
    model's constants)."""
    if block.state != ALLOCATED:
        return []
    label = label_of(block.ptr)
    if label is not None:
        return [{"filename": "<vram>", "line": 0, "name": label}]
    return frames_to_dicts(block.context)


def _segment(allocator: DeviceCachingAllocator, head: Block) -> dict:
    blocks = []
    allocated = active = requested = total = 0
    block: Block | None = head
    while block is not None and block.state != UNMAPPED:
        state = _STATES[block.state]
        blocks.append(
            {
                "address": block.ptr,
                "size": block.size,
                "requested_size": block.requested_size,
                "state": state,
                "frames": _frames(block),
            }
        )
        total += block.size
        if state == "active_allocated":
            allocated += block.size
        if state != "inactive":
            active += block.size
            requested += block.requested_size
        block = block.next
    segment = head.segment
    pool = segment.pool
    expandable = segment.expandable
    default = allocator.driver.default_stream(allocator.index)  # written as PyTorch's 0
    return {
        "device": allocator.index,
        "address": head.ptr,
        "total_size": total,
        "allocated_size": allocated,
        "active_size": active,
        "requested_size": requested,
        "stream": 0 if segment.stream == default else segment.stream,
        "segment_type": "small" if pool.is_small else "large",
        "segment_pool_id": pool.owner.id if pool.owner is not None else (0, 0),
        "is_expandable": expandable,
        "frames": [] if expandable else frames_to_dicts(segment.context),
        "blocks": blocks,
    }


def segments_of(allocator: DeviceCachingAllocator, pool_id: tuple | None = None) -> list[dict]:
    """The allocator's segments in the snapshot format; only private pool ``pool_id``'s if given.

    A segment is a device allocation's run of blocks; with expandable segments, each
    contiguous mapped run of a reserved range.
    """
    with allocator.locked():
        return segment_rows(allocator, pool_id)


def segment_rows(allocator: DeviceCachingAllocator, pool_id: tuple | None = None) -> list[dict]:
    """``segments_of``'s rows, for a caller that holds the allocator's lock already (the
    OOM report, built from the same rows a snapshot has)."""
    out = []
    for block in allocator.all_blocks():
        if block.prev is not None and block.prev.state != UNMAPPED:
            continue  # not the head of its segment
        owner = block.segment.pool.owner
        if pool_id is not None and (owner is None or owner.id != tuple(pool_id)):
            continue
        out.append(_segment(allocator, block))
    return out


# =============================================================================== snapshot
def _allocators_of(kind: str) -> list[DeviceCachingAllocator]:
    found = [a for d, a in list(_registry._allocators.items()) if d.type == kind]
    return sorted(found, key=lambda a: a.index)


def _snapshot(device: object = None) -> dict:
    """The state and history of every device of ``device``'s type (current device if None)."""
    found = as_device(device)
    if found.type == "cpu":
        raise ValueError("device: the cpu device has no caching allocator")
    allocators = _allocators_of(found.type)
    segments: list[dict] = []
    traces: list[list[dict]] = [[] for _ in range(found.driver.device_count())]
    for allocator in allocators:
        segments += segments_of(allocator)
        with allocator.locked():
            history = getattr(allocator.recorder, "history", None)
            if history is not None:
                default = allocator.driver.default_stream(allocator.index)
                traces[allocator.index] = history.trace(default)
    segments.sort(key=lambda s: s["address"])
    own = _registry._allocators.get(found)
    config = own.config if own is not None else default_config()
    return {
        "segments": segments,
        "device_traces": traces,
        "allocator_settings": config.settings(),
        "external_annotations": [],
    }


def _dump_snapshot(filename: str = "dump_snapshot.pickle", device: object = None) -> None:
    """Pickle ``_snapshot(device)`` to ``filename`` (PyTorch's torch.cuda.memory._dump_snapshot)."""
    snapshot = _snapshot(device)
    with open(filename, "wb") as f:
        pickle.dump(snapshot, f)


def memory_snapshot(mempool_id: tuple | None = None, device: object = None) -> list[dict]:
    """The segments of every device of ``device``'s type (of one private pool if given)."""
    found = as_device(device)
    if found.type == "cpu":
        raise ValueError("device: the cpu device has no caching allocator")
    if mempool_id is not None and not (
        isinstance(mempool_id, tuple)
        and len(mempool_id) == 2
        and all(type(part) is int for part in mempool_id)
    ):
        raise TypeError(f"mempool_id: expected a pool id (a tuple of two ints), got {mempool_id!r}")
    out: list[dict] = []
    for allocator in _allocators_of(found.type):
        out += segments_of(allocator, mempool_id)
    out.sort(key=lambda s: s["address"])
    return out
