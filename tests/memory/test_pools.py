"""Private pools: vram.memory.MemPool and use_mem_pool (PyTorch's torch.cuda.MemPool)."""

from __future__ import annotations

import gc
import threading

import pytest

import vram
from vram.memory import MemPool, caching_allocator_alloc, caching_allocator_delete, use_mem_pool

MiB = 1 << 20


def reserved() -> int:
    return vram.memory.memory_reserved()


def test_ids_are_distinct_and_use_count_counts_holders(sim0):
    a, b = MemPool(), MemPool()
    assert a.id != b.id
    assert a.id[0] == 0 and a.id[1] > 0
    assert a.use_count() == 1
    with use_mem_pool(a):
        assert a.use_count() == 2
        with use_mem_pool(a):
            assert a.use_count() == 3
    assert a.use_count() == 1
    assert a.device == sim0


def test_use_mem_pool_routes_this_threads_allocations(sim0):
    pool = MemPool()
    with use_mem_pool(pool):
        inside = caching_allocator_alloc(4 * MiB)
    caching_allocator_delete(inside)
    outside = caching_allocator_alloc(4 * MiB)  # never the pool's memory
    assert not inside <= outside < inside + 20 * MiB
    assert reserved() == 40 * MiB
    with use_mem_pool(pool):
        again = caching_allocator_alloc(4 * MiB)
    assert again == inside
    caching_allocator_delete(outside)
    caching_allocator_delete(again)


def test_other_threads_are_not_routed(sim0):
    pool = MemPool()
    with use_mem_pool(pool):
        mine = caching_allocator_alloc(4 * MiB)
        caching_allocator_delete(mine)  # a free 20 MiB segment of the pool
        theirs: list[int] = []

        def other_thread() -> None:
            with vram.device(sim0):
                theirs.append(caching_allocator_alloc(4 * MiB))

        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert not mine <= theirs[0] < mine + 20 * MiB
    caching_allocator_delete(theirs[0])


def test_pool_memory_is_never_handed_to_others_even_when_full(sim0):
    vram.sim.set_capacity(0, 64 * MiB)
    pool = MemPool()
    with use_mem_pool(pool):
        ptr = caching_allocator_alloc(40 * MiB)
    caching_allocator_delete(ptr)
    with pytest.raises(vram.OutOfMemoryError):
        caching_allocator_alloc(40 * MiB)  # empty_cache-and-retry may not take the pool's
    assert reserved() == 40 * MiB
    with use_mem_pool(pool):
        assert caching_allocator_alloc(40 * MiB) == ptr


def test_same_addresses_after_free_and_realloc_while_the_pool_lives(sim0):
    pool = MemPool()
    sizes = [512, 4096, MiB, 3 * MiB, 12 * MiB, 64 * MiB]
    with use_mem_pool(pool):
        first = [caching_allocator_alloc(n) for n in sizes]
        for ptr in first:
            caching_allocator_delete(ptr)
        vram.memory.empty_cache()  # the pool lives: its segments stay
        second = [caching_allocator_alloc(n) for n in sizes]
    assert second == first
    for ptr in second:
        caching_allocator_delete(ptr)


def test_empty_cache_releases_the_pool_after_it_is_deleted(sim0):
    pool = MemPool()
    with use_mem_pool(pool):
        ptr = caching_allocator_alloc(64 * MiB)
    caching_allocator_delete(ptr)
    vram.memory.empty_cache()
    assert reserved() == 64 * MiB
    del pool
    gc.collect()
    vram.memory.empty_cache()
    assert reserved() == 0


def test_blocks_alive_after_the_pool_is_deleted_are_released_once_freed(sim0):
    pool = MemPool()
    with use_mem_pool(pool):
        ptr = caching_allocator_alloc(64 * MiB)
    del pool
    gc.collect()
    vram.memory.empty_cache()
    assert reserved() == 64 * MiB  # still in use
    caching_allocator_delete(ptr)
    vram.memory.empty_cache()
    assert reserved() == 0


def test_a_pool_in_use_is_not_released(sim0):
    pool = MemPool()
    with use_mem_pool(pool):
        ptr = caching_allocator_alloc(64 * MiB)
        caching_allocator_delete(ptr)
        pool_id = pool.id
        del pool
        gc.collect()
        vram.memory.empty_cache()  # use_mem_pool still holds it
        assert reserved() == 64 * MiB
    del pool_id


def test_use_mem_pool_checks_its_arguments(sim0):
    with pytest.raises(TypeError, match="MemPool"):
        with use_mem_pool(object()):  # type: ignore[arg-type]
            pass
    pool = MemPool()
    with pytest.raises(ValueError, match="device"):
        with use_mem_pool(pool, device="sim:1"):
            pass


def test_snapshot_lists_only_the_pools_segments(sim0):
    pool = MemPool()
    with use_mem_pool(pool):
        ptr = caching_allocator_alloc(4 * MiB)
    other = caching_allocator_alloc(4 * MiB)
    try:
        segments = pool.snapshot()
    except ImportError:
        pytest.skip("vram.memory._snapshot is not written yet")
    assert [s["address"] for s in segments] == [ptr]
    assert segments[0]["total_size"] == 20 * MiB
    caching_allocator_delete(ptr)
    caching_allocator_delete(other)
