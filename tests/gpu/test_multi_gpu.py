"""Two GPUs of one host: peer access, peer copies, pages mapped for a peer, and
vram.distributed over NCCL with the launcher (skipped unless there are 2 CUDA devices)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vram
from vram.driver import cuda_usable, get_driver

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not cuda_usable() or get_driver("cuda").device_count() < 2, reason="needs 2 CUDA GPUs"
    ),
]

WORKERS = Path(__file__).resolve().parents[1] / "distributed" / "workers"


def test_peer_access_can_be_enabled_twice():
    driver = get_driver("cuda")
    assert driver.can_access_peer(0, 1) == driver.can_access_peer(1, 0)
    if not driver.can_access_peer(0, 1):
        pytest.skip("these GPUs cannot access each other's memory")
    driver.enable_peer_access(0, 1)
    driver.enable_peer_access(0, 1)  # already enabled: no error, as PyTorch's
    driver.enable_peer_access(1, 0)
    with pytest.raises(vram.CudaError):
        driver.enable_peer_access(0, 0)


def test_peer_copy_moves_the_bytes_between_devices():
    driver = get_driver("cuda")
    n = 3 << 20
    src = vram.memory.caching_allocator_alloc(n, "cuda:0")
    dst = vram.memory.caching_allocator_alloc(n, "cuda:1")
    stream = vram.Stream("cuda:1")
    driver.memset_d8(src, 0x5A, n, vram.Stream("cuda:0").cuda_stream)
    vram.synchronize("cuda:0")
    driver.memcpy_peer(dst, 1, src, 0, n, stream.cuda_stream)
    stream.synchronize()
    host = np.empty(n, np.uint8)
    driver.memcpy_dtoh(host, dst, stream.cuda_stream)
    stream.synchronize()
    assert (host == 0x5A).all()
    vram.memory.caching_allocator_delete(src)
    vram.memory.caching_allocator_delete(dst)


def test_tensor_to_another_gpu_without_a_host_round_trip():
    x = vram.tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device="cuda:0")
    y = x.to("cuda:1")
    assert y.device == vram.device("cuda:1")
    assert y.numpy().tolist() == np.arange(24, dtype=np.float32).reshape(4, 6).tolist()
    z = x.t().to("cuda:1", dtype=vram.float64)  # a layout and a dtype change on the way
    assert z.numpy().tolist() == np.arange(24, dtype=np.float64).reshape(4, 6).T.tolist()
    back = vram.empty(4, 6, device="cuda:0")
    with vram.device("cuda:1"):  # from a third current device's point of view
        back.copy_(y * 2)
    assert back.numpy().tolist() == (np.arange(24).reshape(4, 6) * 2).tolist()


def test_pages_mapped_for_a_peer_are_readable_from_it():
    driver = get_driver("cuda")
    if not driver.can_access_peer(1, 0):
        pytest.skip("these GPUs cannot access each other's memory")
    driver.enable_peer_access(1, 0)
    page = driver.vmm_granularity(0)
    va = driver.vmm_reserve(0, page)
    handle = driver.vmm_create(0, page)
    try:
        driver.vmm_map(0, va, page, handle)
        driver.vmm_set_access(0, va, page, (1,))
        s0, s1 = vram.Stream("cuda:0"), vram.Stream("cuda:1")
        driver.memset_d8(va, 0x3C, page, s0.cuda_stream)
        s0.synchronize()
        dst = vram.memory.caching_allocator_alloc(page, "cuda:1")
        driver.memcpy_dtod(dst, va, page, s1.cuda_stream)  # device 1 reads device 0's pages
        host = np.empty(page, np.uint8)
        driver.memcpy_dtoh(host, dst, s1.cuda_stream)
        s1.synchronize()
        assert (host == 0x3C).all()
        vram.memory.caching_allocator_delete(dst)
        driver.vmm_unmap(0, va, page)
    finally:
        driver.vmm_release_handle(0, handle)
        driver.vmm_release(0, va, page)


def test_distributed_collectives_over_nccl_match_numpy():
    pytest.importorskip("nccl.bindings.nccl")
    command = [sys.executable, "-m", "vram.distributed.run", "--nproc", "2", "--device", "cuda"]
    result = subprocess.run(
        [*command, str(WORKERS / "collectives.py")], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(re.findall(r"rank \d+ ok", result.stdout)) == ["rank 0 ok", "rank 1 ok"]
