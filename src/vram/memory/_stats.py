"""memory_stats: PyTorch's counters, as plain integers updated where the memory changes.

A ``Stat`` is PyTorch's: ``current``, ``peak``, ``allocated`` (the sum of increases) and
``freed`` (the sum of decreases). The host allocator's stats are Stats too.

The device allocator keeps each stat for the aggregate ("all") and for the pool kind
("small_pool" / "large_pool"). Most change only on the slow path (segments, reserved
bytes) and are Stats updated there. Five change on every malloc and free: allocation,
allocated_bytes, active, active_bytes and requested_bytes. Updating four fields of ten
Stats per call would be most of the cached path's cost, so ``Usage`` keeps them as a few
sums instead (Note [Usage counters]); every reader gets them as Stats in O(1).

Note [Usage counters]
Per pool kind, ``Usage`` counts what malloc and free did since the accumulated stats were
last reset: blocks handed out (count, bytes, requested bytes) and blocks freed by the user
(the same three). A free still waiting for record_stream events is *pending*: it has
lowered allocation and allocated_bytes, not yet active, active_bytes and requested_bytes;
the three pending sums say by how much. Every current value and every sum of increases or
decreases is a sum or difference of these (``as_stats``).
Peaks are the one thing that cannot be derived later. Each group (all, small, large) keeps
three *rooms*: lower bounds of how far the count stats (allocation, active), the block-byte
stats (allocated_bytes, active_bytes) and requested_bytes are below their peaks. A malloc
lowers each room by what it adds; only when a room goes below zero can a peak have been
passed, and then every peak of the group is brought up to its current value and the rooms
are measured exactly. A free that completes at once gives back exactly what it took; a
pending one gives nothing back (a lower bound stays one). So peaks are exact at every
moment, and a malloc or free costs a few additions, also when a program runs at its peak.
"""

from __future__ import annotations

__all__ = ["Stat", "DeviceStats", "STAT_NAMES", "POOL_NAMES"]

STAT_NAMES = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)
POOL_NAMES = ("all", "small_pool", "large_pool")
FIELDS = ("current", "peak", "allocated", "freed")


class Stat:
    """PyTorch's Stat: current, peak, allocated (sum of increases), freed (sum of decreases)."""

    __slots__ = FIELDS

    def __init__(self, current: int = 0, peak: int = 0, allocated: int = 0, freed: int = 0):
        self.current = current
        self.peak = peak
        self.allocated = allocated
        self.freed = freed

    def increase(self, amount: int) -> None:
        current = self.current + amount
        self.current = current
        self.allocated += amount
        if current > self.peak:
            self.peak = current

    def decrease(self, amount: int) -> None:
        self.current -= amount
        self.freed += amount

    def update(self, delta: int) -> None:
        """Increase by ``delta`` if positive, decrease by ``-delta`` if negative."""
        current = self.current + delta
        self.current = current
        if delta > 0:
            self.allocated += delta
            if current > self.peak:
                self.peak = current
        else:
            self.freed -= delta

    def reset_peak(self) -> None:
        self.peak = self.current

    def reset_accumulated(self) -> None:
        self.allocated = self.freed = 0

    def fields(self) -> tuple[int, int, int, int]:
        return self.current, self.peak, self.allocated, self.freed

    def __repr__(self) -> str:
        return "Stat(current={}, peak={}, allocated={}, freed={})".format(*self.fields())


class Usage:
    """The malloc/free counters of one pool kind (Note [Usage counters])."""

    __slots__ = (
        "allocs",
        "alloc_bytes",
        "alloc_requested",
        "frees",
        "free_bytes",
        "free_requested",
        "pending",
        "pending_bytes",
        "pending_requested",
        "base",
        "base_bytes",
    )

    def __init__(self) -> None:
        self.allocs = self.alloc_bytes = self.alloc_requested = 0
        self.frees = self.free_bytes = self.free_requested = 0
        self.pending = self.pending_bytes = self.pending_requested = 0
        self.base = (0, 0, 0)  # (count, bytes, requested) in use when the sums restarted
        self.base_bytes = 0  # base[1], read on its own by allocated_bytes()

    def currents(self) -> tuple[int, int, int, int, int]:
        """(allocation, allocated_bytes, active, active_bytes, requested_bytes) now."""
        count, nbytes, requested = self.base
        allocation = count + self.allocs - self.frees
        allocated = nbytes + self.alloc_bytes - self.free_bytes
        active_requested = requested + self.alloc_requested - self.free_requested
        return (
            allocation,
            allocated,
            allocation + self.pending,
            allocated + self.pending_bytes,
            active_requested + self.pending_requested,
        )

    def current(self, i: int) -> int:
        """One value of ``currents()`` (0 allocation ... 4 requested_bytes), cheaply."""
        if i == 1:
            return self.base_bytes + self.alloc_bytes - self.free_bytes
        return self.currents()[i]

    def restart(self) -> None:
        """reset_accumulated: the sums start again from what is in use now."""
        allocation, allocated, _, _, _ = self.currents()
        requested = self.base[2] + self.alloc_requested - self.free_requested
        self.base = (allocation, allocated, requested)
        self.base_bytes = allocated
        self.allocs = self.alloc_bytes = self.alloc_requested = 0
        self.frees = self.free_bytes = self.free_requested = 0


