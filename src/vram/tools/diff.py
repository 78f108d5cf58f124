"""What changed between two runs: ``vram stats A --diff B`` and ``vram viz A --diff B``.

    vram stats before.pickle --diff after.pickle          tables
    vram viz before.pickle --diff after.pickle -o d.html  one page with the same, drawn

Two snapshots (PyTorch's or vram's) of one device are read as the viewer reads them
(``viz.ViewData``: every allocation and segment a lifetime in the trace, what existed
before it began included) and compared:

- the summary: events, allocations, device mallocs, reserved and allocated at the end, and
  the peaks of both over the trace;
- per stack frame: the bytes live at each run's allocated peak, and at its end, counted for
  every frame of their allocation's stack (a frame counts an allocation once): what grew
  and what shrank, largest change first. Frames are named ``function (file:line)``; one
  that only one run has is new or gone;
- per segment: the segments alive at the end, grouped by pool, stream and kind (small or
  large, expandable or not) and, but for expandable ones, by size: how many, the bytes they
  reserve and hold, in each run. An expandable segment is one however many pieces were
  mapped into it (the trace's segment_map events), as the snapshot counts it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._units import format_bytes
from ._snapshot_file import load_snapshot
from .output import check_output_path
from .replay import downsample
from .viz import ViewData, check_device

__all__ = ["RunDiff", "snapshot_diff", "diff_tables", "write_diff_html"]

_FRAMES_SHOWN = 20  # rows of the frame table
_TIMELINE_POINTS = 600  # points per line of the page's timelines


@dataclass
class _Run:
    """What one snapshot holds, reduced for the comparison."""

    name: str
    summary: dict[str, int]
    at_peak: dict[str, int]  # frame -> live bytes at the allocated peak
    at_end: dict[str, int]
    segments: dict[tuple, list[int]]  # (pool, stream, kind, size) -> [count, reserved, held]
    allocated: list[int]  # after each event (index 0: before the first)
    reserved: list[int]


@dataclass
class RunDiff:
    """The comparison of run A with run B (B minus A where a change is given)."""

    a: _Run
    b: _Run
    summary: list[tuple[str, int, int]] = field(default_factory=list)
    frames: list[tuple[str, int, int, int, int]] = field(default_factory=list)  # a/b peak, end
    segments: list[tuple[tuple, list[int], list[int]]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.name,
            "b": self.b.name,
            "summary": [{"metric": m, "a": x, "b": y, "change": y - x} for m, x, y in self.summary],
            "frames": [
                {
                    "frame": f,
                    "a_peak": ap,
                    "b_peak": bp,
                    "a_end": ae,
                    "b_end": be,
                }
                for f, ap, bp, ae, be in self.frames
            ],
            "segments": [
                {
                    "pool": key[0],
                    "stream": key[1],
                    "kind": key[2],
                    "size": key[3],
                    "a": {"count": a[0], "reserved": a[1], "held": a[2]},
                    "b": {"count": b[0], "reserved": b[1], "held": b[2]},
                }
                for key, a, b in self.segments
            ],
        }


def _run(source: dict | str | Path, device: int) -> _Run:
    snapshot = load_snapshot(source)
    check_device(snapshot, device)
    view = ViewData.build(snapshot, device)
    n = view.n
    totals = view.totals()
    allocated, reserved = totals["allocated"], totals["reserved"]
    peak = max(range(len(allocated)), key=allocated.__getitem__)  # moment + 1
    at_peak = _by_frame(view, peak - 1)
    at_end = _by_frame(view, n - 1 if n else -1)
    segments: dict[tuple, list[int]] = {}
    run_end = None  # where the last expandable piece counted ends, and its key
    alive = sorted((view.seg_addr[s], s) for s in range(len(view.seg_addr)) if view.seg_end[s] == n)
    for addr, s in alive:
        kind = "large" if view.seg_large[s] else "small"
        if view.seg_expandable[s]:
            kind += ", expandable"
        size = 0 if view.seg_expandable[s] else view.seg_size[s]
        pool = _pool(view.pools[view.seg_pool[s]])
        key = (pool, _stream(view.streams[view.seg_stream[s]]), kind, size)
        found = segments.setdefault(key, [0, 0, 0])
        # an expandable segment's mapped pieces are one segment while they touch
        found[0] += 0 if view.seg_expandable[s] and run_end == (addr, key) else 1
        found[1] += view.seg_size[s]
        found[2] += _held(view, s)
        run_end = (addr + view.seg_size[s], key) if view.seg_expandable[s] else None
    actions = view.actions
    summary = {
        "trace events": n,
        "allocations": sum(1 for start in view.alloc_start if start >= 0),
        "device mallocs": sum(1 for code in actions if code in (3, 5)),  # segment_alloc, _map
        "segments at the end": sum(v[0] for v in segments.values()),
        "reserved at the end": reserved[-1],
        "allocated at the end": allocated[-1],
        "peak reserved": max(reserved),
        "peak allocated": allocated[peak],
    }
    name = Path(source).name if isinstance(source, (str, Path)) else "snapshot"
    return _Run(name, summary, at_peak, at_end, segments, allocated, reserved)


def _pool(raw: str) -> str:
    """A pool as the tables name it: "default", or a private pool's id."""
    return "default" if raw in ("0,0", "0", "") else f"private ({raw})"


