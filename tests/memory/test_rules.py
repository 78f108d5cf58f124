"""The caching allocator's policy, rule by rule, with exact sizes, segments and stats.

Each expected value is what PyTorch's CUDACachingAllocator decides for the same calls.
"""

from __future__ import annotations

import pytest

import vram
from vram.memory import set_allocator_settings

KiB = 1 << 10
MiB = 1 << 20


def kinds(stats: dict, name: str, field: str = "current") -> tuple[int, int, int]:
    """(all, small_pool, large_pool) of one stat field."""
    return tuple(stats[f"{name}.{pool}.{field}"] for pool in ("all", "small_pool", "large_pool"))


# ---------------------------------------------------------------------------- rounding
@pytest.mark.parametrize(
    ("size", "rounded"),
    [(1, 512), (511, 512), (512, 512), (513, 1024), (1500, 1536), (MiB + 1, MiB + 512)],
)
def test_sizes_round_up_to_512_bytes(alloc, stats, size, rounded):
    alloc(size)
    s = stats()
    assert s["allocated_bytes.all.current"] == rounded
    assert s["requested_bytes.all.current"] == size


@pytest.mark.parametrize(
    ("size", "rounded"),
    [
        (1200, 1536),  # not above 512 * 4 B: plain 512 B rounding
        (2048, 2048),
        (5000, 5120),  # 4096 .. 8192 in quarters: 4096, 5120, 6144, 7168
        (4096, 4096),  # powers of two stay
        (MiB + 1, MiB + 256 * KiB),
        (100 * MiB, 112 * MiB),  # 64 MiB .. 128 MiB in steps of 16 MiB
    ],
)
def test_roundup_power2_divisions_single_value(allocator, alloc, stats, size, rounded):
    set_allocator_settings("roundup_power2_divisions:4")
    assert allocator.round_size(size) == rounded
    alloc(size)
    assert stats("allocated_bytes.all.current") == rounded


@pytest.mark.parametrize(
    ("size", "rounded"),
    [
        (3000, 3072),  # 8 divisions only above 8 * 512 B
        (5000, 5120),  # 4096 .. 8192 in eighths (512 B steps)
        (MiB + 1, MiB + 128 * KiB),  # everything below 64 MiB takes the first entry (8)
        (100 * MiB, 104 * MiB),  # [64 MiB, 128 MiB): 8 divisions
        (200 * MiB + 1, 200 * MiB + 512),  # [128 MiB, 256 MiB): no entry, 0
        (300 * MiB + 1, 320 * MiB),  # [256 MiB, 512 MiB): 4 divisions (64 MiB steps)
        (600 * MiB + 1, 600 * MiB + 512),  # '>' from the interval after the last one named: 1
        (5 << 30, 5 << 30),
    ],
)
def test_roundup_power2_divisions_list(allocator, size, rounded):
    set_allocator_settings("roundup_power2_divisions:[64:8,256:4,>:1]")
    table = allocator.config.roundup_power2_divisions
    assert table == (8,) * 7 + (0, 4) + (1,) * 7  # '>' keeps 256's entry, as PyTorch 2.11
    assert allocator.round_size(size) == rounded


# ------------------------------------------------------------------- pools and segments
@pytest.mark.parametrize(
    ("size", "pool", "segment"),
    [
        (512, "small_pool", 2 * MiB),
        (MiB, "small_pool", 2 * MiB),
        (MiB + 1, "large_pool", 20 * MiB),
        (10 * MiB - 512, "large_pool", 20 * MiB),
        (10 * MiB, "large_pool", 10 * MiB),
        (11 * MiB + 1, "large_pool", 12 * MiB),
        (100 * MiB + 512, "large_pool", 102 * MiB),
    ],
)
def test_pool_and_segment_size(alloc, stats, size, pool, segment):
    alloc(size)
    s = stats()
    assert s[f"segment.{pool}.current"] == 1
    assert s["segment.all.current"] == 1
    assert s[f"reserved_bytes.{pool}.current"] == segment
    assert s["num_device_alloc"] == 1


