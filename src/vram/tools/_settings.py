"""Allocator settings strings as the tools read, combine and print them.

A settings string is PyTorch's ``PYTORCH_CUDA_ALLOC_CONF`` form, ``key:value,key:value``
(a value may be a bracketed list: ``roundup_power2_divisions:[256:8,>:4]``). The replay
applies a change on top of the settings a trace was recorded with:

- a key the change sets replaces the recorded value; a key the recorded settings lack is
  added;
- a default spelled by name removes the recorded key: ``max_split_size_mb:-1`` (PyTorch's
  own spelling for no limit), ``expandable_segments:False``, ``roundup_power2_divisions:1``,
  ``garbage_collection_threshold:0`` (vram's spelling: PyTorch has none for "off"), and
  ``False`` for vram's switches. So any recorded setting can be replaced or dropped.

Keys fall in three groups: PyTorch's (``PYTORCH_CUDA_ALLOC_CONF`` takes them), vram's own
(``VRAM_ALLOC_CONF`` only, with vram as PyTorch's allocator), and the replay's own
(``record_use:True``: pending frees replayed with record_use, a vram API; ``memory_limit:SIZE``:
a memory fraction allowing SIZE bytes, ``torch.cuda.set_per_process_memory_fraction``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .._units import MiB, format_bytes, parse_bytes
from ..memory import config_items

__all__ = [
    "PYTORCH_KEYS",
    "VRAM_KEYS",
    "CHECKED_KEYS",
    "Change",
    "items",
    "join",
    "merge",
    "unset",
    "settings_to_config",
    "split_replay_keys",
    "fraction",
    "fraction_call",
]

PYTORCH_KEYS = frozenset(
    {
        "max_split_size_mb",
        "max_non_split_rounding_mb",
        "roundup_power2_divisions",
        "garbage_collection_threshold",
        "expandable_segments",
        "release_lock_on_cudamalloc",
        "pinned_use_cuda_host_register",
        "pinned_num_register_threads",
        "pinned_use_background_threads",
        "graph_capture_record_stream_reuse",
        "per_process_memory_fraction",
        "backend",
    }
)
VRAM_KEYS = frozenset(
    {"cross_stream_reuse", "expandable_page_mb", "stream_sanitizer", "oom_snapshot", "record_use"}
)
# Settings whose predictions PyTorch's own runs have checked (bench/predictions.py: each
# workload recorded under them, against the replay of its default trace); a prediction of
# any other setting is marked as unchecked.
CHECKED_KEYS = frozenset({"max_split_size_mb", "roundup_power2_divisions", "expandable_segments"})

# A key's default spelled by name: the key is removed from the recorded settings.
_UNSET = {
    "max_split_size_mb": ("-1",),
    "max_non_split_rounding_mb": ("20",),
    "roundup_power2_divisions": ("0", "1"),
    "garbage_collection_threshold": ("0", "0.0"),
    "expandable_segments": ("False",),
    "cross_stream_reuse": ("False",),
    "record_use": ("False",),
    "expandable_page_mb": ("20",),
}


def items(text: str) -> list[tuple[str, str]]:
    """``key:value`` pairs of a settings string, in order (a bracketed value kept whole),
    as the allocator's parser reads them. ValueError for an item without a value or
    unbalanced brackets."""
    return config_items(text)


def _text(pairs: list[tuple[str, str]]) -> str:
    return ",".join(f"{k}:{v}" for k, v in pairs)


def _unset(key: str, value: str) -> bool:
    return value in _UNSET.get(key, ())


def unset(key: str) -> str:
    """``key`` at its default, spelled by name (it drops the recorded setting)."""
    return f"{key}:{_UNSET[key][0]}"


@dataclass
class Change:
    """A change applied to recorded settings: the settings that result and how they came."""

    settings: str  # the allocator settings that result (replay's own keys left out)
    added: list[str] = field(default_factory=list)  # key:value items the recorded lacked
    replaced: list[tuple[str, str]] = field(default_factory=list)  # (recorded, new) items
    dropped: list[str] = field(default_factory=list)  # recorded items removed
    record_use: bool = False
    memory_limit: int | None = None  # bytes a memory fraction allows, if any

    @property
    def kind(self) -> str:
        """'recorded' (nothing changed), 'adds', 'replaces' or 'drops'."""
        if self.replaced or (self.dropped and self.added):
            return "replaces"
        if self.dropped:
            return "drops"
        if self.added or self.record_use or self.memory_limit is not None:
            return "adds"
        return "recorded"

    def describe(self) -> str:
        """What the change does to the recorded settings, in words."""
        parts = []
        replaced = [f"{old} with {new}" for old, new in self.replaced]
        added = list(self.added)
        if self.dropped and added:  # what was dropped gives way to what is added
            replaced.append(f"{','.join(self.dropped)} with {','.join(added)}")
            added = []
        elif self.dropped:
            parts.append("drops " + ",".join(self.dropped))
        if replaced:
            parts.insert(0, "replaces " + "; ".join(replaced))
        extra = added
        if self.record_use:
            extra.append("record_use for pending frees")
        if self.memory_limit is not None:
            extra.append(f"a memory fraction allowing {format_bytes(self.memory_limit)}")
        if extra:
            parts.append("adds " + ", ".join(extra))
        return "; ".join(parts) or "the recorded settings"

    @property
    def keys(self) -> set[str]:
        """Every key the resulting settings set, and the replay's own in use."""
        found = {key for key, _ in items(self.settings)}
        if self.record_use:
            found.add("record_use")
        if self.memory_limit is not None:
            found.add("memory_limit")
        return found

    @property
    def pytorch(self) -> bool:
        """PyTorch accepts the resulting settings as they are (no key of vram's own)."""
        return not self.keys & VRAM_KEYS

    @property
    def checked(self) -> bool:
        """A PyTorch run has checked predictions of every key this change touches."""
        touched = {item.partition(":")[0] for item in self.added + self.dropped}
        touched |= {new.partition(":")[0] for _, new in self.replaced}
        if self.record_use:
            touched.add("record_use")
        if self.memory_limit is not None:
            touched.add("memory_limit")
        return touched <= CHECKED_KEYS


