"""The simulated GPU's stream-ordered memory pool: what cudaMallocAsync / cudaFreeAsync use.

Each sim device has one pool, its default pool (cuDeviceGetDefaultMemPool), with the
driver's rules:
- Memory comes in chunks of 2 MiB, or of the request rounded up to 2 MiB, charged to the
  device's capacity as a malloc is (injected faults apply: a chunk is one device malloc).
  Blocks are handed out 512-byte aligned, by best fit (size, then address); a larger block
  is split, and a free block merges with its free neighbours.
- A block freed on stream S is *pending* until S runs the free (the free is a mark in S's
  queue). Until then it may serve an allocation on S at once (stream order puts the
  allocation after the free), or on a stream whose queue waits on an event recorded on S
  after the free (event dependencies). Any other stream gets it only once the free has run
  (opportunistic reuse). When the pool cannot grow, an allocation may take a pending
  block of another stream and queue a wait for its free (internal dependencies).
- ``used``: bytes of blocks handed out and not yet freed (a free counts at the call);
  ``reserved``: bytes of chunks. Each has a high watermark, which setting to 0 resets to
  the current value.
- ``release_threshold`` (default 0): at a stream, event or device synchronize, the pool gives
  back whole free chunks while it holds more than the threshold. ``trim_to(keep)`` gives
  back whole free chunks as long as at least ``keep`` bytes stay reserved. A chunk with a
  pending block stays: its free has not run.

The three reuse attributes are 1, as CUDA's defaults and as PyTorch sets them; the sim
models that policy only, so setting one to 0 is CUDA_ERROR_NOT_SUPPORTED.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._errors import CudaError
from ._base import MEMPOOL_ATTRIBUTES

if TYPE_CHECKING:
    from ._sim import _DeviceMemory, _Mark, _Stream

__all__ = ["SimMemPool"]

_ALIGNMENT = 512  # bytes: every block starts and ends on this
_CHUNK = 2 << 20  # bytes: the least the pool reserves at a time, and its rounding
_UINT64_MAX = (1 << 64) - 1
_REUSE = MEMPOOL_ATTRIBUTES[:3]  # the reuse flags

USED, PENDING, FREE = "used", "pending", "free"


@dataclass(slots=True, eq=False)
class _Block:
    ptr: int
    size: int
    chunk: _Chunk
    state: str = FREE
    mark: _Mark | None = None  # PENDING: the free's place in its stream's queue


@dataclass(slots=True, eq=False)
class _Chunk:
    ptr: int
    size: int
    blocks: list[_Block] = field(default_factory=list)  # tile the chunk, by address


class SimMemPool:
    """One device's stream-ordered pool (see the module docstring). Guarded by the sim
    driver's lock: every method is called with it held."""

    def __init__(self, mem: _DeviceMemory, charge: Callable[[_DeviceMemory, int, str], None]):
        self.mem = mem
        self._charge = charge  # the driver's capacity and fault check for a device malloc
        self.release_threshold = 0
        self.reserved = self.reserved_high = 0
        self.used = self.used_high = 0
        self.chunks: list[_Chunk] = []
        self.live: dict[int, _Block] = {}  # ptr -> USED block
        self.pending: list[_Block] = []  # PENDING blocks, oldest free first

    # ---- attributes ----------------------------------------------------------------
    def get(self, name: str) -> int:
        if name in _REUSE:
            return 1
        self.settle()
        values = {
            "release_threshold": self.release_threshold,
            "reserved_mem_current": self.reserved,
            "reserved_mem_high": self.reserved_high,
            "used_mem_current": self.used,
            "used_mem_high": self.used_high,
        }
        if name not in values:
            raise CudaError(
                "cuMemPoolGetAttribute", "CUDA_ERROR_INVALID_VALUE", f"attribute {name}"
            )
        return values[name]

    def set(self, name: str, value: int) -> None:
        call = "cuMemPoolSetAttribute"
        if name in _REUSE:
            if value != 1:
                raise CudaError(call, "CUDA_ERROR_NOT_SUPPORTED", f"the sim models {name}=1 only")
        elif name == "release_threshold":
            if not 0 <= value <= _UINT64_MAX:
                raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"release_threshold {value}")
            self.release_threshold = value
        elif name in ("reserved_mem_high", "used_mem_high"):
            if value != 0:  # as CUDA: 0 is the only value, and it resets to the current one
                raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"{name} can only be reset to 0")
            self.settle()
            if name == "reserved_mem_high":
                self.reserved_high = self.reserved
            else:
                self.used_high = self.used
        else:
            raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"attribute {name} is read-only")

    # ---- allocate and free ---------------------------------------------------------
    def allocate(self, size: int, stream: _Stream, wait: Callable[[_Mark], None]) -> int:
        """A block of ``size`` bytes (rounded to 512) for ``stream``: reuse, else a new
        chunk, else a pending block of another stream behind a wait (``wait(mark)``
        queues it on ``stream``). CUDA_ERROR_OUT_OF_MEMORY when none of them can."""
        size = -(-size // _ALIGNMENT) * _ALIGNMENT
        self.settle()
        block = self._best_fit(size, lambda b: b.state == FREE or self._ordered_after(b, stream))
        if block is None:
            try:
                block = self._grow(size)
            except CudaError as error:
                block = self._best_fit(size, lambda b: b.state == PENDING)
                if block is None or not error.is_out_of_memory:
                    raise
                wait(block.mark)  # internal dependency: the stream waits for the free
        return self._hand_out(block, size)

    def free(self, ptr: int, mark: _Mark) -> None:
        """``ptr`` is freed where ``mark`` will sit in its stream's queue (the caller queues
        the mark next): the block is pending until the stream runs it."""
        block = self.live.pop(ptr, None)
        if block is None:
            raise CudaError("cuMemFreeAsync", "CUDA_ERROR_INVALID_VALUE", f"ptr {ptr:#x}")
        self.used -= block.size
        block.state, block.mark = PENDING, mark
        self.pending.append(block)

    def settle(self) -> None:
        """Pending blocks whose free has run become free (and merge with free neighbours)."""
        done = [b for b in self.pending if b.mark.done]  # type: ignore[union-attr]
        if not done:
            return
        self.pending = [b for b in self.pending if not b.mark.done]  # type: ignore[union-attr]
        for block in done:
            block.state, block.mark = FREE, None
            self._merge(block)

    def trim_to(self, keep: int) -> None:
        """Give back whole free chunks while at least ``keep`` bytes stay reserved."""
        self.settle()
        for chunk in reversed(list(self.chunks)):
            whole = len(chunk.blocks) == 1 and chunk.blocks[0].state == FREE
            if whole and self.reserved - chunk.size >= keep:
                self._release(chunk)

    # ---- the steps -----------------------------------------------------------------
    def _ordered_after(self, block: _Block, stream: _Stream) -> bool:
        """A pending block's free comes before anything queued on ``stream`` from now on:
        it was freed on ``stream``, or ``stream`` waits on a mark queued after the free."""
        mark = block.mark
        if block.state != PENDING or mark is None:
            return False
        if mark.stream is stream:
            return True
        waited = {id(m) for kind, m in stream.queue if kind == "wait" and m.stream is mark.stream}
        if not waited:
            return False
        after = False
        for kind, payload in mark.stream.queue:
            if payload is mark:
                after = True
            elif after and kind == "mark" and id(payload) in waited:
                return True
        return False

    def _best_fit(self, size: int, usable: Callable[[_Block], bool]) -> _Block | None:
        best = None
        for chunk in self.chunks:
            for block in chunk.blocks:
                if block.state == USED or block.size < size or not usable(block):
                    continue
                if best is None or (block.size, block.ptr) < (best.size, best.ptr):
                    best = block
        return best

    def _grow(self, size: int) -> _Block:
        """A new chunk with room for ``size`` bytes, as one free block."""
        nbytes = max(_CHUNK, -(-size // _CHUNK) * _CHUNK)
        mem = self.mem
        self._charge(mem, nbytes, "cuMemAllocAsync")
        ptr = None
        try:
            ptr = mem.take_va(nbytes, _CHUNK, "pool")
            mem.add_range(ptr, nbytes, "pool", "cuMemAllocAsync")
        except CudaError:  # out of address space: nothing stays charged or taken
            mem.used -= nbytes
            if ptr is not None:
                mem.give_va(ptr, nbytes)
            raise
        chunk = _Chunk(ptr, nbytes)
        chunk.blocks.append(_Block(ptr, nbytes, chunk))
        self.chunks.append(chunk)
        self.reserved += nbytes
        self.reserved_high = max(self.reserved_high, self.reserved)
        return chunk.blocks[0]

    def _hand_out(self, block: _Block, size: int) -> int:
        """Take the front ``size`` bytes of ``block``; the rest keeps its state."""
        if block.size > size:
            rest = _Block(block.ptr + size, block.size - size, block.chunk, block.state, block.mark)
            blocks = block.chunk.blocks
            blocks.insert(blocks.index(block) + 1, rest)
            if rest.state == PENDING:
                self.pending.append(rest)
            block.size = size
        if block.state == PENDING:
            self.pending.remove(block)
        block.state, block.mark = USED, None
        self.live[block.ptr] = block
        self.used += size
        self.used_high = max(self.used_high, self.used)
        return block.ptr

    def _merge(self, block: _Block) -> None:
        """Merge a FREE block with its FREE neighbours."""
        blocks = block.chunk.blocks
        i = blocks.index(block)
        if i + 1 < len(blocks) and blocks[i + 1].state == FREE:
            block.size += blocks.pop(i + 1).size
        if i > 0 and blocks[i - 1].state == FREE:
            blocks[i - 1].size += blocks.pop(i).size

    def _release(self, chunk: _Chunk) -> None:
        mem = self.mem
        mem.drop_range(chunk.ptr)
        mem.give_va(chunk.ptr, chunk.size)
        mem.used -= chunk.size
        self.chunks.remove(chunk)
        self.reserved -= chunk.size
