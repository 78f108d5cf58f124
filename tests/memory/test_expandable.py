"""expandable_segments:True on sim's VMM: one reserved range per stream and pool, pages
mapped on demand and unmapped by empty_cache when wholly free."""

from __future__ import annotations

import numpy as np
import pytest

import vram
from vram.memory import caching_allocator_alloc, caching_allocator_delete

MiB = 1 << 20
SMALL_PAGE = 2 * MiB
LARGE_PAGE = 20 * MiB


@pytest.fixture
def exp(sim0):
    vram.memory.set_allocator_settings("expandable_segments:True")
    return sim0


def stats() -> dict[str, int]:
    return vram.memory.memory_stats()


def write_read(ptr: int, nbytes: int, seed: int) -> None:
    """Copy a random pattern to ``ptr`` and back; the bytes must survive."""
    drv = vram.sim.driver()
    stream = vram.current_stream().cuda_stream
    data = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
    out = np.zeros_like(data)
    drv.memcpy_htod(ptr, data, stream)
    drv.memcpy_dtoh(out, ptr, stream)
    drv.stream_synchronize(stream)
    np.testing.assert_array_equal(out, data)


def test_small_requests_map_one_2_mib_page_on_demand(exp):
    a = caching_allocator_alloc(1024)
    assert vram.memory.memory_reserved() == SMALL_PAGE
    assert stats()["num_device_alloc"] == 1
    b = caching_allocator_alloc(1024)
    assert b == a + 1024  # the same page
    assert vram.memory.memory_reserved() == SMALL_PAGE
    assert stats()["num_device_alloc"] == 1
    c = caching_allocator_alloc(MiB)
    d = caching_allocator_alloc(MiB)  # past the first page: the next one is mapped
    assert d == c + MiB
    assert vram.memory.memory_reserved() == 2 * SMALL_PAGE
    assert stats()["num_device_alloc"] == 2


def test_large_requests_map_20_mib_pages(exp):
    caching_allocator_alloc(3 * MiB)
    assert vram.memory.memory_reserved() == LARGE_PAGE
    big = caching_allocator_alloc(30 * MiB)  # 3 MiB + 30 MiB: two pages in all
    assert vram.memory.memory_reserved() == 2 * LARGE_PAGE
    assert stats()["num_device_alloc"] == 2
    assert stats()["reserved_bytes.large_pool.current"] == 2 * LARGE_PAGE
    assert stats()["reserved_bytes.small_pool.current"] == 0
    caching_allocator_delete(big)


def test_expandable_page_mb_sets_the_large_pool_page(sim0):
    vram.memory.set_allocator_settings("expandable_segments:True,expandable_page_mb:2")
    big = caching_allocator_alloc(3 * MiB)
    assert vram.memory.memory_reserved() == 4 * MiB  # two 2 MiB pages, not one of 20
    more = caching_allocator_alloc(30 * MiB)
    assert more == big + 3 * MiB
    assert vram.memory.memory_reserved() == 34 * MiB
    assert stats()["num_device_alloc"] == 2  # one map call each, of 2 and 15 pages
    caching_allocator_delete(big)
    caching_allocator_delete(more)
    vram.memory.empty_cache()
    assert vram.memory.memory_reserved() == 0


def test_one_reserved_range_per_stream_and_pool_allocations_are_contiguous(exp):
    first = caching_allocator_alloc(15 * MiB)
    second = caching_allocator_alloc(15 * MiB)  # 5 MiB left on page 1, 10 MiB on page 2
    third = caching_allocator_alloc(25 * MiB)
    assert second == first + 15 * MiB
    assert third == second + 15 * MiB
    small = caching_allocator_alloc(4096)
    assert abs(small - first) >= vram.get_device_properties().total_memory  # another range
    side = vram.Stream()
    on_side = caching_allocator_alloc(15 * MiB, stream=side)
    assert abs(on_side - first) >= vram.get_device_properties().total_memory
    assert vram.memory.memory_reserved() == 3 * LARGE_PAGE + SMALL_PAGE + LARGE_PAGE


def test_data_survives_across_page_boundaries(exp):
    first = caching_allocator_alloc(15 * MiB)
    spanning = caching_allocator_alloc(30 * MiB)  # from 15 MiB to 45 MiB: three pages
    write_read(first, 15 * MiB, seed=1)
    write_read(spanning, 30 * MiB, seed=2)
    edge = spanning + 5 * MiB - 4096  # 8 KiB straddling the 20 MiB page boundary
    write_read(edge, 8192, seed=3)
    write_read(first + 15 * MiB - 4096, 8192, seed=4)  # across the two allocations


def test_empty_cache_unmaps_wholly_free_pages_only(exp):
    device_free = vram.mem_get_info()[0]
    first = caching_allocator_alloc(15 * MiB)  # page 0
    spanning = caching_allocator_alloc(30 * MiB)  # pages 0, 1, 2
    assert vram.memory.memory_reserved() == 3 * LARGE_PAGE
    caching_allocator_delete(first)
    vram.memory.empty_cache()  # page 0 still holds the start of ``spanning``
    assert vram.memory.memory_reserved() == 3 * LARGE_PAGE
    assert stats()["num_device_free"] == 0
    caching_allocator_delete(spanning)
    vram.memory.empty_cache()
    assert vram.memory.memory_reserved() == 0
    assert stats()["num_device_free"] == 1  # one unmap of the free run of three pages
    assert vram.mem_get_info()[0] == device_free  # every page went back to the device


