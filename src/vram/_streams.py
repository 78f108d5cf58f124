"""Streams and events with PyTorch's names and meanings.

The current stream is per thread and per device; until set it is the device's default
stream.

Streams are pooled as PyTorch pools them: ``Stream()`` takes the next of 32 streams of its
priority level on its device, round robin, created on first use and never destroyed. So a
loop that makes streams makes no new ones after the first 32, and a handle never comes back
as another stream while the caching allocator's blocks remember it. Streams made by other
libraries are adopted with ``ExternalStream``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ._device import Device, as_device, current_device_obj, set_device
from ._device import _state as _device_state  # (read by current_place, without a frame)

__all__ = [
    "Stream",
    "ExternalStream",
    "Event",
    "current_stream",
    "current_handle",
    "this_thread",
    "default_stream",
    "set_stream",
    "stream",
    "as_stream",
]


_POOL_SIZE = 32  # streams per priority level and device (PyTorch's kStreamsPerPool)
_MAX_LEVELS = 4  # priority levels pooled (PyTorch's max_compile_time_stream_priorities)


class _StreamPool:
    """The pooled streams of one device: level k holds streams of priority -k."""

    def __init__(self, device: Device) -> None:
        least, greatest = device.driver.stream_priority_range(device.index)  # type: ignore[arg-type]
        self.device = device
        self.levels = max(1, min(least - greatest + 1, _MAX_LEVELS))
        self.handles: list[list[int | None]] = [[None] * _POOL_SIZE for _ in range(self.levels)]
        self.counters = [itertools.count() for _ in range(self.levels)]  # next() is atomic
        self.lock = threading.Lock()

    def level(self, priority: int) -> int:
        """PyTorch's mapping: 0 and above -> level 0; -k -> level k, clamped to the range."""
        return min(max(-priority, 0), self.levels - 1)

    def next(self, level: int) -> int:
        """The next stream of ``level``, round robin (created on its first use)."""
        i = next(self.counters[level]) % _POOL_SIZE
        handle = self.handles[level][i]
        if handle is None:
            with self.lock:
                handle = self.handles[level][i]
                if handle is None:
                    driver, index = self.device.driver, self.device.index
                    handle = driver.stream_create(index, -level)  # type: ignore[arg-type]
                    self.handles[level][i] = handle
        return handle


_pools: dict[Device, _StreamPool] = {}
_pools_lock = threading.Lock()


def _pool(device: Device) -> _StreamPool:
    found = _pools.get(device)
    if found is None:
        with _pools_lock:
            found = _pools.get(device) or _pools.setdefault(device, _StreamPool(device))
    return found


class Stream:
    """A queue of device work (PyTorch's torch.cuda.Stream), from the device's stream pool.

    ``cuda_stream`` is the driver handle. Two Stream objects for the same handle are equal:
    as in PyTorch, the 33rd ``Stream()`` of one priority on one device is the first again.
    ``priority``: 0 (the default, lowest) or negative for higher priority; values beyond
    the device's range are clamped to it.
    """

    __slots__ = ("device", "priority", "cuda_stream", "__weakref__")

    def __init__(self, device: object = None, priority: int = 0) -> None:
        found = as_device(device)
        if found.type == "cpu":
            raise ValueError("device: streams live on cuda or sim devices, not cpu")
        if type(priority) is not int:
            raise TypeError(f"priority must be an int, got {priority!r}")
        pool = _pool(found)
        level = pool.level(priority)
        self.device = found
        self.priority = -level
        self.cuda_stream = pool.next(level)

    @classmethod
    def _wrap(cls, device: Device, handle: int, priority: int = 0) -> Stream:
        s = cls.__new__(cls)
        s.device = device
        s.priority = priority
        s.cuda_stream = handle
        return s

    def query(self) -> bool:
        """True when all work queued on the stream has completed."""
        return self.device.driver.stream_query(self.cuda_stream)

    def synchronize(self) -> None:
        """Wait until all work queued on the stream has completed. Synchronizes."""
        self.device.driver.stream_synchronize(self.cuda_stream)

    def wait_event(self, event: Event) -> None:
        """Work queued on this stream from now on waits for ``event`` (no host wait)."""
        if not isinstance(event, Event):
            raise TypeError(f"event must be a vram.Event, got {type(event).__name__}")
        event.wait(self)

    def wait_stream(self, stream: Stream) -> None:
        """Work queued from now on waits for all work queued on ``stream`` so far."""
        stream = as_stream(stream, "stream")
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) on this stream and return it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Stream)
            and other.cuda_stream == self.cuda_stream
            and other.device == self.device
        )

    def __hash__(self) -> int:
        return hash((self.device, self.cuda_stream))

    def __repr__(self) -> str:
        return f"<vram.Stream device={self.device} cuda_stream={self.cuda_stream:#x}>"

    def __enter__(self) -> Stream:
        _stream_stack().append((current_device_obj(), current_stream(self.device)))
        set_device(self.device)
        set_stream(self)
        return self

    def __exit__(self, *exc: object) -> None:
        device, previous = _stream_stack().pop()
        set_stream(previous)
        set_device(device)


