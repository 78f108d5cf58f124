"""bench/_floor.py: the python floor makes the cached path's decisions, so trace_ops compares
like with like: on a one-stream trace with default settings it asks for the same segments,
in the same order, as vram's caching allocator."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import vram

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch):
    """bench/ importable, as its scripts import each other (trace_ops, _floor)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    return importlib.import_module


@pytest.mark.parametrize("trace", ["gpt_train-default", "cnn_train-default"])
def test_the_floor_asks_for_vrams_segments(trace, sim0, bench):
    requests = bench("trace_ops").sequence(
        ROOT / "tests" / "data" / "traces" / f"{trace}.pickle.xz"
    )
    floor = bench("_floor").FloorPool()
    allocator = vram.memory.DeviceCachingAllocator(sim0)
    stream = vram.default_stream(sim0).cuda_stream
    segments: list[int] = []
    account = allocator.device_malloc.on_reserve

    def watch(pool, segment, start, nbytes, action):  # the allocator's accounting, watched
        if nbytes > 0:
            segments.append(nbytes)
        account(pool, segment, start, nbytes, action)

    allocator.device_malloc.on_reserve = watch
    mine: dict[int, int] = {}
    theirs: dict[int, int] = {}
    for is_alloc, addr, size in requests:
        if is_alloc:
            mine[addr] = allocator.malloc(size, stream)
            theirs[addr] = floor.malloc(size)
        else:
            allocator.free(mine.pop(addr))
            floor.free(theirs.pop(addr))
    for ptr in mine.values():
        allocator.free(ptr)
    allocator.empty_cache()
    assert len(segments) > 1
    assert floor.segments == segments
