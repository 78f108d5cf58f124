"""backend:cudaMallocAsync on a real GPU: vram's stats against PyTorch's own cudaMallocAsync
backend for the same requests, and the driver's stream order seen through vram.

Each side runs in a fresh process (the backend is read when the allocator is made, and
PyTorch reads PYTORCH_CUDA_ALLOC_CONF before it initializes CUDA), so that both start from
an empty default pool of the device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from vram.driver import cuda_usable

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

MiB = 1 << 20
SRC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "src")
FILLED = {  # the keys PyTorch fills for this backend; every other one is 0
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "active_bytes.all.current",
    "active_bytes.all.peak",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
}

# The same requests through PyTorch or vram: uint8 tensors of these sizes on cuda:0, then
# half of them freed, the peaks reset, the rest freed, and empty_cache.
SCENARIO = """
import json, sys

SIZES = [1, 1000, 4096, 1 << 20, (3 << 20) + 5, 64 << 20, 300 << 20, 7]
if sys.argv[1] == "torch":
    import torch as lib
    cuda = lib.cuda
    stats = lambda: cuda.memory_stats(0)
    backend = cuda.get_allocator_backend()
    sync, empty_cache, reset_peak = cuda.synchronize, cuda.empty_cache, cuda.reset_peak_memory_stats
    cuda.init()  # (PyTorch's memory_stats is {} until CUDA is initialized; vram's never is)
else:
    import vram as lib
    stats = lambda: lib.memory.memory_stats("cuda:0")
    backend = lib.memory.get_allocator_backend()
    sync = lambda: lib.synchronize("cuda:0")
    empty_cache = lambda: lib.memory.empty_cache("cuda:0")
    reset_peak = lambda: lib.memory.reset_peak_memory_stats("cuda:0")
steps = {"before": stats()}
tensors = [lib.empty(n, dtype=lib.uint8, device="cuda:0") for n in SIZES]
sync()
steps["allocated"] = stats()
del tensors[::2]
sync()
steps["half freed"] = stats()
reset_peak()
steps["peaks reset"] = stats()
tensors.clear()
sync()
steps["all freed"] = stats()
empty_cache()
steps["emptied"] = stats()
print(json.dumps({"backend": backend, "steps": steps}))
"""

# vram alone: the pool's attributes, stream-ordered reuse while a free is still queued
# behind a kernel (a spin that waits for a host flag), the memory fraction and OOM.
SEMANTICS = r"""
import json
import numpy as np
import vram
from vram.driver import get_driver

SPIN = '''
extern "C" __global__ void spin(volatile const int* flag, long long most) {
    long long start = clock64();
    while (*flag == 0 && clock64() - start < most) { }
}
'''
dev = vram.device("cuda:0")
drv = get_driver("cuda")
alloc = lambda n, s=None: vram.memory.caching_allocator_alloc(n, dev, s)
free = vram.memory.caching_allocator_delete
main, side = vram.current_stream(dev), vram.Stream(dev)
out = {"backend": vram.memory.get_allocator_backend()}
out["allocator"] = type(vram.memory.allocator_for(dev)).__name__

a = alloc(MiB)
free(a)
b = alloc(MiB)
out["same stream reuses at once"] = a == b
free(b)
out["release threshold"] = drv.mempool_attribute(0, "release_threshold")
out["reuse flags"] = [drv.mempool_attribute(0, f) for f in (
    "reuse_follow_event_dependencies", "reuse_allow_opportunistic",
    "reuse_allow_internal_dependencies")]

# a free queued behind a kernel that has not finished: only its own stream may reuse it
drv.mempool_set_attribute(0, "reuse_allow_internal_dependencies", 0)
flag = drv.host_alloc(4)
view = drv.host_view(flag, 4)
view[:] = 0
kernel = drv.compile(0, SPIN, "spin")
held = alloc(MiB, main)
drv.launch(kernel, (1, 1, 1), (1, 1, 1), (flag, np.int64(20_000_000_000)), main.cuda_stream)
free(held)
elsewhere = alloc(MiB, side)
out["in flight: other stream reuses"] = elsewhere == held
out["kernel still running"] = not main.query()
again = alloc(MiB, main)
out["in flight: same stream reuses"] = again == held
view[:] = 1
vram.synchronize(dev)
free(elsewhere)
free(again)
drv.mempool_set_attribute(0, "reuse_allow_internal_dependencies", 1)
drv.host_free(flag)