def _stream(raw: Any) -> str:
    return raw if isinstance(raw, str) else ("0 (default)" if raw == 0 else f"{raw:#x}")


def _held(view: ViewData, s: int) -> int:
    """Bytes of allocations alive at the end inside segment piece ``s``."""
    lo, hi = view.seg_addr[s], view.seg_addr[s] + view.seg_size[s]
    n = view.n
    return sum(
        block
        for addr, block, end in zip(view.alloc_addr, view.alloc_block, view.alloc_end, strict=True)
        if end == n and lo <= addr < hi
    )


def _by_frame(view: ViewData, moment: int) -> dict[str, int]:
    """Bytes live after ``moment`` per frame of their allocation's stack."""
    out: dict[str, int] = {}
    frames = view.frames
    for start, end, block, stack in zip(
        view.alloc_start, view.alloc_end, view.alloc_block, view.alloc_stack, strict=True
    ):
        if not start <= moment < end:
            continue
        ids = view.stacks[stack] if stack else []
        if not ids:
            out["(no stack recorded)"] = out.get("(no stack recorded)", 0) + block
            continue
        for frame in set(ids):
            text = frames[frame]
            out[text] = out.get(text, 0) + block
    return out


def snapshot_diff(a: dict | str | Path, b: dict | str | Path, device: int = 0) -> RunDiff:
    """Compare snapshot ``a`` with snapshot ``b`` for ``device`` (see the module docstring)."""
    run_a, run_b = _run(a, device), _run(b, device)
    result = RunDiff(run_a, run_b)
    result.summary = [(m, run_a.summary[m], run_b.summary[m]) for m in run_a.summary]
    names = set(run_a.at_peak) | set(run_b.at_peak) | set(run_a.at_end) | set(run_b.at_end)
    rows = [
        (
            f,
            run_a.at_peak.get(f, 0),
            run_b.at_peak.get(f, 0),
            run_a.at_end.get(f, 0),
            run_b.at_end.get(f, 0),
        )
        for f in names
    ]
    rows.sort(key=lambda r: (-max(abs(r[2] - r[1]), abs(r[4] - r[3])), r[0]))
    result.frames = [r for r in rows if r[1] != r[2] or r[3] != r[4]]
    keys = sorted(
        set(run_a.segments) | set(run_b.segments), key=lambda k: (str(k[0]), str(k[1]), k[2], k[3])
    )
    result.segments = [
        (k, run_a.segments.get(k, [0, 0, 0]), run_b.segments.get(k, [0, 0, 0])) for k in keys
    ]
    return result


# ============================================================================= tables
def _change(x: int, y: int) -> str:
    delta = y - x
    if delta == 0:
        return "="
    return ("+" if delta > 0 else "-") + format_bytes(abs(delta))


