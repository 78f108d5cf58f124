"""Snapshots interchange with PyTorch both ways (needs a GPU and PyTorch).

PyTorch's memory-viz functions read a vram pickle; vram's loader and replay read a
snapshot PyTorch recorded, and the replay makes PyTorch's segment decisions.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import vram
from vram.memory._snapshot import _dump_snapshot, _record_memory_history
from vram.tools import load_snapshot, replay

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
memory_viz = pytest.importorskip("torch.cuda._memory_viz")

MiB = 1 << 20


def _workload(device) -> list[int]:
    """Allocations of every kind: small and large pools, a split, frees, a pending free;
    the blocks still live (to free once the snapshot is taken)."""
    held = [vram.memory.caching_allocator_alloc(n, device) for n in (1000, 3 * MiB, 700 * 1024)]
    side = vram.Stream(device)
    big = vram.memory.caching_allocator_alloc(50 * MiB, device)
    vram.memory.record_stream(big, side)
    vram.memory.caching_allocator_delete(held.pop(1))
    vram.memory.caching_allocator_delete(big)
    held.append(vram.memory.caching_allocator_alloc(8 * MiB, device))
    vram.memory.caching_allocator_delete(held.pop(0))
    return held


@pytest.fixture(params=["cuda:0", "sim:0"])
def vram_pickle(request, tmp_path):
    device = vram.device(request.param)
    path = tmp_path / "vram.pickle"
    # cached segments left by earlier tests would serve the workload without a cudaMalloc
    vram.memory.empty_cache(device)
    _record_memory_history(device=device)
    held = []
    try:
        held = _workload(device)
        _dump_snapshot(str(path), device)
    finally:
        _record_memory_history(None)
        for ptr in held:
            vram.memory.caching_allocator_delete(ptr)
    with path.open("rb") as f:
        return pickle.load(f)


def test_torch_memory_viz_reads_a_vram_snapshot(vram_pickle):
    assert vram_pickle["device_traces"][0]
    assert "Summary of segments" in memory_viz.segsum(vram_pickle)
    assert "<html" in memory_viz.trace_plot(vram_pickle).lower()
    assert "<html" in memory_viz.segment_plot(vram_pickle).lower()
    text = memory_viz.trace(vram_pickle)
    assert "alloc" in text


_TORCH_SCRIPT = """
import pickle, sys
import torch

torch.cuda.memory._record_memory_history(max_entries=1_000_000)
x = []
for step in range(3):
    for n in (1000, 3 << 20, 700 << 10, 50 << 20, 8 << 20, 123_456, 30 << 20):
        x.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
    del x[::2]
side = torch.cuda.Stream()
y = torch.empty(40 << 20, dtype=torch.uint8, device="cuda")
y.record_stream(side)
del y
z = torch.empty(40 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
with open(sys.argv[1], "wb") as f:
    pickle.dump(torch.cuda.memory._snapshot(), f)
"""


@pytest.mark.parametrize("conf", ["", "roundup_power2_divisions:4", "expandable_segments:True"])
def test_vram_replays_a_torch_snapshot(tmp_path, conf):
    path = tmp_path / "torch.pickle"
    env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_TORCH_SCRIPT), str(path)],
        check=True,
        env={**os.environ, **env},
    )
    snapshot = load_snapshot(path)
    recorded = [
        e["size"]
        for e in snapshot["device_traces"][0]
        if e["action"] in ("segment_alloc", "segment_map")
    ]
    assert recorded
    (row,) = replay(path)
    assert row["notes"] == []
    assert row["segment_sizes"] == recorded
    assert row["matches_recorded"] is True
