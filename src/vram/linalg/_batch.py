"""Running one library call per matrix of a batch: on the current stream, or side by side.

``run_batch(stream, count, streams, workspace, call)``:
- with one stream, ``call(stream, ws, i)`` for every i on ``stream``, all with the ONE
  workspace ``ws = workspace(stream)`` taken before the loop (the fix of pytorch#181997:
  PyTorch took a workspace per matrix);
- with more, the calls go round robin over that many side streams of vram.linalg's own (so
  none is a stream the program uses): each side stream first waits for an event recorded
  on ``stream`` (everything queued so far, the inputs included), takes its own workspace,
  runs its share, and records an event that ``stream`` then waits for. Work queued on
  ``stream`` afterwards (and any reuse of memory freed on it) comes after every call.
  Nothing synchronizes the host.

``ahead_streams`` and ``ahead_events``: each thread's two streams and five events for the
blocked LU's look-ahead (``_blocked.factor``, ``_lu``).

Side streams are created once per device and kept (as PyTorch's pool streams are); the
events are per thread, so two threads spreading batches at once do not share them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .._device import Device
from .._streams import Event, Stream

__all__ = ["run_batch", "side_streams", "ahead_streams", "ahead_events", "MAX_SIDE_STREAMS"]

MAX_SIDE_STREAMS = 32  # side streams per device, at most

_lock = threading.Lock()  # guards _side
_side: dict[Device, list[Stream]] = {}


def side_streams(device: Device, count: int) -> list[Stream]:
    """The first ``count`` side streams of ``device`` (made on first use, then kept)."""
    count = min(count, MAX_SIDE_STREAMS)
    found = _side.get(device)
    if found is None or len(found) < count:
        with _lock:
            found = _side.setdefault(device, [])
            driver = device.driver
            while len(found) < count:
                handle = driver.stream_create(device.index)  # type: ignore[arg-type]
                found.append(Stream._wrap(device, handle))
    return found[:count]


class _Events(threading.local):
    def __init__(self) -> None:
        self.by_device: dict[Device, tuple[Event, list[Event]]] = {}
        self.ahead: dict[Device, tuple[Event, ...]] = {}
        self.ahead_streams: dict[Device, tuple[Stream, Stream]] = {}


_events = _Events()


def _thread_events(device: Device, count: int) -> tuple[Event, list[Event]]:
    found = _events.by_device.get(device)
    if found is None or len(found[1]) < count:
        ready = found[0] if found is not None else Event()
        done = list(found[1]) if found is not None else []
        done += [Event() for _ in range(count - len(done))]
        found = (ready, done)
        _events.by_device[device] = found
    return found


def ahead_streams(device: Device) -> tuple[Stream, Stream]:
    """This thread's two streams of ``device`` for the blocked LU's look-ahead (made on first
    use, then kept): the panels', of the device's greatest priority, so that their blocks
    go before the GEMM's that wait with them, and the side stream, of the lowest. A
    thread's own: a graph captured on them by one thread must take in no other's work."""
    found = _events.ahead_streams.get(device)
    if found is None:
        driver = device.driver
        least, greatest = driver.stream_priority_range(device.index)  # type: ignore[arg-type]
        made = []
        for priority in (greatest, least):
            handle = driver.stream_create(device.index, priority)  # type: ignore[arg-type]
            made.append(Stream._wrap(device, handle, priority))
        found = _events.ahead_streams[device] = (made[0], made[1])
    return found


def ahead_events(device: Device) -> tuple[Event, ...]:
    """This thread's five events for the look-ahead of one LU on ``device``: the call's
    stream to the panels' and back, and ``_blocked.Ahead``'s three (reused by each call:
    every wait on one is queued before it is recorded again)."""
    found = _events.ahead.get(device)
    if found is None:
        found = _events.ahead[device] = tuple(Event() for _ in range(5))
    return found


def run_batch(
    stream: Stream,
    count: int,
    streams: int,
    workspace: Callable[[Stream], Any],
    call: Callable[[Stream, Any, int], None],
) -> None:
    """Run ``call(s, workspace(s), i)`` for i in range(count), on ``stream`` or spread over
    ``streams`` side streams joined to it (see the module docstring)."""
    if count <= 0:
        return
    streams = min(streams, count, MAX_SIDE_STREAMS)
    if streams <= 1:
        ws = workspace(stream)
        for i in range(count):
            call(stream, ws, i)
        return
    sides = side_streams(stream.device, streams)
    ready, done = _thread_events(stream.device, streams)
    ready.record(stream)
    spaces = []
    for side in sides:
        side.wait_event(ready)
        spaces.append(workspace(side))
    for i in range(count):
        k = i % streams
        call(sides[k], spaces[k], i)
    for side, event in zip(sides, done, strict=False):
        event.record(side)
        stream.wait_event(event)
