"""Workspaces of one vram.linalg call.

``vram.memory.get_workspace`` gives one buffer per (library, device, stream, thread), kept
across calls and grown when needed: what every call takes where the memory package has it.
Without it, a call takes one caching-allocator allocation per (library, stream) instead,
held until the call has queued its work; freeing it then is safe because a block goes
back to its own stream, whose later work runs after this call's. Either way a call takes
ONE workspace per library and stream, never one per matrix (pytorch#181997).
"""

from __future__ import annotations

from .. import memory
from .._streams import Stream

__all__ = ["CallWorkspaces"]


class CallWorkspaces:
    """The workspaces one call takes (see the module docstring)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], memory.Allocation] = {}

    def get(self, nbytes: int, library: str, stream: Stream) -> int:
        """A device pointer to at least ``nbytes`` for ``library`` on ``stream``. A later
        ``get`` of the same library and stream may replace it: use each before the next."""
        shared = getattr(memory, "get_workspace", None)
        if shared is not None:
            return shared(nbytes, library=library, device=stream.device, stream=stream)
        key = (library, stream.cuda_stream)
        held = self._held.get(key)
        if held is None or held.size < nbytes:
            held = memory.allocate(max(nbytes, 1), stream.device, stream)
            self._held[key] = held  # the one it replaces is freed, on its own stream
        return held.ptr
