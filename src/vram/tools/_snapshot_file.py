"""Reading snapshot files, safely: the one loader every tool uses (replay, viz, stats).

A snapshot file is a pickle of plain data (dicts, lists, tuples, strings, numbers, booleans,
None): what ``torch.cuda.memory._snapshot()`` returns and what vram's ``_dump_snapshot``
writes. It may be compressed with xz or gzip (told by its first bytes, not its name), and
pickled with any protocol up to 5.

Safe by default: a pickle can name any importable callable and have it called while it
loads (``__reduce__``), so an untrusted snapshot could run code. The unpickler here admits
no callable but the plain containers ``set`` and ``frozenset``; a pickle that asks for
anything else is refused with a ValueError naming what it asked for, before anything runs.

Bounded: what a file may expand to once loaded (trace events, segments, blocks, frames,
string bytes, bytes of pickle; shared references followed) is checked before any tool walks
it, so a small file cannot make the tools run without end (``_snapshot_limits``).

After loading, ``check_snapshot`` checks the shape the tools rely on (the keys, types and
ranges of segments, blocks and trace entries), so that a malformed snapshot is one clear
ValueError naming the first bad entry, not a KeyError deep inside a tool, nor nonsense.
"""

from __future__ import annotations

import gzip
import lzma
import math
import pickle
from pathlib import Path
from typing import Any, BinaryIO

from ._snapshot_limits import SnapshotBoundError, SnapshotLimits, capped, limits_from_env, measure

__all__ = ["load_snapshot", "read_pickle", "check_snapshot", "SnapshotLimits"]

_XZ_MAGIC = b"\xfd7zXZ\x00"
_GZIP_MAGIC = b"\x1f\x8b"
# The only globals a snapshot pickle may name: plain containers, called with plain data.
_ALLOWED = frozenset({("builtins", "set"), ("builtins", "frozenset")})


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only: no global but set and frozenset."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "__builtin__":  # Python 2's name, in pickles of protocol 0 to 2
            module = "builtins"
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"it asks for {module}.{name}, and a snapshot holds plain data only "
            "(dicts, lists, strings, numbers); refused, nothing was run"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it holds persistent references; a snapshot has none")


def _opened(path: Path) -> BinaryIO:
    """``path`` opened for reading, decompressed when it starts as xz or gzip does."""
    raw = path.open("rb")
    head = raw.read(len(_XZ_MAGIC))
    raw.seek(0)
    if head.startswith(_XZ_MAGIC):
        return lzma.LZMAFile(raw)  # type: ignore[return-value]
    if head.startswith(_GZIP_MAGIC):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    return raw


def read_pickle(path: str | Path, limits: SnapshotLimits | None = None) -> Any:
    """The plain data pickled (and maybe xz- or gzip-compressed) in ``path``.

    Raises FileNotFoundError (or another OSError) when the file cannot be read, and
    ValueError when it is not a pickle of plain data or expands past ``limits`` (None: the
    defaults and VRAM_SNAPSHOT_LIMITS); nothing in the file is ever run.
    """
    limits = limits_from_env() if limits is None else limits
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory, not a snapshot file")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    with _opened(path) as f:
        try:
            data = _PlainUnpickler(capped(f, limits, str(path))).load()
        except SnapshotBoundError:
            raise
        except EOFError:
            empty = path.stat().st_size == 0
            what = "the file is empty" if empty else "the file ends too soon (truncated?)"
            raise ValueError(f"{path}: not a memory snapshot pickle ({what})") from None
        except (pickle.UnpicklingError, lzma.LZMAError, gzip.BadGzipFile) as exc:
            raise ValueError(f"{path}: not a memory snapshot pickle ({exc})") from None
        except (
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            AttributeError,
            OverflowError,
            MemoryError,
            UnicodeDecodeError,
        ) as exc:  # what a corrupt pickle stream raises from the unpickler's opcodes
            raise ValueError(
                f"{path}: not a memory snapshot pickle ({type(exc).__name__}: {exc})"
            ) from None
    measure(data, limits, str(path))
    return data


def load_snapshot(
    source: dict | str | Path, check: bool = True, limits: SnapshotLimits | None = None
) -> dict:
    """A snapshot dict from a dict or a file (read by ``read_pickle``, within ``limits``),
    checked by ``check_snapshot`` unless ``check`` is False. ValueError if it is not a
    snapshot."""
    if isinstance(source, dict):
        snapshot, where = source, "the snapshot"
    elif isinstance(source, (str, Path)):
        snapshot, where = read_pickle(source, limits), str(source)
    else:
        raise TypeError(f"snapshot: expected a dict or a path, got {type(source).__name__}")
    if check:
        check_snapshot(snapshot, where)
    return snapshot


# ============================================================================== checks
_U64 = 1 << 64  # sizes and stream handles are 64-bit unsigned
_ADDRESS = -(1 << 63)  # addresses are 64 bits too; the tools mark one that is none with -1
_DEVICES = 128  # device indices: PyTorch's DeviceIndex is 8 bits (int8_t)


