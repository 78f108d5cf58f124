"""PyTorch on vram's caching allocator.

- ``use_vram_allocator()``: every CUDA allocation PyTorch makes goes through vram. PyTorch's
  pluggable allocator (``CUDAPluggableAllocator``) takes two C function pointers,
  ``alloc(size, device, stream)`` and ``free(ptr, size, device, stream)``; here they are ctypes
  callbacks into vram (no compiled shim), handed to ``torch._C._cuda_customAllocator`` as
  ``CUDAPluggableAllocator`` does after its dlopen, then made current with
  ``torch.cuda.memory.change_current_allocator``. PyTorch allows that only before it
  initializes CUDA (before the first CUDA tensor).
- ``mem_pool()``: a ``torch.cuda.MemPool`` whose segments come from vram, for one region of
  a program that keeps PyTorch's own allocator (``with torch.cuda.use_mem_pool(pool):``).
  PyTorch's caching allocator still splits and caches inside those segments.

The stream PyTorch passes becomes a vram stream (``vram.interop.peer_stream``): vram's
stream-aware reuse, snapshots, viewer, ``expandable_page_mb`` and the rest apply to
PyTorch's memory; ``vram.memory.memory_stats("cuda:N")`` counts it.

What changes for PyTorch code under ``use_vram_allocator()`` (PyTorch's pluggable allocator
does not forward them): ``Tensor.record_stream`` does nothing, so call
``vram.interop.torch.record_stream(tensor, stream)`` or the precise
``record_use(tensor, stream)`` instead; ``torch.cuda.memory_stats`` and
``torch.cuda.memory_snapshot`` raise, so read vram's. An allocation that fails (out of
memory) cannot raise through PyTorch's C interface: PyTorch gets a null pointer, vram warns
with the error, and ``last_error()`` returns it.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from .._device import Device
from .._streams import Stream
from ..memory import allocator_for
from ._pluggable import Callbacks
from ._streams import peer_stream

__all__ = [
    "use_vram_allocator",
    "mem_pool",
    "record_stream",
    "record_use",
    "callback_stats",
    "last_error",
]

_callbacks: Callbacks | None = None
_installed: Any = None  # the allocator made current by use_vram_allocator
_pools_allocators: list[Any] = []  # the allocators behind mem_pool()s, kept for the process
_lock = threading.Lock()


def _get_callbacks() -> Callbacks:
    global _callbacks
    with _lock:
        if _callbacks is None:
            _callbacks = Callbacks("cuda", torch.cuda.current_device)
        return _callbacks


def _custom_allocator() -> Any:
    """A new ``torch._C._cuda_CUDAAllocator`` over vram's callbacks."""
    alloc, free = _get_callbacks().addresses
    return torch._C._cuda_customAllocator(alloc, free)


def use_vram_allocator() -> None:
    """Make PyTorch allocate all its CUDA memory through vram (a no-op when already done).

    Call it before PyTorch initializes CUDA (before the first CUDA tensor); RuntimeError
    otherwise, as PyTorch cannot swap an allocator it has started using.
    """
    global _installed
    if _installed is not None:
        return
    if not torch.cuda.is_available():
        raise RuntimeError("use_vram_allocator: PyTorch sees no CUDA device")
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "use_vram_allocator() must run before PyTorch initializes CUDA (before the first "
            "CUDA tensor or torch.cuda call that starts CUDA)"
        )
    raw = _custom_allocator()
    torch.cuda.memory.change_current_allocator(torch.cuda.memory._CUDAAllocator(raw))
    _installed = raw


def mem_pool(use_on_oom: bool = False) -> torch.cuda.MemPool:
    """A ``torch.cuda.MemPool`` whose segments vram allocates.

    Use it with ``with torch.cuda.use_mem_pool(pool):`` in a program that keeps PyTorch's
    own allocator; PyTorch's caching allocator splits those segments into tensors, and
    returns them to vram when the pool is gone and ``torch.cuda.empty_cache()`` runs.
    """
    if _installed is not None:
        raise RuntimeError(
            "mem_pool: PyTorch already allocates everything through vram "
            "(use_vram_allocator); a pool of PyTorch's caching allocator needs its own allocator"
        )
    raw = _custom_allocator()
    with _lock:
        _pools_allocators.append(raw)
    return torch.cuda.MemPool(allocator=raw, use_on_oom=use_on_oom)


def _vram_stream(stream: object, device: Device) -> Stream:
    """A vram stream for a ``torch.cuda.Stream`` (or a vram Stream) on ``device``."""
    if isinstance(stream, Stream):
        if stream.device != device:
            raise ValueError(f"stream: {stream} belongs to {stream.device}, not {device}")
        return stream
    if isinstance(stream, torch.cuda.Stream):
        if stream.device.index != device.index:
            raise ValueError(f"stream: {stream} belongs to {stream.device}, not {device}")
        return peer_stream(stream.cuda_stream, device)
    raise TypeError(
        f"stream: expected a torch.cuda.Stream or a vram.Stream, got {type(stream).__name__}"
    )


def _block_of(tensor: torch.Tensor, what: str) -> tuple[Device, int]:
    """The device and vram block address of a CUDA tensor's storage."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cuda":
        raise ValueError(f"{what}: tensor is on {tensor.device}, not a CUDA device")
    return Device("cuda", tensor.device.index), tensor.untyped_storage().data_ptr()


def record_stream(tensor: torch.Tensor, stream: object) -> None:
    """``tensor.record_stream(stream)`` for memory vram allocated (under
    ``use_vram_allocator``): its block waits, when freed, for the work queued on ``stream``
    by then. ``stream``: a ``torch.cuda.Stream`` or a vram Stream of the tensor's device."""
    device, ptr = _block_of(tensor, "record_stream")
    if ptr:
        allocator_for(device).record_stream(ptr, _vram_stream(stream, device).cuda_stream)


def record_use(tensor: torch.Tensor, stream: object) -> None:
    """pytorch#181191's ``record_use`` for memory vram allocated: the last use of
    ``tensor`` on ``stream`` is queued now; the block's next owner waits for it (no host wait).

    Call it right after the last read or write of the tensor queued on ``stream``.
    """
    device, ptr = _block_of(tensor, "record_use")
    if ptr:
        allocator_for(device).record_use(ptr, _vram_stream(stream, device).cuda_stream)


def callback_stats() -> dict[str, float]:
    """How often PyTorch called vram (``alloc_calls``, ``free_calls``) and the host time spent
    inside those calls (``seconds``), since the process started."""
    callbacks = _get_callbacks()
    with callbacks.lock:
        return {
            "alloc_calls": callbacks.alloc_calls,
            "free_calls": callbacks.free_calls,
            "seconds": callbacks.seconds,
        }


def last_error() -> BaseException | None:
    """The last error an alloc or free callback met (PyTorch cannot be told), or None."""
    return _get_callbacks().error
