"""The stream sanitizer (``stream_sanitizer:True``): catches cross-stream reuse races.

The race it catches (torchrec#4231): a tensor allocated on stream A is used by a kernel
on stream B, then freed on A without ``record_stream(B)`` or ``record_use(B)``. The
caching allocator hands the block to the next request on A at once, and that new owner
writes it while B's kernel may still be reading it: wrong results (NaN in torchrec's
case), only sometimes, only on a loaded GPU.

With the setting on, a device's caching allocator:

- Poisons freed blocks: a block that becomes free is filled with ``POISON`` bytes (0xFF:
  NaN in every floating dtype, -1 in signed ints) on its stream, after its record_use
  events (the stream waits on them first). A kernel that reads a block after its free
  without the lifetime rules covering it reads NaN on the GPU, at once, not corrupted
  numbers some day. With cross_stream_reuse the poison counts as a use of the free, so a
  block taken by another stream waits for it too.
- Reuses freed blocks as early as the rules allow: a request takes the most recently freed
  block of its stream and pool that fits (the sanitizer's ``_find_free_block``, the
  allocator's block finder hook), not the best fit, so a missing record_stream turns into a
  reuse at the very next allocation.
- On sim, checks every access (Note [Reuse races]): the sim driver tells the sanitizer of
  each queued kernel or copy and the memory it touches, and of each event record, stream
  wait and host synchronization. A kernel that touches a block after it was freed and
  handed to another owner, while a use of the old owner on another stream is not ordered
  before it, is reported as a ``StreamRace`` (a ``StreamRaceWarning`` at the access, and
  ``stream_races(device)``) with the stream of that use and the stacks of the old owner's
  allocation, of its free, of the use, of the new owner's allocation (the reuse) and of the
  conflicting access. A kernel queued on freed memory that is not handed out again is a
  use after free, reported the same way.

The sanitizer is off by default and costs nothing then: it hangs on the allocator's hooks
(the event recorder, whose branches history already has, the block finder and the drop
hook) and on the sim driver's observers.

Note [Reuse races]
Happens-before, with vector clocks, as a GPU orders work: each stream counts the work
queued on it; an event record copies its stream's clock; a stream wait merges the event's
clock into the waiting stream's; the host learns a clock when it sees an event complete
(query, synchronize) or synchronizes a stream or the device (cudaFree does), and work
queued after that is ordered after what the host learned. Each allocation is an owner; it
keeps, per stream, the clock value of its last access there. When a block is handed out,
the new owner notes the old owners of that memory whose accesses the host has not seen
complete. An access of the new owner on stream S races with an old owner's access on
stream B at count q when S's clock holds less than q for B: nothing orders B's use before
S's. record_stream orders it through the host (the block is reused only once the host saw
B's event complete); record_use through a stream wait at the hand-out. Deterministic:
it depends on what the program queued and synchronized, not on when the sim ran it.
"""

from __future__ import annotations

import bisect
import os
import sys
import threading
import warnings
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._history import attach, detach, frames_to_dicts
from ._pool import FREE
from ._registry import allocator_created_hooks, allocator_for

if TYPE_CHECKING:
    from ._caching import DeviceCachingAllocator
    from ._pool import Block, Pool

__all__ = [
    "POISON",
    "StreamRace",
    "StreamRaceWarning",
    "StreamSanitizer",
    "stream_races",
    "sync_sanitizer",
    "sanitizer_of",
]

POISON = 0xFF  # the byte freed blocks are filled with: NaN in float16/bfloat16/float32/64
_RECENT = 64  # freed blocks remembered per pool and stream for early reuse
_RETIRED = 4096  # freed owners kept for race checks, at most
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # vram's own


class StreamRaceWarning(RuntimeWarning):
    """A kernel touched memory that another stream's unsynchronized work may still use."""


