"""The viewer in headless Chromium: each page draws with no script errors, and a screenshot
shows the timeline. Skipped where no Chromium is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

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