def diff_tables(result: RunDiff, shown: int = _FRAMES_SHOWN) -> list[Any]:
    """The diff as rich tables: the summary, the frames that changed most, the segments."""
    from rich.table import Table

    a, b = result.a.name, result.b.name
    summary = Table(title=f"{a} -> {b}")
    for name in ("metric", "A", "B", "change"):
        summary.add_column(name, justify="left" if name == "metric" else "right")
    for metric, x, y in result.summary:
        change = _change(x, y) if metric in _BYTES else ("=" if x == y else f"{y - x:+d}")
        summary.add_row(metric, _cell(metric, x), _cell(metric, y), change)
    frames = Table(
        title=f"stack frames: bytes live at the allocated peak and at the end "
        f"({min(shown, len(result.frames))} of {len(result.frames)} that changed)"
    )
    for name in ("frame", "A peak", "B peak", "peak change", "A end", "B end", "end change"):
        frames.add_column(name, overflow="fold") if name == "frame" else frames.add_column(
            name, justify="right", no_wrap=True
        )
    for f, ap, bp, ae, be in result.frames[:shown]:
        frames.add_row(
            f,
            format_bytes(ap),
            format_bytes(bp),
            _change(ap, bp),
            format_bytes(ae),
            format_bytes(be),
            _change(ae, be),
        )
    if not result.frames:
        from rich.text import Text

        frames = Text(
            "stack frames: no frame's bytes changed"
            + ("" if _has_stacks(result.a) or _has_stacks(result.b) else " (no stacks recorded)")
        )
    segments = Table(title="segments at the end, by pool, stream, kind and size")
    for name in ("pool", "stream", "kind", "size", "A", "B", "reserved change", "held change"):
        segments.add_column(name, justify="right" if name not in ("pool", "kind") else "left")
    for (pool, stream, kind, size), x, y in result.segments:
        segments.add_row(
            pool,
            stream,
            kind,
            "-" if kind.endswith("expandable") else format_bytes(size),
            f"{x[0]} ({format_bytes(x[1])})",
            f"{y[0]} ({format_bytes(y[1])})",
            _change(x[1], y[1]),
            _change(x[2], y[2]),
        )
    return [summary, frames, segments]


# ============================================================================== page
_LEFT, _BOTTOM, _PAD = 64, 28, 8  # pixels around a timeline: the axes' labels


def _timeline(run: _Run, top: int, width: int, height: int) -> str:
    """One run's reserved and allocated bytes over its events, with numbered axes (bytes
    on the left, one scale for both runs; events below)."""
    inner_w, inner_h = width - _LEFT - _PAD, height - _BOTTOM - _PAD
    out = []
    for f in (0, 0.25, 0.5, 0.75, 1):
        y = _PAD + inner_h - f * inner_h
        out.append(
            f'<line class="grid" x1="{_LEFT}" x2="{_LEFT + inner_w}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text x="{_LEFT - 4}" y="{y + 3:.1f}" text-anchor="end">'
            f"{format_bytes(int(top * f))}</text>"
        )
    events = max(len(run.reserved) - 1, 1)
    for f in (0, 0.25, 0.5, 0.75, 1):
        x = _LEFT + f * inner_w
        out.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{_PAD}" y2="{_PAD + inner_h}"/>'
            f'<text x="{x:.1f}" y="{_PAD + inner_h + 14}" text-anchor="middle">'
            f"{round(events * f):,}</text>"
        )
    out.append(
        f'<text x="{_LEFT + inner_w / 2:.1f}" y="{height - 2}" text-anchor="middle">event</text>'
    )
    for values, css in ((run.reserved, "reserved"), (run.allocated, "allocated")):
        sampled = downsample(values, _TIMELINE_POINTS)
        n = max(len(sampled) - 1, 1)
        points = " ".join(
            f"{_LEFT + i * inner_w / n:.1f},{_PAD + inner_h - v * inner_h / top:.1f}"
            for i, v in enumerate(sampled)
        )
        out.append(f'<polyline class="{css}" points="{points}"/>')
    return "".join(out)


