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
    kept_before = _kept_by_linalg()
    yield
    gc.collect()  # tensors that died in reference cycles give their memory back now
    vram.sim.clear_faults()
    _config.set_default_config(None)
    sim.deferred_depth = 0
    sim.run()
    leaks = []
    events_held = 0
    for device, allocator in list(_registry._allocators.items()):
        if device.type == "sim":  # what a test left alive (a traced script's globals) goes too
            vram.memory.empty_cache(device)  # idle library workspaces go back first
            held = _held_by_fixtures(request)
            with allocator.locked():
                live = [
                    block.size for ptr, block in allocator._allocated.items() if ptr not in held
                ]
            if live:
                leaks.append(f"{device}: {len(live)} blocks ({sum(live)} bytes) still allocated")
            for ptr in list(allocator._allocated):
                allocator.free(ptr)
            allocator.empty_cache()
            events_held += _events_held(allocator)
    vram.memory.host_empty_cache()
    events_held += _host_events_held()  # (counted after the cache's events came back)
    for device in range(sim.device_count()):
        sim.set_capacity(device, 16 << 30)
    after = _driver_holdings(sim)
    linalg_events, linalg_pinned = _kept_by_linalg()
    events_held += linalg_events - kept_before[0]
    for name, count in after.items():
        allowed = before[name] + (events_held if name == "events" else 0)
        if name == "pinned host buffers":
            allowed += linalg_pinned - kept_before[1]
        if count > allowed:
            leaks.append(f"{name}: {before[name]} before the test, {count} after")
    if leaks and LEAK_CHECK and request.node.get_closest_marker("leaks") is None:
        pytest.fail("leak check (VRAM_LEAK_CHECK=0 turns it off): " + "; ".join(leaks))


LEAK_CHECK = os.environ.get("VRAM_LEAK_CHECK", "1") != "0"


def _held_by_fixtures(request) -> set[int]:
    """The pointers of the tensors the test's fixture values hold (directly, in containers
    or in their objects' attributes, three levels down): pytest drops those only after every
    teardown, so they are no leak."""
    held: set[int] = set()
    seen: set[int] = set()
    pending = [(v, 0) for v in (getattr(request.node, "funcargs", None) or {}).values()]
    while pending:
        value, depth = pending.pop()
        if id(value) in seen or depth > 3:
            continue
        seen.add(id(value))
        if isinstance(value, vram.Tensor):
            held.add(value._storage.ptr)
        elif isinstance(value, (tuple, list, set)):
            pending.extend((v, depth + 1) for v in value)
        elif isinstance(value, dict):
            pending.extend((v, depth + 1) for v in value.values())
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            pending.extend((v, depth + 1) for v in vars(value).values())
    return held


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


def _kept_by_linalg() -> tuple[int, int]:
    """(events, pinned buffers) this thread's linear algebra keeps for reuse, call after
    call (vram.linalg._batch's events; _libs.per_thread's pinned arrays, and the zero-pivot
    flag's)."""
    from vram.linalg import _batch, _libs

    events = sum(1 + len(done) for _, done in _batch._events.by_device.values())
    events += sum(len(found) for found in _batch._events.ahead.values())
    objects = getattr(_libs._threads, "objects", {})
    pinned = sum(
        isinstance(found, _libs.PinnedArray)
        or isinstance(getattr(found, "memory", None), _libs.PinnedArray)
        for found in objects.values()
    )
    return events, pinned


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
