"""vram trace (a program run with history on) and vram stats, in-process."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from vram import cli
from vram.memory import _record_memory_history
from vram.tools import load_snapshot, peaks
from vram.tools.replay import replay

MiB = 1 << 20


def main_trace(argv: list[str]) -> int:
    return cli.main(["trace", *argv])


def main_stats(argv: list[str]) -> int:
    return cli.main(["stats", *argv])


SCRIPT = """
import sys
import vram

device = vram.device("sim:0")

def step(n):
    return [vram.memory.caching_allocator_alloc(n * 1000, device) for _ in range(3)]

held = step(1) + step(2000)
for ptr in held[:-1]:
    vram.memory.caching_allocator_delete(ptr)
print("args", sys.argv[1:])
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


@pytest.fixture(autouse=True)
def _history_off():
    yield
    _record_memory_history(None)


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


@pytest.mark.leaks  # the script keeps a block to its end, as a program's live tensor
def test_trace_writes_the_snapshot_of_the_script(script, tmp_path, capsys):
    out = tmp_path / "out.pickle"
    status = main_trace(["-o", str(out), "--device", "sim:0", "--", "python", str(script), "0"])
    assert status == 0
    assert "args ['0']" in capsys.readouterr().out
    with out.open("rb") as f:
        snapshot = pickle.load(f)
    trace = snapshot["device_traces"][0]
    allocs = [e for e in trace if e["action"] == "alloc"]
    assert [e["size"] for e in allocs] == [1000] * 3 + [2_000_000] * 3
    names = {f["name"] for f in allocs[0]["frames"]}
    assert "step" in names and "<module>" in names
    assert any(f["filename"] == str(script) for f in allocs[0]["frames"])
    (row,) = replay(snapshot)  # what vram trace writes, vram replay reads
    assert row["matches_recorded"] is True


@pytest.mark.leaks  # the script keeps a block to its end, as a program's live tensor
def test_trace_returns_the_exit_status_and_still_writes(script, tmp_path):
    out = tmp_path / "out.pickle"
    assert main_trace(["-o", str(out), "--device", "sim:0", "--", str(script), "3"]) == 3
    assert out.exists()


def test_trace_of_a_failing_script(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom')\n")
    out = tmp_path / "out.pickle"
    assert main_trace(["-o", str(out), "--", "python", str(bad)]) == 1
    assert "boom" in capsys.readouterr().err
    assert out.exists()


def test_trace_errors(tmp_path, capsys):
    assert main_trace(["--", "python", str(tmp_path / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main_trace(["-o", str(tmp_path / "x.pickle")]) == 2  # no program given
    err = capsys.readouterr().err
    assert err.startswith("vram trace: error: give the program to run after --")
    assert main_trace(["--max-entries", "0", "--", "python", "-c", "1"]) == 2
    assert "--max-entries: must be at least 1" in capsys.readouterr().err


def test_trace_help_lists_every_option(capsys):
    assert main_trace(["--help"]) == 0
    out = capsys.readouterr().out
    usage = out.split("\n\n")[0]
    for option in ("-o OUT", "--device DEV", "--max-entries N", "--context", "-q", "--"):
        assert option in usage, option
    listed = out.split("options:")[1]
    for option in ("--output OUT", "--device DEV", "--max-entries N", "--context", "--quiet"):
        assert re.search(rf"{option}\b", listed), option  # named as in the usage line
    assert "torch.cuda.memory._record_memory_history()" in out  # PyTorch's own allocator


def test_stats_without_a_snapshot_says_what_it_needs(capsys):
    assert main_stats([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vram stats: error: give a snapshot file: vram stats SNAPSHOT")
    assert "vram trace -o FILE" in err and err.count("\n") == 1


def _events(*events: tuple) -> dict:
    entries = [
        {"action": a, "addr": addr, "size": size, "stream": 0, "time_us": 1000 * i, "frames": []}
        for i, (a, addr, size) in enumerate(events)
    ]
    return {"segments": [], "device_traces": [entries], "allocator_settings": {}}


def test_stats_shows_the_peaks_with_the_event_at_which_they_happened(tmp_path, capsys):
    a, b = 0x1000_0000, 0x2000_0000
    snapshot = _events(
        ("segment_alloc", a, 20 * MiB),
        ("alloc", a, 8 * MiB),
        ("alloc", a + 8 * MiB, 4 * MiB),  # allocated and active peak: 12 MiB here (2)
        ("free_requested", a + 8 * MiB, 4 * MiB),  # no longer allocated, still active
        ("segment_alloc", b, 2 * MiB),  # reserved peak: 22 MiB here (4)
        ("free_completed", a + 8 * MiB, 4 * MiB),
        ("alloc", b, MiB),  # allocated 9 MiB: below the peak
    )
    found = {p.measure: p for p in peaks(snapshot)}
    assert (found["reserved"].bytes, found["reserved"].event) == (22 * MiB, 4)
    assert found["reserved"].action == "segment_alloc" and found["reserved"].seconds == 0.004
    assert (found["allocated"].bytes, found["allocated"].event) == (12 * MiB, 2)
    assert (found["active"].bytes, found["active"].event) == (12 * MiB, 2)
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    assert main_stats([str(path)]) == 0
    out = capsys.readouterr().out
    assert "peaks over the trace" in out
    row = next(line for line in out.splitlines() if "reserved" in line and "22.00 MiB" in line)
    assert "segment_alloc" in row and " 4 " in row and "+0.004 s" in row


def test_stats_of_a_snapshot(capsys, monkeypatch, trace):
    monkeypatch.setenv("COLUMNS", "200")
    path = trace("bert_infer-default")
    snapshot = load_snapshot(path)
    assert main_stats([str(path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.lstrip("│┃ ").startswith("0 "))
    cells = [c.strip() for c in row.strip("│┃ ").split("│")]
    assert cells[0] == "0" and cells[1] == str(len(snapshot["segments"]))
    assert cells[8] == str(len(snapshot["device_traces"][0]))


def test_stats_errors(tmp_path, capsys):
    assert main_stats([str(tmp_path / "missing.pickle")]) == 2
    assert main_stats(["--device", "nowhere:0"]) == 2
    assert "error" in capsys.readouterr().err