def write_diff_html(result: RunDiff, out: str | Path, shown: int = 40) -> Path:
    """The diff as one self-contained HTML page: both runs' reserved and allocated over
    their trace, the summary, the frames that grew and shrank as bars, the segments."""
    out = check_output_path(out, "out")
    e = html.escape
    a, b = result.a, result.b
    top = max(max(a.reserved, default=0), max(b.reserved, default=0), 1)
    width, height = 600, 230
    timelines = "".join(
        f'<div class="panel"><h3>{label}: {e(run.name)}</h3>'
        f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}">'
        f"{_timeline(run, top, width, height)}</svg>"
        f"<p>peak reserved {format_bytes(run.summary['peak reserved'])} &middot; peak allocated "
        f"{format_bytes(run.summary['peak allocated'])} &middot; {run.summary['trace events']} "
        "events</p></div>"
        for label, run in (("A", a), ("B", b))
    )
    summary = "".join(
        f"<tr><td>{e(m)}</td><td>{_cell(m, x)}</td><td>{_cell(m, y)}</td>"
        f"<td class='{_css(y - x)}'>"
        f"{_change(x, y) if m in _BYTES else ('=' if x == y else f'{y - x:+d}')}</td></tr>"
        for m, x, y in result.summary
    )
    rows = result.frames[:shown]
    scale = max((max(abs(bp - ap), abs(be - ae)) for _, ap, bp, ae, be in rows), default=1) or 1
    frames = "".join(
        f"<tr><td class='frame'>{e(f)}</td>"
        f"<td>{_bar(bp - ap, scale)}</td><td class='{_css(bp - ap)}'>{_change(ap, bp)}</td>"
        f"<td>{_bar(be - ae, scale)}</td><td class='{_css(be - ae)}'>{_change(ae, be)}</td></tr>"
        for f, ap, bp, ae, be in rows
    )
    segments = "".join(
        f"<tr><td>{e(str(pool))}</td><td>{e(str(stream))}</td><td>{e(kind)}</td>"
        f"<td>{'-' if kind.endswith('expandable') else format_bytes(size)}</td>"
        f"<td>{x[0]} ({format_bytes(x[1])}, {format_bytes(x[2])} held)</td>"
        f"<td>{y[0]} ({format_bytes(y[1])}, {format_bytes(y[2])} held)</td>"
        f"<td class='{_css(y[1] - x[1])}'>{_change(x[1], y[1])}</td></tr>"
        for (pool, stream, kind, size), x, y in result.segments
    )
    if rows:
        frames_section = (
            f"<h2>Stack frames: bytes live at the allocated peak and at the end ({len(rows)} "
            f"of {len(result.frames)} that changed)</h2>\n<table><tr><th>frame</th>"
            '<th colspan="2">at the peak</th><th colspan="2">at the end</th></tr>'
            f"{frames}</table>"
        )
    else:
        frames_section = (
            "<h2>Stack frames</h2><p>No stack frame's bytes changed"
            + (
                ""
                if _has_stacks(a) or _has_stacks(b)
                else " (neither snapshot recorded stacks: _record_memory_history(context='all')"
                " records them)"
            )
            + ".</p>"
        )
    title = f"vram diff: {a.name} -> {b.name}"
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title><style>
body {{ font: 13px system-ui, sans-serif; margin: 16px; color: #1d2330; }}
h1 {{ font-size: 17px; }} h2 {{ font-size: 14px; margin-top: 22px; }}
h3 {{ font-size: 13px; margin: 0; }}
.panels {{ display: flex; gap: 16px; flex-wrap: wrap; }}
svg {{ background: #fafbfc; border: 1px solid #dde1e8; }}
svg text {{ font-size: 10px; fill: #444; }}
.grid {{ stroke: #e3e6eb; }}
.reserved {{ fill: none; stroke: #d62728; stroke-width: 1.2; }}
.allocated {{ fill: none; stroke: #1f77b4; stroke-width: 1.2; }}
table {{ border-collapse: collapse; }}
td, th {{ padding: 2px 8px; border-bottom: 1px solid #eef0f3; }}
td {{ text-align: right; }} td:first-child, td.frame {{ text-align: left; }}
td.frame {{ font-family: ui-monospace, Menlo, monospace; font-size: 11.5px; max-width: 640px; }}
.grew {{ color: #c0392b; }} .shrank {{ color: #1f7a3a; }}
.bar {{ display: inline-block; height: 10px; }}
.bar.grew {{ background: #e4675b; }} .bar.shrank {{ background: #58a86b; }}
</style></head><body>
<h1>{e(title)}</h1>
<p><span style="color:#d62728">reserved</span> and <span style="color:#1f77b4">allocated</span>
bytes after each event of each trace (one scale for both runs)</p>
<div class="panels">{timelines}</div>
<h2>Summary (B minus A)</h2>
<table><tr><th>metric</th><th>A</th><th>B</th><th>change</th></tr>{summary}</table>
{frames_section}
<h2>Segments at the end, by pool, stream, kind and size</h2>
<table><tr><th>pool</th><th>stream</th><th>kind</th><th>size</th><th>A</th><th>B</th>
<th>reserved change</th></tr>{segments}</table>
</body></html>
"""
    out.write_text(page, encoding="utf-8")
    return out


_BYTES = frozenset(
    ("reserved at the end", "allocated at the end", "peak reserved", "peak allocated")
)  # the summary's metrics in bytes (the others are counts)


def _has_stacks(run: _Run) -> bool:
    names = set(run.at_peak) | set(run.at_end)
    return bool(names - {"(no stack recorded)"})


def _cell(metric: str, value: int) -> str:
    return format_bytes(value) if metric in _BYTES else str(value)


def _css(delta: int) -> str:
    return "grew" if delta > 0 else ("shrank" if delta < 0 else "")


def _bar(delta: int, scale: int) -> str:
    width = round(120 * abs(delta) / scale)
    return f"<span class='bar {_css(delta)}' style='width:{width}px'></span>" if width else ""
