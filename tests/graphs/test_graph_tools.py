"""Graph pools in the memory tools: snapshots name each segment's pool, the viewer colours
allocations by pool, and ``vram replay`` replays a trace with graph captures as recorded."""

from __future__ import annotations

import copy

import pytest

import vram
from vram.memory._snapshot import _record_memory_history, _snapshot
from vram.tools import viz
from vram.tools.replay import replay

MiB = 1 << 20


@pytest.fixture
def recorded(sim0):
    """A snapshot of eager work and two captures sharing a pool, with its trace."""
    _record_memory_history("all", device=sim0)
    try:
        x = vram.ones(MiB, device=sim0)  # 4 MiB in the default pool
        warm = x * 2.0
        del warm
        a, b = vram.CUDAGraph(), vram.CUDAGraph()
        side = vram.Stream(sim0)
        with vram.graph(a, stream=side):
            y = x * 3.0  # the graph's output: lives on
            t = y + 1.0
            del t
        with vram.graph(b, pool=a.pool(), stream=side):
            z = y * 0.5
            w = vram.ones(300_000)  # a small-pool block of the shared pool
            del w
        eager = [vram.ones(n) for n in (2 * MiB, 600_000, 3 * MiB)]
        del eager[1]
        with vram.stream(side):  # the graphs' free blocks are not for eager work on side
            eager += [vram.ones(MiB), vram.ones(1000)]
        snap = _snapshot(sim0)
    finally:
        _record_memory_history(None, device=sim0)
    return snap, a.pool(), (y, z)


def test_snapshots_name_the_pool_of_each_segment(recorded):
    snap, pool, _ = recorded
    pools = {tuple(s["segment_pool_id"]) for s in snap["segments"]}
    assert pools == {(0, 0), pool}


def test_the_viewer_colours_allocations_by_pool(recorded, tmp_path):
    snap, pool, (y, z) = recorded
    view = viz.ViewData.build(snap, 0)
    data = view.to_json()
    assert len(data["alloc"]["pool"]) == len(data["alloc"]["addr"])
    private = view.pools.index(",".join(map(str, pool)))
    in_pool = {
        addr
        for addr, p in zip(data["alloc"]["addr"], data["alloc"]["pool"], strict=True)
        if p == private
    }
    assert {y.data_ptr(), z.data_ptr()} <= in_pool
    default = view.pools.index("0,0")
    assert sum(p == default for p in data["alloc"]["pool"]) >= 4  # x, warm and the eager ones
    out = viz.write_html(snap, tmp_path / "view.html")
    page = out.read_text()
    assert 'data-mode="pool"' in page and "private pool (" in page


def test_replay_models_graph_pools(recorded):
    snap, _, _ = recorded
    [row] = replay(snap)
    assert row["matches_recorded"]
    assert any("private pools" in note for note in row["notes"])
    flat = copy.deepcopy(snap)
    for segment in flat["segments"]:
        segment["segment_pool_id"] = (0, 0)
    [unmodelled] = replay(flat)  # the graphs' requests in the default pool: other segments
    assert not unmodelled["matches_recorded"]