def test_small_requests_share_one_segment(alloc, stats):
    ptrs = [alloc(4 * KiB) for _ in range(512)]  # exactly 2 MiB
    assert stats("segment.small_pool.current") == 1
    assert sorted(ptrs) == [ptrs[0] + i * 4 * KiB for i in range(512)]
    alloc(512)
    assert stats("segment.small_pool.current") == 2


def test_mid_size_requests_share_a_20_mib_segment(alloc, stats):
    a = alloc(3 * MiB)
    b = alloc(5 * MiB)
    c = alloc(9 * MiB)
    assert (b - a, c - b) == (3 * MiB, 5 * MiB)
    assert stats("segment.large_pool.current") == 1
    alloc(4 * MiB)  # 3 MiB are left in the segment
    assert stats("segment.large_pool.current") == 2


# ---------------------------------------------------------------------------- best fit
def test_best_fit_then_lowest_address(alloc, free, stats):
    a, b, c = alloc(12 * MiB), alloc(14 * MiB), alloc(12 * MiB)
    free(c, b, a)
    low, high = sorted([a, c])
    assert alloc(11 * MiB) == low  # smallest fitting size, then lowest address
    assert alloc(11 * MiB) == high
    assert alloc(11 * MiB) == b  # the 14 MiB block is split: 3 MiB remain
    s = stats()
    assert s["segment.all.current"] == 3
    assert s["num_device_alloc"] == 3
    assert s["allocated_bytes.all.current"] == 24 * MiB + 11 * MiB  # unsplit 12s keep size
    assert s["inactive_split_bytes.large_pool.current"] == 3 * MiB


def test_smallest_block_wins_over_lower_address(alloc, free):
    big, _, small = alloc(16 * MiB), alloc(12 * MiB), alloc(12 * MiB)
    free(big, small)
    assert alloc(12 * MiB) == small


def test_reuse_only_on_the_same_stream(sim0, alloc, free, stats):
    side = vram.Stream(sim0)
    a = alloc(4 * KiB)
    free(a)
    b = alloc(4 * KiB, side)
    assert b != a
    assert stats("segment.small_pool.current") == 2
    free(b)
    assert alloc(4 * KiB) == a
    assert alloc(4 * KiB, side) == b
    assert stats("num_device_alloc") == 2


# -------------------------------------------------------------------- split and merge
def test_small_pool_splits_any_remainder(alloc, stats):
    a = alloc(MiB)
    assert kinds(stats(), "inactive_split") == (1, 1, 0)
    assert stats("inactive_split_bytes.small_pool.current") == MiB
    b = alloc(MiB - 512)
    assert b == a + MiB
    assert stats("inactive_split_bytes.small_pool.current") == 512
    c = alloc(512)  # the last 512 B: nothing remains, nothing is split off
    assert c == a + 2 * MiB - 512
    s = stats()
    assert s["inactive_split.small_pool.current"] == 0
    assert s["inactive_split_bytes.small_pool.current"] == 0
    assert s["segment.all.current"] == 1


def test_large_pool_splits_only_a_remainder_above_1_mib(alloc, stats):
    alloc(19 * MiB)  # 1 MiB would remain: the whole 20 MiB block is handed out
    s = stats()
    assert s["allocated_bytes.large_pool.current"] == 20 * MiB
    assert s["requested_bytes.large_pool.current"] == 19 * MiB
    assert s["inactive_split.large_pool.current"] == 0
    alloc(19 * MiB - 512)  # 1 MiB + 512 B remain: split
    s = stats()
    assert s["segment.large_pool.current"] == 2
    assert s["allocated_bytes.large_pool.current"] == 39 * MiB - 512
    assert s["inactive_split.large_pool.current"] == 1
    assert s["inactive_split_bytes.large_pool.current"] == MiB + 512


def test_free_merges_with_free_neighbours(alloc, free, stats):
    a, b, c = alloc(512), alloc(512), alloc(512)
    assert (b - a, c - b) == (512, 512)
    assert (stats("inactive_split.all.current"), stats("inactive_split_bytes.all.current")) == (
        1,
        2 * MiB - 1536,
    )
    free(b)  # between two allocated blocks: one more inactive split block
    s = stats()
    assert (s["inactive_split.all.current"], s["inactive_split_bytes.all.current"]) == (
        2,
        2 * MiB - 1024,
    )
    free(c)  # merges with b and with the tail
    s = stats()
    assert (s["inactive_split.all.current"], s["inactive_split_bytes.all.current"]) == (
        1,
        2 * MiB - 512,
    )
    assert alloc(2 * 512) == b  # the merged block starts at b
    free(b)
    free(a)  # the whole segment is one free block again
    s = stats()
    assert (s["inactive_split.all.current"], s["inactive_split_bytes.all.current"]) == (0, 0)
    assert s["inactive_split.all.peak"] == 2
    assert alloc(2 * MiB - 512) is not None and stats("segment.all.current") == 1 + 1


