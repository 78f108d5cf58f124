"""Library workspaces: scratch memory of cuBLAS, cuBLASLt and cuSOLVER calls.

A library call that needs scratch memory asks for it with ``get_workspace(nbytes,
library=...)`` just before it queues its work. The buffer comes from the caching allocator,
one per (library, device, stream, thread), the same one for every call: a workspace is
queried and sized once per call, and allocated once, not per call or per batch item (the
bug of pytorch#181997).

- It grows when a call needs more: the old buffer is freed on its stream (work queued
  there before still runs before anything reuses it) and a larger one allocated. It never
  shrinks.
- ``empty_cache()`` frees the calling thread's workspaces whose stream has nothing queued,
  and those of threads that have ended (Note [Who frees a workspace]); it keeps the others.
- ``memory_stats()`` counts their bytes under ``workspace_bytes.all.*`` (vram's key, beside
  PyTorch's), and snapshots label their blocks with a frame named "<library> workspace".

Note [Who frees a workspace]
``get_workspace`` hands a pointer out without a lock, and the library queues the work that
uses it afterwards: between the two the stream is idle, and the buffer belongs to the
thread that asked. So a workspace is freed only by its own thread (when it grows, or at its
own ``empty_cache()``: by program order neither falls inside one of its hand-outs), or once
that thread has ended. Another thread's ``empty_cache()`` leaves it alone: freed then, the
next allocation on the stream (a freshly zeroed tensor, say) would get the memory the
library is about to write its scratch into.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .._device import Device, as_device
from .._streams import Stream, current_stream
from ._caching import DeviceCachingAllocator
from ._labels import clear_label, set_label
from ._registry import _allocators, allocator_for
from ._stats import Stat

__all__ = ["get_workspace", "release_idle_workspaces", "workspace_stats"]

LIBRARIES = ("cublas", "cublaslt", "cusolver", "linalg")  # who may ask, by name


@dataclass(slots=True)
class _Workspace:
    ptr: int
    nbytes: int  # bytes asked for when it was allocated (its block may be larger)


_lock = threading.Lock()
# (library, allocator, stream handle, thread) -> its workspace; keyed by the allocator, not
# the device, so that a new allocator of a device starts with none
_workspaces: dict[tuple[str, DeviceCachingAllocator, int, int], _Workspace] = {}
_stats: dict[DeviceCachingAllocator, Stat] = {}


def get_workspace(
    nbytes: int, *, library: str, device: object = None, stream: Stream | None = None
) -> int:
    """A device pointer to at least ``nbytes`` of scratch memory for ``library``'s calls
    on ``stream`` (the current stream of ``device`` if None); 0 for 0 bytes.

    Valid until this thread's next ``get_workspace`` for the same library and stream, or
    its next ``empty_cache()``: queue the call that uses it before either.
    """
    if library not in LIBRARIES:
        raise ValueError(f"library: expected one of {', '.join(LIBRARIES)}, got {library!r}")
    if type(nbytes) is not int or nbytes < 0:
        raise ValueError(f"nbytes: expected a non-negative int, got {nbytes!r}")
    if stream is None:
        stream = current_stream(device)
    elif not isinstance(stream, Stream):
        raise TypeError(f"stream: expected a vram.Stream, got {type(stream).__name__}")
    found = stream.device
    if device is not None and as_device(device) != found:
        raise ValueError(f"stream: {stream} is not a stream of {as_device(device)}")
    if nbytes == 0:
        return 0
    return current_workspace(nbytes, library, found, stream.cuda_stream, stream)


def current_workspace(
    nbytes: int, library: str, device: Device, handle: int, stream: Stream | None = None
) -> int:
    """``get_workspace(nbytes, library=library, device=device)`` for vram's own libraries,
    which hold ``handle``, the handle of ``device``'s stream (``stream``; the current one
    where None), already: the same workspaces and the same growth, without the checks of
    arguments vram made itself (a product's plan asks per call)."""
    if nbytes == 0:
        return 0
    allocator = _allocators.get(device) or allocator_for(device)
    key = (library, allocator, handle, threading.get_ident())
    workspace = _workspaces.get(key)
    if workspace is not None and workspace.nbytes >= nbytes:
        return workspace.ptr
    return _grow(key, allocator, stream if stream is not None else current_stream(device), nbytes)


def _grow(key: tuple, allocator: DeviceCachingAllocator, stream: Stream, nbytes: int) -> int:
    with _lock:
        old = _workspaces.pop(key, None)
        stat = _stats.setdefault(allocator, Stat())
        if old is not None:
            clear_label(old.ptr)
            stat.decrease(old.nbytes)
            allocator.free(old.ptr)  # on its stream: queued work still runs before reuse
        ptr = allocator.malloc(nbytes, stream.cuda_stream)
        _workspaces[key] = _Workspace(ptr, nbytes)
        set_label(ptr, f"{key[0]} workspace")
        stat.increase(nbytes)
        return ptr


def release_idle_workspaces(device: Device) -> None:
    """Free the workspaces of ``device`` whose stream has nothing queued, of this thread and
    of threads that have ended (empty_cache; Note [Who frees a workspace])."""
    allocator = allocator_for(device)
    me = threading.get_ident()
    with _lock:
        alive = {thread.ident for thread in threading.enumerate()}
        for key, workspace in list(_workspaces.items()):
            if key[1] is not allocator or (key[3] != me and key[3] in alive):
                continue
            if not allocator.driver.stream_query(key[2]):
                continue
            del _workspaces[key]
            clear_label(workspace.ptr)
            _stats[allocator].decrease(workspace.nbytes)
            allocator.free(workspace.ptr)


def workspace_stats(device: Device) -> dict[str, int]:
    """The ``workspace_bytes.all.*`` keys memory_stats() adds for ``device``."""
    stat = _stats.get(allocator_for(device)) or Stat()
    fields = ("current", "peak", "allocated", "freed")
    return {f"workspace_bytes.all.{f}": v for f, v in zip(fields, stat.fields(), strict=True)}
