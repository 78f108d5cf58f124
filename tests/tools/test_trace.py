"""vram trace (a program run with history on) and vram stats, in-process."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from vram.memory._snapshot import _record_memory_history
from vram.tools import load_snapshot
from vram.tools.replay import replay
from vram.tools.trace import main_stats, main_trace

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
    with pytest.raises(SystemExit):
        main_trace(["-o", str(tmp_path / "x.pickle")])  # no program given


def test_stats_prints_the_memory_summary(sim0, capsys):
    assert main_stats(["--device", "sim:0"]) == 0
    out = capsys.readouterr().out
    assert "memory summary" in out and "Allocated memory" in out


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