def test_freed_segment_serves_one_request_whole(alloc, free):
    a = alloc(MiB)
    b = alloc(MiB)
    free(a, b)
    assert alloc(MiB) == a


# --------------------------------------------------------------------- max_split_size
def test_oversize_blocks_are_never_split(alloc, free, stats):
    set_allocator_settings("max_split_size_mb:40")
    big = alloc(50 * MiB)
    s = stats()
    assert s["max_split_size"] == 40 * MiB
    assert (s["oversize_segments.current"], s["oversize_allocations.current"]) == (1, 1)
    free(big)
    assert stats("oversize_allocations.current") == 0
    small = alloc(30 * MiB)  # below max_split_size: never given an oversize block
    assert small != big
    assert stats("segment.large_pool.current") == 2
    again = alloc(45 * MiB)  # oversize, within 20 MiB of the block: taken whole
    assert again == big
    s = stats()
    assert s["allocated_bytes.all.current"] == 80 * MiB
    assert s["inactive_split.all.current"] == 0
    assert s["oversize_allocations.allocated"] == 2


def test_oversize_block_too_large_for_a_request(alloc, free, stats):
    set_allocator_settings("max_split_size_mb:40")
    big = alloc(62 * MiB)
    free(big)
    other = alloc(41 * MiB)  # 62 >= 41 + 20: not rounded up that far
    assert other != big
    assert stats("reserved_bytes.all.current") == 62 * MiB + 42 * MiB
    free(other)
    assert alloc(43 * MiB) == big  # 62 < 43 + 20


def test_max_non_split_rounding_mb(alloc, free):
    set_allocator_settings("max_split_size_mb:40,max_non_split_rounding_mb:30")
    big = alloc(62 * MiB)
    free(big)
    assert alloc(41 * MiB) == big  # 62 < 41 + 30


def test_small_pool_request_never_takes_an_oversize_large_block(alloc, free, stats):
    set_allocator_settings("max_split_size_mb:40")
    free(alloc(50 * MiB))
    alloc(5 * MiB)
    assert stats("segment.large_pool.current") == 2
    assert stats("oversize_segments.current") == 1


# -------------------------------------------------------------------------- empty_cache
def test_empty_cache_releases_whole_free_segments_only(alloc, free, stats):
    a, b = alloc(512), alloc(512)
    c = alloc(12 * MiB)
    free(a, c)
    assert stats("reserved_bytes.all.current") == 14 * MiB
    vram.memory.empty_cache("sim:0")
    s = stats()
    assert s["reserved_bytes.all.current"] == 2 * MiB  # b keeps its segment
    assert s["segment.all.current"] == 1
    assert s["num_device_free"] == 1
    assert s["num_sync_all_streams"] == 1
    assert s["reserved_bytes.large_pool.freed"] == 12 * MiB
    free(b)
    vram.memory.empty_cache("sim:0")
    assert stats("reserved_bytes.all.current") == 0


# ------------------------------------------------------------- memory fraction, GC
def test_memory_fraction_caps_reserve(sim0, capacity, alloc, free, stats):
    total = capacity(1 << 30)
    assert vram.memory.get_per_process_memory_fraction(sim0) == 1.0
    vram.memory.set_per_process_memory_fraction(0.25, sim0)
    assert vram.memory.get_per_process_memory_fraction(sim0) == 0.25
    a = alloc(200 * MiB)
    allowed = vram.memory.format_size(int(0.25 * total))  # 256.00 MiB
    with pytest.raises(vram.OutOfMemoryError, match=f"{allowed} allowed"):
        alloc(100 * MiB)
    assert stats("num_ooms") == 1
    free(a)
    assert alloc(100 * MiB) == a  # the cached 200 MiB block is split
    free(a)
    b = alloc(250 * MiB)  # 200 + 250 > 256: the cached segment goes, the retry fits
    s = stats()
    assert s["reserved_bytes.all.current"] == 250 * MiB
    assert s["num_alloc_retries"] == 2  # once for the OOM, once here
    assert s["num_device_free"] == 1
    assert b is not None


