"""Workspaces of one vram.linalg call.

- The libraries' workspaces ("cusolver": getrf's; "cublas": the cuBLAS handle's) come from
  ``vram.memory.get_workspace``: one buffer per (library, device, stream, thread), kept
  across calls and grown when needed; a call takes ONE per library and stream, never one
  per matrix (pytorch#181997).
- vram.linalg's own scratch ("linalg": cuBLAS's device arrays of matrix pointers, int64
  pivots for the 64-bit API, getrs's info slots) is one caching-allocator allocation per
  call and stream, held until the call has queued its work; freeing it then is safe, as
  a block goes back to its own stream, whose later work runs after this call's.
"""

from __future__ import annotations

from .. import memory
from .._streams import Stream

__all__ = ["CallWorkspaces"]


class CallWorkspaces:
    """The workspaces one call takes (see the module docstring)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[int, memory.Allocation] = {}  # stream handle -> linalg scratch

    def get(self, nbytes: int, library: str, stream: Stream) -> int:
        """A device pointer to at least ``nbytes`` for ``library`` on ``stream``. A later
        ``get`` of the same library and stream may replace it: use each before the next."""
        if library != "linalg":
            return memory.get_workspace(
                nbytes, library=library, device=stream.device, stream=stream
            )
        held = self._held.get(stream.cuda_stream)
        if held is None or held.size < nbytes:
            held = memory.allocate(max(nbytes, 1), stream.device, stream)
            self._held[stream.cuda_stream] = held  # the one it replaces is freed on its stream
        return held.ptr
