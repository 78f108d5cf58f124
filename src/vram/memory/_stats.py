"""memory_stats: PyTorch's counters, as plain integers updated where the memory changes.

A ``Stat`` is PyTorch's: ``current``, ``peak``, ``allocated`` (the sum of increases) and
``freed`` (the sum of decreases). The host allocator's stats are Stats too.

The device allocator keeps each stat for the aggregate ("all") and for the pool kind
("small_pool" / "large_pool"). Most change only on the slow path (segments, reserved
bytes) and are Stats updated there. Seven change on every malloc and free: allocation,
allocated_bytes, active, active_bytes, requested_bytes and inactive_split(_bytes).
Updating four fields of twenty-one Stats per call would be most of the cached path's cost,
so ``Usage`` keeps them as a few sums per pool kind instead (Note [Usage counters]);
every reader gets them as Stats in O(1).

Note [Usage counters]
Per pool kind, ``Usage`` counts what malloc and free did since the accumulated stats were
last reset: blocks handed out (count, bytes, requested bytes) and blocks freed by the user
(the same three). A free still waiting for record_stream events is *pending*: it has
lowered allocation and allocated_bytes, not yet active, active_bytes and requested_bytes;
the three pending sums say by how much. A take-back (a free and an alloc of the same
block) counts once, in ``reuses`` and ``reuse_bytes`` (and ``reuse_requested`` when it asks
for what the freed block was asked for): the readers add them to both sides.
Every current value and every sum of increases or decreases is a sum or difference of
these (``usage_stats``).
inactive_split moves by a net amount per call (PyTorch applies one increase or decrease
per call): ``Usage`` keeps its current value and the sum of its increases; the sum of its
decreases is the increases less the change since the last reset. inactive_split_bytes is
kept without a write on the cached path (Note [inactive_split_bytes]).
Peaks are the one thing that cannot be derived later. Each pool kind has two *rooms*:
lower bounds of how far its count stats (allocation, active) and its byte stats
(allocated_bytes, active_bytes, requested_bytes) can rise before one passes a peak, its
own or the aggregate's: a kind's room is at most its own distance below its peaks, and the
two kinds' rooms together are at most the aggregate's distance below its peaks (the
aggregate's room is shared out between the kinds). A malloc lowers its kind's rooms by what
it adds at most (1, and the block's size: never less than the bytes requested); a free that
completes at once gives back at least what they count (1, and the bytes requested); a
pending one gives nothing back (a lower bound stays one). Either keeps both bounds, and
touches one kind's rooms only. Only when a room goes below zero can a peak have been passed:
then the kind's and the aggregate's peaks are brought up to their current values, the
distances are measured exactly, and the rooms are shared out again (the kind gets up to
half the aggregate's room, or more where the other kind holds less).
A room is not stored: it is a limit less a difference of sums that malloc and free update
anyway (the count room: ``count_limit - (allocs - frees)``; the byte room: ``bytes_limit -
(alloc_bytes - free_requested)``), so a malloc or free writes no room, and a malloc compares
twice, also at a program's peak. Where the sums move by other than the room does (a pending
free, a take-back, a reset of the sums), the limit moves the other way.
inactive_split's and inactive_split_bytes' peaks are kept with rooms shared out the same way
(Note [inactive_split_bytes]).

Note [inactive_split_bytes]
The free bytes of split device allocations move, on nearly every call, by exactly what
active_bytes moves the other way: a malloc cut from a free block of a split allocation
moves its bytes from one to the other, and so does a free that stays in a split
allocation. So a kind keeps an *offset*: inactive_split_bytes is ``split_offset`` less
active_bytes' sums (``alloc_bytes - free_bytes + pending_bytes``), and only a call that
moves it otherwise (a whole segment split or handed out whole, a segment whole again, an
expandable block) changes the offset. Its sum of increases is kept the same way: a free
that stays split raises it by the bytes freed, which ``free_bytes`` counts already, so
``split_up_extra`` holds only what other calls add, less the bytes of completed frees that
raised it by other than their size. Its peaks, and inactive_split's, are kept with rooms
as the usage stats' are: ``split_limit`` (``split_blocks_limit``) is what it may rise to
before a peak, the kind's or the aggregate's, may pass, the rooms shared out between the
kinds; ``split_mark`` is ``split_limit`` in the units a free compares (``free_bytes -
alloc_bytes``), so a free that stays split compares twice and writes at most two counts.
"""

from __future__ import annotations

