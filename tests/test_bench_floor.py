"""bench/_floor.py: the python floor makes the cached path's decisions, so trace_ops compares
like with like: on a one-stream trace with default settings it asks for the same segments,
in the same order, as vram's caching allocator."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import vram
from vram.tools import load_snapshot

ROOT = Path(__file__).resolve().parents[1]


def _floor_module():
    spec = importlib.util.spec_from_file_location("bench_floor", ROOT / "bench" / "_floor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _requests(path: Path) -> list[tuple[bool, int, int]]:
    out, live = [], set()
    traces = load_snapshot(path)["device_traces"]
    for entry in next(t for t in traces if t):
        if entry["action"] == "alloc":
            out.append((True, entry["addr"], max(entry["size"], 1)))
            live.add(entry["addr"])
        elif entry["action"] == "free_requested" and entry["addr"] in live:
            out.append((False, entry["addr"], 0))
            live.discard(entry["addr"])
    return out


@pytest.mark.parametrize("trace", ["gpt_train-default", "cnn_train-default"])
def test_the_floor_asks_for_vrams_segments(trace, sim0):
    requests = _requests(ROOT / "tests" / "data" / "traces" / f"{trace}.pickle.xz")
    floor = _floor_module().FloorPool()
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
