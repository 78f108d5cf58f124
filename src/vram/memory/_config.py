"""VRAM_ALLOC_CONF: the caching allocator's settings, with PyTorch's keys and checks.

The string is PyTorch's: ``key:value`` pairs separated by commas, lists in brackets::

    VRAM_ALLOC_CONF="expandable_segments:True,roundup_power2_divisions:[256:1,>:4]"

``PYTORCH_CUDA_ALLOC_CONF`` is read when ``VRAM_ALLOC_CONF`` is unset. Keys vram adds:
``cross_stream_reuse`` (take a free block of another stream before growing the pool) and
``expandable_page_mb`` (the page size of the large pool's expandable segments; PyTorch's
is 20, smaller pages leave less mapped but unused memory at the end of a segment).
``backend:cudaMallocAsync`` makes allocators on the driver's stream-ordered pool (``_async``).
``stream_sanitizer:True`` poisons freed blocks and reports cross-stream reuse races
(``_sanitizer``); ``oom_snapshot:PATH`` writes a snapshot when an OOM is raised (as
``VRAM_OOM_SNAPSHOT=PATH``; ``_oom_report``).
An unknown key or a bad value raises ValueError naming it.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace

__all__ = [
    "AllocatorConfig",
    "parse_config",
    "apply_settings",
    "config_from_env",
    "default_config",
    "set_default_config",
    "ROUNDUP_INTERVALS",
    "BACKENDS",
]

_MB = 1 << 20
_LARGE_BUFFER_MB = 20  # kLargeBuffer in MiB: the least max_split_size_mb allowed is above it
SIZE_MAX = (1 << 64) - 1  # PyTorch's "no limit" for max_split_size
ROUNDUP_INTERVALS = 16  # power-of-two intervals from 1 MiB to 64 GiB
BACKENDS = ("native", "cudaMallocAsync")  # vram's caching allocator; the driver's pool


@dataclass(frozen=True, slots=True)
class AllocatorConfig:
    """The settings one caching allocator runs with (defaults are PyTorch's)."""

    text: str = ""
    max_split_size: int = SIZE_MAX  # bytes; blocks this large are never split
    max_non_split_rounding_size: int = 20 * _MB  # bytes an oversize block may exceed a request
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    expandable_segments: bool = False
    release_lock_on_cudamalloc: bool = False
    pinned_use_cuda_host_register: bool = False
    pinned_num_register_threads: int = 1
    pinned_use_background_threads: bool = False
    graph_capture_record_stream_reuse: bool = False
    per_process_memory_fraction: float = 1.0
    backend: str = "native"  # or "cudaMallocAsync" (fixed when an allocator is made)
    cross_stream_reuse: bool = False  # vram's own
    expandable_page_size: int = 20 * _MB  # vram's own: bytes per large-pool expandable page
    stream_sanitizer: bool = False  # vram's own: poison freed blocks, report reuse races
    oom_snapshot: str = ""  # vram's own: write a snapshot here when an OOM is raised

    def settings(self) -> dict:
        """The allocator_settings dict a snapshot carries (PyTorch's keys)."""
        return {
            "PYTORCH_CUDA_ALLOC_CONF": self.text,
            "max_split_size": -1 if self.max_split_size == SIZE_MAX else self.max_split_size,
            "garbage_collection_threshold": self.garbage_collection_threshold,
            "expandable_segments": self.expandable_segments,
            "pinned_num_register_threads": self.pinned_num_register_threads,
            "release_lock_on_cudamalloc": self.release_lock_on_cudamalloc,
            "pinned_use_cuda_host_register": self.pinned_use_cuda_host_register,
            "graph_capture_record_stream_reuse": self.graph_capture_record_stream_reuse,
            "roundup_power2_divisions": {
                str(1 << i): d for i, d in enumerate(self.roundup_power2_divisions)
            },
            "cross_stream_reuse": self.cross_stream_reuse,
            "expandable_page_size": self.expandable_page_size,
            "stream_sanitizer": self.stream_sanitizer,
            "oom_snapshot": self.oom_snapshot,
        }


def _bool(key: str, value: str) -> bool:
    if value == "True":
        return True
    if value == "False":
        return False
    raise ValueError(f"{key}: expected True or False, got {value!r}")


def _int(key: str, value: str) -> int:
    if not re.fullmatch(r"[0-9]+", value):
        raise ValueError(f"{key}: expected a non-negative integer, got {value!r}")
    return int(value)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _split_mb(key: str, value: str) -> int:
    mb = _int(key, value)
    if mb <= _LARGE_BUFFER_MB:
        raise ValueError(f"{key} too small, must be > {_LARGE_BUFFER_MB}, got {mb}")
    if mb * _MB > SIZE_MAX:
        raise ValueError(f"{key}: at most {SIZE_MAX // _MB} (2^64 bytes), got {mb}")
    return mb * _MB


def _divisions(key: str, value: str) -> tuple[int, ...]:
    """PyTorch's roundup_power2_divisions: one power of two, or ``[MB:div,...,>:div]``.

    A list sets the divisions of the interval that starts at MB (a power of two) and, for
    its first entry, of every interval below; ``>`` sets every interval above the last one
    named, and comes last. An empty list is refused, as is anything after ``>``.
    """
    if not value.startswith("["):
        div = _int(key, value)
        if not _power_of_two(div):
            raise ValueError(f"{key}: the divisions have to be a power of 2, got {div}")
        return (div,) * ROUNDUP_INTERVALS
    if not value.endswith("]"):
        raise ValueError(f"{key}: unterminated list {value!r}")
    table = [0] * ROUNDUP_INTERVALS
    first, last_index, seen_rest = True, 0, False
    items = [item for item in value[1:-1].split(",") if item.strip()]
    if not items:
        raise ValueError(f"{key}: the list is empty; give [MB:divisions,...,>:divisions]")
    for item in items:
        if seen_rest:
            raise ValueError(f"{key}: '>' must be the last entry of {value!r}")
        interval, sep, div_text = item.partition(":")
        if not sep:
            raise ValueError(f"{key}: expected 'interval:divisions', got {item!r}")
        div = _int(key, div_text.strip())
        if div != 0 and not _power_of_two(div):
            raise ValueError(f"{key}: divisions must be a power of 2 or 0, got {div}")
        interval = interval.strip()
        if interval == ">":  # the intervals above the last one named (index 0 if none was)
            table[last_index + 1 :] = [div] * (ROUNDUP_INTERVALS - last_index - 1)
            seen_rest = True
            continue
        mb = _int(key, interval)
        if not _power_of_two(mb):
            raise ValueError(f"{key}: the intervals have to be a power of 2, got {mb}")
        index = min(mb.bit_length() - 1, ROUNDUP_INTERVALS - 1)
        if first:
            table[:index] = [div] * index
            first = False
        table[index] = div
        last_index = index
    return tuple(table)


def _threshold(key: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{key}: expected a number, got {value!r}") from None
    if not 0.0 < number < 1.0:
        raise ValueError(f"{key}: must be between 0 and 1 (exclusive), got {value!r}")
    return number


def _items(text: str) -> list[tuple[str, str]]:
    """Split ``a:1,b:[x:1,y:2],c:True`` into pairs, keeping bracketed lists whole."""
    pairs, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced brackets in allocator settings {text!r}")
        elif ch == "," and depth == 0:
            item = text[start:i].strip()
            start = i + 1
            if not item:
                continue
            key, sep, value = item.partition(":")
            if not sep or not value.strip():
                raise ValueError(f"{key.strip() or item}: expected 'key:value', got {item!r}")
            pairs.append((key.strip(), value.strip()))
    if depth:
        raise ValueError(f"unbalanced brackets in allocator settings {text!r}")
    return pairs


def parse_config(text: str, base: AllocatorConfig | None = None) -> AllocatorConfig:
    """Parse a PyTorch-style allocator string on top of ``base`` (defaults if None)."""
    if not isinstance(text, str):
        raise TypeError(f"allocator settings must be a string, got {type(text).__name__}")
    changes: dict = {}
    for key, value in _items(text):
        if key == "max_split_size_mb":
            changes["max_split_size"] = _split_mb(key, value)
        elif key == "max_non_split_rounding_mb":
            changes["max_non_split_rounding_size"] = _split_mb(key, value)
        elif key == "garbage_collection_threshold":
            changes[key] = _threshold(key, value)
        elif key == "roundup_power2_divisions":
            changes[key] = _divisions(key, value)
        elif key in (
            "expandable_segments",
            "release_lock_on_cudamalloc",
            "pinned_use_cuda_host_register",
            "pinned_use_background_threads",
            "graph_capture_record_stream_reuse",
            "cross_stream_reuse",
            "stream_sanitizer",
        ):
            changes[key] = _bool(key, value)
        elif key == "oom_snapshot":
            changes[key] = value
        elif key == "expandable_page_mb":
            mb = _int(key, value)
            if mb < 2 or mb % 2 or mb > 1024:
                raise ValueError(f"{key}: must be an even number of MiB from 2 to 1024, got {mb}")
            changes["expandable_page_size"] = mb * _MB
        elif key == "pinned_num_register_threads":
            threads = _int(key, value)
            if not _power_of_two(threads) or threads > 128:
                raise ValueError(f"{key}: must be a power of 2 up to 128, got {threads}")
            changes[key] = threads
        elif key == "per_process_memory_fraction":
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not 0.0 <= number <= 1.0:  # NaN too
                raise ValueError(f"{key}: expected a number in [0, 1], got {value!r}")
            changes[key] = number
        elif key == "backend":
            if value not in BACKENDS:
                raise ValueError(
                    f"backend: unknown allocator backend {value!r}; the options are native and "
                    "cudaMallocAsync"
                )
            changes[key] = value
        else:
            raise ValueError(f"unrecognized allocator option: {key!r}")
    joined = ",".join(filter(None, [base.text if base else "", text.strip()]))
    return replace(base or AllocatorConfig(), text=joined, **changes)


def apply_settings(text: str, current: AllocatorConfig) -> AllocatorConfig:
    """PyTorch's _set_allocator_settings: ``text`` on top of ``current``, except that
    max_split_size_mb, roundup_power2_divisions and garbage_collection_threshold go back to
    their defaults unless ``text`` sets them again (PyTorch resets those three each call).
    The settings text becomes ``text``, PyTorch's last allocator settings.

    The backend cannot change: naming another one than ``current``'s raises, as PyTorch
    raises when the backend parsed at run time is not the one parsed at load time."""
    base = replace(
        current,
        text="",
        max_split_size=SIZE_MAX,
        roundup_power2_divisions=(0,) * ROUNDUP_INTERVALS,
        garbage_collection_threshold=0.0,
    )
    config = parse_config(text, base)
    if config.backend != current.backend:
        raise ValueError(
            "backend: Allocator backend parsed at runtime != allocator backend parsed at load "
            f"time, {config.backend} != {current.backend} (the backend is read from "
            "VRAM_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF when an allocator is made)"
        )
    return config


def config_from_env() -> AllocatorConfig:
    """Settings from VRAM_ALLOC_CONF, or PYTORCH_CUDA_ALLOC_CONF where that is unset.

    A bad string raises ValueError naming the variable it came from and the key."""
    variable = "VRAM_ALLOC_CONF"
    text = os.environ.get(variable)
    if text is None:
        variable = "PYTORCH_CUDA_ALLOC_CONF"
        text = os.environ.get(variable, "")
    try:
        return parse_config(text)
    except ValueError as exc:
        raise ValueError(f"{variable}={text!r}: {exc}") from None


_override: AllocatorConfig | None = None  # set by set_allocator_settings


def default_config() -> AllocatorConfig:
    """What a new allocator starts with: set_allocator_settings' result, else the env."""
    return _override if _override is not None else config_from_env()


def set_default_config(config: AllocatorConfig | None) -> None:
    global _override
    _override = config