class _Peaks:
    """The peaks of the five usage stats of one group, and its rooms (Note [Usage counters])."""

    __slots__ = ("values", "room_count", "room_bytes", "room_requested")

    def __init__(self) -> None:
        self.values = [0, 0, 0, 0, 0]  # peaks in the order of Usage.currents()
        self.room_count = self.room_bytes = self.room_requested = 0

    def catch_up(self, currents: tuple[int, ...]) -> None:
        """Raise each peak to its current value, and measure the rooms exactly."""
        values = self.values
        for i, value in enumerate(currents):
            if value > values[i]:
                values[i] = value
        self.room_count = min(values[0] - currents[0], values[2] - currents[2])
        self.room_bytes = min(values[1] - currents[1], values[3] - currents[3])
        self.room_requested = values[4] - currents[4]


class _SplitCounts:
    """inactive_split(_bytes) of one pool kind: currents, sums of increases and decreases,
    peaks."""

    __slots__ = (
        "blocks",
        "nbytes",
        "blocks_up",
        "blocks_down",
        "bytes_up",
        "bytes_down",
        "peak_blocks",
        "peak_bytes",
    )

    def __init__(self) -> None:
        self.blocks = self.nbytes = 0
        self.blocks_up = self.blocks_down = self.bytes_up = self.bytes_down = 0
        self.peak_blocks = self.peak_bytes = 0

    def reset_peak(self) -> None:
        self.peak_blocks, self.peak_bytes = self.blocks, self.nbytes

    def reset_accumulated(self) -> None:
        self.blocks_up = self.blocks_down = self.bytes_up = self.bytes_down = 0


