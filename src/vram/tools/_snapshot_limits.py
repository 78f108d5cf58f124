"""How much a snapshot file may expand to once loaded: the bounds ``read_pickle`` enforces.

A pickle can refer to one object many times (its memo), so a small file can load as an
enormous snapshot: 80 KB that list one list of 20,000 events 20,000 times is 400 million
events to every tool that walks them. Sharing itself is fine (PyTorch's snapshots share
their frames); what is bounded is what the data amounts to once every reference is
followed: trace events, segments, blocks, stack frames and string bytes, and the bytes of
pickle a compressed file inflates to. The loaded data is measured before any tool sees it,
in time proportional to the file (each distinct object is measured once), and a file past
a bound is refused with one line naming the bound and the setting that raises it:

    VRAM_SNAPSHOT_LIMITS="events:50000000,string_bytes:16GiB" vram viz big.pickle -o v.html

(``limits=`` of ``load_snapshot`` and ``read_pickle`` does the same from Python.) Data that
refers to itself, or nests deeper than any snapshot does, is refused too: the tools walk
snapshots as trees.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, fields, replace
from typing import Any, BinaryIO

from .._units import parse_bytes

__all__ = ["SnapshotLimits", "SnapshotBoundError", "limits_from_env", "capped", "measure"]

ENV = "VRAM_SNAPSHOT_LIMITS"
_MAX_DEPTH = 32  # containers within containers; a PyTorch snapshot nests 6 deep


@dataclass(frozen=True)
class SnapshotLimits:
    """The most a loaded snapshot file may amount to, every shared reference followed.

    The defaults are far above what PyTorch records (its history is usually capped at 100,000
    events; a million with deep stacks is a large one) and keep the tools' work bounded.
    """

    events: int = 10_000_000  # trace events, over every device
    segments: int = 1_000_000
    blocks: int = 10_000_000  # blocks of the segments
    frames: int = 200_000_000  # stack frames, over every event, segment and block
    string_bytes: int = 16 << 30  # UTF-8 bytes of every string (keys too)
    pickle_bytes: int = 4 << 30  # bytes of pickle, once decompressed

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"limits: {field.name} must be a positive int, got {value!r}")


class SnapshotBoundError(ValueError):
    """A snapshot file expands past one of its bounds (a ValueError: the file is bad input)."""


def limits_from_env() -> SnapshotLimits:
    """The defaults, with what ``VRAM_SNAPSHOT_LIMITS`` ("events:N,string_bytes:16GiB")
    raises or lowers; ValueError naming the variable for a bad setting."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return SnapshotLimits()
    known = {field.name for field in fields(SnapshotLimits)}
    changes: dict[str, int] = {}
    for item in text.split(","):
        key, sep, value = (part.strip() for part in item.partition(":"))
        if not sep or key not in known:
            raise ValueError(
                f"{ENV}={text!r}: expected KEY:VALUE pairs, KEY one of {', '.join(sorted(known))}"
            )
        if key.endswith("_bytes"):
            changes[key] = parse_bytes(value, f"{ENV} {key}")
        elif value.isdecimal() and int(value) > 0:
            changes[key] = int(value)
        else:
            raise ValueError(f"{ENV}: {key} must be a positive whole number, got {value!r}")
    return replace(SnapshotLimits(), **changes)


def _refuse(where: str, amount: int, what: str, key: str, bound: int) -> SnapshotBoundError:
    return SnapshotBoundError(
        f"{where}: expands to {amount:,} {what} once loaded, past the bound of {bound:,} "
        f"({ENV}={key}:N raises it)"
    )


class _Counted(io.RawIOBase):
    """A readable stream that refuses to give more than ``limit`` bytes of ``inner``."""

    def __init__(self, inner: BinaryIO, limit: int, where: str) -> None:
        self._inner = inner
        self._limit = limit
        self._where = where
        self._count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._inner.readinto(buffer)  # type: ignore[attr-defined]
        self._count += n or 0
        if self._count > self._limit:
            raise SnapshotBoundError(
                f"{self._where}: holds more than {self._limit:,} bytes of pickle once "
                f"decompressed ({ENV}=pickle_bytes:N raises it)"
            )
        return n


def capped(stream: BinaryIO, limits: SnapshotLimits, where: str) -> BinaryIO:
    """``stream`` (decompressed), read through a buffer that raises SnapshotBoundError once
    more than ``limits.pickle_bytes`` bytes have been read."""
    return io.BufferedReader(_Counted(stream, limits.pickle_bytes, where), 1 << 16)  # type: ignore[return-value]


_CONTAINERS = frozenset({dict, list, tuple, set, frozenset})  # what the unpickler builds
_SCALARS = frozenset({int, float, bool, type(None)})


def _totals(root: Any, where: str) -> tuple[int, int]:
    """(string bytes, stack frames) of ``root``, every shared reference followed: each
    distinct container is measured once, from what it holds (its strings, and the totals of
    the containers in it), so the time goes with the distinct objects. Nesting deeper than
    ``_MAX_DEPTH`` (which data that refers to itself always does) is refused."""
    done: dict[int, tuple[int, int]] = {}  # id -> (string bytes, frames)

    def measured(obj: Any, depth: int) -> tuple[int, int]:
        if depth > _MAX_DEPTH:
            raise ValueError(
                f"{where}: the data nests more than {_MAX_DEPTH} levels deep, or refers to "
                "itself; a snapshot is a tree a few levels deep"
            )
        strings = frames = 0
        if type(obj) is dict:
            if type(obj.get("frames")) is list:
                frames = len(obj["frames"])
            children: Any = (*obj, *obj.values())
        else:
            children = obj
        for child in children:
            kind = type(child)
            if kind in _SCALARS:
                continue
            if kind is str:
                strings += len(child) if child.isascii() else len(child.encode("utf-8", "replace"))
            elif kind in _CONTAINERS:
                found = done.get(id(child))
                if found is None:
                    found = done[id(child)] = measured(child, depth + 1)
                strings += found[0]
                frames += found[1]
            else:  # bytes, bytearray
                strings += len(child)
        return strings, frames

    return measured(root, 0) if type(root) in _CONTAINERS else (0, 0)


def measure(data: Any, limits: SnapshotLimits, where: str) -> None:
    """Raise SnapshotBoundError if ``data`` (loaded from ``where``) amounts to more than
    ``limits`` allow once every reference is followed; ValueError if it refers to itself
    or nests too deep. Takes time in proportion to the distinct objects, not the total."""
    strings, frames = _totals(data, where)
    counts = {"segments": 0, "blocks": 0, "events": 0}
    if isinstance(data, dict):
        traces = data.get("device_traces")
        if isinstance(traces, list):
            counts["events"] = sum(len(t) for t in traces if isinstance(t, list))
        segments = data.get("segments")
        if isinstance(segments, list):
            counts["segments"] = len(segments)
            counts["blocks"] = sum(
                len(s["blocks"])
                for s in segments
                if isinstance(s, dict) and isinstance(s.get("blocks"), list)
            )
    counts["frames"] = frames
    counts["string_bytes"] = strings
    names = {"events": "trace events", "string_bytes": "bytes of strings", "frames": "frames"}
    for key, amount in counts.items():
        bound = getattr(limits, key)
        if amount > bound:
            raise _refuse(where, amount, names.get(key, key), key, bound)
