"""The device a replay runs on: a simulated GPU that counts memory and backs none, placing
segments where the trace recorded them.

``replay_device(capacity, recorded)`` is ``vram.sim.SimDriver(backed=False)`` with one
device of ``capacity`` bytes and ``RecordedAddresses`` as its placement: a malloc of a size
the trace recorded gets the recorded addresses of that size, in order, while their range is
free; everything else gets addresses below the recorded ones, each lower than the last
(above them when the recorded addresses are too low to leave room).

Note [Replay addresses]
Best fit breaks ties between free blocks of one size by address, so where new segments land
decides which of them a request splits. On an H100 CUDA hands each new allocation a lower
address than the one before (the traces in tests/data/traces show it), so the newest
segment's block wins a tie. Placing the replay's own segments below the recorded ones, each
lower than the last, reproduces that: a replay of a workload's default trace under each
other setting then makes exactly the decisions PyTorch made under it (bench/predictions.py);
addresses growing upward do not (gpt_train under max_split_size_mb:64 reserved 1.4% less).
"""

from __future__ import annotations

import bisect
from collections import deque

from ..sim import SimDriver

__all__ = ["RecordedAddresses", "replay_device"]

_SYNTHETIC_GAP = 1 << 40  # bytes between the recorded addresses and the replay's own
_SYNTHETIC_FLOOR = 1 << 32  # the replay's own addresses stay above this (never near 0)
_MAX_RESERVE = 1 << 46  # bytes: room below the first address when nothing was recorded
_ALIGN = 2 << 20  # bytes; alignment of addresses the replay makes up


class RecordedAddresses:
    """The replay device's placement (a ``vram.sim.AddressSpace``; see the module doc)."""

    def __init__(self, recorded: list[tuple[int, int]]) -> None:
        self._recorded: dict[int, deque[int]] = {}  # size -> recorded addresses, in order
        top, low = 0, None
        for addr, size in recorded:
            self._recorded.setdefault(size, deque()).append(addr)
            top = max(top, addr + size)
            low = addr if low is None else min(low, addr)
        start = _SYNTHETIC_GAP + 2 * _MAX_RESERVE if low is None else low - _SYNTHETIC_GAP
        self._down = start // _ALIGN * _ALIGN  # the next address the replay's own take, down
        self._up = -(-(top + _SYNTHETIC_GAP) // _ALIGN) * _ALIGN  # when below is used up
        self._starts: list[int] = []  # sorted starts of live mallocs
        self._sizes: dict[int, int] = {}  # live malloc start -> size

    def is_live(self, addr: int) -> bool:
        """True when a live malloc starts at ``addr``."""
        return addr in self._sizes

    def take(self, size: int, alignment: int, kind: str) -> int:
        ptr = None
        queue = self._recorded.get(size) if kind == "malloc" else None
        if queue:
            for i, addr in enumerate(queue):
                if not self._overlaps(addr, size):
                    del queue[i]
                    ptr = addr
                    break
        if ptr is None:
            ptr = self._own(size)
        if kind == "malloc":
            bisect.insort(self._starts, ptr)
            self._sizes[ptr] = size
        return ptr

    def give(self, start: int, size: int) -> None:
        if self._sizes.pop(start, None) is not None:
            del self._starts[bisect.bisect_left(self._starts, start)]

    def _overlaps(self, addr: int, size: int) -> bool:
        i = bisect.bisect_left(self._starts, addr)
        if i < len(self._starts) and self._starts[i] < addr + size:
            return True
        return i > 0 and self._starts[i - 1] + self._sizes[self._starts[i - 1]] > addr

    def _own(self, size: int) -> int:
        """Address space for the replay's own segment (Note [Replay addresses])."""
        step = -(-size // _ALIGN) * _ALIGN
        if self._down - step >= _SYNTHETIC_FLOOR:
            self._down -= step
            return self._down
        addr = self._up
        self._up += step
        return addr


def replay_device(
    capacity: int, recorded: list[tuple[int, int]]
) -> tuple[SimDriver, RecordedAddresses]:
    """A one-device simulated GPU of ``capacity`` bytes that counts memory, backs none and
    places segments at the ``recorded`` (address, size) pairs; and its placement."""
    addresses = RecordedAddresses(recorded)
    driver = SimDriver(
        device_count=1, capacity=capacity, backed=False, addresses=lambda _: addresses
    )
    return driver, addresses
