"""The viewer in headless Chromium: each page draws with no script errors, and a screenshot
shows the timeline. Skipped where no Chromium is installed."""

from __future__ import annotations

import html
import json
import pickle
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vram import cli
from vram.tools.viz import write_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1400,900",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


def _page_status(tmp_path: Path, page: Path) -> str:
    """Load the page with its self-test (#selftest: every hover, click and zoom path) and
    return what it wrote to <html data-viz-status>."""
    result = _chromium(tmp_path, "--dump-dom", page.as_uri() + "#selftest")
    assert "Uncaught" not in result.stderr, result.stderr[-2000:]
    match = re.search(r'<html[^>]*\sdata-viz-status="([^"]*)"', result.stdout)
    assert match, f"no status in the page; stderr: {result.stderr[-2000:]}"
    return match.group(1)


def test_bundled_traces_draw_without_errors(real_trace, tmp_path):
    page = write_html(real_trace, tmp_path / "view.html")
    assert _page_status(tmp_path, page) == "ok"

    shot = tmp_path / "shot.png"
    _chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 40_000
    plt = pytest.importorskip("matplotlib.pyplot")
    pixels = plt.imread(shot)[..., :3]
    # The timeline's plot area (css px 100..980 x 120..400): mostly coloured allocations.
    plot = pixels[130:400, 110:970]
    saturation = plot.max(axis=-1) - plot.min(axis=-1)
    assert (saturation > 0.25).mean() > 0.2


def test_a_120k_event_trace_draws_without_errors(tmp_path, synthetic_snapshot):
    page = write_html(synthetic_snapshot(120_000), tmp_path / "big.html", title="synthetic")
    assert _page_status(tmp_path, page) == "ok"


# ------------------------------------------------------------------ snapshot strings are text
MARK = "data-pwned"
PAYLOAD = f"<img src=x onerror=\"document.documentElement.setAttribute('{MARK}','yes')\">"


def _dom(tmp_path: Path, page: Path, selftest: bool = False) -> str:
    result = _chromium(tmp_path, "--dump-dom", page.as_uri() + ("#selftest" if selftest else ""))
    return result.stdout


def test_the_payload_runs_where_it_is_not_escaped(tmp_path):
    """The check below means something: inserted as HTML, the payload runs and marks the page."""
    page = tmp_path / "control.html"
    page.write_text(
        "<!doctype html><html><body><div id='d'></div><script>"
        f"document.getElementById('d').innerHTML = {json.dumps(PAYLOAD)};"
        "</script></body></html>"
    )
    assert f'{MARK}="yes"' in _dom(tmp_path, page)


def test_a_crafted_snapshot_runs_no_script(tmp_path):
    frame = {"name": PAYLOAD, "filename": PAYLOAD, "line": 1}
    event = {"action": "alloc", "addr": 1 << 21, "size": 4096, "stream": 7, "frames": [frame]}
    block = {"address": 1 << 21, "size": 4096, "state": "active_allocated", "frames": [frame]}
    segment = {
        "device": 0,
        "address": 1 << 21,
        "total_size": 2 << 20,
        "stream": 7,
        "segment_pool_id": PAYLOAD,
        "frames": [frame],
        "blocks": [block],
    }
    snapshot = {
        "segments": [segment],
        "device_traces": [[event]],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": PAYLOAD},
    }
    page = write_html(snapshot, tmp_path / "crafted.html", title=PAYLOAD)
    # A stream name: vram's loader admits only numbers there, so put the string straight
    # into the page's data, as a snapshot made by some other tool could have it.
    text = page.read_text()
    match = re.search(
        r'(<script id="viz-data" type="application/json">)(.*?)(</script>)', text, re.S
    )
    data = json.loads(match[2])
    assert data["streams"] == [7]
    data["streams"] = [PAYLOAD]
    raw = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    page.write_text(text[: match.start(2)] + raw + text[match.end(2) :])

    dom = _dom(tmp_path, page, selftest=True)
    assert re.search(r'<html[^>]*\sdata-viz-status="ok"', dom), dom[:2000]
    assert not re.search(rf"<html[^>]*\s{MARK}=", dom)  # the payload never ran
    assert "&lt;img src=x onerror=" in dom  # shown as text


def _tagged(marker: str) -> str:
    """A snapshot string that closes the page's data <script> and opens one of its own,
    which marks the page if it runs."""
    return f"</script><script>document.documentElement.setAttribute('{MARK}','{marker}')</script>"


def test_script_tags_in_frame_and_file_names_show_as_text(tmp_path, capsys):
    name, filename = "forward" + _tagged("name"), _tagged("file") + ".py"
    frame = {"name": name, "filename": filename, "line": 7}
    event = {"action": "alloc", "addr": 1 << 21, "size": 4096, "stream": 0, "frames": [frame]}
    block = {"address": 1 << 21, "size": 4096, "state": "active_allocated", "frames": [frame]}
    segment = {"address": 1 << 21, "total_size": 2 << 20, "frames": [frame], "blocks": [block]}
    # the snapshot's own file name (the page's title) carries a tag too (a name has no "/")
    path = tmp_path / f"<script>document.documentElement.setAttribute('{MARK}','title')<.pickle"
    path.write_bytes(pickle.dumps({"segments": [segment], "device_traces": [[event]]}))
    page = tmp_path / "tags.html"
    assert cli.main(["viz", str(path), "-o", str(page)]) == 0
    capsys.readouterr()

    for selftest in (False, True):  # as opened (the allocation's details), then every path
        dom = _dom(tmp_path, page, selftest=selftest)
        assert re.search(r'<html[^>]*\sdata-viz-status="ok"', dom), dom[:2000]
        assert not re.search(rf"<html[^>]*\s{MARK}=", dom)  # no tag ran
    # shown as text: the details of the allocation the page opens with, and the title
    dom = _dom(tmp_path, page)
    escaped = html.escape(f"{name} ({filename}:7)", quote=False)
    shown = re.search(r'<div class="frames">(.*?)</div>', dom, re.S)
    assert shown and shown[1] == escaped, dom[:3000]
    assert f"<h1>{html.escape(path.name, quote=False)}</h1>" in dom
