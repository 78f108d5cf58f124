"""``VRAM_NO_CACHING=1``: an allocator that caches nothing (PyTorch's
PYTORCH_NO_CUDA_MEMORY_CACHING), to count or debug what a program asks of the device."""

from __future__ import annotations

import os

from ._caching import DeviceCachingAllocator

__all__ = ["UncachedAllocator", "no_caching_requested"]


class UncachedAllocator(DeviceCachingAllocator):
    """``VRAM_NO_CACHING=1``: every request is a device allocation of its own (of the
    rounded size), given back to the device at free; the stats are kept as usual. The
    caching allocator's own path, with ``no_caching`` set (its ``_free`` gives the segment
    back), so that one place decides for both."""

    no_caching = True

    @staticmethod
    def allocation_size(size: int) -> int:
        """Each request is a segment of its own, of the rounded size."""
        return size


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
