"""Pinned host tensors and non_blocking copies between them and a device."""

from __future__ import annotations

import numpy as np
import pytest

import vram


def test_pin_memory_copies_into_pinned_memory(sim0):
    t = vram.arange(10, dtype=vram.float32, device="cpu")
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and p.device == vram.device("cpu")
    assert p.pin_memory() is p
    np.testing.assert_array_equal(p.numpy(), np.arange(10, dtype=np.float32))
    assert vram.memory.is_pinned(p.data_ptr())


def test_empty_pin_memory_and_errors(sim0):
    p = vram.empty(4, 4, dtype=vram.int32, device="cpu", pin_memory=True)
    assert p.is_pinned() and p.shape == (4, 4)
    z = vram.zeros(3, device="cpu", pin_memory=True)
    assert z.is_pinned() and z.numpy().tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="pin_memory"):
        vram.empty(3, device="sim:0", pin_memory=True)
    with pytest.raises(RuntimeError, match="pin_memory"):
        vram.zeros(3, device="sim:0").pin_memory()


def test_non_blocking_upload_is_queued_and_keeps_the_pinned_block(sim0):
    host = vram.tensor([1.0, 2.0, 3.0], device="cpu").pin_memory()
    stream = vram.current_stream()
    with vram.sim.deferred():
        dev = host.to("sim:0", non_blocking=True)
        assert vram.sim.pending(stream) >= 1  # queued, not run
        before = vram.memory.host_memory_stats()["active_requests.current"]
        del host  # freed by the user, but the copy has not run: the block must wait
        assert vram.memory.host_memory_stats()["active_requests.current"] == before
        stream.synchronize()
    assert dev.numpy().tolist() == [1.0, 2.0, 3.0]


def test_non_blocking_download_into_pinned(sim0):
    dev = vram.tensor([4, 5, 6], dtype=vram.int64, device="sim:0")
    out = vram.empty(3, dtype=vram.int64, device="cpu", pin_memory=True)
    with vram.sim.deferred():
        out.copy_(dev, non_blocking=True)
        assert vram.sim.pending(vram.current_stream()) >= 1  # queued, no host wait
        vram.current_stream().synchronize()
    assert out.numpy().tolist() == [4, 5, 6]