@dataclass
class StreamRace:
    """One race the sanitizer saw (see the module docstring)."""

    kind: str  # "reuse": the block was handed to a new owner; "use after free": it was not
    device: str
    address: int  # the old owner's block
    size: int
    stream: int  # the stream whose use of the old owner nothing orders before the access
    access_stream: int  # the stream of the conflicting access
    alloc_frames: list[dict] = field(default_factory=list)  # the old owner's allocation
    free_frames: list[dict] = field(default_factory=list)  # its free
    use_frames: list[dict] = field(default_factory=list)  # its unordered use on ``stream``
    reuse_frames: list[dict] = field(default_factory=list)  # the new owner's allocation
    access_frames: list[dict] = field(default_factory=list)  # the conflicting access

    def __str__(self) -> str:
        if self.kind == "reuse":
            head = (
                f"stream race on {self.device}: the block of {self.size} bytes at "
                f"{self.address:#x} was freed and handed to a new owner while stream "
                f"{self.stream:#x} may still use it (no record_stream or record_use "
                f"covers that use); the new owner touches it on stream "
                f"{self.access_stream:#x}"
            )
        else:
            head = (
                f"use after free on {self.device}: stream {self.access_stream:#x} touches "
                f"the block of {self.size} bytes at {self.address:#x} after it was freed"
            )
        parts = [head]
        for title, frames in (
            (f"the use on stream {self.stream:#x}", self.use_frames),
            ("allocated", self.alloc_frames),
            ("freed", self.free_frames),
            ("reused (the new owner's allocation)", self.reuse_frames),
            (f"the access on stream {self.access_stream:#x}", self.access_frames),
        ):
            if title.startswith("reused") and self.kind != "reuse":
                continue
            parts.append(f"  {title}:")
            parts += [
                f"    {f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})"
                for f in frames[:6]
            ] or ["    (no frames)"]
        return "\n".join(parts)


def _frames() -> tuple:
    """The caller's Python stack outside the vram package (the program's own frames),
    innermost first, as (code, instruction offset) pairs, as history keeps them (turned
    into dicts, with their lines, only for a report)."""
    frame = sys._getframe(1)
    out = []
    while frame is not None:
        code = frame.f_code
        if not code.co_filename.startswith(_PACKAGE):
            out.append((code, frame.f_lasti))
        frame = frame.f_back
    return tuple(out)


class _Owner:
    """One allocation, from its alloc to its free, and the accesses made to it."""

    __slots__ = ("ptr", "size", "stream", "block", "alloc", "free", "uses", "before", "told")

    def __init__(self, ptr: int, size: int, stream: int, block: Block, alloc: tuple) -> None:
        self.ptr = ptr
        self.size = size
        self.stream = stream
        self.block = block
        self.alloc = alloc  # frames of the allocation
        self.free: tuple = ()  # frames of the free
        self.uses: dict[int, tuple[int, tuple]] = {}  # stream -> (count, frames): last access
        self.before: list[_Owner] = []  # old owners of this memory, not yet seen complete
        self.told: set[int] = set()  # id() of old owners already reported against this one

    def overlaps(self, start: int, end: int) -> bool:
        return self.ptr < end and start < self.ptr + self.size