def test_empty_cache_keeps_pages_under_live_blocks(exp):
    kept = caching_allocator_alloc(15 * MiB)  # page 0
    freed = caching_allocator_alloc(30 * MiB)  # pages 0..2
    caching_allocator_delete(freed)
    vram.memory.empty_cache()  # pages 1 and 2 are wholly free
    assert vram.memory.memory_reserved() == LARGE_PAGE
    assert stats()["num_device_free"] == 1  # one unmap of pages 1 and 2
    write_read(kept, 15 * MiB, seed=4)
    again = caching_allocator_alloc(30 * MiB)  # maps two pages again, same addresses
    assert again == kept + 15 * MiB
    assert stats()["num_device_alloc"] == 3  # page 0; pages 1-2; pages 1-2 again
    write_read(again, 30 * MiB, seed=5)


def test_memory_stats_follow_the_mapped_pages(exp):
    a = caching_allocator_alloc(3 * MiB)
    b = caching_allocator_alloc(5 * MiB)
    s = stats()
    assert s["allocated_bytes.all.current"] == 8 * MiB
    assert s["requested_bytes.all.current"] == 8 * MiB
    assert s["active_bytes.all.current"] == 8 * MiB
    assert s["reserved_bytes.all.current"] == LARGE_PAGE
    assert s["allocation.all.current"] == 2
    assert s["inactive_split_bytes.all.current"] == 0  # expandable blocks are never counted
    caching_allocator_delete(a)
    caching_allocator_delete(b)
    s = stats()
    assert s["allocated_bytes.all.current"] == 0
    assert s["allocated_bytes.all.peak"] == 8 * MiB
    assert s["reserved_bytes.all.current"] == LARGE_PAGE
    vram.memory.empty_cache()
    s = stats()
    assert s["reserved_bytes.all.current"] == 0
    assert s["reserved_bytes.all.peak"] == LARGE_PAGE
    assert (s["num_device_alloc"], s["num_device_free"]) == (1, 1)


def test_freed_blocks_are_reused_before_mapping_more(exp):
    ptrs = [caching_allocator_alloc(8 * MiB) for _ in range(5)]  # 40 MiB: two pages
    for ptr in ptrs:
        caching_allocator_delete(ptr)
    again = caching_allocator_alloc(40 * MiB)
    assert again == ptrs[0]
    assert stats()["num_device_alloc"] == 2


def test_fraction_limits_what_may_be_mapped(exp):
    vram.sim.set_capacity(0, 1 << 30)
    vram.memory.set_per_process_memory_fraction(0.1)  # 102.4 MiB
    a = caching_allocator_alloc(60 * MiB)
    b = caching_allocator_alloc(30 * MiB)
    assert vram.memory.memory_reserved() == 100 * MiB
    with pytest.raises(vram.OutOfMemoryError, match="102.40 MiB allowed"):
        caching_allocator_alloc(20 * MiB)
    assert vram.memory.memory_reserved() == 100 * MiB
    caching_allocator_delete(b)
    c = caching_allocator_alloc(20 * MiB)  # freed room is reused
    assert c == a + 60 * MiB


def test_device_out_of_memory_maps_nothing_and_raises(exp):
    vram.sim.set_capacity(0, 64 * MiB)
    with pytest.raises(vram.OutOfMemoryError):
        caching_allocator_alloc(80 * MiB)
    assert vram.memory.memory_reserved() == 0
    assert vram.mem_get_info()[0] == 64 * MiB
    assert stats()["num_ooms"] == 1


def test_out_of_memory_unmaps_other_streams_free_pages_and_retries(exp):
    vram.sim.set_capacity(0, 64 * MiB)
    side = vram.Stream()
    ptr = caching_allocator_alloc(40 * MiB, stream=side)
    caching_allocator_delete(ptr)  # two free pages mapped on the side stream's range
    mine = caching_allocator_alloc(40 * MiB)
    assert vram.memory.memory_reserved() == 40 * MiB
    assert stats()["num_alloc_retries"] == 1
    write_read(mine, 40 * MiB, seed=6)


def test_unmapped_pages_read_as_fresh_memory_when_mapped_again(exp):
    ptr = caching_allocator_alloc(20 * MiB)
    vram.sim.driver().view(ptr, 20 * MiB)[:] = 7
    caching_allocator_delete(ptr)
    vram.memory.empty_cache()
    again = caching_allocator_alloc(20 * MiB)
    assert again == ptr
    assert not vram.sim.driver().view(again, 20 * MiB).any()


def test_peer_access_maps_expandable_pages_for_the_peer():
    """With peer access enabled, the accessed device's pages (mapped before and after) are
    mapped for the peer too (cuMemSetAccess), as PyTorch's allocator does."""
    vram.memory.set_allocator_settings("expandable_segments:True")
    sim = vram.sim.driver()
    before = caching_allocator_alloc(MiB, device="sim:0")
    vram.memory.enable_peer_access("sim:0", device="sim:1")  # sim:1 reads sim:0's memory
    after = caching_allocator_alloc(30 * MiB, device="sim:0")
    assert sim.vmm_access(0, before) == frozenset({0, 1})
    assert sim.vmm_access(0, after) == frozenset({0, 1})
    with pytest.raises(ValueError, match="peer: sim:0 cannot be a peer of sim:0"):
        vram.memory.enable_peer_access("sim:0", device="sim:0")
    caching_allocator_delete(before)
    caching_allocator_delete(after)
