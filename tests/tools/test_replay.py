"""vram replay: PyTorch's decisions under the recorded settings, what-ifs under others."""

from __future__ import annotations

import json
import pickle

import pytest

import vram
from vram import cli
from vram.memory import parse_config
from vram.memory._snapshot import _record_memory_history, _snapshot
from vram.tools import load_snapshot
from vram.tools._replay_device import replay_device
from vram.tools._settings import settings_to_config
from vram.tools.replay import replay


def main_replay(argv: list[str]) -> int:
    return cli.main(["replay", *argv])


MiB = 1 << 20
GiB = 1 << 30
DEFAULTS = parse_config("").settings()


def _recorded_sizes(path) -> list[int]:
    snapshot = load_snapshot(path)
    return [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "segment_alloc"]


def _trace(*events: tuple, settings: dict | None = None) -> dict:
    """A snapshot from (action, addr, size) events on stream 0."""
    entries = [
        {"action": a, "addr": addr, "size": size, "stream": 0, "time_us": i, "frames": []}
        for i, (a, addr, size) in enumerate(events)
    ]
    return {
        "segments": [],
        "device_traces": [entries],
        "allocator_settings": settings or DEFAULTS,
    }


# =========================================================================== fidelity
def test_fidelity_under_the_recorded_settings(real_trace):
    (row,) = replay(real_trace)
    recorded = _recorded_sizes(real_trace)
    assert row["segment_sizes"] == recorded
    assert row["device_malloc"] == len(recorded)
    assert row["matches_recorded"] is True
    assert row["peak_reserved"] == sum(recorded)  # these traces never free a segment
    assert row["notes"] == []


def test_the_rp2_trace_is_replayed_with_its_rounding(trace):
    path = trace("cnn_train-rp2")
    recorded = load_snapshot(path)["allocator_settings"]
    (row,) = replay(path)
    assert (
        parse_config(row["settings"]).settings()["roundup_power2_divisions"]
        == (recorded["roundup_power2_divisions"])
    )
    assert row["matches_recorded"] is True
    (plain,) = replay(path, ["roundup_power2_divisions:1"])
    assert plain["segment_sizes"] != row["segment_sizes"]


def test_the_recorded_rp2_setting_parses_as_pytorch_parsed_it(trace):
    """The rp2 traces were recorded under PYTORCH_CUDA_ALLOC_CONF's list form; vram's parser
    makes the same table of divisions that PyTorch put in the snapshot."""
    settings = load_snapshot(trace("cnn_train-rp2"))["allocator_settings"]
    mine = parse_config(settings["PYTORCH_CUDA_ALLOC_CONF"]).settings()
    assert mine["roundup_power2_divisions"] == settings["roundup_power2_divisions"]


@pytest.mark.parametrize("name", ["cnn_train-default", "gpt_train-default", "cnn_train-rp2"])
def test_expandable_segments_lower_peak_reserved(trace, name):
    path = trace(name)
    recorded, expandable = replay(path, ["", "expandable_segments:True"])
    assert expandable["config"] == "expandable_segments:True"
    assert expandable["peak_reserved"] < recorded["peak_reserved"]
    ratio = expandable["peak_reserved"] / expandable["peak_allocated"]
    assert ratio < recorded["peak_reserved"] / recorded["peak_allocated"]
    assert expandable["peak_ratio"] < recorded["peak_ratio"]
    assert expandable["matches_recorded"] is False


def test_oom_at_a_small_capacity(trace):
    path = trace("cnn_train-default")
    recorded = sum(_recorded_sizes(path))  # what PyTorch reserved (it never freed a segment)
    little, roomy = recorded // 4, 2 * recorded
    small, big = replay(path, [""], capacity=little) + replay(path, capacity=roomy)
    assert small["oom"] is True and isinstance(small["oom_at"], int)
    assert small["capacity"] == little and small["peak_reserved"] <= little
    assert big["oom"] is False and big["oom_at"] is None


def test_a_vram_snapshot_replays_identically(sim0):
    _record_memory_history()
    try:
        ptrs = [vram.memory.caching_allocator_alloc(size, sim0) for size in (1000, 3 * MiB, 900)]
        vram.memory.caching_allocator_delete(ptrs[1])
        ptrs[1] = vram.memory.caching_allocator_alloc(25 * MiB, sim0)
        vram.memory.caching_allocator_delete(ptrs[0])
        snapshot = _snapshot(sim0)
    finally:
        _record_memory_history(None)
    (row,) = replay(snapshot)
    assert row["segment_sizes"] == [2 * MiB, 20 * MiB, 26 * MiB]
    assert row["matches_recorded"] is True
    for ptr in ptrs[1:]:
        vram.memory.caching_allocator_delete(ptr)