def test_memory_fraction_uses_the_total_reported_now(sim0, allocator, capacity):
    total = capacity(1 << 30)  # set after the allocator was made
    vram.memory.set_per_process_memory_fraction(0.5, sim0)
    assert allocator.allowed_memory_maximum == total // 2


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_memory_fraction_out_of_range(sim0, fraction):
    with pytest.raises(ValueError, match="fraction"):
        vram.memory.set_per_process_memory_fraction(fraction, sim0)


def test_memory_fraction_must_be_a_float(sim0):
    with pytest.raises(TypeError, match="fraction"):
        vram.memory.set_per_process_memory_fraction(1, sim0)


def test_garbage_collection_releases_the_oldest_free_blocks(sim0, capacity, alloc, free, stats):
    assert capacity(1 << 30) == 1 << 30, "sim:0 still holds memory of an earlier test"
    set_allocator_settings("garbage_collection_threshold:0.5")
    vram.memory.set_per_process_memory_fraction(0.5, sim0)  # 512 MiB allowed, GC above 256
    a, b, c = alloc(50 * MiB), alloc(60 * MiB), alloc(70 * MiB)
    free(a, b)  # both enter the pool after 3 lookups
    d = alloc(80 * MiB)  # 180 MiB reserved: no GC; 260 MiB after
    assert stats("num_device_free") == 0
    free(c, d)  # they enter after 4 lookups: younger than a and b
    alloc(90 * MiB)  # 260 > 256: a and b (age 2 >= mean 1.5) go, though a alone would do
    s = stats()
    assert s["num_device_free"] == 2
    assert s["reserved_bytes.all.current"] == (70 + 80 + 90) * MiB
    assert alloc(70 * MiB) == c and alloc(80 * MiB) == d


def test_garbage_collection_needs_a_fraction(capacity, alloc, free, stats):
    capacity(1 << 30)
    set_allocator_settings("garbage_collection_threshold:0.1")
    free(alloc(200 * MiB))
    alloc(300 * MiB)
    assert stats("num_device_free") == 0


# ------------------------------------------------------------------ summary and resets
def test_memory_summary_rows(alloc):
    alloc(MiB)
    alloc(12 * MiB)
    text = vram.memory.memory_summary("sim:0")
    for row in (
        "Allocated memory",
        "Active memory",
        "Requested memory",
        "GPU reserved memory",
        "Non-releasable memory",
        "Allocations",
        "Active allocs",
        "GPU reserved segments",
        "Non-releasable allocs",
        "Oversize allocations",
        "Oversize GPU segments",
        "from large pool",
        "from small pool",
        "OOMs: 0",
        "device malloc retries: 0",
    ):
        assert row in text, row
    lines = text.splitlines()
    assert all(len(line) == 77 for line in lines)
    assert any("GPU reserved memory" in line and "14336 KiB" in line for line in lines)
    short = vram.memory.memory_summary("sim:0", abbreviated=True)
    assert "from large pool" not in short and "Allocated memory" in short


def test_reset_peak_and_accumulated(alloc, free, stats):
    a = alloc(12 * MiB)
    free(a)
    s = stats()
    assert (s["allocated_bytes.all.peak"], s["allocated_bytes.all.allocated"]) == (12 * MiB,) * 2
    vram.memory.reset_peak_memory_stats("sim:0")
    s = stats()
    assert s["allocated_bytes.all.peak"] == 0
    assert s["reserved_bytes.all.peak"] == 12 * MiB  # still reserved
    assert s["allocated_bytes.all.freed"] == 12 * MiB
    vram.memory.reset_accumulated_memory_stats("sim:0")
    s = stats()
    assert s["allocated_bytes.all.allocated"] == s["allocated_bytes.all.freed"] == 0
    assert s["num_device_alloc"] == 0
    assert s["reserved_bytes.all.current"] == 12 * MiB
    assert vram.memory.max_memory_reserved("sim:0") == 12 * MiB
    assert vram.memory.memory_reserved("sim:0") == 12 * MiB
    assert vram.memory.memory_allocated("sim:0") == 0
    alloc(MiB)
    assert vram.memory.max_memory_allocated("sim:0") == MiB


