"""The memory viewer at a million events: page size and time to first paint in Chromium.

    python bench/viewer.py [--events 1000000] [--trace gpt_train-default] [--out DIR] [--save]

A bundled trace (tests/data/traces) is repeated to ``--events`` trace events (its requests
copied with their addresses moved apart; bench/doctor.py's ``_repeated``), pickled with
protocol 5, and drawn by ``vram.tools.viz.write_html``. The page is opened in headless
Chromium; the page itself reports, on <html>, the milliseconds from navigation to its first
drawn frame (``data-viz-first-paint-ms``, JSON parse and layout included) and those of the
layout alone (``data-viz-build-ms``). A row gives those, the page's size, the time Python
took to write it and the wall time of the whole browser run. Needs ``chromium`` on PATH.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import add_output_arguments, description_of, write_results
from _traces import read_trace
from doctor import _repeated
from vram.tools.viz import write_html

TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
MiB = 1 << 20


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def open_page(browser: str, page: Path, profile: Path) -> tuple[dict[str, str], float]:
    """The page's data-viz-* attributes once it has loaded, and the seconds it took."""
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        f"--user-data-dir={profile}",
        "--window-size=1400,900",
        "--dump-dom",
        page.as_uri(),
    ]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    tag = re.search(r"<html[^>]*>", result.stdout)
    found = dict(re.findall(r'data-viz-([a-z-]+)="([^"]*)"', tag.group(0) if tag else ""))
    return found, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--events", type=int, default=1_000_000, help="trace events")
    parser.add_argument("--trace", default="gpt_train-default", help="the bundled trace")
    parser.add_argument("--rounds", type=int, default=3, help="browser runs (best is kept)")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    browser = _chromium()
    if browser is None:
        parser.error("no chromium on PATH: the viewer cannot be timed here")
    snapshot = _repeated(read_trace(TRACES / f"{options.trace}.pickle.xz"), options.events)
    events = len(snapshot["device_traces"][0])
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "big.pickle"
        source.write_bytes(pickle.dumps(snapshot, protocol=5))
        page = Path(folder) / "big.html"
        start = time.perf_counter()
        write_html(source, page, title=f"{options.trace} x{events // 10_000 / 100:g}M")
        write_s = time.perf_counter() - start
        best: dict[str, str] | None = None
        wall = None
        for _ in range(options.rounds):
            found, seconds = open_page(browser, page, Path(folder) / "profile")
            if found.get("status") != "ok":
                print(f"the page did not draw: {found.get('status')}", file=sys.stderr)
                return 1
            if best is None or int(found["first-paint-ms"]) < int(best["first-paint-ms"]):
                best, wall = found, seconds
        row = {
            "trace": options.trace,
            "events": events,
            "snapshot_mib": round(source.stat().st_size / MiB, 1),
            "page_mib": round(page.stat().st_size / MiB, 1),
            "write_html_s": round(write_s, 2),
            "first_paint_ms": int(best["first-paint-ms"]),
            "layout_ms": int(best["build-ms"]),
            "browser_wall_s": round(wall, 2),
            "cpus": os.cpu_count(),
        }
    paths = write_results("viewer", "sim:0", [row], options.out, options.save)
    print(
        f"viewer: {row['events']:,} events ({row['snapshot_mib']} MiB snapshot) -> "
        f"{row['page_mib']} MiB page in {row['write_html_s']} s; first paint "
        f"{row['first_paint_ms']} ms (layout {row['layout_ms']} ms), browser run "
        f"{row['browser_wall_s']} s"
    )
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
