"""Replay a memory trace through vram's allocator under other settings: ``vram replay``.

    vram replay snapshot.pickle --config expandable_segments:True --capacity 40GiB

The trace (``_replay_trace``) is replayed once per configuration on a device that counts
memory and backs none (``_replay_device``), through a fresh caching allocator
(``_replayer``, which says the rules). Under the settings the trace was recorded with, the
replay makes the decisions the recording allocator made: the same segment allocations, of
the same sizes, in order (``matches_recorded``). Under other settings it predicts what
PyTorch would have done; ``checked`` says whether PyTorch's own runs have checked
predictions of every setting the configuration changes (bench/predictions.py).

This module is the report: ``replay`` (rows), ``replay_runs`` (rows and timelines),
``report_lines`` (the text ``vram replay`` prints) and ``write_html`` (the timelines); and
the door to one replay at a time (``read_trace``, then ``replay_config`` per setting).
``vram replay TRACE --suggest`` searches the settings for the trace (``vram.tools.suggest``).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

from .._units import format_bytes
from ._replay_trace import read_trace
from ._replayer import Run, replay_config
from ._snapshot_file import load_snapshot
from .output import counted, wrap

__all__ = [
    "replay",
    "replay_runs",
    "read_trace",
    "replay_config",
    "report_lines",
    "write_html",
    "downsample",
    "Run",
]


def replay_runs(
    trace: dict | str | Path,
    configs: list[str] | None = None,
    capacity: int | None = None,
    record_use: bool = False,
    device: int | None = None,
    timeline: bool = False,
    progress: Callable[[int], None] | None = None,
) -> list[Run]:
    """``replay``'s results with, when ``timeline``, the reserved and allocated bytes after
    each request; ``progress(n)`` is told of the trace entries replayed (over every
    configuration: ``len(configs)`` times the trace's entries in all)."""
    if capacity is not None and capacity <= 0:
        raise ValueError(f"capacity: must be positive, got {capacity}")
    parsed = read_trace(load_snapshot(trace), device)
    configs = configs or [""]
    if progress is not None:
        progress(0, total=len(parsed.entries) * len(configs))
    return [
        replay_config(parsed, text, capacity, record_use, progress, timeline) for text in configs
    ]


def replay(
    trace: dict | str | Path,
    configs: list[str] | None = None,
    capacity: int | None = None,
    record_use: bool = False,
    device: int | None = None,
) -> list[dict]:
    """Replay a snapshot's device trace once per configuration; one result dict each.

    ``configs`` are settings strings applied to the trace's recorded settings ("" or None:
    the recorded settings alone): a key replaces the recorded value or is added, and a
    default spelled by name (``max_split_size_mb:-1``) drops the recorded key.
    ``record_use:True`` replays pending frees with record_use and ``memory_limit:SIZE`` sets
    a memory fraction allowing SIZE bytes. ``capacity`` (bytes) is the replay device's
    memory; ``record_use`` replays pending frees with record_use in every configuration.
    ``device``: the trace's device index (the first with a trace if None).
    """
    return [run.row for run in replay_runs(trace, configs, capacity, record_use, device)]


# ============================================================================= output
def _recorded(row: dict) -> str:
    if not row["recorded"]:
        return "not recorded"
    if row["matches_recorded"]:
        return "yes"
    if row["flushes"] or row["oom"]:
        return "no (the capacity changed what it did)"
    return "NO"


def report_lines(rows: list[dict], title: str) -> list[str]:
    """What ``vram replay`` prints: per configuration what it changes, its settings on a
    line of their own (never wrapped, to be copied), then its numbers; 80 columns."""
    lines = wrap(title)
    for n, row in enumerate(rows, 1):
        what = "the recorded settings" if row["change"] == "recorded" else row["change_text"]
        if row["config"].startswith("recorded") and row["change"] != "recorded":
            what = f"the recorded settings; {what}"
        if not row["checked"] and row["change"] != "recorded":
            what += " (unchecked prediction)"
        lines.append("")
        lines += wrap(f"{n}. {what}", "   ", first="")
        lines.append(f"   settings: {row['settings'] or '(none: PyTorch defaults)'}")
        ratio = "-" if row["peak_ratio"] is None else f"{row['peak_ratio']:.3f}"
        numbers = (
            f"peak reserved {format_bytes(row['peak_reserved'])}, peak allocated "
            f"{format_bytes(row['peak_allocated'])} (ratio {ratio}); "
            f"{row['device_malloc']} device mallocs; at the allocated peak: reserved "
            f"{format_bytes(row['reserved_at_peak'])}, largest free block "
            f"{format_bytes(row['largest_free_at_peak'])}, fragmentation "
            f"{row['fragmentation_at_peak']:.1%}."
        )
        if row["capacity"] is None:
            fits = "On a device with room for it"
        elif row["oom"]:
            fits = f"OUT OF MEMORY on {format_bytes(row['capacity'])} (trace entry {row['oom_at']})"
        else:
            fits = f"Fits in {format_bytes(row['capacity'])}"
        if row["flushes"]:
            fits += f", after {counted(row['flushes'], 'cache flush', 'cache flushes')}"
        lines += wrap(f"{numbers} {fits}; same segments as the trace: {_recorded(row)}.", "   ")
    lines.append("")
    lines += wrap(
        "same segments as the trace: the replay allocated the segments the recording did, of "
        "the same sizes, in order (only the recorded settings can: others are not recorded). "
        "Unchecked prediction: no PyTorch run has checked predictions of that setting "
        "(bench/predictions.py checks max_split_size_mb, roundup_power2_divisions and "
        "expandable_segments). Cache flushes: the allocator gave back its cache and retried "
        "to stay within the device."
    )
    for note in rows[0]["notes"] if rows else ():
        lines += wrap(f"note: {note}")
    return lines


def downsample(values: list[int], points: int) -> list[int]:
    """At most ``points`` values, each the maximum of its stretch (peaks stay visible)."""
    if len(values) <= points:
        return list(values)
    step = len(values) / points
    return [
        max(values[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)])
        for i in range(points)
    ]