from operator import add, itemgetter

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
        "count_limit",
        "bytes_limit",
        "peaks",
        "split_blocks",
        "split_offset",
        "split_blocks_up",
        "split_up_extra",
        "split_blocks_limit",
        "split_limit",
        "split_mark",
        "split_base",
        "split_peaks",
        "pending_base",
        "reuses",
        "reuse_bytes",
        "reuse_requested",
    )

    def __init__(self) -> None:
        self.allocs = self.alloc_bytes = self.alloc_requested = 0
        self.frees = self.free_bytes = self.free_requested = 0
        self.pending = self.pending_bytes = self.pending_requested = 0
        self.base = (0, 0, 0)  # (count, bytes, requested) in use when the sums restarted
        self.base_bytes = 0  # base[1], read on its own by allocated_bytes()
        self.count_limit = self.bytes_limit = 0  # where its rooms end (see rooms())
        self.peaks = [0, 0, 0, 0, 0]  # in the order of currents()
        self.split_blocks = 0  # inactive_split now
        self.split_blocks_up = 0  # its sum of increases
        self.split_blocks_limit = 0  # what it may rise to before a peak may pass
        # inactive_split_bytes (Note [inactive_split_bytes]): split_bytes() now, its sum of
        # increases less what free_bytes counts, and its room (as a value it may rise to,
        # and as what free_bytes - alloc_bytes may rise to)
        self.split_offset = self.split_up_extra = 0
        self.split_limit = self.split_mark = 0
        self.split_base = (0, 0)  # (blocks, bytes) when the sums restarted
        self.split_peaks = [0, 0]  # (blocks, bytes)
        self.pending_base = (0, 0, 0)  # the pending sums when the sums restarted
        self.reuses = self.reuse_bytes = 0  # take-backs: a free and an alloc each
        self.reuse_requested = 0  # the bytes asked for by take-backs of the same request

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

    def split_bytes(self) -> int:
        """inactive_split_bytes now (Note [inactive_split_bytes])."""
        return self.split_offset - (self.alloc_bytes - self.free_bytes + self.pending_bytes)

    def set_split_limit(self, limit: int) -> None:
        """inactive_split_bytes may rise to ``limit`` before a peak may pass."""
        self.split_limit = limit
        self.split_mark = limit - self.split_offset + self.pending_bytes

    def split_stats(self) -> tuple[Stat, Stat]:
        """inactive_split and inactive_split_bytes as Stats."""
        (base_blocks, base_bytes), (peak_blocks, peak_bytes) = self.split_base, self.split_peaks
        blocks, nbytes = self.split_blocks, self.split_bytes()
        up_blocks = self.split_blocks_up
        up_bytes = self.split_up_extra + self.free_bytes - self.pending_bytes + self.pending_base[1]
        return (
            Stat(blocks, peak_blocks, up_blocks, up_blocks - (blocks - base_blocks)),
            Stat(nbytes, peak_bytes, up_bytes, up_bytes - (nbytes - base_bytes)),
        )

    def rooms(self) -> tuple[int, int]:
        """(count room, byte room): how far the kind may rise before a peak may pass."""
        return (
            self.count_limit - (self.allocs - self.frees),
            self.bytes_limit - (self.alloc_bytes - self.free_requested),
        )

    def set_rooms(self, count: int, nbytes: int) -> None:
        self.count_limit = count + (self.allocs - self.frees)
        self.bytes_limit = nbytes + (self.alloc_bytes - self.free_requested)

    def restart(self) -> None:
        """reset_accumulated: the sums start again from what is in use now."""
        rooms, split_bytes = self.rooms(), self.split_bytes()
        allocation, allocated, _, _, _ = self.currents()
        requested = self.base[2] + self.alloc_requested - self.free_requested
        self.base = (allocation, allocated, requested)
        self.base_bytes = allocated
        self.allocs = self.alloc_bytes = self.alloc_requested = 0
        self.frees = self.free_bytes = self.free_requested = 0
        self.reuses = self.reuse_bytes = self.reuse_requested = 0
        self.split_base = (self.split_blocks, split_bytes)
        self.split_blocks_up = self.split_up_extra = 0
        self.pending_base = (self.pending, self.pending_bytes, self.pending_requested)
        self.set_rooms(*rooms)
        self.split_offset = split_bytes + self.pending_bytes
        self.set_split_limit(self.split_limit)


