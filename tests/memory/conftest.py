"""Fixtures for the caching allocator's tests: raw allocations on sim:0 and its stats."""

from __future__ import annotations

import pytest

import vram
from vram.memory import _api, _registry, allocator_for


@pytest.fixture
def allocator(sim0):
    """The caching allocator of sim:0 (fresh for every test)."""
    return allocator_for(sim0)


@pytest.fixture
def alloc(sim0):
    """``alloc(size, stream=None)``: caching_allocator_alloc on sim:0."""

    def allocate(size: int, stream: object = None) -> int:
        return vram.memory.caching_allocator_alloc(size, sim0, stream)

    return allocate


@pytest.fixture
def free():
    """``free(*ptrs)``: caching_allocator_delete each pointer."""

    def release(*ptrs: int) -> None:
        for ptr in ptrs:
            vram.memory.caching_allocator_delete(ptr)

    return release


@pytest.fixture
def stats(sim0):
    """``stats()``: memory_stats of sim:0; ``stats("key")``: one value."""

    def read(key: str | None = None):
        found = vram.memory.memory_stats(sim0)
        return found if key is None else found[key]

    return read


@pytest.fixture(autouse=True)
def _release_live_allocations():
    """After each test, free what it left allocated on sim devices, so no device memory
    stays held by an allocator the next test no longer sees."""
    yield
    sim = vram.sim.driver()
    sim.deferred_depth = 0
    sim.run()
    for device, allocator in list(_registry._allocators.items()):
        if device.type != "sim":
            continue
        vram.memory.empty_cache(device)  # library workspaces leave their registry first
        with allocator.locked():  # (frees what finalizers dropped first)
            live = list(allocator._allocated)
        for ptr in live:
            _api._raw_owner.pop(ptr, None)
            allocator.free(ptr)
        allocator.empty_cache()


@pytest.fixture
def capacity(sim0):
    """``capacity(n)``: sim:0 gets ``n`` bytes more than it holds now; returns its total."""

    def set_capacity(nbytes: int) -> int:
        free, total = vram.sim.driver().mem_get_info(0)
        vram.sim.set_capacity(0, total - free + nbytes)
        return total - free + nbytes

    return set_capacity
