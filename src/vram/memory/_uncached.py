"""``VRAM_NO_CACHING=1``: an allocator that caches nothing (PyTorch's
PYTORCH_NO_CUDA_MEMORY_CACHING), to count or debug what a program asks of the device."""

from __future__ import annotations

import os

from ._caching import DeviceCachingAllocator
from ._pool import SMALL_SIZE, Block

__all__ = ["UncachedAllocator", "no_caching_requested"]


class UncachedAllocator(DeviceCachingAllocator):
    """``VRAM_NO_CACHING=1``: every request is a device allocation of its own (of the
    rounded size), given back to the device at free; the stats are kept as usual."""

    no_caching = True

    @staticmethod
    def allocation_size(size: int) -> int:
        """Each request is a segment of its own, of the rounded size."""
        return size

    def _malloc(self, orig_size: int, stream: int) -> Block | None:
        size = self.round_size(orig_size)
        pool = self.small if size <= SMALL_SIZE else self.large
        limit = self.allowed_memory_maximum
        if limit is not None and self.total_allocated_memory + size > limit:
            return None
        block = self.device_malloc.grow(pool, stream, size)
        if block is None:
            return None
        return self._hand_out(block, pool, size, orig_size, stream)

    def _free(self, ptr: int) -> None:
        """Wait for the streams that used the block (as cudaFree would), then give its
        segment back. Synchronizes."""
        block = self._live_block(ptr, "free")
        streams = {block.segment.stream, *self.lifetimes.stream_uses.pop(block, ())}
        for stream in sorted(streams):
            self.driver.stream_synchronize(stream)
        if block.use_events:
            self.lifetimes.wait_for_uses(block)
        del self._allocated[ptr]
        if self._oversize and block in self._oversize:
            self._oversize.remove(block)
            self.stats.oversize_allocations.decrease(1)
        if self.recorder is not None:
            self._trace("free_requested", block.ptr, block.requested_size, block.segment.stream)
        size, requested = block.size, block.requested_size
        self._free_block(block)  # (a whole segment: nothing to merge, no split change)
        self.stats.free(block.segment.pool.is_small, size, requested, 0, 0)
        self._give_back(block)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def no_caching_requested() -> bool:
    """``VRAM_NO_CACHING`` (PyTorch's ``PYTORCH_NO_CUDA_MEMORY_CACHING`` when unset):
    1/true/yes/on or 0/false/no/off; anything else is a ValueError naming the variable."""
    for name in ("VRAM_NO_CACHING", "PYTORCH_NO_CUDA_MEMORY_CACHING"):
        text = os.environ.get(name)
        if text is None:
            continue
        value = text.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ValueError(f"{name}: expected 1 or 0 (true/false, yes/no, on/off), got {text!r}")
    return False
