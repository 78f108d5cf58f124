"""Each plug-in runs its peer's own workload on vram memory (needs a GPU and the peer).

vram's memory_stats must move by exactly what the peer allocated, and come back when the
peer frees it. PyTorch and Numba pick their allocator once per process, so their checks
run in a fresh Python process each (the code below, with the same PYTHONPATH).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import vram

pytestmark = pytest.mark.gpu

CUDA0 = vram.Device("cuda", 0)  # (not checked at import: collection runs without a GPU)


def _requested() -> int:
    return vram.memory.memory_stats(CUDA0)["requested_bytes.all.current"]


def _run(code: str, env: dict[str, str] | None = None) -> str:
    """Run ``code`` in a fresh interpreter; its stdout (it must exit 0)."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# ------------------------------------------------------------------------- PyTorch
def test_pytorch_allocates_through_vram_and_trains():
    pytest.importorskip("torch")
    out = _run(
        """
        import gc
        import torch
        import vram
        from vram.interop import torch as vt

        vt.use_vram_allocator()
        dev = vram.device("cuda:0")
        def requested():
            return vram.memory.memory_stats(dev)["requested_bytes.all.current"]

        base = requested()
        x = torch.empty(1000, dtype=torch.uint8, device="cuda")
        y = torch.randn(256, 256, device="cuda")
        assert requested() - base == 1000 + 256 * 256 * 4, requested() - base
        del x, y
        assert requested() == base

        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            z = torch.ones(1 << 20, device="cuda")
        ptr = z.untyped_storage().data_ptr()
        (seg,) = [s for s in vram.memory.memory_snapshot()
                  if s["address"] <= ptr < s["address"] + s["total_size"]]
        assert seg["stream"] == side.cuda_stream  # made for PyTorch's side stream
        torch.cuda.current_stream().wait_stream(side)
        w = z * 2  # the default stream reads z ...
        vt.record_use(z, torch.cuda.current_stream())  # ... and that is its last use there
        del z

        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 10)
        ).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = torch.randn(64, 512, device="cuda")
        target = torch.randint(0, 10, (64,), device="cuda")
        losses = []
        for _ in range(20):
            loss = torch.nn.functional.cross_entropy(model(data), target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0], losses
        assert vt.last_error() is None
        stats = vt.callback_stats()
        assert stats["alloc_calls"] > 0 and stats["free_calls"] > 0
        print("peak", vram.memory.memory_stats(dev)["allocated_bytes.all.peak"] > 0)
        """
    )
    assert out.strip() == "peak True"


def test_pytorch_mem_pool_segments_come_from_vram():
    pytest.importorskip("torch")
    out = _run(
        """
        import gc
        import torch
        import vram
        from vram.interop import torch as vt

        dev = vram.device("cuda:0")
        def allocated():
            return vram.memory.memory_stats(dev)["allocated_bytes.all.current"]

        torch.empty(1, device="cuda")  # PyTorch's own allocator starts: it stays in use
        base = allocated()
        pool = vt.mem_pool()
        with torch.cuda.use_mem_pool(pool):
            x = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
        outside = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # not from vram
        segments = sum(
            s["total_size"] for s in torch.cuda.memory_snapshot()
            if tuple(s["segment_pool_id"]) == tuple(pool.id)
        )
        assert segments > 0 and allocated() - base == segments, (allocated() - base, segments)
        del x, pool
        gc.collect()
        torch.cuda.empty_cache()
        assert allocated() == base
        print("ok")
        """
    )
    assert out.strip() == "ok"


# ---------------------------------------------------------------------------- CuPy
def test_cupy_allocates_through_vram_per_stream():
    cupy = pytest.importorskip("cupy")
    from vram.interop import cupy as plugin

    plugin.use_vram()
    try:
        base = _requested()
        a = cupy.arange(1000, dtype=cupy.float32)
        assert _requested() - base == 4000
        assert float((a * 2).sum()) == 999000.0
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            b = cupy.ones(1 << 18, dtype=cupy.float64)
        ptr = b.data.ptr
        (seg,) = [
            s
            for s in vram.memory.memory_snapshot()
            if s["address"] <= ptr < s["address"] + s["total_size"]
        ]
        assert seg["stream"] == stream.ptr
        stream.synchronize()
        del a, b
        gc.collect()
        assert _requested() == base
    finally:
        plugin.use_cupy()


