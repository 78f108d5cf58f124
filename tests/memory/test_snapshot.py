"""Snapshots, history and counting: PyTorch's format, round-tripped through pickle."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import vram
from vram.memory._counting import count_device_calls
from vram.memory._snapshot import (
    _dump_snapshot,
    _record_memory_history,
    _snapshot,
    memory_snapshot,
    segments_of,
)

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"  # bench/record_traces.py
MiB = 1 << 20

SEGMENT_KEYS = [
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "requested_size",
    "stream",
    "segment_type",
    "segment_pool_id",
    "is_expandable",
    "frames",
    "blocks",
]
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
ENTRY_KEYS = {
    "action",
    "addr",
    "size",
    "stream",
    "time_us",
    "frames",
    "compile_context",
    "user_metadata",
}


@pytest.fixture(autouse=True)
def _history_off():
    yield
    _record_memory_history(None)


def _round_trip(tmp_path) -> dict:
    path = tmp_path / "snap.pickle"
    _dump_snapshot(str(path))
    with path.open("rb") as f:
        return pickle.load(f)


def _actions(snapshot: dict, device: int = 0) -> list[str]:
    return [e["action"] for e in snapshot["device_traces"][device]]


def test_snapshot_format_and_states(sim0, alloc, free, tmp_path):
    _record_memory_history()
    a = alloc(1000)
    b = alloc(3000)
    d = alloc(1000)
    c = alloc(5 * MiB)
    free(b)
    snap = _round_trip(tmp_path)
    assert set(snap) >= {"segments", "device_traces", "allocator_settings"}
    assert snap["allocator_settings"]["expandable_segments"] is False
    assert len(snap["device_traces"]) == vram.sim.driver().device_count()
    small, large = snap["segments"]  # sorted by address: the small segment came first
    assert list(small) == SEGMENT_KEYS
    assert (small["segment_type"], small["total_size"]) == ("small", 2 * MiB)
    assert (large["segment_type"], large["total_size"]) == ("large", 20 * MiB)
    assert small["segment_pool_id"] == (0, 0) and small["is_expandable"] is False
    assert [(x["address"], x["size"], x["state"]) for x in small["blocks"]] == [
        (a, 1024, "active_allocated"),
        (a + 1024, 3072, "inactive"),
        (a + 4096, 1024, "active_allocated"),
        (a + 5120, 2 * MiB - 5120, "inactive"),
    ]
    assert all(set(x) == BLOCK_KEYS for x in small["blocks"])
    assert small["allocated_size"] == small["active_size"] == 2048
    assert small["requested_size"] == 2000
    assert large["blocks"][0]["address"] == c and large["allocated_size"] == 5 * MiB
    assert sum(x["size"] for x in large["blocks"]) == large["total_size"]
    trace = snap["device_traces"][0]
    assert all(set(e) == ENTRY_KEYS for e in trace)
    assert [(e["action"], e["size"]) for e in trace] == [
        ("segment_alloc", 2 * MiB),
        ("alloc", 1000),
        ("alloc", 3000),
        ("alloc", 1000),
        ("segment_alloc", 20 * MiB),
        ("alloc", 5 * MiB),
        ("free_requested", 3000),
        ("free_completed", 3000),
    ]
    assert trace[0]["compile_context"] == "N/A" and trace[0]["user_metadata"] == ""
    assert [e["time_us"] for e in trace] == sorted(e["time_us"] for e in trace)
    free(a, c, d)


def test_pending_free_is_active_pending_free(sim0, alloc, free):
    _record_memory_history()
    side = vram.Stream(sim0)
    with vram.sim.deferred():
        ptr = alloc(4096)
        vram.memory.record_stream(ptr, side)
        free(ptr)
        (segment,) = memory_snapshot()
        assert segment["blocks"][0]["state"] == "active_pending_free"
        assert segment["active_size"] == 4096 and segment["allocated_size"] == 0
        assert _actions(_snapshot())[-1] == "free_requested"
    alloc_again = alloc(512)  # the next malloc finds the event done and completes the free
    assert _actions(_snapshot())[-2:] == ["free_completed", "alloc"]
    assert memory_snapshot()[0]["blocks"][0]["state"] == "active_allocated"
    free(alloc_again)


def test_frames_when_asked(sim0, alloc, free):
    _record_memory_history(context="all")
    ptr = alloc(1000)  # this line is in the frames
    free(ptr)
    trace = _snapshot()["device_traces"][0]
    alloc_entry = next(e for e in trace if e["action"] == "alloc")
    top = alloc_entry["frames"][0]
    assert set(top) == {"filename", "line", "name"}
    assert top["name"] == "allocate" and top["filename"].endswith("conftest.py")  # the fixture
    assert any(f["name"] == "test_frames_when_asked" for f in alloc_entry["frames"])
    assert not any("/vram/memory/" in f["filename"] for f in alloc_entry["frames"])
    free_entry = next(e for e in trace if e["action"] == "free_requested")
    assert any(f["name"] == "test_frames_when_asked" for f in free_entry["frames"])


def test_frames_of_live_blocks_and_segments(sim0, alloc, free):
    _record_memory_history(context="state")
    ptr = alloc(1000)
    (segment,) = memory_snapshot()
    names = {f["name"] for f in segment["blocks"][0]["frames"]}
    assert "test_frames_of_live_blocks_and_segments" in names
    assert "test_frames_of_live_blocks_and_segments" in {f["name"] for f in segment["frames"]}
    trace = _snapshot()["device_traces"][0]
    assert next(e for e in trace if e["action"] == "alloc")["frames"] == []  # "state" only
    free(ptr)
    assert memory_snapshot()[0]["blocks"][0]["frames"] == []


def test_no_frames_without_context(sim0, alloc, free):
    _record_memory_history(context=None)
    free(alloc(1000))
    (segment,) = memory_snapshot()
    assert all(e["frames"] == [] for e in _snapshot()["device_traces"][0])
    assert segment["frames"] == []


def test_state_only_keeps_no_trace(sim0, alloc, free):
    _record_memory_history(enabled="state")
    ptr = alloc(1000)
    assert _snapshot()["device_traces"][0] == []
    assert memory_snapshot()[0]["blocks"][0]["frames"] != []
    free(ptr)


def test_ring_buffer_keeps_the_last_entries(sim0, alloc, free):
    _record_memory_history(max_entries=5)
    for size in range(1000, 11000, 1000):
        free(alloc(size))
    trace = _snapshot()["device_traces"][0]
    assert [(e["action"], e["size"]) for e in trace] == [
        ("free_requested", 9000),
        ("free_completed", 9000),
        ("alloc", 10000),
        ("free_requested", 10000),
        ("free_completed", 10000),
    ]


def test_disabling_stops_and_clears(sim0, alloc, free):
    _record_memory_history()
    free(alloc(1000))
    _record_memory_history(None)
    free(alloc(1000))
    assert _snapshot()["device_traces"][0] == []
    assert vram.memory.allocator_for(sim0).recorder is None


def test_history_covers_every_device_of_the_type(sim0):
    _record_memory_history()
    other = vram.device("sim:1")
    ptr = vram.memory.caching_allocator_alloc(1000, other)
    vram.memory.caching_allocator_delete(ptr)
    snap = _snapshot(other)
    assert _actions(snap, 1)[:2] == ["segment_alloc", "alloc"]
    assert snap["segments"][0]["device"] == 1


def test_expandable_segments_are_one_segment_per_mapped_run(sim0, alloc, free):
    vram.memory.set_allocator_settings("expandable_segments:True")
    _record_memory_history()
    a = alloc(30 * MiB)
    b = alloc(30 * MiB)
    (segment,) = memory_snapshot()
    assert segment["is_expandable"] is True
    assert segment["total_size"] == 60 * MiB  # three 20 MiB pages mapped
    assert [x["state"] for x in segment["blocks"]] == ["active_allocated"] * 2
    assert "segment_map" in _actions(_snapshot())
    free(a, b)


def test_mem_pool_snapshot_uses_segments_of(sim0, free):
    pool = vram.memory.MemPool(sim0)
    with vram.memory.use_mem_pool(pool):
        ptr = vram.memory.caching_allocator_alloc(1000, sim0)
    other = vram.memory.caching_allocator_alloc(1000, sim0)
    (segment,) = pool.snapshot()
    assert segment["segment_pool_id"] == pool.id
    assert segment["blocks"][0]["address"] == ptr
    allocator = vram.memory.allocator_for(sim0)
    assert len(segments_of(allocator)) == 2
    free(ptr, other)


def test_bad_arguments():
    with pytest.raises(ValueError, match="enabled"):
        _record_memory_history("sometimes")
    with pytest.raises(ValueError, match="context"):
        _record_memory_history(context="everything")
    with pytest.raises(ValueError, match="stacks"):
        _record_memory_history(stacks="cpp")
    with pytest.raises(ValueError, match="max_entries"):
        _record_memory_history(max_entries=0)


@pytest.mark.parametrize("name", ["gpt_train", "cnn_train", "bert_infer", "two_stream"])
def test_bundled_traces_load(name):
    from vram.tools import load_snapshot

    path = TRACES / f"{name}-default.pickle.xz"
    if not any(TRACES.glob("*.pickle.xz")):  # until the traces are committed
        pytest.skip("tests/data/traces/ has no traces yet (bench/record_traces.py)")
    snap = load_snapshot(path)
    assert set(SEGMENT_KEYS) <= set(snap["segments"][0])
    recorded = [e for e in snap["device_traces"][0] if e["action"] == "segment_alloc"]
    assert sum(e["size"] for e in recorded) == sum(s["total_size"] for s in snap["segments"])


# =========================================================================== counting
def test_count_device_calls(sim0, alloc, free):
    with count_device_calls() as calls:
        a = alloc(1000)
        b = alloc(2000)  # from the same small segment
        c = alloc(30 * MiB)
        free(a, b, c)
    assert (calls.device_malloc, calls.alloc, calls.free) == (2, 3, 3)
    assert (calls.device_free, calls.map, calls.unmap, calls.sync, calls.oom) == (0, 0, 0, 0, 0)
    with count_device_calls() as warm:
        free(alloc(1000), alloc(30 * MiB))
    assert warm.device_malloc == 0 and warm.alloc == 2
    with count_device_calls(sim0) as cleared:
        vram.memory.empty_cache(sim0)
    assert cleared.device_free == 2 and cleared.sync == 1
    assert vram.memory.allocator_for(sim0).recorder is None


def test_counts_are_frozen_after_the_block(sim0, alloc, free):
    with count_device_calls() as calls:
        ptr = alloc(1000)
        assert calls.alloc == 1  # live inside the block
    free(alloc(1000))
    vram.memory.empty_cache(sim0)
    assert calls.as_dict() == {
        "device_malloc": 1,
        "device_free": 0,
        "map": 0,
        "unmap": 0,
        "alloc": 1,
        "free": 0,
        "oom": 0,
        "sync": 0,
    }
    assert "alloc=1" in repr(calls)
    free(ptr)


def test_counting_maps_and_history_together(sim0, alloc, free):
    vram.memory.set_allocator_settings("expandable_segments:True")
    _record_memory_history()
    with count_device_calls() as outer, count_device_calls() as inner:
        ptr = alloc(30 * MiB)
        free(ptr)
        vram.memory.empty_cache(sim0)
    assert outer.as_dict() == inner.as_dict()
    assert (outer.map, outer.unmap, outer.device_malloc) == (1, 1, 0)
    assert _actions(_snapshot())[-1] == "segment_unmap"
    assert vram.memory.allocator_for(sim0).recorder is not None  # history still hangs on it


def test_counting_an_oom(sim0, alloc, capacity):
    capacity(4 * MiB)
    with count_device_calls() as calls, pytest.raises(vram.OutOfMemoryError):
        alloc(30 * MiB)
    assert calls.oom == 1 and calls.sync == 1 and calls.device_malloc == 0