# ======================================================================= the replay
def test_recorded_addresses_are_handed_out_again():
    driver, _ = replay_device(1 * GiB, [(0x1000_0000, 20 * MiB), (0x2000_0000, 20 * MiB)])
    assert driver.malloc(0, 20 * MiB) == 0x1000_0000
    assert driver.malloc(0, 20 * MiB) == 0x2000_0000
    third = driver.malloc(0, 20 * MiB)
    assert third > 0x2000_0000 + 20 * MiB  # beyond every recorded address
    with pytest.raises(vram.CudaError, match="backs no memory"):
        driver.view(third, 4)  # counted, never backed
    assert driver.mem_get_info(0) == (GiB - 60 * MiB, GiB)
    driver.free(0, third)
    with pytest.raises(vram.CudaError, match="OUT_OF_MEMORY"):
        driver.malloc(0, 2 * GiB)


def test_a_pending_free_holds_its_block_until_completed():
    a, b = 0x1000_0000, 0x2000_0000
    trace = _trace(
        ("segment_alloc", a, 30 * MiB),
        ("alloc", a, 30 * MiB),
        ("free_requested", a, 30 * MiB),  # waits on record_stream events ...
        ("segment_alloc", b, 30 * MiB),
        ("alloc", b, 30 * MiB),  # ... so this needed a segment of its own
        ("free_completed", a, 30 * MiB),
        ("alloc", a, 30 * MiB),
    )
    (row,) = replay(trace)
    assert row["segment_sizes"] == [30 * MiB, 30 * MiB] and row["matches_recorded"]
    assert row["peak_allocated"] == 60 * MiB


def test_record_use_reuses_a_block_freed_on_another_stream_at_once():
    a = 0x1000_0000
    trace = _trace(
        ("segment_alloc", a, 30 * MiB),
        ("alloc", a, 30 * MiB),
        ("free_requested", a, 30 * MiB),
        ("segment_alloc", a + 30 * MiB, 30 * MiB),
        ("alloc", a + 30 * MiB, 30 * MiB),
        ("free_completed", a, 30 * MiB),
    )
    recorded, record_use = replay(trace, ["", "record_use:True"])
    assert recorded["device_malloc"] == 2
    assert record_use["device_malloc"] == 1 and record_use["peak_reserved"] == 30 * MiB
    (flag,) = replay(trace, record_use=True)
    assert flag["segment_sizes"] == record_use["segment_sizes"]


def test_empty_cache_calls_are_replayed():
    a, b = 0x1000_0000, 0x2000_0000
    trace = _trace(
        ("segment_alloc", a, 30 * MiB),
        ("alloc", a, 30 * MiB),
        ("free_requested", a, 30 * MiB),
        ("free_completed", a, 30 * MiB),
        ("segment_free", a, 30 * MiB),  # empty_cache(): no new segment follows
        ("segment_alloc", b, 2 * MiB),
        ("alloc", b, 1000),
    )
    (row,) = replay(trace)
    assert row["device_free"] == 1
    assert row["segment_sizes"] == [30 * MiB, 2 * MiB] and row["matches_recorded"]
    assert any("empty_cache()" in note for note in row["notes"])


def test_a_trace_that_began_late(trace):
    snapshot = load_snapshot(trace("cnn_train-default"))
    entries = snapshot["device_traces"][0]
    cut = len(entries) // 2
    late = {**snapshot, "device_traces": [entries[cut:]]}
    (row,) = replay(late)
    assert any("live before the trace began" in note for note in row["notes"])
    assert any("segments existed before" in note for note in row["notes"])
    assert row["oom"] is False
    # what existed before is made first, so the late half needs far fewer new segments
    assert row["peak_reserved"] >= sum(s["total_size"] for s in snapshot["segments"]) // 2


def test_the_synthetic_trace_with_pending_frees_and_pre_trace_state(synthetic_snapshot):
    snapshot = synthetic_snapshot(5000)
    rows = replay(snapshot, ["", "expandable_segments:True", "cross_stream_reuse:True"])
    assert [r["oom"] for r in rows] == [False, False, False]
    assert all(r["peak_allocated"] > 0 for r in rows)
    notes = " ".join(rows[0]["notes"])
    assert "live before the trace began" in notes and "segments existed before" in notes