# record_stream: the free waits for the recorded stream (PyTorch's unifying free stream)
used = alloc(MiB, main)
vram.memory.record_stream(used, side)
free(used)
vram.synchronize(dev)

# the memory fraction caps what live allocations asked for
total = vram.mem_get_info(dev)[1]
vram.memory.set_per_process_memory_fraction(0.01, dev)
try:
    alloc(int(0.02 * total))
    out["over the fraction"] = "allocated"
except vram.OutOfMemoryError as error:
    out["over the fraction"] = str(error).splitlines()[0]
vram.memory.set_per_process_memory_fraction(1.0, dev)
try:
    alloc(1 << 50)  # a PiB: the driver refuses
    out["a PiB"] = "allocated"
except vram.OutOfMemoryError as error:
    out["a PiB"] = str(error).splitlines()[0]
vram.memory.empty_cache(dev)
out["reserved after empty_cache"] = vram.memory.memory_reserved(dev)
print(json.dumps(out))
""".replace("MiB", str(MiB))


def _run(script: str, *args: str, conf: str = "backend:cudaMallocAsync") -> dict:
    """Run ``script`` in a fresh Python with PyTorch's and vram's allocator settings set."""
    paths = [os.path.abspath(SRC), os.environ.get("PYTHONPATH", "")]
    env = dict(
        os.environ,
        PYTORCH_CUDA_ALLOC_CONF=conf,
        VRAM_ALLOC_CONF=conf,
        PYTHONPATH=os.pathsep.join(filter(None, paths)),
    )
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_stats_match_pytorchs_cudamallocasync_backend():
    pytest.importorskip("torch")
    theirs = _run(SCENARIO, "torch")
    ours = _run(SCENARIO, "vram")
    assert theirs["backend"] == ours["backend"] == "cudaMallocAsync"
    for step, torch_stats in theirs["steps"].items():
        vram_stats = {
            k: v for k, v in ours["steps"][step].items() if not k.startswith("workspace_bytes")
        }
        print(step, {k: (torch_stats[k], vram_stats.get(k)) for k in sorted(FILLED)})
        assert set(vram_stats) == set(torch_stats), step
        assert {k: vram_stats[k] for k in FILLED} == {k: torch_stats[k] for k in FILLED}, step
        assert {k for k, v in torch_stats.items() if v} <= FILLED, step
        assert {k for k, v in vram_stats.items() if v} <= FILLED, step
    steps = ours["steps"]
    assert steps["allocated"]["allocated_bytes.all.current"] >= sum(
        [1, 1000, 4096, 1 << 20, (3 << 20) + 5, 64 << 20, 300 << 20, 7]
    )
    assert steps["all freed"]["allocated_bytes.all.current"] == 0
    assert steps["all freed"]["reserved_bytes.all.current"] > 0  # the pool kept it
    assert steps["emptied"]["reserved_bytes.all.current"] == 0


def test_stream_order_fraction_and_out_of_memory_on_the_gpu():
    out = _run(SEMANTICS)
    print(out)
    assert out["backend"] == "cudaMallocAsync" and out["allocator"] == "AsyncAllocator"
    assert out["same stream reuses at once"]
    assert out["release threshold"] == (1 << 64) - 1
    assert out["reuse flags"] == [1, 1, 1]
    assert out["kernel still running"]
    assert not out["in flight: other stream reuses"]
    assert out["in flight: same stream reuses"]
    expected = "Allocation on device cuda:0 would exceed allowed memory. (out of memory)"
    assert out["over the fraction"] == expected
    assert out["a PiB"] == expected
    assert out["reserved after empty_cache"] == 0


def test_a_backend_switch_at_run_time_is_refused_as_pytorch_refuses_it():
    pytest.importorskip("torch")
    script = """
    import json
    import torch
    import vram
    out = {}
    torch.empty(1, device="cuda")
    try:
        torch.cuda.memory._set_allocator_settings("backend:native")
    except RuntimeError as error:
        out["torch"] = str(error)
    try:
        vram.memory.set_allocator_settings("backend:native")
    except ValueError as error:
        out["vram"] = str(error)
    print(json.dumps(out))
    """
    out = _run(script)
    print(out)
    message = (
        "Allocator backend parsed at runtime != allocator backend parsed at load time, "
        "native != cudaMallocAsync"
    )
    assert message in out.get("torch", "")
    assert message in out.get("vram", "")