# --------------------------------------------------------------------------- Numba
def test_numba_emm_plugin_arrays_and_kernels_run_on_vram_memory():
    """Numba's own arrays (and a kernel, where this Numba can compile one: numba-cuda's
    compiler breaks on some NumPy releases, which has nothing to do with its memory) live in
    vram's memory, and vram's stats move by exactly what Numba asked for."""
    pytest.importorskip("numba.cuda")
    out = _run(
        """
        import gc
        import numpy as np
        from numba import cuda
        import vram

        dev = vram.device("cuda:0")
        def requested():
            return vram.memory.memory_stats(dev)["requested_bytes.all.current"]

        cuda.current_context()  # Numba's context, with vram's memory manager
        base = requested()
        d = cuda.to_device(np.arange(1000, dtype=np.float32))
        e = cuda.device_array((500,), dtype=np.float64)
        assert requested() - base == 4000 + 4000, requested() - base
        e.copy_to_device(np.ones(500))
        assert (d.copy_to_host() == np.arange(1000, dtype=np.float32)).all()
        assert (e.copy_to_host() == 1).all()
        try:
            @cuda.jit
            def double(x):
                i = cuda.grid(1)
                if i < x.size:
                    x[i] *= 2
            double[4, 256](d)
        except (AttributeError, ImportError) as exc:  # Numba's compiler, not its memory
            print("kernel not compiled by this Numba:", exc)
        else:
            assert (d.copy_to_host() == np.arange(1000, dtype=np.float32) * 2).all()
        del d, e
        gc.collect()
        assert requested() == base
        print("ok")
        """,
        env={"NUMBA_CUDA_MEMORY_MANAGER": "vram.interop.numba"},
    )
    assert out.strip().splitlines()[-1] == "ok"


# ----------------------------------------------------------------------- cuda.core
def test_cuda_core_memory_resource_buffers_come_from_vram():
    core = pytest.importorskip("cuda.core")
    from vram.interop.cuda_core import VramMemoryResource

    device = core.Device(0)
    device.set_current()
    stream = device.create_stream()
    mr = VramMemoryResource(0)
    base = _requested()
    buffer = mr.allocate(1 << 20, stream=stream)
    assert _requested() - base == 1 << 20
    buffer.fill(7, stream=stream)
    copy = buffer.copy_to(stream=stream)  # a second buffer from the same resource
    assert _requested() - base == 2 << 20
    stream.sync()
    host = np.empty(1 << 20, np.uint8)
    CUDA0.driver.memcpy_dtoh(host, int(copy.handle), 0)
    vram.synchronize(CUDA0)
    assert (host == 7).all()
    other = device.create_stream()
    buffer.close(other)  # freed in order on another stream: vram records that use
    copy.close(stream)
    assert _requested() == base
    other.sync()


# -------------------------------------------------------------------------- nvmath
def test_nvmath_matmul_and_fft_take_workspace_from_vram():
    cupy = pytest.importorskip("cupy")
    nvmath = pytest.importorskip("nvmath")
    from vram.interop.nvmath import VramAllocator

    class Counting(VramAllocator):
        def __init__(self) -> None:
            super().__init__(0)
            self.sizes: list[int] = []

        def memalloc_async(self, size, stream):
            self.sizes.append(size)
            return super().memalloc_async(size, stream)

    allocator = Counting()
    options = {"allocator": allocator}
    stats = vram.memory.memory_stats(CUDA0)
    before = stats["requested_bytes.all.allocated"], stats["requested_bytes.all.current"]
    a = cupy.random.rand(512, 256, dtype=cupy.float32)
    b = cupy.random.rand(256, 128, dtype=cupy.float32)
    c = nvmath.linalg.advanced.matmul(a, b, options=options)
    cupy.testing.assert_allclose(c, a @ b, rtol=1e-4)
    x = (cupy.random.rand(1024, 1024) + 1j * cupy.random.rand(1024, 1024)).astype(cupy.complex64)
    y = nvmath.fft.fft(x, axes=[0, 1], options=options)
    cupy.testing.assert_allclose(y, cupy.fft.fft2(x), rtol=1e-3, atol=1e-2)
    cupy.cuda.get_current_stream().synchronize()
    stats = vram.memory.memory_stats(CUDA0)
    assert sum(allocator.sizes) > 0  # cuFFT's 2-D plan needs workspace
    assert stats["requested_bytes.all.allocated"] - before[0] == sum(allocator.sizes)
    assert stats["requested_bytes.all.current"] == before[1]  # all given back