def _kept(theirs: int, own: int, every: int) -> int:
    """The room the other kind keeps at a catch-up: at most its room now, and at most what
    is left of the aggregate's room ``every`` once this kind has up to half of it (or all
    it can use, ``own``)."""
    return min(theirs, every - min(own, (every + 1) // 2))


def _raise(peaks: list[int], currents: tuple[int, ...]) -> tuple[int, int]:
    """Raise each peak of a group to its current value; (count, bytes) distances below them."""
    for i, value in enumerate(currents):
        if value > peaks[i]:
            peaks[i] = value
    return (
        min(peaks[0] - currents[0], peaks[2] - currents[2]),
        min(peaks[1] - currents[1], peaks[3] - currents[3], peaks[4] - currents[4]),
    )


class DeviceStats:
    """The memory_stats counters of one device allocator."""

    def __init__(self) -> None:
        self.small, self.large = self.usage = (Usage(), Usage())
        self.peaks = [0, 0, 0, 0, 0]  # the aggregate's usage peaks
        self.split_peaks = [0, 0]  # the aggregate's inactive_split peaks: (blocks, bytes)
        # the stats that change off the cached path: [all, small, large] each
        self.segment = _group()
        self.reserved_bytes = _group()
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
        usage = self.small if small else self.large
        usage.allocs += 1
        usage.alloc_bytes += size
        usage.alloc_requested += requested
        if (
            usage.allocs - usage.frees > usage.count_limit
            or usage.alloc_bytes - usage.free_requested > usage.bytes_limit
        ):  # a room below zero (Note [Usage counters])
            self._catch_up(usage)
        if split_bytes != -size or split > 0:
            if split or split_bytes:
                self._split_moved(usage, split, split_bytes, size)
            else:  # a block outside split allocations: the offset follows active_bytes
                usage.split_offset += size
                usage.split_mark -= size
        elif split:  # a free block of a split allocation handed out whole: a fall
            usage.split_blocks += split
        # (else: the offset holds, Note [inactive_split_bytes])

    def free(self, small: bool, size: int, requested: int, split: int, split_bytes: int) -> None:
        """The user freed a block and it is back in its pool (a free with no events to
        wait for); the call changed inactive_split by (``split``, ``split_bytes``)."""
        usage = self.small if small else self.large
        usage.frees += 1
        usage.free_bytes += size
        usage.free_requested += requested
        if split_bytes != size or split < 0:
            if split or split_bytes:
                self._split_moved(usage, split, split_bytes, -size)
            else:  # a block outside split allocations (as _split_moved would count it)
                usage.split_offset -= size
                usage.split_mark += size
                usage.split_up_extra -= size
        else:  # it stays split: its bytes join inactive_split_bytes, and so may the block
            if split:
                usage.split_blocks += split
                usage.split_blocks_up += split
            if (
                usage.split_blocks > usage.split_blocks_limit
                or usage.free_bytes - usage.alloc_bytes > usage.split_mark
            ):  # past a room
                self._split_catch_up(usage)

    def reuse(
        self, small: bool, size: int, freed: int, requested: int, rest: int, whole: bool
    ) -> None:
        """``free`` of a block of ``size`` bytes (asked for as ``freed``), then ``alloc`` of
        the same block for ``requested`` bytes: the allocator's take-back (Note [Taking a
        dropped block back]). ``rest`` > 0: the free merges it with the free rest of
        ``rest`` bytes after it, and the alloc splits it off that rest again; ``whole``:
        the two make a whole segment. ``rest`` 0: the block has no free neighbour, so it
        leaves and enters alone; ``whole``: it is a whole segment."""
        usage = self.small if small else self.large
        usage.reuses += 1  # (counted in allocs and frees by the readers: they cancel in both)
        usage.reuse_bytes += size
        if requested == freed:  # (the same request again: counted once, in both sums)
            usage.reuse_requested += requested
        else:  # requested_bytes moves by requested - freed: the byte room shrinks by that
            usage.free_requested += freed  # at most
            usage.alloc_requested += requested
            usage.bytes_limit -= freed if freed > requested else requested
            if requested > freed and usage.alloc_bytes - usage.free_requested > usage.bytes_limit:
                self._catch_up(usage)
        if rest:
            if whole:  # the free takes the rest out of inactive_split, the alloc puts it back
                usage.split_blocks_up += 1
                usage.split_up_extra += rest
                return
            rise = 0  # the merged block stays split: its bytes rise, then fall
        elif whole:
            return  # a whole segment alone: no split allocation, nothing moves
        else:
            rise = 1  # alone in a split segment: it joins inactive_split, then leaves
            usage.split_blocks_up += 1
        # the sums of increases keep the free's rise; only the rise, at its top, can pass a
        # peak: catch up there
        usage.split_up_extra += size
        if (
            rise and usage.split_blocks >= usage.split_blocks_limit
        ) or usage.free_bytes - usage.alloc_bytes > usage.split_mark - size:
            usage.split_blocks += rise
            usage.split_offset += size
            usage.split_mark -= size
            self._split_catch_up(usage)
            usage.split_blocks -= rise
            usage.split_offset -= size
            usage.split_mark += size

    def free_requested(self, small: bool, size: int, requested: int) -> None:
        """The user freed a block that still waits for record_stream events (pending):
        ``free_completed`` follows when they have completed."""
        usage = self.small if small else self.large
        usage.frees += 1
        usage.free_bytes += size
        usage.free_requested += requested
        usage.count_limit -= 1  # (the rooms stay: active and requested_bytes are unchanged)
        usage.bytes_limit -= requested
        usage.pending += 1
        usage.pending_bytes += size
        usage.pending_requested += requested
        usage.split_mark += size  # (active_bytes is unchanged, so is inactive_split_bytes)

    def free_completed(
        self, small: bool, size: int, requested: int, split: int, split_bytes: int
    ) -> None:
        """A pending free's events have completed: the block is back in its pool."""
        usage = self.small if small else self.large
        usage.pending -= 1
        usage.pending_bytes -= size
        usage.pending_requested -= requested
        usage.split_mark -= size
        self._split_moved(usage, split, split_bytes, -size)

    def _catch_up(self, usage: Usage) -> None:
        """A room of ``usage``'s kind is below zero: raise the kind's and the aggregate's
        peaks to their current values, and share the rooms out again (Note [Usage
        counters]): the other kind keeps at most what is left once this one has up to half
        of the aggregate's room."""
        other = self.large if usage is self.small else self.small
        mine = usage.currents()
        own = _raise(usage.peaks, mine)
        every = _raise(self.peaks, tuple(map(add, mine, other.currents())))
        (own_count, own_bytes), (all_count, all_bytes) = own, every
        their_count, their_bytes = other.rooms()
        keep_count = _kept(their_count, own_count, all_count)
        keep_bytes = _kept(their_bytes, own_bytes, all_bytes)
        other.set_rooms(keep_count, keep_bytes)
        usage.set_rooms(
            min(own_count, all_count - keep_count), min(own_bytes, all_bytes - keep_bytes)
        )

    def _split_moved(self, usage: Usage, blocks: int, nbytes: int, active: int) -> None:
        """inactive_split(_bytes) of ``usage``'s kind moved by (``blocks``, ``nbytes``) in
        one call that moved active_bytes by ``active`` (a free's is minus its size): the
        current values, the sums of increases, and the peaks (they can pass only on a
        rise). Note [inactive_split_bytes]."""
        if blocks:
            usage.split_blocks += blocks
            if blocks > 0:
                usage.split_blocks_up += blocks
        moved = nbytes + active  # (0 when it moved as active_bytes' opposite)
        if moved:
            usage.split_offset += moved
            usage.split_mark -= moved
        extra = nbytes if nbytes > 0 else 0
        if active < 0:  # a completed free: free_bytes counts its size as an increase
            extra += active
        if extra:
            usage.split_up_extra += extra
        if (
            usage.split_blocks > usage.split_blocks_limit
            or usage.free_bytes - usage.alloc_bytes > usage.split_mark
        ):  # past a room: a rise
            self._split_catch_up(usage)

    def _split_catch_up(self, usage: Usage) -> None:
        """inactive_split or inactive_split_bytes of ``usage``'s kind rose past its room:
        raise the kind's peaks and the aggregate's, and share the rooms out again (as
        ``_catch_up`` does)."""
        other = self.large if usage is self.small else self.small
        mine = (usage.split_blocks, usage.split_bytes())
        theirs = (other.split_blocks, other.split_bytes())
        limits = (other.split_blocks_limit, other.split_limit)
        kept, given = [], []
        for i in (0, 1):
            total = mine[i] + theirs[i]
            if mine[i] > usage.split_peaks[i]:
                usage.split_peaks[i] = mine[i]
            if total > self.split_peaks[i]:
                self.split_peaks[i] = total
            own, every = usage.split_peaks[i] - mine[i], self.split_peaks[i] - total
            kept.append(_kept(limits[i] - theirs[i], own, every))
            given.append(min(own, every - kept[i]))
        other.split_blocks_limit = theirs[0] + kept[0]
        other.set_split_limit(theirs[1] + kept[1])
        usage.split_blocks_limit = mine[0] + given[0]
        usage.set_split_limit(mine[1] + given[1])

    def _split_stats(self, pool: int) -> tuple[Stat, Stat]:
        """inactive_split and inactive_split_bytes of a group (0 all, 1 small, 2 large)."""
        if pool:
            return self.usage[pool - 1].split_stats()
        (small_blocks, small_bytes), (large_blocks, large_bytes) = (
            self.small.split_stats(),
            self.large.split_stats(),
        )
        return (
            _sum(small_blocks, large_blocks, self.split_peaks[0]),
            _sum(small_bytes, large_bytes, self.split_peaks[1]),
        )

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
        peaks = self.peaks if pool == 0 else parts[0].peaks
        reuses = sum(u.reuses for u in parts)
        reuse_bytes = sum(u.reuse_bytes for u in parts)
        allocs = sum(u.allocs for u in parts) + reuses
        alloc_bytes = sum(u.alloc_bytes for u in parts) + reuse_bytes
        reuse_requested = sum(u.reuse_requested for u in parts)
        alloc_requested = sum(u.alloc_requested for u in parts) + reuse_requested
        frees = sum(u.frees for u in parts) + reuses
        free_bytes = sum(u.free_bytes for u in parts) + reuse_bytes
        # active's decreases: the frees less those still pending, plus the completions of
        # frees that were pending when the sums restarted (counted in an earlier sum)
        done = frees - sum(u.pending - u.pending_base[0] for u in parts)
        done_bytes = free_bytes - sum(u.pending_bytes - u.pending_base[1] for u in parts)
        done_requested = reuse_requested + sum(
            u.free_requested - u.pending_requested + u.pending_base[2] for u in parts
        )
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
            return self.usage[pool - 1].currents()[i]
        return self._currents_all()[i]

    def peak(self, name: str, pool: int = 0) -> int:
        if name in ("inactive_split", "inactive_split_bytes"):
            return self._split_stats(pool)[name == "inactive_split_bytes"].peak
        if name in _USAGE:
            return self.usage_stats(pool)[_USAGE[name]].peak
        return getattr(self, name)[pool].peak

    def as_dict(self, max_split_size: int) -> dict[str, int]:
        """PyTorch's flat memory_stats dict, keys sorted as torch.cuda.memory_stats sorts them."""
        values: list[int] = []
        for pool in range(len(POOL_NAMES)):
            usage = dict(zip(_USAGE, self.usage_stats(pool), strict=True))
            usage["inactive_split"], usage["inactive_split_bytes"] = self._split_stats(pool)
            for name in STAT_NAMES:
                stat = usage[name] if name in usage else getattr(self, name)[pool]
                values += stat.fields()
        values += self.oversize_allocations.fields()
        values += self.oversize_segments.fields()
        values += (
            self.num_alloc_retries,
            self.num_ooms,
            self.num_sync_all_streams,
            self.num_device_alloc,
            self.num_device_free,
            max_split_size,
        )
        return dict(zip(_SORTED_KEYS, _sorted_values(values), strict=True))

    def reset_peak(self) -> None:
        for usage in self.usage:
            usage.peaks = list(usage.currents())
            usage.set_rooms(0, 0)
            usage.split_peaks = [usage.split_blocks, usage.split_bytes()]
            usage.split_blocks_limit = usage.split_blocks
            usage.set_split_limit(usage.split_peaks[1])
        self.peaks = list(self._currents_all())
        self.split_peaks = [
            self.small.split_blocks + self.large.split_blocks,
            self.small.split_bytes() + self.large.split_bytes(),
        ]
        for stat in self._stats():
            stat.reset_peak()

    def reset_accumulated(self) -> None:
        for usage in self.usage:
            usage.restart()
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


# as_dict's keys in the order it gathers the values, and that order sorted (once, here)
_KEYS = (
    *(f"{name}.{pool}.{field}" for pool in POOL_NAMES for name in STAT_NAMES for field in FIELDS),
    *(
        f"{name}.{field}"
        for name in ("oversize_allocations", "oversize_segments")
        for field in FIELDS
    ),
    "num_alloc_retries",
    "num_ooms",
    "num_sync_all_streams",
    "num_device_alloc",
    "num_device_free",
    "max_split_size",
)
_ORDER = sorted(range(len(_KEYS)), key=_KEYS.__getitem__)
_SORTED_KEYS = tuple(_KEYS[i] for i in _ORDER)
_sorted_values = itemgetter(*_ORDER)


def _group() -> tuple[Stat, Stat, Stat]:
    return Stat(), Stat(), Stat()


def _sum(small: Stat, large: Stat, peak: int) -> Stat:
    """The aggregate of two pool kinds' Stat, with its own peak."""
    return Stat(
        small.current + large.current, peak, small.allocated + large.allocated,
        small.freed + large.freed,
    )  # fmt: skip
