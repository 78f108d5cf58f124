"""The memory viewer: a snapshot drawn as one self-contained HTML page, or as a PNG.

Input is a snapshot in PyTorch's format (what ``torch.cuda.memory._snapshot()`` pickles and
what vram writes): ``segments`` (the allocator's state when the snapshot was taken),
``device_traces`` (per device, the ring of recent alloc / free / segment events) and
``allocator_settings``.

What the page shows:
- the active-memory timeline: every allocation a band stacked on those below it, from the
  event that allocated it to the event that completed its free (x = event index, y = bytes),
  coloured by size or by stream; small allocations beyond a point budget are summed into one
  grey band on top, so that 100,000+ events stay responsive;
- the allocator state at any moment: the segments alive then, with their blocks;
- a details panel for what is under the mouse (size, address, stream, pool, state, stack).

How the moment-by-moment state is recovered (Note [Trace begins late]): the trace ring may
begin after some allocations were already live. Everything is reduced to lifetimes
``[start, end)`` in event indices, with ``start = -1`` for what existed before the first
event: an allocation freed in the trace but never allocated in it, and an active block or a
segment of the final ``segments`` state that the trace never created. The state after event
``m`` is then everything with ``start <= m < end`` -- PyTorch's MemoryViz makes the same
assumption. Allocation sizes in a trace are the requested sizes; a block's extent in the state
view is that size rounded up to 512 B, or the block's exact size when the final state has it.

Python does the bookkeeping once (lifetimes as columns of numbers: JSON, or binary for a
large trace, Note [Large pages]); viz.js lays out and
draws on <canvas> in the browser. ``write_png`` uses the same layout, drawn by matplotlib.
"""

from __future__ import annotations

import bisect
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._units import format_bytes
from ._snapshot_file import load_snapshot
from .output import check_output_path

__all__ = [
    "ViewData",
    "check_device",
    "check_png",
    "load_snapshot",
    "snapshot_devices",
    "write_html",
    "write_png",
]

_HERE = Path(__file__).resolve().parent
_TEMPLATE = _HERE / "viz_template.html"
_SCRIPT = _HERE / "viz.js"

# Trace actions, numbered as the page reads them (viz.js keeps the same list).
_ACTIONS = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
    "other",
)
_ACTION_CODE = {name: code for code, name in enumerate(_ACTIONS)}

_BLOCK_ROUND = 512  # bytes: the allocator rounds every block up to this (kMinBlockSize)
_SMALL_SEGMENT = 2 << 20  # bytes: small-pool segments are 2 MiB (kSmallBuffer)
_MAX_POINTS = 3_000_000  # timeline breakpoints before small allocations are summarised
_PACK_EVENTS = 100_000  # from this many events on, columns are binary (Note [Large pages])
_MAX_FRAMES = 64  # frames kept per stack, innermost first


def write_html(
    snapshot: dict | str | Path,
    out: str | Path,
    device: int = 0,
    title: str | None = None,
) -> Path:
    """Write the viewer for ``device`` of ``snapshot`` to ``out``: one HTML file, no network.

    ValueError if ``snapshot`` is not a snapshot or holds nothing for ``device``; every
    string taken from the snapshot is escaped where the page shows it.
    """
    out = check_output_path(out, "out")
    snap = load_snapshot(snapshot)
    check_device(snap, device)
    if title is None:
        title = Path(snapshot).name if isinstance(snapshot, (str, Path)) else "memory snapshot"
    data = ViewData.build(snap, device).to_json()
    data["title"] = title
    # No "<", ">" or "&" inside <script> (a snapshot string could close it, or open a
    # comment); "\u003c" and the others are the same JSON strings.
    payload = json.dumps(data, separators=(",", ":"))
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        payload = payload.replace(char, escaped)
    parts = {"TITLE": html.escape(title), "DATA": payload, "SCRIPT": _SCRIPT.read_text()}
    page = re.sub(r"\{\{(TITLE|DATA|SCRIPT)\}\}", lambda m: parts[m[1]], _TEMPLATE.read_text())
    out.write_text(page, encoding="utf-8")
    return out


