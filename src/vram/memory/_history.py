"""What hangs on an allocator's ``recorder``: the allocation history and the call counters.

An allocator calls ``recorder.record(allocator, action, addr, size, stream, context)`` for
each event (``context``: the frames of a segment_free's segment) while its event hook is
set (``allocator.set_recorder``; DeviceCachingAllocator._trace). The recorder here is a small
fan-out: the allocator's History (while _record_memory_history is on), any number of
counters (count_device_calls) and watchers (the stream sanitizer) hang on it. With none,
``allocator.recorder`` goes back to None and the allocator's hot path pays nothing.

History keeps PyTorch's meanings:
- ``enabled``: "state" keeps stack frames of live allocations and segments only; "all" also
  keeps the trace of events, in a ring of ``max_entries``.
- ``context``: None records no frames; "state" frames of live allocations and segments;
  "alloc" also on alloc events of the trace; "all" also on free events (the stack at the
  free). Without "all", free and segment_free events carry the frames of the allocation.
- Frames are Python frames, innermost first, as PyTorch's ``{filename, line, name}`` dicts;
  frames inside ``vram.memory`` (the allocator and this recorder) are left out. They are kept
  as (code, line) pairs and turned into dicts only when a snapshot is taken.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["Recorder", "History", "HistorySettings", "attach", "detach", "frames_to_dicts"]

_MEMORY_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep  # frames here are skipped


@dataclass(frozen=True, slots=True)
class HistorySettings:
    """What _record_memory_history asked for."""

    trace: bool  # enabled == "all": keep the event trace, not only live frames
    context: str | None  # None, "state", "alloc" or "all"
    stacks: str  # "python" or "all" (vram has only Python frames)
    max_entries: int  # bound of the trace ring


Frames = tuple  # ((code, instruction offset), ...), innermost first
_CAPTURED = frozenset(("alloc", "segment_alloc", "segment_map", "oom"))  # stack taken at the event
_now_ns = time.time_ns


def capture_frames() -> Frames:
    """The caller's Python stack, innermost first, without the allocator's own frames (the
    innermost ones in vram.memory). Each frame is kept as (code, instruction offset): the
    line number is worked out only when a snapshot asks (``frames_to_dicts``), which makes
    a capture about twice as fast as reading ``f_lineno`` of every frame."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_MEMORY_DIR):
        frame = frame.f_back
    out = []
    append = out.append
    while frame is not None:
        append((frame.f_code, frame.f_lasti))
        frame = frame.f_back
    return tuple(out)


@lru_cache(maxsize=1 << 16)
def _line(code: Any, offset: int) -> int:
    """The source line of the instruction at ``offset`` of ``code`` (its first line if the
    offset is before the first instruction or has no line)."""
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line if line is not None else code.co_firstlineno
    return code.co_firstlineno


def frames_to_dicts(frames: Any, cache: dict | None = None) -> list[dict]:
    """Captured frames as PyTorch's list of {filename, line, name} dicts ([] for none).
    ``cache`` (a dict) shares one list between the equal stacks of many events."""
    if not frames:
        return []
    if cache is not None:
        found = cache.get(frames)
        if found is not None:
            return found
    out = [
        {"filename": c.co_filename, "line": _line(c, offset), "name": c.co_name}
        for c, offset in frames
    ]
    if cache is not None:
        cache[frames] = out
    return out


class History:
    """One allocator's history: the event ring, and the frames of its live allocations."""

    __slots__ = ("settings", "entries", "_live", "_last", "_mode", "_append")

    def __init__(self, settings: HistorySettings, old: History | None = None) -> None:
        self.settings = settings
        kept = old.entries if old is not None else ()
        self.entries: deque = deque(kept, maxlen=settings.max_entries)
        self._live: dict[int, Frames] = dict(old._live) if old is not None else {}
        self._last: tuple = ("", 0, None)  # (action, addr, frames) of the previous event
        self._mode = settings.context  # (read on every event: one attribute, not two)
        self._append = self.entries.append if settings.trace else None

    def record(
        self, allocator: Any, action: str, addr: int, size: int, stream: int, context: Any = None
    ) -> Any:
        """Note one event; returns the frames the allocator keeps (alloc, segment_alloc)."""
        mode = self._mode
        if mode is None:  # the trace alone: what recording all the time costs
            append = self._append
            if append is not None:
                append((action, addr, size, stream, _now_ns() // 1000, None))
            return None
        state = kept = None
        if action in _CAPTURED:
            state = capture_frames()
            kept = state if mode != "state" else None
            if action == "alloc":
                self._live[addr] = state
        elif mode == "all":
            last = self._last
            if action == "free_completed" and last[0] == "free_requested" and last[1] == addr:
                kept = last[2]  # the same free() call: one stack, as PyTorch takes
            else:
                kept = capture_frames()
        elif action == "free_requested" or action == "free_completed":
            kept = self._live.get(addr)
        elif action == "segment_free":
            kept = context  # the frames of the segment's allocation
        if action == "free_completed":
            self._live.pop(addr, None)
        if mode == "all":
            self._last = (action, addr, kept)
        append = self._append
        if append is not None:
            append((action, addr, size, stream, _now_ns() // 1000, kept))
        return state

    def trace(self, default_stream: int = 0) -> list[dict]:
        """The ring as PyTorch's device trace entries, oldest first; the device's default
        stream (``default_stream``, its driver handle) is written as PyTorch's 0."""
        cache: dict = {}  # equal stacks share one list (and pickle once)
        return [
            {
                "action": action,
                "addr": addr,
                "frames": frames_to_dicts(frames, cache),
                "size": size,
                "stream": 0 if stream == default_stream else stream,
                "time_us": time_us,
                "compile_context": "N/A",
                "user_metadata": "",
            }
            for action, addr, size, stream, time_us, frames in list(self.entries)
        ]


class Recorder:
    """The fan-out an allocator's ``recorder`` points to (guarded by the allocator's lock)."""

    __slots__ = ("history", "counters", "watchers")

    def __init__(self) -> None:
        self.history: History | None = None
        self.counters: list[dict[str, int]] = []  # one dict action -> count per counter
        self.watchers: list[Any] = []  # objects with record(...) too (the stream sanitizer)

    def record(
        self, allocator: Any, action: str, addr: int, size: int, stream: int, context: Any = None
    ) -> Any:
        for counts in self.counters:
            counts[action] = counts.get(action, 0) + 1
        for watcher in self.watchers:
            watcher.record(allocator, action, addr, size, stream, context)
        history = self.history
        if history is None:
            return None
        return history.record(allocator, action, addr, size, stream, context)

    def idle(self) -> bool:
        return self.history is None and not self.counters and not self.watchers


def attach(allocator: Any) -> Recorder:
    """The allocator's Recorder, installed (its event hook) if it has none. Call under the
    allocator's lock."""
    recorder = allocator.recorder
    if not isinstance(recorder, Recorder):
        recorder = Recorder()
        allocator.set_recorder(recorder)
    return recorder


def detach(allocator: Any) -> None:
    """Take the recorder off when nothing hangs on it. Call under the allocator's lock."""
    recorder = allocator.recorder
    if isinstance(recorder, Recorder) and recorder.idle():
        allocator.set_recorder(None)
