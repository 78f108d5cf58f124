"""One replay of a trace under one configuration, through a fresh caching allocator.

Rules of the replay:
- Settings: the trace's ``allocator_settings`` are turned back into a settings string, and
  the configuration is applied on top of it (``_settings.merge``: it replaces, adds or drops
  recorded keys; "" is the recorded settings).
- The device is ``_replay_device``'s: memory counted, never backed; segments placed where
  the trace recorded them. Each recorded stream is a stream of that device (in the
  recorded streams' order), so the allocator keeps them apart as PyTorch did.
- A free whose free_completed comes later (the block waited on record_stream events) is
  used on a held stream of its own (``SimDriver.hold``) that is released at the trace's
  free_completed, or earlier when the host synchronizes with it: empty_cache and the OOM
  path wait for pending frees, and freeing a segment synchronizes the device (cudaFree
  does), as garbage collection can under other settings. With record_use the block returns
  to the pool at once and the next owner's stream waits instead.
- The result row says: device mallocs (segment allocations plus mapped pages), the segment
  sizes in order, peak reserved, peak allocated and ``peak_ratio`` (peak reserved over
  peak allocated); at the allocated peak (the moment allocated memory reached its maximum)
  the reserved bytes, the largest free block and ``fragmentation_at_peak`` (1 - the largest
  free block over the reserved bytes not allocated there: 0 when the free memory is one
  block); ``flushes``, the times the allocator gave back its cache and retried to stay
  within the device; and whether the replay ran out of memory at ``capacity`` (without one,
  the device is 80 GiB or four times what the trace reserved, whichever is more).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._device import Device
from .._errors import OutOfMemoryError
from ..memory import AllocatorConfig, DeviceCachingAllocator, parse_config
from ..sim import SimDriver
from ._replay_device import replay_device
from ._replay_pools import add_pool_routes
from ._replay_trace import ALLOC, COMPLETE, FREE, FREE_PENDING, Trace
from ._settings import merge, settings_to_config

__all__ = ["Pruned", "Run", "Replayer", "replay_config", "device_capacity"]

_MB = 1 << 20
_DEFAULT_CAPACITY = 80 << 30  # bytes; at least this without a capacity (an H100's memory)
_PROGRESS_STEP = 4096  # requests replayed between progress updates


class Pruned(Exception):
    """A replay stopped early: it reserved more than its bound (``vram replay --suggest``)."""

    def __init__(self, reserved: int, at: int) -> None:
        super().__init__(f"reserved {reserved} bytes at request {at}, above the bound")
        self.reserved = reserved
        self.at = at


@dataclass
class Run:
    """A configuration's result row, and its timelines when they were asked for."""

    row: dict
    reserved: list[int]  # after each request (only when a timeline was asked for)
    allocated: list[int]


def device_capacity(trace: Trace, capacity: int | None) -> int:
    """The replay device's memory: ``capacity``, or big enough for any configuration."""
    if capacity is not None:
        return capacity
    recorded_total = sum(size for _, size in trace.recorded_segments)
    return max(_DEFAULT_CAPACITY, 4 * recorded_total)


class _SegmentSizes:
    """The allocator's reserve hook: notes the segment sizes it allocates or maps, in order
    (the replay keeps no recorder: the allocator's history branches stay untaken)."""

    __slots__ = ("sizes",)

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def __call__(self, pool: Any, segment: Any, start: int, nbytes: int, action: str) -> None:
        if nbytes > 0:
            self.sizes.append(nbytes)


def _watch_segments(allocator: DeviceCachingAllocator) -> _SegmentSizes:
    """The sizes of the segments ``allocator`` allocates or maps, noted as it goes."""
    segments = _SegmentSizes()
    allocator.add_reserve_hook(segments)
    return segments


def _largest_free(allocator: DeviceCachingAllocator) -> int:
    """The largest free mapped block of any pool."""
    pools = [allocator.small, allocator.large]
    for private in allocator.private_pools.values():
        pools += [private.small, private.large]
    return max(pool.largest_free() for pool in pools)


def _allocated_reader(allocator: DeviceCachingAllocator) -> Callable[[], int]:
    """A function returning the allocator's allocated bytes now, as cheaply as it can: the
    stats' own O(1) reader where they have one."""
    stats = allocator.stats
    reader = getattr(stats, "allocated_bytes", None)
    if callable(reader):
        return reader
    return lambda: stats.current("allocated_bytes")


