"""The interpreter's floor for a trace: the least a best-fit caching pool in pure Python does.

``FloorPool`` makes the decisions of PyTorch's cached path for one stream and the default
settings, and nothing else: sizes rounded to 512 B, the small and large pools, best fit in
(size, address) order over sorted distinct sizes and per-size heaps (vram's index), split
and merge, new segments from a counter. No statistics, no events, no checks, no lock, no
history, no argument validation, and its ``malloc``/``free`` are called directly. It is no
allocator (it never touches the device): it says what one request costs the interpreter
before any of the work a real allocator must do, so a benchmark can show how far from the
floor vram is, and how far the floor is from a compiled allocator.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from heapq import heappop, heappush

_SMALL = 1 << 20


class _Block:
    __slots__ = ("ptr", "size", "small", "prev", "next", "free")


class FloorPool:
    """Best fit, split and merge for one stream, as bare as Python allows."""

    def __init__(self) -> None:
        self.next_ptr = 1 << 40
        self.pools = ([], {}, {}), ([], {}, {})  # (sizes, size -> heap, ptr -> free block)
        self.live: dict[int, _Block] = {}
        self.segments: list[int] = []  # the size of each new segment, in order

    def malloc(self, size: int) -> int:
        size = (size + 511) & -512 or 512
        small = size <= _SMALL
        sizes, heaps, free = self.pools[small]
        block = None
        i = bisect_left(sizes, size)
        while block is None and i < len(sizes):
            fit = sizes[i]
            heap = heaps[fit]
            while heap:
                found = free.get(heap[0])
                if found is not None and found.size == fit:
                    block = found
                    break
                heappop(heap)  # stale: taken or merged since
            else:
                del heaps[fit], sizes[i]
        if block is None:  # a new segment
            block = _Block()
            if small:
                block.size = 2 << 20
            else:  # 20 MiB shared below 10 MiB, else the request rounded to 2 MiB
                block.size = 20 << 20 if size < 10 << 20 else -(-size // (2 << 20)) * (2 << 20)
            block.ptr, self.next_ptr = self.next_ptr, self.next_ptr + block.size
            block.small, block.prev, block.next = small, None, None
            self.segments.append(block.size)
        else:
            del free[block.ptr]
        rest = block.size - size
        if rest >= 512 if small else rest > _SMALL:
            tail = _Block()
            tail.ptr, tail.size, tail.small, tail.free = block.ptr + size, rest, small, True
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            self._index(tail)
        block.free = False
        self.live[block.ptr] = block
        return block.ptr

    def free(self, ptr: int) -> None:
        block = self.live.pop(ptr)
        free = self.pools[block.small][2]
        before, after = block.prev, block.next
        if before is not None and before.free:
            del free[before.ptr]
            block.ptr, block.size, block.prev = before.ptr, block.size + before.size, before.prev
            if block.prev is not None:
                block.prev.next = block
        if after is not None and after.free:
            del free[after.ptr]
            block.size, block.next = block.size + after.size, after.next
            if block.next is not None:
                block.next.prev = block
        block.free = True
        self._index(block)

    def _index(self, block: _Block) -> None:
        sizes, heaps, free = self.pools[block.small]
        free[block.ptr] = block
        heap = heaps.get(block.size)
        if heap is None:
            heaps[block.size] = [block.ptr]
            insort(sizes, block.size)
        elif heap[0] != block.ptr:
            heappush(heap, block.ptr)
