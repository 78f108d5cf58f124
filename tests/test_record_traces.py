"""bench/record_traces.py without a GPU: trace files written, read back, checked and indexed."""

from __future__ import annotations

import importlib.util
import lzma
import pickle
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


@pytest.fixture(scope="module")
def recorder():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(
            "record_traces", ROOT / "bench" / "record_traces.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(ROOT / "bench"))


def _snapshot(sizes: list[int], conf: str = "", side: int = 0) -> dict:
    """A PyTorch-format snapshot: one segment, then each size allocated and freed in turn
    (the last on stream ``side`` when given, its free completing later)."""
    trace = [{"action": "segment_alloc", "addr": 1 << 32, "size": 20 * MiB, "stream": 7}]
    for k, size in enumerate(sizes):
        stream = side if side and k == len(sizes) - 1 else 7
        trace += [
            {"action": "alloc", "addr": (1 << 32) + k, "size": size, "stream": stream},
            {"action": "free_requested", "addr": (1 << 32) + k, "size": size, "stream": stream},
            {"action": "free_completed", "addr": (1 << 32) + k, "size": size, "stream": stream},
        ]
    for entry in trace:
        entry |= {"time_us": 1, "compile_context": "N/A", "user_metadata": ""}
    block = {"address": 1 << 32, "size": 20 * MiB, "requested_size": 0, "state": "inactive"}
    return {
        "segments": [
            {
                "device": 0,
                "address": 1 << 32,
                "total_size": 20 * MiB,
                "allocated_size": 0,
                "active_size": 0,
                "requested_size": 0,
                "stream": 7,
                "segment_type": "large",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": [block],
            }
        ],
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": conf, "expandable_segments": False},
        "external_annotations": [],
        "vram_recording": {"torch": "2.11.0", "device_name": "NVIDIA H100 80GB HBM3"},
    }


def test_a_trace_file_is_xz_of_a_protocol_5_pickle_and_reads_back(recorder, tmp_path):
    snapshot = _snapshot([3 * MiB, 5 * MiB])
    path = recorder.write_trace(snapshot, tmp_path / recorder.trace_file("gpt_train", "rp2"))
    assert path.name == "gpt_train-rp2.pickle.xz"
    raw = lzma.decompress(path.read_bytes())
    assert raw[:2] == b"\x80\x05"  # PROTO 5
    assert recorder.read_trace(path) == pickle.loads(raw) == snapshot


def test_summary_of_a_trace(recorder):
    summary = recorder.summarize(_snapshot([3 * MiB, 5 * MiB], "max_split_size_mb:64"))
    assert summary == {
        "settings": "max_split_size_mb:64",
        "events": 7,
        "allocs": 2,
        "device_mallocs": 1,
        "segments": 1,
        "peak_reserved": 20 * MiB,
        "peak_requested": 5 * MiB,
        "streams": 1,
        "torch": "2.11.0",
        "device_name": "NVIDIA H100 80GB HBM3",
    }


def test_requests_number_streams_by_first_use(recorder):
    assert recorder.requests(_snapshot([1000, 2000], side=99)) == [
        ("alloc", 1000, 0),
        ("free_requested", 1000, 0),
        ("alloc", 2000, 1),
        ("free_requested", 2000, 1),
    ]


def test_requests_are_checked_across_settings(recorder, tmp_path):
    for setting in recorder.SETTINGS:
        sizes = [1000, 4096, 2000] if setting == "rp2" else [1000, 2000, 2000]
        recorder.write_trace(_snapshot(sizes), tmp_path / recorder.trace_file("cnn_train", setting))
    for setting in recorder.SETTINGS:
        recorder.write_trace(_snapshot([64]), tmp_path / recorder.trace_file("bert_infer", setting))
    lines = recorder.check_requests(tmp_path, ["cnn_train", "bert_infer", "gpt_train"])
    assert lines == [
        "cnn_train: 6 requests, DIFFER: rp2 (from request 2)",
        "bert_infer: 2 requests, same under every setting",
        "gpt_train: not every setting was recorded",
    ]


def test_the_index_has_a_row_per_file(recorder, tmp_path):
    recorder.write_trace(_snapshot([1000]), tmp_path / recorder.trace_file("two_stream", "default"))
    recorder.write_trace(
        _snapshot([1000], "expandable_segments:True"),
        tmp_path / recorder.trace_file("two_stream", "expandable"),
    )
    recorder.write_trace(_snapshot([7]), tmp_path / recorder.trace_file("two_stream", "rp2"))
    assert recorder.main(["--out", str(tmp_path), "--index-only"]) == 0
    text = (tmp_path / "README.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| two_stream-")]
    assert rows == [
        "| two_stream-default.pickle.xz | two_stream under default | `(none)` | 4 | 1 | 1 "
        "| 20 | 0 | yes |",
        "| two_stream-expandable.pickle.xz | two_stream under expandable "
        "| `expandable_segments:True` | 4 | 1 | 1 | 20 | 0 | yes |",
        "| two_stream-rp2.pickle.xz | two_stream under rp2 | `(none)` | 4 | 1 | 1 | 20 | 0 | no |",
    ]
    assert "PyTorch 2.11.0 on NVIDIA H100 80GB HBM3" in text
    for name, what in recorder.WORKLOADS.items():
        assert f"| {name} | {what} |" in text
    assert "| rp2 | `roundup_power2_divisions:[256:8,>:4]` |" in text


def test_every_workload_has_a_description_and_a_run(recorder):
    assert set(recorder.WORKLOADS) == set(recorder.RUNS)
    assert set(recorder.SETTINGS) == {"default", "max_split", "rp2", "expandable"}
    assert recorder.SETTINGS["default"] == ""


def test_the_readme_lists_every_workload_and_setting(recorder):
    text = (ROOT / "README.md").read_text()
    for name, what in recorder.WORKLOADS.items():
        assert f"| `{name}` | {what} |" in text
    for name, value in recorder.SETTINGS.items():
        assert f"| `{name}` | `{value}` |" in text or (not value and f"| `{name}` | (unset" in text)