class ExternalStream(Stream):
    """A stream made by another library (PyTorch's torch.cuda.ExternalStream): vram queues
    work and records events on it, and never creates or destroys it. The caller keeps the
    stream alive while vram uses it.

    ``stream_ptr`` is the CUstream handle (an int); ``device`` the device it belongs to
    (the current device if None). ValueError if the driver cannot adopt it.
    """

    __slots__ = ()

    def __init__(self, stream_ptr: int, device: object = None) -> None:
        found = as_device(device)
        if found.type == "cpu":
            raise ValueError("device: streams live on cuda or sim devices, not cpu")
        if type(stream_ptr) is not int or isinstance(stream_ptr, bool):
            raise TypeError(f"stream_ptr: expected an int handle, got {stream_ptr!r}")
        found.driver.register_stream(stream_ptr, found.index)  # type: ignore[arg-type]
        self.device = found
        self.priority = 0
        self.cuda_stream = stream_ptr


class Event:
    """A marker in a stream (PyTorch's torch.cuda.Event); created on its first record."""

    __slots__ = ("enable_timing", "blocking", "_device", "_handle", "_recorded", "__weakref__")

    def __init__(self, enable_timing: bool = False, blocking: bool = False) -> None:
        self.enable_timing = bool(enable_timing)
        self.blocking = bool(blocking)
        self._device: Device | None = None
        self._handle: int | None = None
        self._recorded = False

    @property
    def device(self) -> Device | None:
        return self._device

    @property
    def cuda_event(self) -> int | None:
        return self._handle

    def record(self, stream: Stream | None = None) -> None:
        """Record the event on ``stream`` (the current stream if None)."""
        stream = current_stream() if stream is None else as_stream(stream, "stream")
        if self._handle is None:
            self._device = stream.device
            self._handle = stream.device.driver.event_create(
                stream.device.index,  # type: ignore[arg-type]
                self.enable_timing,
            )
        elif stream.device != self._device:
            raise ValueError(
                f"stream: the event was created on {self._device}; "
                f"it cannot be recorded on a stream of {stream.device}"
            )
        self._device.driver.event_record(self._handle, stream.cuda_stream)  # type: ignore[union-attr]
        self._recorded = True

    def query(self) -> bool:
        """True when the work before the last record has completed (or never recorded)."""
        if self._handle is None:
            return True
        return self._device.driver.event_query(self._handle)  # type: ignore[union-attr]

    def synchronize(self) -> None:
        """Wait for the last record to complete (returns at once if never recorded)."""
        if self._handle is not None:
            self._device.driver.event_synchronize(self._handle)  # type: ignore[union-attr]

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` (current if None) wait for the last record; no-op if unrecorded.
        The stream may be another device's of the same kind (as cudaStreamWaitEvent)."""
        stream = current_stream() if stream is None else as_stream(stream, "stream")
        if self._handle is None:
            return
        if stream.device.type != self._device.type:  # type: ignore[union-attr]
            raise ValueError(
                f"stream: a stream of {stream.device} cannot wait on an event of {self._device}"
            )
        driver = stream.device.driver
        if stream.device == self._device:
            driver.stream_wait_event(stream.cuda_stream, self._handle)
        else:
            with stream.device:  # a default stream's handle means its own device's
                driver.stream_wait_event(stream.cuda_stream, self._handle)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event's record and ``end_event``'s."""
        if not isinstance(end_event, Event):
            raise TypeError(f"end_event must be a vram.Event, got {type(end_event).__name__}")
        for name, ev in (("self", self), ("end_event", end_event)):
            if not ev.enable_timing:
                raise RuntimeError(f"{name}: event was created without enable_timing=True")
            if not ev._recorded:
                raise RuntimeError(f"{name}: event was never recorded")
        if self._device != end_event._device:
            raise ValueError("end_event: events are on different devices")
        return self._device.driver.event_elapsed_ms(self._handle, end_event._handle)  # type: ignore[union-attr,arg-type]

    def __repr__(self) -> str:
        state = "unrecorded" if not self._recorded else f"on {self._device}"
        return f"<vram.Event {state}>"

    def __del__(self) -> None:
        handle, device = self._handle, self._device
        if handle is not None and device is not None:
            try:
                device.driver.event_destroy(handle)
            except Exception:  # finalizers never raise
                pass


class _Handles(dict):
    """Device -> the handle of this thread's current stream there: ``current_handle``'s
    answer, asked once per device and kept (Note [The current handle, kept]); 0 for the cpu
    device, which has no streams (its launchers run at once)."""

    __slots__ = ()

    def __missing__(self, device: Device) -> int:
        handle = 0 if device.type == "cpu" else current_handle(device)
        self[device] = handle
        return handle


class _Local(threading.local):
    def __init__(self) -> None:
        self.current: dict[Device, Stream] = {}
        self.stack: list[tuple[Device, Stream]] = []
        self.handles = _Handles()


_local = _Local()
this_thread = _local  # ``this_thread.handles[device]``: what every launch is queued on

# Note [The current handle, kept]
# Every op asks for the handle of the current stream of its device, once per call. The
# answer changes only where ``set_stream`` writes this thread's current stream (the one
# writer of ``_local.current``; ``with stream``, graph capture and the rest go through it)
# and a device's default stream is made once, so ``set_stream`` writes the handle too and
# ``this_thread.handles[device]`` is one dict lookup, without a frame. The simple path,
# ``current_handle`` (and ``current_stream(device).cuda_stream``), stays the reference a
# differential test holds the kept answers to.
_defaults: dict[Device, Stream] = {}


def _stream_stack() -> list[tuple[Device, Stream]]:
    return _local.stack


def default_stream(device: object = None) -> Stream:
    """The device's default stream."""
    found = as_device(device)
    s = _defaults.get(found)
    if s is None:
        if found.type == "cpu":
            raise ValueError("device: the cpu device has no streams")
        s = Stream._wrap(found, found.driver.default_stream(found.index))  # type: ignore[arg-type]
        _defaults[found] = s
    return s


def current_stream(device: object = None) -> Stream:
    """This thread's current stream on the device (its default stream until set)."""
    found = current_device_obj() if device is None else as_device(device)
    s = _local.current.get(found) or _defaults.get(found)
    return s if s is not None else default_stream(found)


def current_place() -> tuple[Device, int]:
    """This thread's current device and the driver handle of its current stream there: where a
    call given neither a device nor a stream runs (``current_stream()``'s device and handle, in
    one frame: the raw allocator API asks on every request)."""
    found = _device_state.current
    if found is None:
        found = current_device_obj()
    return found, _local.handles[found]  # (Note [The current handle, kept])


def current_handle(device: Device) -> int:
    """The driver handle of this thread's current stream on ``device`` (a Device, not a
    spec): ``current_stream(device).cuda_stream`` without resolving the device again."""
    s = _local.current.get(device) or _defaults.get(device)
    return (s if s is not None else default_stream(device)).cuda_stream


def set_stream(s: Stream) -> None:
    """Make ``s`` the current stream of its device, and that device current, for this thread.

    As PyTorch's torch.cuda.set_stream, which also switches the current device.
    """
    s = as_stream(s, "stream")
    if current_device_obj() != s.device:
        set_device(s.device)
    _local.current[s.device] = s
    _local.handles[s.device] = s.cuda_stream


def as_stream(value: object, argument: str = "stream") -> Stream:
    if not isinstance(value, Stream):
        raise TypeError(f"{argument}: expected a vram.Stream, got {type(value).__name__}")
    return value


@contextmanager
def stream(s: Stream | None) -> Iterator[Stream | None]:
    """``with vram.stream(s):`` makes ``s`` current (and its device); None does nothing."""
    if s is None:
        yield None
        return
    with as_stream(s, "stream"):
        yield s
