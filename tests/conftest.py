"""Shared fixtures: every test starts with fresh sim allocators, settings and faults."""

from __future__ import annotations

import gc

import pytest

import vram
from vram.driver import cuda_usable
from vram.memory import _config, _registry


@pytest.fixture(autouse=True)
def _fresh_memory_state(monkeypatch):
    """Fresh allocators for sim devices, default settings, no injected faults."""
    monkeypatch.delenv("VRAM_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    _config.set_default_config(None)
    vram.sim.clear_faults()
    old = dict(_registry._allocators)
    for device in list(old):
        if device.type == "sim":
            del _registry._allocators[device]
    yield
    gc.collect()  # tensors that died in reference cycles give their memory back now
    vram.sim.clear_faults()
    _config.set_default_config(None)
    sim = vram.sim.driver()
    sim.deferred_depth = 0
    sim.run()
    for device, allocator in list(_registry._allocators.items()):
        if device.type == "sim":  # what a test left alive (a traced script's globals) goes too
            with allocator.locked():
                live = list(allocator._allocated)
            for ptr in live:
                allocator.free(ptr)
            allocator.empty_cache()
    for device in range(sim.device_count()):
        sim.set_capacity(device, 16 << 30)


@pytest.fixture
def sim0():
    """The simulated device sim:0, made current for the test."""
    device = vram.device("sim:0")
    with device:
        yield device


def pytest_itemcollected(item):
    """``pytest -m quick``: a quick subset of every package (tests/_quick_run.py)."""
    from _quick_run import mark

    mark(item)


def pytest_collection_modifyitems(config, items):
    if cuda_usable():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture
def fused_calls(monkeypatch):
    """The fused attention plans that ran during the test, one entry a call."""
    from vram.ops import _attention

    calls = []
    real = _attention.AttentionPlan.__call__

    def counting(self, *args):
        calls.append(self)
        return real(self, *args)

    monkeypatch.setattr(_attention.AttentionPlan, "__call__", counting)
    return calls
