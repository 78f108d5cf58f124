"""Plug-ins: vram's caching allocator as the memory of other GPU libraries.

Each submodule imports its peer library only when it is imported itself:

- ``vram.interop.torch``: PyTorch allocates through vram (``use_vram_allocator()``), or one
  region of a program does (``mem_pool()``); record_stream / record_use by pointer.
- ``vram.interop.cupy``: ``use_vram()`` / ``use_cupy()``: CuPy's allocator, stream-aware.
- ``vram.interop.numba``: a Numba External Memory Management plugin
  (``NUMBA_CUDA_MEMORY_MANAGER=vram.interop.numba``).
- ``vram.interop.cuda_core``: ``VramMemoryResource``, a cuda.core MemoryResource.
- ``vram.interop.nvmath``: ``VramAllocator``, the ``allocator`` option of nvmath-python.
- ``vram.interop.triton``: ``use_vram()``: Triton launches on vram's current stream and
  takes its scratch memory from vram, without torch.

A peer's raw stream handle becomes a vram stream (``peer_stream``): its default stream is
vram's default stream of the device, any other handle a ``vram.ExternalStream``, so that
vram's stream-aware reuse, record_stream and record_use apply to the peer's streams.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ._streams import peer_stream

__all__ = ["peer_stream", "torch", "cupy", "numba", "cuda_core", "nvmath", "triton"]

_PLUGINS = ("torch", "cupy", "numba", "cuda_core", "nvmath", "triton")


def __getattr__(name: str) -> ModuleType:
    """Import a plug-in (and so its peer library) on first use."""
    if name in _PLUGINS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
