"""The viewer's files: HTML pages that need no network, PNG timelines, and big traces."""

from __future__ import annotations

import json
import pickle
import re
import time

import pytest

from vram.tools.viz import load_snapshot, write_html, write_png


def _page_data(page: str) -> dict:
    match = re.search(r'<script id="viz-data" type="application/json">(.*?)</script>', page, re.S)
    assert match, "the page embeds its data"
    return json.loads(match.group(1))


def test_html_for_each_bundled_trace(real_trace, tmp_path):
    out = write_html(real_trace, tmp_path / "view.html")
    page = out.read_text()
    snap = load_snapshot(real_trace)
    trace = snap["device_traces"][0]
    data = _page_data(page)

    assert data["n"] == len(trace)
    assert data["title"] == real_trace.name
    allocs = sum(e["action"] == "alloc" for e in trace)
    assert len(data["alloc"]["addr"]) == allocs  # these traces begin before any allocation
    assert "<canvas" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"<script[^>]*\ssrc=", page, re.I)
    assert "@import" not in page


def test_png_for_each_bundled_trace(real_trace, tmp_path):
    pytest.importorskip("matplotlib")
    out = write_png(real_trace, tmp_path / "timeline.png")
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000


def test_load_snapshot_takes_a_dict_or_a_pickle(tmp_path, synthetic_snapshot):
    snap = synthetic_snapshot(200)
    assert load_snapshot(snap) is snap
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap))
    assert load_snapshot(path)["device_traces"] == snap["device_traces"]
    (tmp_path / "other.pickle").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="not a memory snapshot"):
        load_snapshot(tmp_path / "other.pickle")


def _event(action: str, addr: int, size: int, stream: int = 0) -> dict:
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": 0}


def _segment(addr: int, size: int, blocks: list[dict]) -> dict:
    return {
        "device": 0,
        "address": addr,
        "total_size": size,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 1),
        "is_expandable": False,
        "frames": [],
        "blocks": blocks,
    }


def test_lifetimes_include_what_predates_the_trace(tmp_path):
    """A trace that begins late: what it frees without allocating, and what the final state
    holds without the trace allocating it, were live from the start."""
    mib = 1 << 20
    seg = 0x7000_0000_0000
    snap = {
        "segments": [
            _segment(
                seg,
                20 * mib,
                [
                    {
                        "address": seg,
                        "size": 4 * mib,
                        "requested_size": 4 * mib,
                        "state": "active_allocated",
                    },
                    {
                        "address": seg + 4 * mib,
                        "size": 2 * mib,
                        "requested_size": 2 * mib,
                        "state": "active_pending_free",
                    },
                    {
                        "address": seg + 6 * mib,
                        "size": 14 * mib,
                        "requested_size": 0,
                        "state": "inactive",
                    },
                ],
            )
        ],
        "device_traces": [
            [
                _event("free_requested", seg + 6 * mib, mib),  # 0: allocated before the trace
                _event("free_completed", seg + 6 * mib, mib),  # 1
                _event("alloc", seg + 4 * mib, 2 * mib, 7),  # 2
                _event("free_requested", seg + 4 * mib, 2 * mib, 7),  # 3: still pending at the end
                _event("segment_alloc", seg + 32 * mib, 2 * mib),  # 4
                _event("segment_free", seg + 32 * mib, 2 * mib),  # 5
            ]
        ],
    }
    data = _page_data(write_html(snap, tmp_path / "late.html").read_text())
    alloc, segs = data["alloc"], data["seg"]
    rows = sorted(
        zip(*(alloc[k] for k in ("addr", "start", "freeReq", "end", "block")), strict=True)
    )
    assert rows == [
        (seg, -1, 6, 6, 4 * mib),  # live through the whole trace
        (seg + 4 * mib, 2, 3, 6, 2 * mib),  # pending free at the end
        (seg + 6 * mib, -1, 0, 1, mib),  # freed in the trace
    ]
    assert data["streams"][alloc["stream"][alloc["addr"].index(seg + 4 * mib)]] == 7
    pieces = sorted(zip(segs["addr"], segs["size"], segs["start"], segs["end"], strict=True))
    assert pieces == [(seg, 20 * mib, -1, 6), (seg + 32 * mib, 2 * mib, 4, 5)]
    assert data["pools"][segs["pool"][segs["addr"].index(seg)]] == "0,1"


def test_a_trace_without_history_still_shows_the_final_state(tmp_path):
    snap = {
        "segments": [
            _segment(
                0x1000_0000,
                2 << 20,
                [{"address": 0x1000_0000, "size": 2 << 20, "state": "inactive"}],
            )
        ]
    }
    data = _page_data(write_html(snap, tmp_path / "empty.html", title="empty").read_text())
    assert data["n"] == 0
    assert data["seg"]["start"] == [-1] and data["seg"]["end"] == [0]


def test_a_120k_event_trace_builds_fast_and_small(tmp_path, synthetic_snapshot):
    snap = synthetic_snapshot(120_000)
    started = time.perf_counter()
    out = write_html(snap, tmp_path / "big.html", title="synthetic")
    elapsed = time.perf_counter() - started
    assert elapsed < 20, f"write_html took {elapsed:.1f} s"
    assert out.stat().st_size < 15_000_000
    assert _page_data(out.read_text())["n"] == 120_000
