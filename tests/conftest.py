"""Shared fixtures: every test starts with fresh sim allocators, settings and faults."""

from __future__ import annotations

import gc
import os

import pytest

import vram
from vram.driver import cuda_usable
from vram.memory import _config, _registry


@pytest.fixture(autouse=True)
def _fresh_memory_state(monkeypatch, request):
    """Fresh allocators for sim devices, default settings, no injected faults."""
    monkeypatch.delenv("VRAM_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    _config.set_default_config(None)
    vram.sim.clear_faults()
    old = dict(_registry._allocators)
    for device in list(old):
        if device.type == "sim":
            del _registry._allocators[device]
    sim = vram.sim.driver()
    before = _driver_holdings(sim)
    yield
    gc.collect()  # tensors that died in reference cycles give their memory back now
    vram.sim.clear_faults()
    _config.set_default_config(None)
    sim.deferred_depth = 0
    sim.run()
    leaks = []
    events_held = _host_events_held()
    for device, allocator in list(_registry._allocators.items()):
        if device.type == "sim":  # what a test left alive (a traced script's globals) goes too
            with allocator.locked():
                live = [allocator._allocated[ptr].size for ptr in allocator._allocated]
            if live:
                leaks.append(f"{device}: {len(live)} blocks ({sum(live)} bytes) still allocated")
                for ptr in list(allocator._allocated):
                    allocator.free(ptr)
            allocator.empty_cache()
            events_held += _events_held(allocator)
    vram.memory.host_empty_cache()
    for device in range(sim.device_count()):
        sim.set_capacity(device, 16 << 30)
    after = _driver_holdings(sim)
    for name, count in after.items():
        allowed = before[name] + (events_held if name == "events" else 0)
        if count > allowed:
            leaks.append(f"{name}: {before[name]} before the test, {count} after")
    if leaks and LEAK_CHECK and request.node.get_closest_marker("leaks") is None:
        pytest.fail("leak check (VRAM_LEAK_CHECK=0 turns it off): " + "; ".join(leaks))


LEAK_CHECK = os.environ.get("VRAM_LEAK_CHECK", "1") != "0"


def _driver_holdings(sim) -> dict[str, int]:
    """What the sim driver holds: device memory per device, events, pinned host buffers."""
    found = {f"sim:{m.index} bytes": m.used for m in sim._memory}
    found["events"] = len(sim._events)
    found["pinned host buffers"] = len(sim._host)
    return found


def _events_held(allocator) -> int:
    """The events an allocator keeps for reuse (as PyTorch's event pools do): not leaks."""
    lifetimes = getattr(allocator, "lifetimes", None)
    if lifetimes is None:  # the cudaMallocAsync backend: its one event and its use events
        return 1 if getattr(allocator, "_ready", False) else 0
    return len(lifetimes.spare_events) + sum(len(s) for s in lifetimes.peer_spares.values())


def _host_events_held() -> int:
    host = vram.memory.host_allocator()
    return sum(len(spare) for spare in host._spare_events.values())


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
