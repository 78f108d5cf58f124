"""Predictions against PyTorch's own runs: a replay of each workload's default trace under
another setting reserves at its peak what PyTorch reserved when it ran under that setting
(within 1%; bench/predictions.py prints the table)."""

from __future__ import annotations

import pytest

from vram.tools.replay import load_snapshot, replay

WORKLOADS = ("gpt_train", "cnn_train", "bert_infer", "two_stream")
SETTINGS = {  # bench/record_traces.py's settings (tests/data/traces/README.md)
    "max_split": "max_split_size_mb:64",
    "rp2": "roundup_power2_divisions:[256:8,>:4]",
    "expandable": "expandable_segments:True",
}


def _recorded(snapshot: dict) -> tuple[int, list[int]]:
    """Peak reserved and the segment sizes (allocated or mapped) of a PyTorch trace."""
    trace = next(t for t in snapshot["device_traces"] if t)
    reserved = peak = 0
    sizes = []
    for e in trace:
        if e["action"] in ("segment_alloc", "segment_map"):
            reserved += e["size"]
            sizes.append(e["size"])
            peak = max(peak, reserved)
        elif e["action"] in ("segment_free", "segment_unmap"):
            reserved -= e["size"]
    return peak, sizes


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_default_trace_predicts_each_other_setting(trace, workload, setting):
    (predicted,) = replay(trace(f"{workload}-default"), [SETTINGS[setting]])
    peak, sizes = _recorded(load_snapshot(trace(f"{workload}-{setting}")))
    assert abs(predicted["peak_reserved"] / peak - 1) <= 0.01
    assert predicted["segment_sizes"] == sizes  # the same decisions, not only the same peak