def test_memory_stats_keys_are_pytorchs(stats):
    s = stats()
    names = (
        "allocation",
        "segment",
        "active",
        "inactive_split",
        "allocated_bytes",
        "reserved_bytes",
        "active_bytes",
        "inactive_split_bytes",
        "requested_bytes",
    )
    expected = {
        f"{n}.{p}.{f}"
        for n in names
        for p in ("all", "small_pool", "large_pool")
        for f in ("current", "peak", "allocated", "freed")
    }
    expected |= {
        f"{n}.{f}"
        for n in ("oversize_allocations", "oversize_segments")
        for f in ("current", "peak", "allocated", "freed")
    }
    expected |= {
        "num_alloc_retries",
        "num_ooms",
        "num_sync_all_streams",
        "num_device_alloc",
        "num_device_free",
        "max_split_size",
    }
    vram_own = {f"workspace_bytes.all.{f}" for f in ("current", "peak", "allocated", "freed")}
    assert set(s) == expected | vram_own  # PyTorch's keys, and vram's library workspaces
    assert s["max_split_size"] == -1


# ------------------------------------------------------------------------- bad input
def test_alloc_zero_bytes_is_null(alloc, stats):
    assert alloc(0) == 0
    vram.memory.caching_allocator_delete(0)
    assert stats("num_device_alloc") == 0


def test_alloc_negative_size(alloc):
    with pytest.raises(ValueError, match="size"):
        alloc(-1)


@pytest.mark.parametrize("size", [1.5, "64", True])
def test_alloc_size_not_an_int(alloc, size):
    with pytest.raises(TypeError, match="size"):
        alloc(size)


def test_delete_unknown_pointer(alloc):
    with pytest.raises(ValueError, match="ptr"):
        vram.memory.caching_allocator_delete(0x1234)
    ptr = alloc(512)
    vram.memory.caching_allocator_delete(ptr)
    with pytest.raises(ValueError, match="ptr"):  # twice
        vram.memory.caching_allocator_delete(ptr)


def test_alloc_on_a_stream_of_another_device(alloc):
    other = vram.Stream("sim:1")
    with pytest.raises(ValueError, match="stream"):
        alloc(512, other)


def test_alloc_stream_of_a_wrong_type(alloc):
    with pytest.raises(TypeError, match="stream"):
        alloc(512, "side")


def test_alloc_on_the_cpu_device():
    with pytest.raises(ValueError, match="device"):
        vram.memory.caching_allocator_alloc(512, "cpu")


def test_record_stream_of_unknown_pointer(sim0):
    with pytest.raises(ValueError, match="ptr"):
        vram.memory.record_stream(0x1234, vram.Stream(sim0))


def test_expandable_blocks_switched_off_still_obey_the_oversize_rule(alloc, free, stats):
    set_allocator_settings("max_split_size_mb:40,expandable_segments:True")
    free(alloc(30 * MiB))  # 40 MiB of pages mapped in an expandable segment, now free
    set_allocator_settings("max_split_size_mb:40,expandable_segments:False")
    big = alloc(50 * MiB)
    free(big)
    other = alloc(30 * MiB)  # below max_split_size: neither the expandable nor the 50 MiB
    assert other != big
    assert stats("segment.large_pool.current") == 2  # 50 and 30 MiB (expandable: not counted)


def test_oversize_release_passes_over_split_blocks(alloc, free, stats):
    a = alloc(50 * MiB)
    rest = alloc(150 * MiB)  # both from... their own segments
    free(rest)
    first = alloc(60 * MiB)  # splits the 150 MiB block: 90 MiB stay free, split
    assert first == rest
    set_allocator_settings("max_split_size_mb:40")
    vram.sim.inject_malloc_failure(nth=1)
    alloc(62 * MiB)  # the free 90 MiB is split: not released, no crash; retried after all
    s = stats()
    assert (s["num_device_free"], s["num_alloc_retries"]) == (0, 1)
    assert a is not None