def check_png(argument: str = "png") -> None:
    """ValueError naming ``argument`` and the extra to install when matplotlib, which draws
    the PNG, is missing (call it before any other work)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError(
            f'{argument}: drawing a PNG needs matplotlib: pip install -e ".[plot]" '
            "(or pip install matplotlib)"
        ) from None


def write_png(
    snapshot: dict | str | Path,
    out: str | Path,
    device: int = 0,
    title: str | None = None,
) -> Path:
    """Draw the active-memory timeline of ``device`` with matplotlib and save it to ``out``.

    ValueError if ``snapshot`` is not a snapshot or holds nothing for ``device``, or when
    matplotlib is missing (``check_png``).
    """
    check_png()
    out = check_output_path(out, "out")
    snap = load_snapshot(snapshot)
    check_device(snap, device)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    if title is None:
        title = Path(snapshot).name if isinstance(snapshot, (str, Path)) else "memory snapshot"
    view = ViewData.build(snap, device)
    layout = _Layout.compute(view)
    gib = float(1 << 30)

    bits = view.size_bits()
    polys, colours = [], []
    for a in layout.individual:
        xs, ys = layout.points[a]
        size = view.alloc_size[a] / gib
        end = min(view.alloc_end[a], view.n)
        bottom = [(max(xs[0], 0), ys[0] / gib)]
        for k in range(1, len(xs)):
            bottom += [(xs[k], ys[k - 1] / gib), (xs[k], ys[k] / gib)]
        bottom.append((end, ys[-1] / gib))
        top = [(x, y + size) for x, y in reversed(bottom)]
        polys.append(bottom + top)
        colours.append(_size_colour(view.alloc_size[a], bits, a))

    fig, ax = plt.subplots(figsize=(14, 5), dpi=110)
    ax.add_collection(PolyCollection(polys, facecolors=colours, linewidths=0))
    x = list(range(-1, view.n))
    xs = [max(v, 0) for v in x]
    individual = [v / gib for v in layout.individual_total]
    total = [v / gib for v in layout.active_total]
    if layout.threshold > 0:
        ax.fill_between(xs, individual, total, step="post", color="#b0b0b0", linewidth=0)
    reserved = [v / gib for v in layout.reserved_total]
    ax.step(xs, reserved, where="post", color="#333333", linewidth=0.8, label="reserved")
    peak = max(range(len(total)), key=total.__getitem__)
    ax.plot([xs[peak]], [total[peak]], "v", color="#c0392b")
    ax.annotate(f"peak active {format_bytes(layout.active_total[peak])}", (xs[peak], total[peak]))
    ax.set_xlim(0, max(view.n, 1))
    ax.set_ylim(0, max(max(reserved, default=0), max(total, default=0), 1e-9) * 1.08)
    ax.set_xlabel("event")
    ax.set_ylabel("GiB")
    ax.set_title(f"{title} - active memory timeline (device {device})")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def snapshot_devices(snap: dict) -> list[int]:
    """The device indices a snapshot holds anything for: trace events or segments."""
    traced = {i for i, trace in enumerate(snap.get("device_traces") or []) if trace}
    return sorted(traced | {s.get("device", 0) for s in snap.get("segments") or []})


def check_device(snap: dict, device: int) -> None:
    """ValueError unless ``snap`` holds trace events or segments for ``device``."""
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise ValueError(f"device: expected a device index (0, 1, ...), got {device!r}")
    found = snapshot_devices(snap)
    if device in found:
        return
    if not found:
        raise ValueError("the snapshot is empty: no segments and no trace events to draw")
    listed = ", ".join(map(str, found))
    raise ValueError(f"device: the snapshot holds nothing for device {device} (it has {listed})")


@dataclass
class ViewData:
    """Lifetimes of allocations and segments in event indices; see Note [Trace begins late].

    Columns, one entry per allocation (``alloc_*``) or segment piece (``seg_*``). A segment
    piece is a whole segment, or one mapped range of an expandable segment. ``end == n`` means
    alive at the end of the trace.
    """

    n: int = 0
    actions: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)  # microseconds since the first event
    streams: list[int] = field(default_factory=list)  # raw stream ids; columns index this
    frames: list[str] = field(default_factory=list)
    stacks: list[list[int]] = field(default_factory=lambda: [[]])  # stack 0 is "no frames"
    pools: list[str] = field(default_factory=list)
    oom: list[int] = field(default_factory=list)
    alloc_addr: list[int] = field(default_factory=list)
    alloc_size: list[int] = field(default_factory=list)
    alloc_block: list[int] = field(default_factory=list)  # bytes the block spans
    alloc_stream: list[int] = field(default_factory=list)
    alloc_start: list[int] = field(default_factory=list)
    alloc_free_req: list[int] = field(default_factory=list)
    alloc_end: list[int] = field(default_factory=list)
    alloc_stack: list[int] = field(default_factory=list)
    alloc_pool: list[int] = field(default_factory=list)  # the pool of the segment it is in
    seg_addr: list[int] = field(default_factory=list)
    seg_size: list[int] = field(default_factory=list)
    seg_stream: list[int] = field(default_factory=list)
    seg_pool: list[int] = field(default_factory=list)
    seg_large: list[int] = field(default_factory=list)
    seg_expandable: list[int] = field(default_factory=list)
    seg_start: list[int] = field(default_factory=list)
    seg_end: list[int] = field(default_factory=list)
    seg_stack: list[int] = field(default_factory=list)
    settings: str = ""
    _stream_index: dict = field(default_factory=dict)
    _frame_index: dict = field(default_factory=dict)
    _stack_index: dict = field(default_factory=dict)
    _pool_index: dict = field(default_factory=dict)
    _open_allocs: dict = field(default_factory=dict)  # address -> allocation live at the end

    @classmethod
    def build(cls, snap: dict, device: int) -> ViewData:
        traces = snap.get("device_traces") or []
        trace = traces[device] if device < len(traces) else []
        segments = [s for s in snap.get("segments", []) if s.get("device", 0) == device]
        view = cls(n=len(trace), settings=_settings_text(snap.get("allocator_settings")))
        view._read_trace(trace)
        view._add_final_state(segments)
        view._assign_pools()
        view._sort_allocations()
        return view

    def _read_trace(self, trace: list[dict]) -> None:
        n = self.n
        t0 = trace[0].get("time_us", 0) if trace else 0
        open_allocs: dict[int, int] = {}  # address -> allocation, until its free completes
        open_segs: dict[int, int] = {}  # address -> segment piece, until freed or unmapped
        for i, e in enumerate(trace):
            action = e.get("action", "other")
            code = _ACTION_CODE.get(action, _ACTION_CODE["other"])
            self.actions.append(code)
            self.times.append(int(e.get("time_us", t0) - t0))
            addr, size = e.get("addr", 0), e.get("size", 0)
            if action == "alloc":
                a = self._new_alloc(addr, size, e.get("stream", 0), i, e.get("frames"))
                open_allocs[addr] = a
            elif action in ("free_requested", "free_completed"):
                a = open_allocs.get(addr)
                if a is None:  # allocated before the trace began
                    a = self._new_alloc(addr, size, e.get("stream", 0), -1, e.get("frames"))
                    open_allocs[addr] = a
                if action == "free_requested" or self.alloc_free_req[a] == n:
                    self.alloc_free_req[a] = i
                if action == "free_completed":
                    self.alloc_end[a] = i
                    del open_allocs[addr]
            elif action in ("segment_alloc", "segment_map"):
                expandable = action == "segment_map"
                s = self._new_seg(addr, size, e.get("stream", 0), i, expandable, e.get("frames"))
                open_segs[addr] = s
            elif action in ("segment_free", "segment_unmap"):
                s = open_segs.pop(addr, None)
                if s is None:  # created before the trace began
                    expandable = action == "segment_unmap"
                    s = self._new_seg(addr, size, e.get("stream", 0), -1, expandable, None)
                self.seg_end[s] = i
            elif action == "oom":
                self.oom.append(i)
        self._open_allocs = open_allocs

    def _add_final_state(self, segments: list[dict]) -> None:
        """Fill in what the final state knows: pools, exact block sizes, pre-trace lifetimes."""
        n = self.n
        alive_pieces = sorted(
            (self.seg_addr[s], self.seg_size[s], s)
            for s in range(len(self.seg_addr))
            if self.seg_end[s] == n
        )
        for seg in sorted(segments, key=lambda s: s["address"]):
            base, total = seg["address"], seg["total_size"]
            pool = self._pool(seg.get("segment_pool_id", (0, 0)))
            large = int(seg.get("segment_type", "large") == "large")
            covered = [(a, sz, s) for a, sz, s in alive_pieces if base <= a < base + total]
            for _, _, s in covered:
                self.seg_pool[s], self.seg_large[s] = pool, large
            for gap_addr, gap_size in _uncovered(base, total, covered):
                s = self._new_seg(
                    gap_addr,
                    gap_size,
                    seg.get("stream", 0),
                    -1,
                    bool(seg.get("is_expandable", False)),
                    seg.get("frames"),
                )
                self.seg_pool[s], self.seg_large[s] = pool, large
            for block in seg.get("blocks", []):
                if block["state"] == "inactive":
                    continue
                a = self._open_allocs.get(block["address"])
                if a is None:  # allocated before the trace began and still live
                    size = block.get("requested_size", block["size"])
                    a = self._new_alloc(
                        block["address"], size, seg.get("stream", 0), -1, block.get("frames")
                    )
                    if block["state"] == "active_pending_free":
                        self.alloc_free_req[a] = -1
                self.alloc_block[a] = block["size"]
                if self.alloc_stack[a] == 0:
                    self.alloc_stack[a] = self._stack(block.get("frames"))

    def _assign_pools(self) -> None:
        """Each allocation's pool: that of the segment piece holding its address when it
        began (a sweep over the pieces' lifetimes, pieces of one moment by address)."""
        default = self._pool((0, 0))
        events = []  # (moment, order, kind, index): removals, then additions, then allocations
        for s in range(len(self.seg_addr)):
            events.append((self.seg_start[s], 1, s))
            events.append((self.seg_end[s], 0, s))
        events += [(start, 2, a) for a, start in enumerate(self.alloc_start)]
        live: list[tuple[int, int]] = []  # (address, piece), sorted
        self.alloc_pool = [default] * len(self.alloc_addr)
        for _, kind, k in sorted(events):
            if kind == 0:
                del live[bisect.bisect_left(live, (self.seg_addr[k], k))]
            elif kind == 1:
                bisect.insort(live, (self.seg_addr[k], k))
            else:
                i = bisect.bisect_right(live, (self.alloc_addr[k], len(self.seg_addr))) - 1
                if i >= 0:
                    addr, s = live[i]
                    if self.alloc_addr[k] < addr + self.seg_size[s]:
                        self.alloc_pool[k] = self.seg_pool[s]

    def _sort_allocations(self) -> None:
        """Put allocations in the order of their start; the page's layout walks them so."""
        order = sorted(range(len(self.alloc_addr)), key=lambda a: (self.alloc_start[a], a))
        for name in (
            "alloc_addr",
            "alloc_size",
            "alloc_block",
            "alloc_stream",
            "alloc_start",
            "alloc_free_req",
            "alloc_end",
            "alloc_stack",
            "alloc_pool",
        ):
            column = getattr(self, name)
            setattr(self, name, [column[a] for a in order])

    def _new_alloc(self, addr: int, size: int, stream: int, start: int, frames) -> int:
        self.alloc_addr.append(addr)
        self.alloc_size.append(size)
        self.alloc_block.append(-(-size // _BLOCK_ROUND) * _BLOCK_ROUND)
        self.alloc_stream.append(self._stream(stream))
        self.alloc_start.append(start)
        self.alloc_free_req.append(self.n)
        self.alloc_end.append(self.n)
        self.alloc_stack.append(self._stack(frames))
        return len(self.alloc_addr) - 1

    def _new_seg(self, addr, size, stream, start, expandable: bool, frames) -> int:
        self.seg_addr.append(addr)
        self.seg_size.append(size)
        self.seg_stream.append(self._stream(stream))
        self.seg_pool.append(self._pool((0, 0)))
        self.seg_large.append(int(size != _SMALL_SEGMENT or expandable))
        self.seg_expandable.append(int(expandable))
        self.seg_start.append(start)
        self.seg_end.append(self.n)
        self.seg_stack.append(self._stack(frames))
        return len(self.seg_addr) - 1

    def _stream(self, stream: int) -> int:
        return _intern(self._stream_index, self.streams, stream)

    def _pool(self, pool_id) -> int:
        text = ",".join(str(v) for v in pool_id) if isinstance(pool_id, (tuple, list)) else pool_id
        return _intern(self._pool_index, self.pools, str(text))

    def _stack(self, frames) -> int:
        if not frames:
            return 0
        ids = tuple(
            _intern(self._frame_index, self.frames, _frame_text(f)) for f in frames[:_MAX_FRAMES]
        )
        if ids not in self._stack_index:
            self._stack_index[ids] = len(self.stacks)
            self.stacks.append(list(ids))
        return self._stack_index[ids]

    def totals(self) -> dict[str, list[int]]:
        """Bytes "reserved" (segments), "allocated" (from alloc to free_requested) and
        "active" (to free_completed: also frees waiting for another stream's work) after
        each event; index m + 1 is the moment after event m, index 0 before the first."""
        n = self.n
        out = {}
        for name, starts, ends, sizes in (
            ("reserved", self.seg_start, self.seg_end, self.seg_size),
            ("allocated", self.alloc_start, self.alloc_free_req, self.alloc_block),
            ("active", self.alloc_start, self.alloc_end, self.alloc_block),
        ):
            deltas = [0] * (n + 2)
            for start, end, size in zip(starts, ends, sizes, strict=True):
                deltas[start + 1] += size
                deltas[end + 1] -= size
            values, now = [], 0
            for delta in deltas[: n + 1]:
                now += delta
                values.append(now)
            out[name] = values
        return out

    def size_bits(self) -> tuple[int, int]:
        """The colour scale: bit lengths from the size below which the smallest allocations
        hold 1% of all allocated bytes, to the largest allocation."""
        sizes = sorted(size for size in self.alloc_size if size > 0)
        if not sizes:
            return (0, 0)
        total, running = sum(sizes), 0
        for size in sizes:
            running += size
            if running * 100 >= total:
                break
        return (size.bit_length(), sizes[-1].bit_length())

    def to_json(self) -> dict[str, Any]:
        """The page's data: JSON columns, or for large traces binary ones (Note [Large pages])."""
        pack = _pack if self.n >= _PACK_EVENTS else _plain
        return {
            "n": self.n,
            "actionNames": list(_ACTIONS),
            "action": pack(self.actions, "u8"),
            "time": pack(self.times, "f64"),
            "streams": self.streams,
            "pools": self.pools,
            "frames": self.frames,
            "stacks": self.stacks,
            "oom": self.oom,
            "settings": self.settings,
            "alloc": {
                "addr": pack(self.alloc_addr, "f64"),
                "size": pack(self.alloc_size, "f64"),
                "block": pack(self.alloc_block, "f64"),
                "stream": pack(self.alloc_stream, "i32"),
                "start": pack(self.alloc_start, "i32"),
                "freeReq": pack(self.alloc_free_req, "i32"),
                "end": pack(self.alloc_end, "i32"),
                "stack": pack(self.alloc_stack, "i32"),
                "pool": pack(self.alloc_pool, "i32"),
            },
            "seg": {
                "addr": pack(self.seg_addr, "f64"),
                "size": pack(self.seg_size, "f64"),
                "stream": pack(self.seg_stream, "i32"),
                "pool": pack(self.seg_pool, "i32"),
                "large": pack(self.seg_large, "u8"),
                "expandable": pack(self.seg_expandable, "u8"),
                "start": pack(self.seg_start, "i32"),
                "end": pack(self.seg_end, "i32"),
                "stack": pack(self.seg_stack, "i32"),
            },
            "sizeBits": self.size_bits(),
            "maxPoints": _MAX_POINTS,
        }


@dataclass
class _Layout:
    """The stacked timeline, as viz.js computes it: the same algorithm, for ``write_png``.

    Allocations are stacked in the order they start; when one is freed, those above it move
    down. ``points[a]`` is the allocation's bottom edge as breakpoints (event, offset). The
    allocations smaller than ``threshold`` are not stacked one by one: their sum is a band on
    top of the others (``individual_total`` up to ``active_total``). Totals are indexed by
    moment + 1 (index 0 is the state before the first event).
    """

    individual: list[int]
    points: dict[int, tuple[list[int], list[int]]]
    threshold: int
    individual_total: list[int]
    active_total: list[int]
    reserved_total: list[int]

    @classmethod
    def compute(cls, view: ViewData) -> _Layout:
        sizes = sorted(view.alloc_size, reverse=True)
        if not sizes:  # segments only: nothing to stack
            return cls._stack(view, 0)  # type: ignore[return-value]
        count = len(sizes)
        while True:
            if count == 0:  # summarise everything
                threshold = sizes[0] + 1
            else:
                threshold = sizes[count - 1] if count < len(sizes) else 0
            layout = cls._stack(view, threshold)
            if layout is not None:
                return layout
            count //= 2

    @classmethod
    def _stack(cls, view: ViewData, threshold: int) -> _Layout | None:
        n = view.n
        starts: dict[int, int] = {}
        ends: dict[int, int] = {}
        initial = []
        for a, (start, end) in enumerate(zip(view.alloc_start, view.alloc_end, strict=True)):
            if start < 0:
                initial.append(a)
            else:
                starts[start] = a
            if end < n:
                ends[end] = a
        stack: list[int] = []
        offset: dict[int, int] = {}
        points: dict[int, tuple[list[int], list[int]]] = {}
        top = 0
        small = 0
        budget = _MAX_POINTS

        def push(a: int, x: int) -> None:
            nonlocal top, small
            if view.alloc_size[a] < threshold:
                small += view.alloc_size[a]
                return
            offset[a] = top
            points[a] = ([x], [top])
            stack.append(a)
            top += view.alloc_size[a]

        for a in initial:
            push(a, -1)
        individual_total, active_total = [top], [top + small]
        for i in range(n):
            a = ends.get(i)
            if a is not None and a in offset:
                pos = stack.index(a)
                size = view.alloc_size[a]
                budget -= len(stack) - pos - 1
                if budget < 0:
                    return None
                for b in stack[pos + 1 :]:
                    offset[b] -= size
                    points[b][0].append(i)
                    points[b][1].append(offset[b])
                del stack[pos], offset[a]
                top -= size
            elif a is not None:
                small -= view.alloc_size[a]
            a = starts.get(i)
            if a is not None:
                push(a, i)
            individual_total.append(top)
            active_total.append(top + small)
        reserved = [0] * (n + 2)
        for start, end, size in zip(view.seg_start, view.seg_end, view.seg_size, strict=True):
            reserved[start + 1] += size
            reserved[end + 1] -= size
        for k in range(1, n + 2):
            reserved[k] += reserved[k - 1]
        return cls(
            individual=list(points),
            points=points,
            threshold=threshold,
            individual_total=individual_total,
            active_total=active_total,
            reserved_total=reserved[: n + 1],
        )


# Note [Large pages]
# A trace of a million events makes columns of a million numbers. As JSON each costs the
# page its digits and the browser a parse; as little-endian binary in base64 each costs 1.3
# to 11 bytes, decoded with one atob. From _PACK_EVENTS events on, every column is written
# so: {"b64": ..., "type": "u8" | "u16" | "i32" | "f64"}, in the narrowest type that holds
# its values (a stream or stack index takes one or two bytes, not a JSON number's digits).
# The columns the drawing needs are decoded when the page loads; the events' actions and
# times, which only the details panel shows, when it first asks (viz.js: lazyColumn).
# Smaller pages keep plain JSON lists.
_TYPES = (("u8", "<u1", 0, 255), ("u16", "<u2", 0, 65535), ("i32", "<i4", -(2**31), 2**31 - 1))


def _plain(values: list, kind: str) -> list:
    return values


def _pack(values: list, kind: str) -> dict[str, str]:
    """``values`` as {"b64", "type"}: the narrowest of u8, u16, i32 that holds them (all
    integers), else f64."""
    import base64

    import numpy as np

    found = np.asarray(values)
    name, dtype = "f64", "<f8"
    if found.dtype.kind in "iub" or kind != "f64":
        low = int(found.min()) if found.size else 0
        high = int(found.max()) if found.size else 0
        for candidate, numpy_type, least, most in _TYPES:
            if least <= low and high <= most:
                name, dtype = candidate, numpy_type
                break
    data = found.astype(dtype).tobytes()
    return {"b64": base64.b64encode(data).decode("ascii"), "type": name}


def _uncovered(base: int, total: int, pieces: list[tuple[int, int, int]]):
    """The ranges of [base, base + total) that no (addr, size, _) piece covers."""
    cursor = base
    for addr, size, _ in sorted(pieces):
        if addr > cursor:
            yield cursor, addr - cursor
        cursor = max(cursor, addr + size)
    if cursor < base + total:
        yield cursor, base + total - cursor


def _intern(index: dict, table: list, value) -> int:
    if value not in index:
        index[value] = len(table)
        table.append(value)
    return index[value]


def _frame_text(frame: dict) -> str:
    return f"{frame.get('name', '?')} ({frame.get('filename', '?')}:{frame.get('line', '?')})"


def _settings_text(settings: dict | None) -> str:
    if not settings:
        return ""
    conf = settings.get("PYTORCH_CUDA_ALLOC_CONF") or settings.get("VRAM_ALLOC_CONF")
    if conf:
        return conf
    return "expandable_segments" if settings.get("expandable_segments") else "defaults"


# The page's colours by size (viz.js: RAMP, sizeColour, shade), from blue to red.
_RAMP = (
    (59, 111, 216),
    (46, 170, 200),
    (80, 185, 110),
    (200, 200, 60),
    (240, 150, 50),
    (214, 69, 61),
)


def _size_colour(size: int, bits: tuple[int, int], index: int) -> tuple[float, float, float]:
    """The colour of an allocation of ``size`` when sizes span ``bits`` (log2 range)."""
    lo, hi = bits
    t = (size.bit_length() - lo) / (hi - lo) if hi > lo else 0.5
    x = min(max(t, 0.0), 1.0) * (len(_RAMP) - 1)
    k = min(int(x), len(_RAMP) - 2)
    rgb = [c + (d - c) * (x - k) for c, d in zip(_RAMP[k], _RAMP[k + 1], strict=True)]
    if index % 3 == 1:
        rgb = [c + (255 - c) * 0.2 for c in rgb]
    elif index % 3 == 2:
        rgb = [c * 0.86 for c in rgb]
    return tuple(c / 255 for c in rgb)