def _need(entry: dict, key: str, kinds: type | tuple[type, ...], where: str) -> None:
    if key not in entry:
        raise ValueError(f"{where} has no {key!r}")
    if not isinstance(entry[key], kinds):
        raise ValueError(f"{where}: {key!r} is a {type(entry[key]).__name__}, not as expected")


def _may(entry: dict, key: str, kinds: type | tuple[type, ...], where: str) -> None:
    if key in entry and entry[key] is not None and not isinstance(entry[key], kinds):
        raise ValueError(f"{where}: {key!r} is a {type(entry[key]).__name__}, not as expected")


def _whole(
    entry: dict, key: str, where: str, required: bool = False, low: int = 0, end: int = _U64
) -> None:
    """``entry[key]`` is an int in [low, end) (a bool is not: True is no size); absent is
    allowed unless ``required``, None too."""
    if key not in entry and required:
        raise ValueError(f"{where} has no {key!r}")
    value = entry.get(key)
    if value is None and not required:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: {key!r} is a {type(value).__name__}, not an int")
    if not low <= value < end:
        bottom = "-2**63" if low == _ADDRESS else str(low)
        top = "2**64 - 1" if end == _U64 else str(end - 1)
        raise ValueError(f"{where}: {key!r} is {value}, outside {bottom} to {top}")


def _frames(entry: dict, where: str) -> None:
    frames = entry.get("frames")
    if frames is None:
        return
    if not isinstance(frames, list) or not all(isinstance(f, dict) for f in frames):
        raise ValueError(f"{where}: 'frames' is not a list of frame dicts")


def check_snapshot(snapshot: Any, where: str = "the snapshot") -> None:
    """Raise ValueError naming the first thing in ``snapshot`` that the tools cannot read.

    A snapshot is a dict with a list ``segments`` and/or a list of lists ``device_traces``.
    A segment needs an ``address`` and ``total_size`` and a list of ``blocks``, each with an
    ``address`` and ``size`` and a str ``state``; a trace entry needs a str ``action`` and
    an ``addr`` and ``size``. These are ints (not bools) of 64 bits: sizes and streams from
    0 to 2**64 - 1, addresses from -2**63; device indices are 0 to 127. Other known keys
    must have their types.
    """
    if not isinstance(snapshot, dict) or not (
        isinstance(snapshot.get("segments"), list)
        or isinstance(snapshot.get("device_traces"), list)
    ):
        kind = type(snapshot).__name__
        raise ValueError(
            f"{where}: not a memory snapshot (expected a dict with 'segments' and "
            f"'device_traces', got a {kind})"
        )
    _may(snapshot, "segments", list, where)
    _may(snapshot, "device_traces", list, where)
    _may(snapshot, "allocator_settings", dict, where)
    if len(snapshot.get("device_traces") or []) > _DEVICES:
        raise ValueError(f"{where}: 'device_traces' lists more than {_DEVICES} devices")
    for i, seg in enumerate(snapshot.get("segments") or []):
        at = f"{where}: segments[{i}]"
        if not isinstance(seg, dict):
            raise ValueError(f"{at} is a {type(seg).__name__}, not a segment dict")
        _whole(seg, "address", at, required=True, low=_ADDRESS)
        _whole(seg, "total_size", at, required=True)
        _whole(seg, "device", at, end=_DEVICES)
        for key in ("allocated_size", "active_size", "requested_size", "stream"):
            _whole(seg, key, at)
        _may(seg, "segment_type", str, at)
        _may(seg, "is_expandable", (bool, int), at)
        _may(seg, "segment_pool_id", (tuple, list, int, str), at)
        _frames(seg, at)
        _may(seg, "blocks", list, at)
        for j, block in enumerate(seg.get("blocks") or []):
            bat = f"{at}.blocks[{j}]"
            if not isinstance(block, dict):
                raise ValueError(f"{bat} is a {type(block).__name__}, not a block dict")
            _whole(block, "address", bat, required=True, low=_ADDRESS)
            _whole(block, "size", bat, required=True)
            _need(block, "state", str, bat)
            _whole(block, "requested_size", bat)
            _frames(block, bat)
    for d, trace in enumerate(snapshot.get("device_traces") or []):
        at = f"{where}: device_traces[{d}]"
        if not isinstance(trace, list):
            raise ValueError(f"{at} is a {type(trace).__name__}, not a list of events")
        for k, event in enumerate(trace):
            eat = f"{at}[{k}]"
            if not isinstance(event, dict):
                raise ValueError(f"{eat} is a {type(event).__name__}, not an event dict")
            _need(event, "action", str, eat)
            _whole(event, "addr", eat, required=True, low=_ADDRESS)
            _whole(event, "size", eat, required=True)
            _whole(event, "stream", eat)
            _time(event, eat)
            _frames(event, eat)


def _time(event: dict, where: str) -> None:
    value = event.get("time_us")
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: 'time_us' is a {type(value).__name__}, not a number")
    if not math.isfinite(value):
        raise ValueError(f"{where}: 'time_us' is {value}, not a finite number")
