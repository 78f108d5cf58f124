"""vram replay --suggest: every candidate a real replay, ranked, pruned, with a lower bound."""

from __future__ import annotations

import json

import pytest

from vram.memory import parse_config
from vram.tools.replay import main_replay, replay
from vram.tools.suggest import suggest_settings

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


def test_suggest_ranks_settings_on_every_bundled_trace(real_trace):
    found = suggest_settings(real_trace)
    base = found.baseline.peak_reserved
    assert found.lower_bound <= base
    done = [c for c in found.candidates if not c.pruned and not c.oom]
    assert done and done[0].peak_reserved <= base
    assert all(found.lower_bound <= c.peak_reserved for c in done)
