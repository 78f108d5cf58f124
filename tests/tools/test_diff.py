"""vram stats A --diff B and vram viz A --diff B: what grew and shrank, per stack frame and
per segment, between two snapshots (pickled with any protocol up to 5)."""

from __future__ import annotations

import pickle

import pytest

import vram
from vram import cli
from vram._units import format_bytes
from vram.memory._snapshot import _record_memory_history, _snapshot
from vram.tools.diff import snapshot_diff

MiB = 1 << 20


def embeddings(n: int) -> vram.Tensor:
    return vram.empty(n * MiB // 4, device="sim:0")


def attention(n: int) -> vram.Tensor:
    return vram.empty(n * MiB // 4, device="sim:0")


def mlp(n: int) -> vram.Tensor:
    return vram.empty(n * MiB // 4, device="sim:0")


def _run(tmp_path, name: str, sizes: dict, protocol: int):
    """A run: each named function allocates its MiB; the first half is freed after the peak,
    the rest stays live at the end. The snapshot is written with ``protocol``."""
    sim0 = vram.device("sim:0")
    _record_memory_history("all", context="alloc", device=sim0)
    try:
        kept = [globals()[fn](n) for fn, n in sizes.items()]
        del kept[: len(kept) // 2]
        snapshot = _snapshot(sim0)
    finally:
        _record_memory_history(None, device=sim0)
    path = tmp_path / f"{name}.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=protocol))
    del kept
    vram.memory.empty_cache(sim0)
    return path


@pytest.fixture
def runs(tmp_path):
    a = _run(tmp_path, "a", {"embeddings": 4, "attention": 30}, protocol=5)
    b = _run(tmp_path, "b", {"embeddings": 4, "mlp": 40}, protocol=2)
    return a, b


def _frame(result, name: str) -> tuple:
    (row,) = [r for r in result.frames if r[0].startswith(name + " (")]
    return row[1:]


def test_frames_that_grew_and_shrank(runs):
    result = snapshot_diff(*runs)
    # (A at the peak, B at the peak, A at the end, B at the end)
    assert _frame(result, "attention") == (30 * MiB, 0, 30 * MiB, 0)  # gone
    assert _frame(result, "mlp") == (0, 40 * MiB, 0, 40 * MiB)  # new
    assert not [r for r in result.frames if r[0].startswith("embeddings (")]  # unchanged
    test = [r for r in result.frames if r[0].startswith("_run (")]
    assert test == [(test[0][0], 34 * MiB, 44 * MiB, 30 * MiB, 40 * MiB)]  # every frame counts
    changes = [max(abs(r[2] - r[1]), abs(r[4] - r[3])) for r in result.frames]
    assert changes == sorted(changes, reverse=True)  # largest change first
    summary = {m: (x, y) for m, x, y in result.summary}
    assert summary["peak allocated"] == (34 * MiB, 44 * MiB)
    assert summary["allocated at the end"] == (30 * MiB, 40 * MiB)
    assert summary["allocations"] == (2, 2)


def test_segments_by_pool_stream_kind_and_size(runs):
    result = snapshot_diff(*runs)
    rows = {key[2:]: (a, b) for key, a, b in result.segments}
    assert rows[("large", 20 * MiB)] == ([1, 20 * MiB, 0], [1, 20 * MiB, 0])  # embeddings'
    assert rows[("large", 30 * MiB)] == ([1, 30 * MiB, 30 * MiB], [0, 0, 0])
    assert rows[("large", 40 * MiB)] == ([0, 0, 0], [1, 40 * MiB, 40 * MiB])


def test_cli_stats_and_viz_diff(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    a, b = runs
    assert cli.main(["stats", str(a), "--diff", str(b)]) == 0
    out = capsys.readouterr().out
    assert "peak allocated" in out and "+10.00 MiB" in out and "mlp (" in out
    page = tmp_path / "diff.html"
    assert cli.main(["viz", str(a), "--diff", str(b), "-o", str(page)]) == 0
    text = page.read_text()
    assert "vram diff: a.pickle -&gt; b.pickle" in text and "attention (" in text
    assert text.count("<polyline") == 4  # reserved and allocated of both runs


@pytest.mark.parametrize(
    "argv, message",
    [
        (["stats", "--diff", "b.pickle"], "give the snapshot to compare with first"),
        (["viz", "A", "--diff", "B", "-o", "x.html", "--png", "x.png"], "--png"),
        (["stats", "missing.pickle", "--diff", "b.pickle"], "missing.pickle"),
    ],
)
def test_cli_diff_bad_input_is_one_line(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_page_has_numbered_axes_default_pools_and_no_empty_frame_table(tmp_path):
    a = _run(tmp_path, "a", {"embeddings": 4, "attention": 30}, protocol=5)
    page = tmp_path / "same.html"
    assert cli.main(["viz", str(a), "--diff", str(a), "-o", str(page)]) == 0
    text = page.read_text()
    assert "<table><tr><th>frame</th>" not in text  # nothing changed: no empty table
    assert "No stack frame's bytes changed." in text
    assert ">0,0<" not in text and "<td>default</td>" in text
    peak = snapshot_diff(a, a).a.summary["peak reserved"]
    assert f'text-anchor="end">{format_bytes(peak)}</text>' in text  # the byte axis' top
    assert 'text-anchor="end">0 B</text>' in text
    assert 'text-anchor="middle">event</text>' in text
    result = snapshot_diff(a, a)
    assert {key[0] for key, _, _ in result.segments} == {"default"}


def test_an_expandable_segment_counts_once_however_many_pieces_it_mapped(trace):
    """gpt_train under expandable segments maps 74 pieces into two ranges (one per pool):
    the diff counts the two segments its snapshot holds, by pool kind."""
    from vram.tools import load_snapshot

    b = trace("gpt_train-expandable")
    result = snapshot_diff(trace("gpt_train-default"), b)
    summary = {m: (x, y) for m, x, y in result.summary}
    held = load_snapshot(b)["segments"]
    assert summary["segments at the end"] == (84, len(held)) == (84, 2)
    assert summary["device mallocs"] == (84, 74)
    rows = {key[2]: got for key, _, got in result.segments if key[2].endswith("expandable")}
    large, small = (s for s in sorted(held, key=lambda s: -s["total_size"]))
    assert rows["large, expandable"][:2] == [1, large["total_size"]]
    assert rows["small, expandable"][:2] == [1, small["total_size"]]
