"""vram explain on PyTorch-format snapshots: the report from segments and the trace's oom."""

from __future__ import annotations

import json
import pickle

from vram import cli
from vram.tools.explain import find_setting, report_from_snapshot

MiB = 1 << 20


def main_explain(argv: list[str]) -> int:
    return cli.main(["explain", *argv])


def test_explain_a_pytorch_snapshot_with_an_oom_event(tmp_path, capsys, synthetic_snapshot):
    snapshot = synthetic_snapshot(3000)
    path = tmp_path / "torch.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=5))
    report = report_from_snapshot(path)
    oom = next(e for e in snapshot["device_traces"][0] if e["action"] == "oom")
    assert (report.request, report.device_free) == (oom["size"], oom["addr"])
    assert report.limit == report.reserved + oom["addr"]
    live = [
        b["size"]
        for s in snapshot["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    ]
    assert [b.size for b in report.largest_live] == sorted(live, reverse=True)[:10]
    pending = sum(
        b["size"]
        for s in snapshot["segments"]
        for b in s["blocks"]
        if b["state"] == "active_pending_free"
    )
    assert sum(report.pending.values()) == pending
    assert main_explain([str(path), "--no-replay"]) == 0
    out = capsys.readouterr().out
    assert "out of memory on device 0: 1024.00 GiB requested" in out
    assert "10 largest live blocks" in out and "model_1.py" in out


def test_a_request_no_device_could_hold_is_named_so(tmp_path, capsys, synthetic_snapshot):
    path = tmp_path / "torch.pickle"
    path.write_bytes(pickle.dumps(synthetic_snapshot(3000)))
    result = find_setting(path)
    assert result.baseline.fits is False and result.makes_it_fit is None
    assert main_explain([str(path), "--json", "--jobs", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["avoided_by"].startswith("none of the")
    assert out["search"]["capacity"] == out["limit"]


def test_explain_bad_input_is_one_line(tmp_path, capsys):
    assert main_explain([str(tmp_path / "missing.pickle")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vram explain: error:") and err.count("\n") == 1


def test_without_an_oom_it_says_there_was_none(tmp_path, capsys, trace):
    path = trace("cnn_train-default")
    assert main_explain([str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("memory of device 0\n  there was no out-of-memory error")
    assert "would the recorded run fit" not in out


def test_capacity_answers_would_it_fit_and_with_which_setting(capsys, trace):
    path = str(trace("cnn_train-max_split"))
    assert main_explain([path, "--capacity", "2GiB", "--jobs", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "would the recorded run fit in 2.00 GiB: yes, under the recorded settings" in out
    assert main_explain([path, "--capacity", "780MiB", "--jobs", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "would the recorded run fit in 780.00 MiB: not under the recorded settings" in out
    assert "yes with expandable_segments:True" in out
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out
    assert main_explain([path, "--capacity", "300MiB", "--jobs", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "fit in 300.00 MiB: no; none of the" in out


def test_an_oom_snapshot_with_a_capacity_is_answered_for_that_capacity(
    tmp_path, capsys, synthetic_snapshot
):
    """--capacity on a snapshot with an OOM replays its history on a device of that size:
    the verdict names the size, and does not blame memory the trace does not show."""
    snapshot = synthetic_snapshot(3000)
    oom = next(e for e in snapshot["device_traces"][0] if e["action"] == "oom")
    oom["size"] = 64 * MiB  # a request that a device of 8 GiB holds
    path = tmp_path / "torch.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    assert main_explain([str(path), "--capacity", "8GiB", "--jobs", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "the setting that would have avoided it: on a device of 8.00 GiB: none needed: the "
        "recorded history fits there under its own settings" in out
    )
    assert "another process" not in out


def test_a_run_that_fits_only_by_flushing_is_told_the_setting_that_needs_none(capsys, trace):
    """The recorded settings fit 100 MiB below their peak only by giving their cache back;
    the answer names the PyTorch setting that fits without, with its line to paste."""
    from vram.tools import suggest_settings

    path = str(trace("cnn_train-default"))
    need = suggest_settings(path, jobs=1).baseline.peak_reserved
    capacity = f"{(need >> 20) - 100}MiB"
    assert main_explain([path, "--capacity", capacity, "--jobs", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("would the recorded run"))
    text = " ".join(" ".join(lines[at:]).split())
    assert "yes, under the recorded settings, by flushing its cache" in text
    assert "expandable_segments:True fits without flushing:" in text
    assert lines[-1] == "    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
