"""The out-of-memory ladder, step by step, in PyTorch's order: free-memory callbacks,
device malloc, release one (or a few) oversize free blocks and retry, release everything
cached and retry (num_alloc_retries), then the OOM observers and OutOfMemoryError."""

from __future__ import annotations

import pytest

import vram
from vram.memory import format_size, set_allocator_settings

MiB = 1 << 20


@pytest.fixture
def log(monkeypatch):
    """Every device malloc and free of sim:0 in order: ("malloc", size, ok) / ("free", ptr)."""
    drv = vram.sim.driver()
    calls: list[tuple] = []
    real_malloc, real_free = drv.malloc, drv.free

    def malloc(device: int, size: int) -> int:
        try:
            ptr = real_malloc(device, size)
        except vram.CudaError:
            calls.append(("malloc", size, False))
            raise
        calls.append(("malloc", size, True))
        return ptr

    def free(device: int, ptr: int) -> None:
        calls.append(("free", ptr))
        real_free(device, ptr)

    monkeypatch.setattr(drv, "malloc", malloc)
    monkeypatch.setattr(drv, "free", free)
    return calls


def test_out_of_memory_error_is_a_runtime_error():
    assert issubclass(vram.OutOfMemoryError, RuntimeError)


def test_callbacks_run_before_the_device_is_asked(sim0, alloc, free, stats, log):
    held = alloc(12 * MiB)
    calls = []

    def release_held() -> bool:
        calls.append("callback")
        free(held)  # frees inside the allocator's malloc: done at once
        return True

    vram.memory.register_free_memory_callback(release_held, sim0)
    assert alloc(12 * MiB) == held
    assert calls == ["callback"]
    assert log == [("malloc", 12 * MiB, True)]
    assert stats("num_device_alloc") == 1


def test_callbacks_are_not_called_when_a_cached_block_fits(sim0, alloc, free):
    calls = []
    vram.memory.register_free_memory_callback(lambda: calls.append(1) or False, sim0)
    a = alloc(12 * MiB)
    assert calls == [1]  # nothing cached yet
    free(a)
    alloc(12 * MiB)
    assert calls == [1]


def test_release_one_oversize_block_and_retry(alloc, free, stats, log):
    set_allocator_settings("max_split_size_mb:40")
    big = alloc(100 * MiB)
    free(big)
    log.clear()
    vram.sim.inject_malloc_failure(nth=1)
    small = alloc(30 * MiB)  # never served by the oversize block
    assert log == [("malloc", 30 * MiB, False), ("free", big), ("malloc", 30 * MiB, True)]
    s = stats()
    assert (s["num_alloc_retries"], s["num_device_free"], s["num_sync_all_streams"]) == (0, 1, 0)
    assert s["reserved_bytes.all.current"] == 30 * MiB
    assert s["oversize_segments.current"] == 0
    assert small is not None


def test_release_several_oversize_blocks_largest_first(alloc, free, stats, log):
    set_allocator_settings("max_split_size_mb:40")
    a, b, c = alloc(50 * MiB), alloc(60 * MiB), alloc(70 * MiB)
    free(a, b, c)
    log.clear()
    vram.sim.inject_malloc_failure(nth=1)
    alloc(100 * MiB)  # no single block of 100 MiB: 70 + 60 >= 100 are released
    assert log == [
        ("malloc", 100 * MiB, False),
        ("free", c),
        ("free", b),
        ("malloc", 100 * MiB, True),
    ]
    s = stats()
    assert s["reserved_bytes.all.current"] == 150 * MiB  # a stays cached
    assert (s["num_alloc_retries"], s["num_sync_all_streams"]) == (0, 0)


def test_release_everything_cached_and_retry(alloc, free, stats, log):
    small = alloc(512)
    mid = alloc(10 * MiB)
    held = alloc(512)  # keeps the small segment split, so not releasable
    free(small, mid)
    log.clear()
    vram.sim.inject_malloc_failure(nth=1)
    alloc(12 * MiB)
    assert log == [("malloc", 12 * MiB, False), ("free", mid), ("malloc", 12 * MiB, True)]
    s = stats()
    assert (s["num_alloc_retries"], s["num_sync_all_streams"], s["num_device_free"]) == (1, 1, 1)
    assert s["segment.small_pool.current"] == 1  # split and in use: not releasable
    assert held is not None