def split_replay_keys(text: str) -> tuple[str, bool, int | None]:
    """Take the replay's own keys out of ``text``: (allocator settings, record_use, the
    memory limit in bytes or None). ValueError naming a bad value."""
    kept, record_use, limit = [], False, None
    for key, value in items(text):
        if key == "record_use":
            if value not in ("True", "False"):
                raise ValueError(f"record_use: expected True or False, got {value!r}")
            record_use = value == "True"
        elif key == "memory_limit":
            limit = parse_bytes(value, "memory_limit")
        else:
            kept.append((key, value))
    return _text(kept), record_use, limit


def merge(recorded: str, change: str) -> Change:
    """``change`` applied on top of ``recorded`` (see the module docstring)."""
    own, record_use, limit = split_replay_keys(change)
    base = items(recorded)
    result = dict(base)
    added, replaced, dropped = [], [], []
    for key, value in items(own):
        if key == "max_split_size_mb" and value.lstrip("-").isdigit() and int(value) <= 0:
            if value != "-1":
                raise ValueError(
                    f"max_split_size_mb: {value} is not a size; -1 (no limit) is PyTorch's "
                    "default, as its snapshots say"
                )
        old = result.get(key)
        if _unset(key, value):
            if old is not None:
                dropped.append(f"{key}:{old}")
                del result[key]
            continue
        if old == value:
            continue
        if old is None:
            added.append(f"{key}:{value}")
        else:
            replaced.append((f"{key}:{old}", f"{key}:{value}"))
        result[key] = value
    text = _text([(k, result[k]) for k in [*dict(base), *result] if k in result])
    return Change(_dedupe(text), added, replaced, dropped, record_use, limit)


def _dedupe(text: str) -> str:
    seen: dict[str, str] = {}
    for key, value in items(text):
        seen.setdefault(key, value)
    return _text(list(seen.items()))


def join(a: str, b: str) -> str:
    """Two changes as one: ``b``'s settings win, but a key one of them sets beats the
    other's unset spelling; the memory limit last."""
    found: dict[str, str] = {}
    for key, value in items(a) + items(b):
        if key in found and _unset(key, value) and not _unset(key, found[key]):
            continue
        found[key] = value
    limit = found.pop("memory_limit", None)
    pairs = list(found.items()) + ([("memory_limit", limit)] if limit is not None else [])
    return _text(pairs)


def settings_to_config(settings: dict | None) -> str:
    """A settings string that rebuilds a snapshot's ``allocator_settings`` dict, in the
    short forms PyTorch reads (``roundup_power2_divisions:[256:8,>:4]``)."""
    if not settings:
        return ""
    parts = []
    split = settings.get("max_split_size", -1)
    if split not in (-1, None) and split < (1 << 63):
        parts.append(f"max_split_size_mb:{split // MiB}")
    rounding = settings.get("max_non_split_rounding_size")
    if rounding and rounding != 20 * MiB:
        parts.append(f"max_non_split_rounding_mb:{rounding // MiB}")
    threshold = settings.get("garbage_collection_threshold") or 0.0
    if threshold:
        parts.append(f"garbage_collection_threshold:{threshold}")
    divisions = settings.get("roundup_power2_divisions") or {}
    if any(divisions.values()):
        parts.append(f"roundup_power2_divisions:{_divisions_text(divisions)}")
    for key in ("expandable_segments", "cross_stream_reuse"):
        if settings.get(key):
            parts.append(f"{key}:True")
    page = settings.get("expandable_page_size")
    if page and page != 20 * MiB and settings.get("expandable_segments"):
        parts.append(f"expandable_page_mb:{page // MiB}")
    return ",".join(parts)


def _divisions_text(divisions: dict) -> str:
    """PyTorch's short form of a table of divisions: one number, or ``[MB:div,...,>:div]``
    with one item per run of equal values (the first item also sets the intervals below
    it, and ``>`` every interval after the last item, as PyTorch parses them)."""
    keys = sorted(divisions, key=int)
    values = [divisions[k] for k in keys]
    if len(set(values)) == 1:
        return str(values[0])
    runs: list[tuple[str, int]] = []
    for key, value in zip(keys, values, strict=True):
        if runs and runs[-1][1] == value:
            runs[-1] = (key, value)
        else:
            runs.append((key, value))
    body = [f"{key}:{value}" for key, value in runs[:-1]] + [f">:{runs[-1][1]}"]
    return "[" + ",".join(body) + "]"


def fraction(limit: int, device_total: int) -> float:
    """The memory fraction (4 decimals, rounded up) that allows ``limit`` bytes of a device
    of ``device_total``."""
    return min(math.ceil(limit / device_total * 10_000) / 10_000, 1.0)


def fraction_call(limit: int, device_total: int | None, pytorch: bool = True) -> str:
    """The call that caps the process at ``limit`` bytes: ``fraction`` of a device of
    ``device_total`` bytes, or computed on the device where it runs when None. PyTorch's
    (``torch.cuda``), or vram's when vram is PyTorch's allocator (PyTorch's own cap does
    not reach it then)."""
    module = "torch.cuda" if pytorch else "vram"
    if device_total:
        return f"{module}.set_per_process_memory_fraction({fraction(limit, device_total)!r})"
    return (
        f"{module}.set_per_process_memory_fraction({limit} / "
        f"{module}.get_device_properties(0).total_memory)"
    )
