"""History kept all the time: a bounded ring, stacks with their lines worked out at the
dump, and segment_free events carrying their segment's stack under every context."""

from __future__ import annotations

import inspect

import pytest

import vram
from vram.memory._snapshot import _record_memory_history, _snapshot

MiB = 1 << 20


@pytest.mark.parametrize("context", ["state", "alloc", "all"])
def test_segment_free_carries_the_segment_stack(sim0, alloc, free, context):
    _record_memory_history("all", context=context, device=sim0)
    try:
        line = inspect.currentframe().f_lineno + 1
        ptr = alloc(30 * MiB)  # a segment of its own
        free(ptr)
        vram.memory.empty_cache(sim0)
        trace = _snapshot(sim0)["device_traces"][0]
    finally:
        _record_memory_history(None, device=sim0)
    (segment_free,) = [e for e in trace if e["action"] == "segment_free"]
    name = "test_segment_free_carries_the_segment_stack"
    if context == "all":  # the stack at the release (empty_cache), as PyTorch takes it
        assert segment_free["frames"][0]["name"] == name
        assert segment_free["frames"][0]["line"] == line + 2
    else:  # the segment's: where it was allocated ([0] is the alloc fixture's helper)
        assert segment_free["frames"][1]["name"] == name
        assert segment_free["frames"][1]["line"] == line


def test_the_ring_keeps_the_last_events_and_equal_stacks_share_a_list(sim0, alloc, free):
    _record_memory_history("all", context="alloc", max_entries=10, device=sim0)
    try:
        for _ in range(20):
            free(alloc(4096))
        trace = _snapshot(sim0)["device_traces"][0]
    finally:
        _record_memory_history(None, device=sim0)
    assert len(trace) == 10
    assert [e["action"] for e in trace[-3:]] == ["alloc", "free_requested", "free_completed"]
    allocs = [e for e in trace if e["action"] == "alloc"]
    assert len(allocs) == 3 and allocs[0]["frames"] is allocs[1]["frames"]  # one stack, shared