def _device_streams(driver: SimDriver, trace: Trace) -> dict[int, int]:
    """A stream of the replay device for each recorded stream, in the recorded order (the
    default stream for PyTorch's 0)."""
    found = {}
    for stream in trace.streams:
        found[stream] = driver.default_stream(0) if stream == 0 else driver.stream_create(0)
    return found


class Replayer:
    """One replay of one trace under one configuration."""

    def __init__(
        self,
        trace: Trace,
        config: AllocatorConfig,
        capacity: int,
        record_use: bool,
        limit: int | None = None,
    ):
        self.trace = trace
        self.record_use = record_use
        pre = [(addr, size) for addr, size, _, _ in trace.pre_segments]
        self.driver, self.addresses = replay_device(capacity, pre + trace.recorded_segments)
        streams = _device_streams(self.driver, trace)
        self.streams = streams
        self.ops = [(c, a, s, streams[st] if c == ALLOC else st, i) for c, a, s, st, i in trace.ops]
        allocator = DeviceCachingAllocator(Device("sim", 0), config, driver=self.driver)
        add_pool_routes(
            allocator, {pool: {streams[s] for s in used} for pool, used in trace.pools.items()}
        )
        if limit is not None:
            allocator.set_memory_fraction(min(limit / capacity, 1.0))
        self.segments = _watch_segments(allocator)
        self.allocator = allocator
        self.ptrs: dict[int, int] = {}  # recorded address -> replay pointer, live allocations
        self.held: dict[int, int] = {}  # recorded address -> held stream of a pending free
        self.peak_allocated = self.reserved_at_peak = self.largest_free_at_peak = 0
        self.reserved: list[int] = []
        self.allocated: list[int] = []

    def setup(self) -> None:
        """Make what was live before the trace began."""
        trace, allocator, streams = self.trace, self.allocator, self.streams
        for addr, size, stream in trace.pre_allocs:
            self.ptrs[addr] = allocator.malloc(max(size, 1), streams[stream])
        fills = []
        for addr, size, stream, small in trace.pre_segments:
            if self.addresses.is_live(addr):
                continue  # a live allocation made it already
            if small:
                fills += [
                    allocator.malloc(_MB, streams[stream]),
                    allocator.malloc(_MB, streams[stream]),
                ]
            else:
                fills.append(allocator.malloc(size, streams[stream]))
        for ptr in fills:
            allocator.free(ptr)
        allocator.reset_peak()  # the fills were never the program's: peaks start here
        self._note_peak(_allocated_reader(allocator)())

    def _note_peak(self, allocated: int) -> None:
        """The state at the allocated peak: reserved and the largest free block there."""
        if allocated > self.peak_allocated:
            self.peak_allocated = allocated
            self.reserved_at_peak = self.allocator.total_allocated_memory
            self.largest_free_at_peak = _largest_free(self.allocator)

    def run(
        self,
        progress: Callable[[int], None] | None = None,
        timeline: bool = False,
        bound: int | None = None,
    ) -> tuple[bool, int | None]:
        """Replay every request; (ran out of memory, at which trace entry).

        ``progress(n)`` is told of the trace entries replayed, every ``_PROGRESS_STEP``
        requests; ``timeline`` keeps reserved and allocated bytes after each request;
        ``bound`` stops the replay with ``Pruned`` as soon as it reserves more bytes than
        that.

        Note [The replay loop]: the trace was compiled once into (code, addr, size, stream,
        entry) tuples; this loop is all the replay adds to the allocator's own work per
        request, so it binds what it calls to locals, reads reserved bytes from the
        allocator's plain counter, and looks at the state of the allocated peak only when a
        peak ends (the first request after a run of allocations that set one), not at every
        allocation.
        """
        allocator, driver = self.allocator, self.driver
        malloc, free, ptrs, held = allocator.malloc, allocator.free, self.ptrs, self.held
        allocated_now = _allocated_reader(allocator)
        reserved_out, allocated_out = self.reserved, self.allocated
        limit = (1 << 127) if bound is None else bound
        peak = self.peak_allocated
        rising = False  # allocations since the last request set a new allocated peak
        ops = self.ops
        step = _PROGRESS_STEP
        i = reported = 0
        try:
            for start in range(0, len(ops), step):
                for op in ops[start : start + step]:
                    code = op[0]
                    if code == ALLOC:
                        ptrs[op[1]] = malloc(op[2] or 1, op[3])
                        rising = True
                    else:
                        if rising:
                            rising = False
                            allocated = allocated_now()
                            if allocated > peak:
                                self._note_peak(allocated)
                                peak = allocated
                        if code == FREE:
                            ptr = ptrs.pop(op[1], None)
                            if ptr is not None:
                                free(ptr)
                        elif code == FREE_PENDING:
                            self._free_pending(op[1])
                        elif code == COMPLETE:
                            stream = held.pop(op[1], None)
                            if stream is not None:
                                driver.release(stream)
                                driver.stream_destroy(stream)
                                del ptrs[op[1]]
                            elif op[1] in ptrs:  # its free was requested before the trace
                                free(ptrs.pop(op[1]))
                        else:
                            allocator.empty_cache()
                    if allocator.total_allocated_memory > limit:
                        raise Pruned(allocator.total_allocated_memory, op[4])
                    if timeline:
                        reserved_out.append(allocator.total_allocated_memory)
                        allocated_out.append(allocated_now())
                    i += 1
                if progress is not None and start + step < len(ops):
                    upto = ops[start + step][4]  # the trace entries replayed so far
                    progress(upto - reported)
                    reported = upto
        except OutOfMemoryError:
            if rising:
                self._note_peak(allocated_now())
            return True, ops[i][4]
        if rising:
            self._note_peak(allocated_now())
        if progress is not None:
            progress(len(self.trace.entries) - reported)
        return False, None

    def _free_pending(self, addr: int) -> None:
        """A free whose free_completed comes later: used on a held stream of its own until
        then (record_stream), or returned at once with a use recorded there (record_use)."""
        ptr = self.ptrs.get(addr)
        if ptr is None:
            return
        stream = self.driver.stream_create(0)
        if self.record_use:
            self.allocator.record_use(ptr, stream)
            self.driver.stream_destroy(stream)
            del self.ptrs[addr]
        else:
            self.driver.hold(stream)
            self.allocator.record_stream(ptr, stream)
            self.held[addr] = stream
        self.allocator.free(ptr)