def write_html(runs: list[Run], path: str | Path, title: str = "vram replay") -> None:
    """The configurations' reserved and allocated timelines side by side, in one HTML file."""
    top = max((max(r.reserved, default=0) for r in runs), default=0) or 1
    width, height, pad, left = 420, 240, 30, 72  # pixels; left holds the byte labels
    panels = []
    for run in runs:
        reserved = downsample(run.reserved, width)
        allocated = downsample(run.allocated, width)
        n = max(len(reserved) - 1, 1)

        def line(values: list[int], n: int = n) -> str:
            return " ".join(
                f"{left + i * width / n:.1f},{pad + height - v * height / top:.1f}"
                for i, v in enumerate(values)
            )

        row = run.row
        ticks = "".join(
            f'<text x="{left - 4}" y="{pad + height - f * height + 4:.1f}" text-anchor="end">'
            f"{format_bytes(int(top * f))}</text>"
            f'<line x1="{left}" x2="{left + width}" y1="{pad + height - f * height:.1f}" '
            f'y2="{pad + height - f * height:.1f}" class="grid"/>'
            for f in (0, 0.25, 0.5, 0.75, 1)
        )
        panels.append(
            f'<div class="panel"><h2>{html.escape(row["config"])}</h2>'
            f'<svg width="{left + width + pad}" height="{height + 2 * pad}">{ticks}'
            f'<polyline class="reserved" points="{line(reserved)}"/>'
            f'<polyline class="allocated" points="{line(allocated)}"/>'
            f'<text x="{left + width / 2}" y="{height + 2 * pad - 8}" text-anchor="middle">'
            f"event ({len(run.reserved)} events)</text></svg>"
            f"<p>device mallocs {row['device_malloc']} · peak reserved "
            f"{format_bytes(row['peak_reserved'])} · peak allocated "
            f"{format_bytes(row['peak_allocated'])}"
            f"{' · OOM' if row['oom'] else ''}</p></div>"
        )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>
body {{ font: 13px system-ui, sans-serif; margin: 16px; }}
.panels {{ display: flex; flex-wrap: wrap; gap: 16px; }}
.panel h2 {{ font-size: 14px; margin: 0; }}
svg text {{ font-size: 10px; fill: #444; }}
.grid {{ stroke: #ddd; }}
.reserved {{ fill: none; stroke: #d62728; stroke-width: 1.2; }}
.allocated {{ fill: none; stroke: #1f77b4; stroke-width: 1.2; }}
</style></head><body><h1>{html.escape(title)}</h1>
<p><span style="color:#d62728">reserved</span> and
<span style="color:#1f77b4">allocated</span> bytes after each event of the trace</p>
<div class="panels">{"".join(panels)}</div></body></html>
"""
    Path(path).write_text(page)