def test_settings_round_trip():
    for text in (
        "",
        "roundup_power2_divisions:4",
        "roundup_power2_divisions:[256:1,512:2,>:8]",
        "max_split_size_mb:200,garbage_collection_threshold:0.6",
        "expandable_segments:True",
    ):
        config = parse_config(text)
        rebuilt = parse_config(settings_to_config(config.settings()))
        assert rebuilt.settings() | {"PYTORCH_CUDA_ALLOC_CONF": ""} == config.settings() | {
            "PYTORCH_CUDA_ALLOC_CONF": ""
        }


# ============================================================================== CLI
def test_json_output(capsys, trace):
    path = trace("bert_infer-default")
    status = main_replay([str(path), "--json", "--config", "expandable_segments:True"])
    assert status == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["config"] for r in rows] == ["recorded", "expandable_segments:True"]
    for row in rows:
        assert {
            "config",
            "device_malloc",
            "segment_sizes",
            "peak_reserved",
            "peak_allocated",
        } <= set(row)
    assert rows[0]["segment_sizes"] == _recorded_sizes(path)


def test_table_output(capsys, trace):
    assert main_replay([str(trace("bert_infer-default")), "--capacity", "100MiB"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1. the recorded settings" in out and "device mallocs" in out
    assert "OUT OF MEMORY on 100.00 MiB" in out


def test_html_output(tmp_path, trace):
    out = tmp_path / "replay.html"
    path = str(trace("cnn_train-default"))
    assert main_replay([path, "--config", "expandable_segments:True", "--html", str(out)]) == 0
    page = out.read_text()
    assert page.count("<svg") == 2 and "expandable_segments:True" in page
    assert "http://" not in page and "https://" not in page and "<script src" not in page


def test_missing_file(capsys, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        replay(tmp_path / "nothing.pickle")
    assert main_replay([str(tmp_path / "nothing.pickle")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_not_a_snapshot(capsys, tmp_path):
    listed = tmp_path / "list.pickle"
    listed.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(ValueError, match="not a memory snapshot"):
        replay(listed)
    garbage = tmp_path / "garbage.pickle"
    garbage.write_bytes(b"this is not a pickle")
    assert main_replay([str(garbage)]) == 2
    assert "not a memory snapshot" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no device trace"):
        replay({"segments": [], "device_traces": [[]]})


def test_bad_config(capsys, trace):
    path = trace("bert_infer-default")
    with pytest.raises(ValueError, match="expandable_segments: expected True or False"):
        replay(path, ["expandable_segments:Maybe"])
    with pytest.raises(ValueError, match="unrecognized allocator option"):
        replay(path, ["no_such_key:1"])
    assert main_replay([str(path), "--config", "max_split_size_mb:5"]) == 2
    assert "max_split_size_mb" in capsys.readouterr().err
    assert main_replay([str(path), "--capacity", "lots"]) == 2


def test_a_recorded_setting_is_replaced_by_name(trace, capsys):
    """max_split_size_mb:-1 (PyTorch's spelling for no limit) drops the recorded setting:
    the max_split trace then replays as the default trace does (the same requests)."""
    instead, dropped = replay(
        trace("cnn_train-max_split"),
        ["max_split_size_mb:-1,expandable_segments:True", "max_split_size_mb:-1"],
    )
    (expandable,) = replay(trace("cnn_train-default"), ["expandable_segments:True"])
    (default,) = replay(trace("cnn_train-default"))
    assert instead["peak_reserved"] == expandable["peak_reserved"]
    assert instead["segment_sizes"] == expandable["segment_sizes"]
    assert dropped["segment_sizes"] == default["segment_sizes"]
    assert instead["change"] == "replaces" and dropped["change"] == "drops"
    assert instead["settings"] == "expandable_segments:True" and dropped["settings"] == ""
    assert main_replay([str(trace("cnn_train-max_split")), "--config", "max_split_size_mb:0"]) == 2
    assert "-1 (no limit) is PyTorch's default" in capsys.readouterr().err


def test_the_report_says_what_each_row_changes_and_not_recorded(trace, capsys):
    path = str(trace("cnn_train-max_split"))
    assert main_replay([path, "--config", "expandable_segments:True"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1. the recorded settings settings: max_split_size_mb:64" in out
    assert "same segments as the trace: yes." in out
    assert "2. adds expandable_segments:True settings: max_split_size_mb:64,expandable" in out
    assert "same segments as the trace: not recorded." in out
    assert (
        main_replay([path, "--config", "garbage_collection_threshold:0.8,memory_limit:2GiB"]) == 0
    )
    out = " ".join(capsys.readouterr().out.split())
    assert "a memory fraction allowing 2.00 GiB (unchecked prediction)" in out