def replay_config(
    trace: Trace,
    text: str,
    capacity: int | None,
    record_use: bool = False,
    progress: Callable[[int], None] | None = None,
    timeline: bool = False,
    bound: int | None = None,
) -> Run:
    """Replay ``trace`` under ``text`` (a change to its recorded settings); its result.
    Raises ``Pruned`` when ``bound`` is given and the replay reserves more than that."""
    recorded = settings_to_config(trace.settings)
    try:
        change = merge(recorded, text)
        config = parse_config(change.settings)
    except ValueError as exc:
        raise ValueError(f"config {text!r}: {exc}") from None
    change.record_use = use = change.record_use or record_use
    limit = change.memory_limit
    replayer = Replayer(trace, config, device_capacity(trace, capacity), use, limit)
    try:
        replayer.setup()
    except OutOfMemoryError:  # what was live before the trace does not fit
        oom, oom_at = True, 0
    else:
        oom, oom_at = replayer.run(progress, timeline, bound)
    stats = replayer.allocator.stats
    sizes = replayer.segments.sizes
    peak_allocated = stats.peak("allocated_bytes")
    peak_reserved = stats.peak("reserved_bytes")
    at_peak = replayer.reserved_at_peak
    unallocated = at_peak - replayer.peak_allocated
    own_text = ["record_use:True"] if use else []
    if limit is not None:
        own_text.append(f"memory_limit:{limit}")
    row = {
        "config": text or ("recorded, record_use" if record_use else "recorded"),
        "settings": ",".join(filter(None, [change.settings, *own_text])),
        "change": change.kind,
        "change_text": change.describe(),
        "pytorch": change.pytorch,
        "checked": change.checked,
        "device_malloc": stats.num_device_alloc,
        "device_free": stats.num_device_free,
        "flushes": stats.num_alloc_retries,
        "segment_sizes": sizes,
        "peak_reserved": peak_reserved,
        "peak_allocated": peak_allocated,
        "peak_ratio": round(peak_reserved / peak_allocated, 4) if peak_allocated else None,
        "reserved_at_peak": at_peak,
        "largest_free_at_peak": replayer.largest_free_at_peak,
        "fragmentation_at_peak": (
            round(1 - replayer.largest_free_at_peak / unallocated, 4) if unallocated > 0 else 0.0
        ),
        "capacity": capacity,
        "oom": oom,
        "oom_at": oom_at,
        "recorded": change.kind == "recorded",
        "matches_recorded": sizes == trace.recorded_sizes,
        "notes": list(trace.notes),
    }
    return Run(row, replayer.reserved, replayer.allocated)