class StreamSanitizer:
    """The sanitizer of one device allocator (state guarded by its own lock)."""

    def __init__(self, allocator: DeviceCachingAllocator) -> None:
        self.allocator = allocator
        self.driver = allocator.driver
        self.races: list[StreamRace] = []
        self._lock = threading.RLock()
        self._clocks: dict[int, dict[int, int]] = {}  # stream -> its vector clock
        self._events: dict[int, dict[int, int]] = {}  # event -> the clock it recorded
        self._host: dict[int, int] = {}  # what the host has seen complete
        self._live: dict[int, _Owner] = {}  # ptr -> live owner
        self._starts: list[int] = []  # sorted ptrs of live owners
        self._freeing: dict[int, _Owner] = {}  # ptr -> owner freed, block not free yet
        self._retired: list[_Owner] = []  # freed owners whose accesses may still race
        self._recent: dict[tuple[int, int], list[Block]] = {}  # (id(pool), stream) -> blocks
        self._told: set[tuple[int, int]] = set()  # (id(old owner), stream) used after free
        self._dropped: dict[int, tuple] = {}  # ptr -> frames where a finalizer dropped it
        self._observer = _Observer(self)

    # ---- attach / detach ---------------------------------------------------------------
    def attach(self) -> None:
        """Hang on the allocator's hooks (call under its lock) and on the sim driver's
        observers."""
        allocator = self.allocator
        attach(allocator).watchers.append(self)
        allocator.set_block_finder(self._find_free_block)  # early reuse (see doc)
        allocator.set_drop_hook(self._note_drop)  # the stack where a tensor was dropped
        watch = getattr(self.driver, "watch", None)
        if watch is not None:
            watch(self._observer)

    def detach(self) -> None:
        """Come off the allocator's hooks (call under its lock) and the driver's."""
        allocator = self.allocator
        recorder = allocator.recorder
        if recorder is not None and self in getattr(recorder, "watchers", ()):
            recorder.watchers.remove(self)
            detach(allocator)
        allocator.set_block_finder(None)
        allocator.set_drop_hook(None)
        unwatch = getattr(self.driver, "unwatch", None)
        if unwatch is not None:
            unwatch(self._observer)

    def _note_drop(self, ptr: int) -> None:
        """A finalizer dropped ``ptr`` (the allocator's drop hook): note where, since the
        free itself runs at the allocator's next call, whose stack is not the program's."""
        self._dropped[ptr] = _frames()  # (a dict store: safe from a finalizer)

    # ---- the allocator's events (under the allocator's lock) ---------------------------
    def record(
        self, allocator: Any, action: str, addr: int, size: int, stream: int, context: Any = None
    ) -> None:
        if action == "alloc":
            self._allocated(addr, stream)
        elif action == "free_requested":
            self._freed(addr)
        elif action == "free_completed":
            self._completed(addr)

    def _allocated(self, ptr: int, stream: int) -> None:
        block = self.allocator._allocated.get(ptr)
        if block is None:
            return
        owner = _Owner(ptr, block.size, stream, block, _frames())
        with self._lock:
            end = ptr + block.size
            owner.before = [
                old for old in self._retired if old.overlaps(ptr, end) and self._unseen(old)
            ]
            self._live[ptr] = owner
            bisect.insort(self._starts, ptr)

    def _freed(self, ptr: int) -> None:
        with self._lock:
            owner = self._live.pop(ptr, None)
            if owner is None:
                return
            del self._starts[bisect.bisect_left(self._starts, ptr)]
            owner.free = self._dropped.pop(ptr, None) or _frames()
            owner.before = []
            self._freeing[ptr] = owner
            self._retired.append(owner)
            if len(self._retired) > _RETIRED:
                self._prune()

    def _completed(self, ptr: int) -> None:
        """The block is free now (before it merges): poison it, note it for early reuse."""
        with self._lock:
            owner = self._freeing.pop(ptr, None)
        if owner is None or self.allocator.no_caching:
            return
        block = owner.block
        if block.ptr != ptr:
            return
        self._poison(block)
        key = (id(block.segment.pool), block.segment.stream)
        recent = self._recent.setdefault(key, [])
        recent.append(block)
        if len(recent) > _RECENT:
            del recent[0]

    def _poison(self, block: Block) -> None:
        """Fill ``block`` with POISON on its stream, after its record_use events."""
        allocator = self.allocator
        if allocator.lifetimes.captures:
            return  # (a memset now would be captured into the graph)
        stream = block.segment.stream
        driver = self.driver
        for event in block.use_events or ():
            if event.stream != stream:
                driver.stream_wait_event(stream, event.handle)
        _poisoning.on = True
        try:
            driver.memset_d8(block.ptr, POISON, block.size, stream)
        finally:
            _poisoning.on = False
        if allocator.config.cross_stream_reuse:
            allocator.lifetimes.note_use(block, stream)  # another stream's taker waits for it

    # ---- early reuse -------------------------------------------------------------------
    def _find_free_block(self, pool: Pool, size: int, stream: int) -> Block | None:
        """The most recently freed block of ``stream`` in ``pool`` that fits (with the
        oversize rules), or None: the allocator's own best fit (its block finder hook)."""
        recent = self._recent.get((id(pool), stream))
        if recent:
            config = self.allocator.config
            max_split, rounding = config.max_split_size, config.max_non_split_rounding_size
            found = pool.index.get(stream)
            for i in range(len(recent) - 1, -1, -1):
                block = recent[i]
                if block.state != FREE or found is None or found.blocks.get(block.ptr) is not block:
                    del recent[i]  # merged into a neighbour, taken, or released
                    continue
                if block.size < size or block.segment.source.expandable:
                    continue
                if size < max_split <= block.size or (
                    size >= max_split and block.size >= size + rounding
                ):
                    continue
                return block
        return None

    # ---- the sim driver's view (under the driver's lock) --------------------------------
    def observe(self, kind: str, stream: int | None, what: Any) -> None:
        with self._lock:
            if kind == "queue":
                if not getattr(_poisoning, "on", False):
                    self._access(stream, what)  # type: ignore[arg-type]
            elif kind == "record":
                self._events[what] = dict(self._clock(stream))  # type: ignore[index]
            elif kind == "wait":
                _merge(self._clock(stream), self._events.get(what, {}))  # type: ignore[arg-type]
            elif kind == "host_event":
                _merge(self._host, self._events.get(what, {}))  # type: ignore[arg-type]
            elif kind == "host_stream":
                _merge(self._host, self._clocks.get(stream, {}))  # type: ignore[arg-type]
            elif kind == "host_device":
                for handle, clock in self._clocks.items():
                    if self.driver.stream_device(handle) == stream:
                        _merge(self._host, clock)

    def _clock(self, stream: int) -> dict[int, int]:
        """``stream``'s clock, which knows everything the host knows (work queued after the
        host saw something complete is ordered after it)."""
        clock = self._clocks.get(stream)
        if clock is None:
            clock = self._clocks[stream] = {}
        _merge(clock, self._host)
        return clock

    def _access(self, stream: int, touches: Any) -> None:
        clock = self._clock(stream)
        count = clock[stream] = clock.get(stream, 0) + 1
        frames = None
        for start, nbytes in touches:
            if nbytes <= 0:
                continue
            end = start + nbytes
            owners = self._owners(start, end)
            if frames is None:
                frames = _frames()
            if not owners:
                self._after_free(stream, start, end, count, frames)
                continue
            for owner in owners:
                self._check(owner, stream, clock, frames)
                owner.uses[stream] = (count, frames)

    def _owners(self, start: int, end: int) -> list[_Owner]:
        starts = self._starts
        i = bisect.bisect_right(starts, start) - 1
        found = []
        if i >= 0 and self._live[starts[i]].overlaps(start, end):
            found.append(self._live[starts[i]])
        i += 1
        while i < len(starts) and starts[i] < end:
            found.append(self._live[starts[i]])
            i += 1
        return found

    def _check(self, owner: _Owner, stream: int, clock: dict[int, int], frames: tuple) -> None:
        """Report the old owners' accesses that nothing orders before this one."""
        for old in owner.before:
            if id(old) in owner.told:
                continue
            for used_on, (count, use_frames) in old.uses.items():
                if used_on != stream and clock.get(used_on, 0) < count:
                    owner.told.add(id(old))
                    self._report("reuse", old, used_on, stream, use_frames, owner.alloc, frames)
                    break

    def _after_free(self, stream: int, start: int, end: int, count: int, frames: tuple) -> None:
        """An access to memory no live owner holds: a use after free if a freed owner had
        it (noted as that owner's use, so that its next owner is checked against it)."""
        for old in reversed(self._retired):
            if old.overlaps(start, end):
                if (id(old), stream) not in self._told:
                    self._told.add((id(old), stream))
                    self._report("use after free", old, stream, stream, frames, (), frames)
                old.uses[stream] = (count, frames)
                return

    def _report(
        self,
        kind: str,
        old: _Owner,
        used_on: int,
        stream: int,
        use_frames: tuple,
        reuse_frames: tuple,
        access_frames: tuple,
    ) -> None:
        race = StreamRace(
            kind=kind,
            device=str(self.allocator.device),
            address=old.ptr,
            size=old.size,
            stream=self._shown(used_on),
            access_stream=self._shown(stream),
            alloc_frames=frames_to_dicts(old.alloc),
            free_frames=frames_to_dicts(old.free),
            use_frames=frames_to_dicts(use_frames),
            reuse_frames=frames_to_dicts(reuse_frames),
            access_frames=frames_to_dicts(access_frames),
        )
        self.races.append(race)
        where = race.access_frames[0] if race.access_frames else {}
        warnings.warn_explicit(
            StreamRaceWarning(str(race)),
            StreamRaceWarning,
            where.get("filename", "<vram>"),
            where.get("line", 0),
        )

    def _shown(self, stream: int) -> int:
        """A stream as snapshots show it: the device's default stream as PyTorch's 0."""
        default = self.driver.default_stream(self.allocator.index)
        return 0 if stream == default else stream

    # ---- forgetting what cannot race any more ------------------------------------------
    def _unseen(self, owner: _Owner) -> bool:
        """True while some access of ``owner`` has not been seen complete by the host."""
        host = self._host
        return any(host.get(stream, 0) < count for stream, (count, _) in owner.uses.items())

    def _prune(self) -> None:
        kept = [owner for owner in self._retired if self._unseen(owner)]
        self._retired = kept[-_RETIRED // 2 :]


class _Observer:
    """The sim driver's observer: a weak reference, so that a sanitizer whose allocator is
    gone does not stay alive (it takes itself off the driver at its next call)."""

    __slots__ = ("sanitizer", "_unwatch", "__weakref__")

    def __init__(self, sanitizer: StreamSanitizer) -> None:
        self.sanitizer = weakref.ref(sanitizer)
        self._unwatch = getattr(sanitizer.driver, "unwatch", None)

    def __call__(self, kind: str, stream: int | None, what: Any) -> None:
        from ._registry import _allocators

        found = self.sanitizer()
        if found is None or _allocators.get(found.allocator.device) is not found.allocator:
            found = None  # its allocator is gone (or replaced): nothing to watch any more
            unwatch = getattr(self, "_unwatch", None)
            if unwatch is not None:
                unwatch(self)
            return
        found.observe(kind, stream, what)


_poisoning = threading.local()  # .on: this thread queues a sanitizer's poison (no access)


def _merge(into: dict[int, int], other: dict[int, int]) -> None:
    for stream, count in other.items():
        if into.get(stream, 0) < count:
            into[stream] = count


# ================================================================= one per allocator
_sanitizers: weakref.WeakKeyDictionary[Any, StreamSanitizer] = weakref.WeakKeyDictionary()


def sanitizer_of(allocator: Any) -> StreamSanitizer | None:
    """The stream sanitizer attached to ``allocator``, or None."""
    return _sanitizers.get(allocator)


def sync_sanitizer(allocator: Any) -> None:
    """Attach a sanitizer to ``allocator`` if its settings ask for one, and detach it if
    they no longer do. Called when an allocator is made (``allocator_created_hooks``) and
    when the settings change."""
    if not hasattr(allocator, "set_block_finder") or getattr(allocator, "no_caching", False):
        return
    wanted = bool(getattr(allocator.config, "stream_sanitizer", False))
    with allocator.locked():
        found = _sanitizers.get(allocator)
        if wanted and found is None:
            _sanitizers[allocator] = sanitizer = StreamSanitizer(allocator)
            sanitizer.attach()
        elif not wanted and found is not None:
            found.detach()
            del _sanitizers[allocator]


def stream_races(device: object = None) -> list[StreamRace]:
    """The races the stream sanitizer of ``device``'s allocator has reported so far (an
    empty list when ``stream_sanitizer:True`` is not set)."""
    found = _sanitizers.get(allocator_for(device))
    return [] if found is None else list(found.races)


if sync_sanitizer not in allocator_created_hooks:
    allocator_created_hooks.append(sync_sanitizer)