def test_the_whole_ladder_then_out_of_memory(sim0, capacity, alloc, free, stats, log):
    total = capacity(256 * MiB)
    set_allocator_settings("max_split_size_mb:40")
    a, b = alloc(50 * MiB), alloc(60 * MiB)
    small = alloc(512)
    used = alloc(5 * MiB)  # a 20 MiB segment, 15 MiB of it free but not releasable
    free(a, b, small)
    log.clear()
    order = []
    vram.memory.register_free_memory_callback(lambda: order.append("callback") or False, sim0)
    vram.memory.attach_out_of_memory_observer(lambda *args: order.append(("observer", *args)), sim0)
    vram.sim.inject_malloc_failure(above_bytes=64 * MiB)
    with pytest.raises(vram.OutOfMemoryError) as info:
        alloc(100 * MiB)
    assert log == [
        ("malloc", 100 * MiB, False),
        ("free", b),  # oversize blocks, largest first: not enough, still released
        ("free", a),
        ("malloc", 100 * MiB, False),
        ("free", small),  # everything cached that is whole
        ("malloc", 100 * MiB, False),
    ]
    device_free = vram.sim.driver().mem_get_info(0)[0]
    assert device_free == total - 20 * MiB
    assert order == ["callback", ("observer", 0, 100 * MiB, total, device_free)]
    s = stats()
    assert (s["num_ooms"], s["num_alloc_retries"], s["num_sync_all_streams"]) == (1, 1, 1)
    assert s["reserved_bytes.all.current"] == 20 * MiB
    message = str(info.value)
    assert message == (
        "SIM out of memory. Tried to allocate 100.00 MiB. sim:0 has a total capacity of "
        f"{format_size(total)} of which {format_size(device_free)} is free. "
        "Of the allocated memory 5.00 MiB is allocated by vram, and 15.00 MiB is reserved "
        "by vram but unallocated. If reserved but unallocated memory is large try setting "
        "VRAM_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )
    assert used is not None


def test_out_of_memory_reports_the_segment_size_asked_for(capacity, alloc, stats):
    capacity(16 * MiB)
    with pytest.raises(vram.OutOfMemoryError, match=r"Tried to allocate 20\.00 MiB\."):
        alloc(2 * MiB)  # a large request takes a 20 MiB segment
    assert stats("num_ooms") == 1
    assert alloc(MiB) is not None  # the small pool's 2 MiB segment still fits


def test_capacity_runs_out_without_injected_faults(capacity, alloc, free, stats):
    capacity(64 * MiB)
    a = alloc(30 * MiB)
    b = alloc(30 * MiB)
    with pytest.raises(vram.OutOfMemoryError, match="of which 4.00 MiB is free"):
        alloc(30 * MiB)
    free(b)
    assert alloc(30 * MiB) == b
    s = stats()
    assert (s["num_ooms"], s["num_alloc_retries"]) == (1, 1)
    assert a is not None


def test_observer_sees_the_fraction_limit(sim0, capacity, alloc):
    total = capacity(1 << 30)
    vram.memory.set_per_process_memory_fraction(0.5, sim0)
    seen = []
    vram.memory.attach_out_of_memory_observer(lambda *args: seen.append(args), sim0)
    with pytest.raises(vram.OutOfMemoryError, match=r"allowed; Of the allocated"):
        alloc(600 * MiB)
    device_free = vram.sim.driver().mem_get_info(0)[0]
    assert seen == [(0, 600 * MiB, total // 2, device_free)]


def test_a_failing_observer_does_not_hide_the_error(sim0, capacity, alloc):
    capacity(8 * MiB)

    def broken(*args) -> None:
        raise KeyError("observer")

    vram.memory.attach_out_of_memory_observer(broken, sim0)
    with pytest.raises(vram.OutOfMemoryError):
        alloc(12 * MiB)


def test_out_of_memory_changes_nothing(capacity, alloc, stats):
    capacity(32 * MiB)
    a = alloc(512)
    before = stats()
    with pytest.raises(vram.OutOfMemoryError):
        alloc(40 * MiB)
    after = stats()
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"num_ooms", "num_alloc_retries", "num_sync_all_streams"}
    assert alloc(512) == a + 512
