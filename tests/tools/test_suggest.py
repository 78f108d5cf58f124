"""vram replay --suggest: every candidate a real replay, ranked, pruned, with a lower bound."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from vram import cli
from vram.memory import parse_config
from vram.tools.replay import replay
from vram.tools.suggest import suggest_settings
from vram.tools.suggest_report import suggest_lines

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"

MiB = 1 << 20
DEFAULTS = parse_config("").settings()


def _trace(*events: tuple) -> dict:
    """A snapshot from (action, addr, size[, stream]) events."""
    entries = [
        {
            "action": e[0],
            "addr": e[1],
            "size": e[2],
            "stream": e[3] if len(e) > 3 else 0,
            "time_us": i,
            "frames": [],
        }
        for i, e in enumerate(events)
    ]
    return {"segments": [], "device_traces": [entries], "allocator_settings": DEFAULTS}


_made: dict[str, object] = {}  # the synthetic trace and its search, made once per run


@pytest.fixture
def snapshot(synthetic_snapshot):
    if "snapshot" not in _made:
        _made["snapshot"] = synthetic_snapshot(4000, seed=3)
    return _made["snapshot"]


@pytest.fixture
def result(snapshot):
    if "result" not in _made:
        _made["result"] = suggest_settings(snapshot, jobs=1)
    return _made["result"]


def test_the_lower_bound_is_the_peak_of_live_bytes_rounded_to_512():
    a, b, c = 0x1000_0000, 0x2000_0000, 0x3000_0000
    trace = _trace(
        ("segment_alloc", a, 2 * MiB),
        ("alloc", a, 1000),  # 1024 live
        ("segment_alloc", b, 20 * MiB),
        ("alloc", b, 3 * MiB + 1),  # 3 MiB + 512
        ("free_requested", a, 1000),
        ("free_completed", a, 1000),
        ("alloc", a, 0),  # a zero-byte request still takes 512 B
        ("free_requested", b, 3 * MiB + 1),  # pending: no longer the program's from here on
        ("alloc", c, 5 * MiB),
        ("free_completed", b, 3 * MiB + 1),
    )
    result = suggest_settings(trace, jobs=1)
    assert result.lower_bound == 5 * MiB + 512  # c and the zero-byte a


def test_every_candidate_is_a_real_replay_ranked_by_peak_reserved(snapshot, result):
    done = [c for c in result.candidates if not c.pruned and not c.oom]
    assert len(done) >= 3
    peaks = [c.peak_reserved for c in done]
    assert peaks == sorted(peaks)
    assert result.candidates[: len(done)] == done  # pruned runs rank last
    for c in done[:3]:
        (row,) = replay(snapshot, [c.config])
        assert row["peak_reserved"] == c.peak_reserved
        assert c.recovers == result.baseline.peak_reserved - c.peak_reserved
    assert result.lower_bound <= min(peaks)
    knobs = {c.knob for c in result.candidates}
    assert {"max_split", "rp2", "expandable", "gc", "record_use"} <= knobs
    assert result.best is done[0]


def test_a_pruned_candidate_stopped_once_it_passed_the_recorded_peak(snapshot, result):
    pruned = [c for c in result.candidates if c.pruned]
    assert pruned, "the search prunes at least one candidate of this trace"
    base = result.baseline.peak_reserved
    for c in pruned:
        assert c.peak_reserved is None and c.pruned_at > base
        (row,) = replay(snapshot, [c.config])
        assert row["peak_reserved"] > base  # pruning never dropped a better setting


def test_what_each_suggestion_recovers_is_a_share_of_the_gap_to_the_bound(result):
    gap = result.baseline.peak_reserved - result.lower_bound
    assert gap > 0
    for c in result.candidates:
        if c.peak_reserved is not None:
            assert c.recovers_share == round(c.recovers / gap, 4)


def test_capacity_names_the_change_that_makes_the_run_fit(snapshot, result):
    # the least capacity (to 2 MiB) the recorded settings fit in, release-and-retry included
    low, high = result.lower_bound, result.baseline.peak_reserved
    while high - low > 2 * MiB:
        middle = (low + high) // 2
        low, high = (middle, high) if replay(snapshot, capacity=middle)[0]["oom"] else (low, middle)
    capacity = low  # the recorded settings run out of memory here
    found = suggest_settings(snapshot, capacity=capacity, jobs=1)
    assert found.baseline.fits is False
    fix = found.makes_it_fit
    assert fix is not None and fix.fits is True
    (row,) = replay(snapshot, [fix.config], capacity=capacity)
    assert row["oom"] is False
    assert all(c.fits == (not c.oom) for c in found.candidates)  # no pruning at a capacity


def test_parallel_workers_find_what_one_process_finds(snapshot, result):
    parallel = suggest_settings(snapshot, jobs=2)
    assert [(c.config, c.peak_reserved, c.pruned) for c in parallel.candidates] == [
        (c.config, c.peak_reserved, c.pruned) for c in result.candidates
    ]


def main_replay(argv: list[str]) -> int:
    return cli.main(["replay", *argv])


def test_cli_suggest_json(tmp_path, capsys, snapshot):
    import pickle

    path = tmp_path / "trace.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=5))
    assert main_replay([str(path), "--suggest", "--json", "--jobs", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lower_bound"] > 0 and out["best"] == out["candidates"][0]["config"]
    assert out["recoverable"] == out["baseline"]["peak_reserved"] - out["lower_bound"]
    assert main_replay([str(path), "--suggest", "--capacity", "1GiB", "--jobs", "1"]) == 0
    text = capsys.readouterr().out
    assert "lower bound" in text and "at 1.00 GiB: the recorded settings fit" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config", "expandable_segments:True"], "takes no --config"),
        (["--capacity", "lots"], "--capacity"),
        (["--jobs", "0"], "jobs: must be at least 1"),
    ],
)
def test_cli_suggest_bad_input_is_one_line(tmp_path, capsys, snapshot, args, message):
    import pickle

    path = tmp_path / "trace.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    assert main_replay([str(path), "--suggest", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


_BUNDLED = sorted(p.name.split(".")[0] for p in TRACES.glob("*.pickle.xz"))
_searched: dict[str, object] = {}  # each bundled trace's search, made once per run


def _search(trace, name: str):
    if name not in _searched:
        _searched[name] = suggest_settings(trace(name), jobs=1)
    return _searched[name]


@pytest.mark.parametrize("name", _BUNDLED)
def test_suggest_ranks_settings_on_every_bundled_trace(trace, name):
    found = _search(trace, name)
    base = found.baseline.peak_reserved
    assert found.lower_bound <= base
    done = [c for c in found.candidates if not c.pruned and not c.oom]
    assert done and done[0].peak_reserved <= base
    assert all(found.lower_bound <= c.peak_reserved for c in done)


# ==================================================== advice a PyTorch user can act on
_PASTE = (
    "PYTORCH_CUDA_ALLOC_CONF=",
    "VRAM_ALLOC_CONF=",
    "unset ",
    "torch.cuda.",
    "vram.set_per_process_memory_fraction",
    "and tensor.",
)


def _setting_line(line: str) -> bool:
    return line.lstrip().startswith(_PASTE)


@pytest.mark.parametrize("name", _BUNDLED)
def test_the_best_line_is_a_pytorch_setting_with_the_line_to_paste(trace, name):
    result = _search(trace, name)
    lines = suggest_lines(result)
    at = next(i for i, line in enumerate(lines) if line.startswith("best:"))
    end = lines.index("", at)  # the best paragraph: its text, then the lines to paste
    best = result.best
    assert best is not None and best.pytorch
    pastes = [line.strip() for line in lines[at:end] if _setting_line(line)]
    if best.recovers > 0:
        assert pastes[0] == f"PYTORCH_CUDA_ALLOC_CONF={best.settings}"
    else:  # nothing reserves less: keep the recorded settings (a PyTorch setting each time)
        assert "best: the recorded settings" in lines[at]
        assert pastes == [f"PYTORCH_CUDA_ALLOC_CONF={result.baseline.settings}"]
    sections = [line for line in lines if line.endswith("best first:")]
    assert sections[0].startswith("PyTorch's settings (PYTORCH_CUDA_ALLOC_CONF)")
    vram_at = next(i for i, line in enumerate(lines) if line.startswith("vram's own options"))
    vram_rows = [line for line in lines[vram_at:] if _setting_line(line)]
    assert vram_rows and all(
        not line.strip().startswith("PYTORCH_CUDA_ALLOC_CONF=") for line in vram_rows
    )
    turn_on = "    from vram.interop import torch as vt; vt.use_vram_allocator()"
    assert turn_on in lines[vram_at : vram_at + 4]  # the line to paste, whole
    pytorch_rows = [line for line in lines[:vram_at] if _setting_line(line)]
    assert not any("expandable_page_mb" in line or "record_use" in line for line in pytorch_rows)


def test_the_lines_fit_80_columns_and_never_wrap_a_setting(trace):
    result = suggest_settings(trace("cnn_train-max_split"), capacity=700 * MiB, jobs=1)
    for show_all in (False, True):
        lines = suggest_lines(result, show_all)
        assert all(len(line) <= 80 for line in lines if not _setting_line(line))
        for c in result.candidates[:5]:
            for line in c.how:  # each whole, on a line of its own
                assert any(text.strip() == line for text in lines)
    shown = [line for line in suggest_lines(result) if line.strip().startswith(_PASTE[:3])]
    every = [line for line in suggest_lines(result, True) if line.strip().startswith(_PASTE[:3])]
    notes = [line for line in suggest_lines(result) if "not shown" in line]
    left = sum(int(note.split("(")[1].split()[0]) for note in notes)
    assert len(every) - len(shown) == left > 0


def test_a_recorded_setting_can_be_replaced_and_the_row_says_so(trace):
    """On a trace recorded with max_split_size_mb:64, expandable segments instead of it
    is a candidate of its own, and predicts what the default trace predicts with them."""
    result = suggest_settings(trace("cnn_train-max_split"), jobs=1)
    instead = next(c for c in result.candidates if c.settings == "expandable_segments:True")
    on_top = next(
        c
        for c in result.candidates
        if c.settings == "max_split_size_mb:64,expandable_segments:True"
    )
    assert instead.change == "replaces" and on_top.change == "adds"
    assert instead.change_text == "replaces max_split_size_mb:64 with expandable_segments:True"
    (default,) = replay(trace("cnn_train-default"), ["expandable_segments:True"])
    assert instead.peak_reserved == default["peak_reserved"]
    dropped = next(c for c in result.candidates if c.knob == "defaults")
    assert dropped.settings == "" and dropped.how == ["unset PYTORCH_CUDA_ALLOC_CONF"]
    assert instead.checked and not next(c for c in result.candidates if c.knob == "gc").checked


def test_what_the_capacity_did_is_said(trace):
    path = trace("cnn_train-default")
    need = suggest_settings(path, jobs=1).baseline.peak_reserved
    capacity = need - 100 * MiB  # the recorded settings fit only by flushing their cache
    result = suggest_settings(path, capacity=capacity, jobs=1)
    assert result.baseline.fits and result.at_capacity.flushes > 0
    text = " ".join(" ".join(suggest_lines(result)).split())
    assert f"fit, but only by flushing their cache {result.at_capacity.flushes} times" in text
    lines = suggest_lines(result)
    at = next(i for i, line in enumerate(lines) if line.startswith("best:"))  # with capacity too
    assert result.best.fits and result.best.flushes == 0
    assert f"    PYTORCH_CUDA_ALLOC_CONF={result.best.settings}" in lines[at : lines.index("", at)]
    assert "every setting runs to its end" in text
    gc = [c for c in result.candidates if c.knob == "gc"]  # capped at the whole device
    assert gc and all(
        c.fraction_call == "torch.cuda.set_per_process_memory_fraction(1.0)" for c in gc
    )
    roomy = suggest_settings(path, capacity=4 * need, jobs=1)  # capped at the recorded peak
    gc = [c for c in roomy.candidates if c.knob == "gc"]
    fraction = math.ceil(need / (4 * need) * 10_000) / 10_000
    assert gc and all(
        c.fraction_call == f"torch.cuda.set_per_process_memory_fraction({fraction!r})"
        and c.memory_limit == int(fraction * 4 * need)
        for c in gc
    )
    clean = [c for c in result.candidates if c.fits and not c.flushes]
    assert clean and result.candidates[: len(clean)] == clean  # no flush ranks first