class DeviceStats:
    """The memory_stats counters of one device allocator."""

    def __init__(self) -> None:
        self.usage = (Usage(), Usage())  # (small, large)
        self._peaks = (_Peaks(), _Peaks(), _Peaks())  # (all, small, large)
        # the stats that change off the cached path (or, for inactive_split, by a net amount
        # per call): [all, small, large] each
        self.segment = _group()
        self.reserved_bytes = _group()
        self.split = (_SplitCounts(), _SplitCounts())  # inactive_split: (small, large)
        self.split_peaks = [0, 0]  # the aggregate's peaks: (blocks, bytes)
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

    # ---- the cached path ----------------------------------------------------------------
    def alloc(self, small: bool, size: int, requested: int, split: int, split_bytes: int) -> None:
        """A block of ``size`` bytes was handed out for ``requested`` bytes; the call changed
        inactive_split by ``split`` blocks and ``split_bytes`` bytes (net)."""
        usage = self.usage[0 if small else 1]
        usage.allocs += 1
        usage.alloc_bytes += size
        usage.alloc_requested += requested
        every, mine = self._peaks[0], self._peaks[1 if small else 2]
        every.room_count -= 1
        every.room_bytes -= size
        every.room_requested -= requested
        mine.room_count -= 1
        mine.room_bytes -= size
        mine.room_requested -= requested
        if every.room_bytes < 0 or every.room_count < 0 or every.room_requested < 0:
            every.catch_up(self._currents_all())
        if mine.room_bytes < 0 or mine.room_count < 0 or mine.room_requested < 0:
            mine.catch_up(usage.currents())
        if split or split_bytes:
            self._split(small, split, split_bytes)

    def free(self, small: bool, size: int, requested: int, split: int, split_bytes: int) -> None:
        """The user freed a block and it is back in its pool (a free with no events to
        wait for); the call changed inactive_split by (``split``, ``split_bytes``)."""
        usage = self.usage[0 if small else 1]
        usage.frees += 1
        usage.free_bytes += size
        usage.free_requested += requested
        every, mine = self._peaks[0], self._peaks[1 if small else 2]
        every.room_count += 1
        every.room_bytes += size
        every.room_requested += requested
        mine.room_count += 1
        mine.room_bytes += size
        mine.room_requested += requested
        if split or split_bytes:
            self._split(small, split, split_bytes)

    def free_requested(self, small: bool, size: int, requested: int) -> None:
        """The user freed a block that still waits for record_stream events (pending):
        ``free_completed`` follows when they have completed."""
        usage = self.usage[0 if small else 1]
        usage.frees += 1
        usage.free_bytes += size
        usage.free_requested += requested
        usage.pending += 1
        usage.pending_bytes += size
        usage.pending_requested += requested

    def free_completed(
        self, small: bool, size: int, requested: int, split: int, split_bytes: int
    ) -> None:
        """A pending free's events have completed: the block is back in its pool."""
        usage = self.usage[0 if small else 1]
        usage.pending -= 1
        usage.pending_bytes -= size
        usage.pending_requested -= requested
        if split or split_bytes:
            self._split(small, split, split_bytes)

    def _split(self, small: bool, blocks: int, nbytes: int) -> None:
        """inactive_split moves by the net change of one call (PyTorch applies it once, as
        one increase or decrease per stat); the aggregate's sums are the kinds' sums, so
        only its peaks are kept here."""
        mine = self.split[0 if small else 1]
        if nbytes > 0:
            mine.nbytes += nbytes
            mine.bytes_up += nbytes
            if mine.nbytes > mine.peak_bytes:
                mine.peak_bytes = mine.nbytes
            every = self.split[0].nbytes + self.split[1].nbytes
            if every > self.split_peaks[1]:
                self.split_peaks[1] = every
        elif nbytes < 0:
            mine.nbytes += nbytes
            mine.bytes_down -= nbytes
        if blocks > 0:
            mine.blocks += blocks
            mine.blocks_up += blocks
            if mine.blocks > mine.peak_blocks:
                mine.peak_blocks = mine.blocks
            every = self.split[0].blocks + self.split[1].blocks
            if every > self.split_peaks[0]:
                self.split_peaks[0] = every
        elif blocks < 0:
            mine.blocks += blocks
            mine.blocks_down -= blocks

    def _split_stats(self, pool: int) -> tuple[Stat, Stat]:
        """inactive_split and inactive_split_bytes of a group (0 all, 1 small, 2 large)."""
        parts = self.split if pool == 0 else (self.split[pool - 1],)
        blocks = Stat(
            sum(p.blocks for p in parts),
            self.split_peaks[0] if pool == 0 else parts[0].peak_blocks,
            sum(p.blocks_up for p in parts),
            sum(p.blocks_down for p in parts),
        )
        nbytes = Stat(
            sum(p.nbytes for p in parts),
            self.split_peaks[1] if pool == 0 else parts[0].peak_bytes,
            sum(p.bytes_up for p in parts),
            sum(p.bytes_down for p in parts),
        )
        return blocks, nbytes

    # ---- the slow path ------------------------------------------------------------------
    def segment_added(self, small: bool, nbytes: int, new_segment: bool = True) -> None:
        """Memory reserved from the device: a new segment, or (expandable) pages mapped."""
        kind = 1 if small else 2
        if new_segment:
            self.segment[0].increase(1)
            self.segment[kind].increase(1)
        self.reserved_bytes[0].increase(nbytes)
        self.reserved_bytes[kind].increase(nbytes)

    def segment_removed(self, small: bool, nbytes: int, whole_segment: bool = True) -> None:
        kind = 1 if small else 2
        if whole_segment:
            self.segment[0].decrease(1)
            self.segment[kind].decrease(1)
        self.reserved_bytes[0].decrease(nbytes)
        self.reserved_bytes[kind].decrease(nbytes)

    # ---- readers ------------------------------------------------------------------------
    def _currents_all(self) -> tuple[int, ...]:
        small, large = self.usage[0].currents(), self.usage[1].currents()
        return tuple(a + b for a, b in zip(small, large, strict=True))

    def usage_stats(self, pool: int) -> list[Stat]:
        """allocation, allocated_bytes, active, active_bytes, requested_bytes of a group
        (0: all, 1: small, 2: large) as Stats."""
        if pool == 0:
            parts = self.usage
            currents = self._currents_all()
        else:
            parts = (self.usage[pool - 1],)
            currents = parts[0].currents()
        peaks = self._peaks[pool].values
        allocs = sum(u.allocs for u in parts)
        alloc_bytes = sum(u.alloc_bytes for u in parts)
        alloc_requested = sum(u.alloc_requested for u in parts)
        frees = sum(u.frees for u in parts)
        free_bytes = sum(u.free_bytes for u in parts)
        done = frees - sum(u.pending for u in parts)
        done_bytes = free_bytes - sum(u.pending_bytes for u in parts)
        done_requested = sum(u.free_requested - u.pending_requested for u in parts)
        increases = (allocs, alloc_bytes, allocs, alloc_bytes, alloc_requested)
        decreases = (frees, free_bytes, done, done_bytes, done_requested)
        return [Stat(currents[i], peaks[i], increases[i], decreases[i]) for i in range(5)]

    def allocated_bytes(self) -> int:
        """allocated_bytes.all.current: what memory_allocated() returns, in a few additions."""
        small, large = self.usage
        return (
            small.base_bytes + small.alloc_bytes - small.free_bytes
            + large.base_bytes + large.alloc_bytes - large.free_bytes
        )  # fmt: skip

    def current(self, name: str, pool: int = 0) -> int:
        """The current value of one stat (``pool``: 0 all, 1 small, 2 large) in O(1)."""
        if name in ("inactive_split", "inactive_split_bytes"):
            return self._split_stats(pool)[name == "inactive_split_bytes"].current
        i = _USAGE.get(name)
        if i is None:
            return getattr(self, name)[pool].current
        if pool:
            return self.usage[pool - 1].current(i)
        return self.usage[0].current(i) + self.usage[1].current(i)

    def peak(self, name: str, pool: int = 0) -> int:
        if name in ("inactive_split", "inactive_split_bytes"):
            return self._split_stats(pool)[name == "inactive_split_bytes"].peak
        if name in _USAGE:
            return self.usage_stats(pool)[_USAGE[name]].peak
        return getattr(self, name)[pool].peak

    def as_dict(self, max_split_size: int) -> dict[str, int]:
        """PyTorch's flat memory_stats dict, keys sorted as torch.cuda.memory_stats sorts them."""
        out: dict[str, int] = {}
        for pool, pool_name in enumerate(POOL_NAMES):
            usage = dict(zip(_USAGE, self.usage_stats(pool), strict=True))
            usage["inactive_split"], usage["inactive_split_bytes"] = self._split_stats(pool)
            for name in STAT_NAMES:
                stat = usage[name] if name in usage else getattr(self, name)[pool]
                for field, value in zip(FIELDS, stat.fields(), strict=True):
                    out[f"{name}.{pool_name}.{field}"] = value
        for name in ("oversize_allocations", "oversize_segments"):
            for field, value in zip(FIELDS, getattr(self, name).fields(), strict=True):
                out[f"{name}.{field}"] = value
        out["num_alloc_retries"] = self.num_alloc_retries
        out["num_ooms"] = self.num_ooms
        out["num_sync_all_streams"] = self.num_sync_all_streams
        out["num_device_alloc"] = self.num_device_alloc
        out["num_device_free"] = self.num_device_free
        out["max_split_size"] = max_split_size
        return dict(sorted(out.items()))

    def reset_peak(self) -> None:
        for pool, peaks in enumerate(self._peaks):
            currents = self._currents_all() if pool == 0 else self.usage[pool - 1].currents()
            peaks.values = list(currents)
            peaks.room_count = peaks.room_bytes = peaks.room_requested = 0
        for counts in self.split:
            counts.reset_peak()
        self.split_peaks = [sum(c.blocks for c in self.split), sum(c.nbytes for c in self.split)]
        for stat in self._stats():
            stat.reset_peak()

    def reset_accumulated(self) -> None:
        for usage in self.usage:
            usage.restart()
        for counts in self.split:
            counts.reset_accumulated()
        for stat in self._stats():
            stat.reset_accumulated()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

    def _stats(self) -> list[Stat]:
        groups = (self.segment, self.reserved_bytes)
        return [s for g in groups for s in g] + [self.oversize_allocations, self.oversize_segments]


_USAGE = {  # the usage stats, in the order of Usage.currents()
    "allocation": 0,
    "allocated_bytes": 1,
    "active": 2,
    "active_bytes": 3,
    "requested_bytes": 4,
}


def _group() -> tuple[Stat, Stat, Stat]:
    return Stat(), Stat(), Stat()
