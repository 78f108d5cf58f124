"""Note [Claims]: handing out the front of a free block without touching the free lists
must make exactly the decisions, and keep exactly the stats, of doing the split for real."""

from __future__ import annotations

import random

import pytest

import vram
from vram.memory import DeviceCachingAllocator, _caching, parse_config

_SPAN = 1 << 40  # bytes between the address ranges of sim:0 and sim:1


def _pair(text: str = "") -> tuple[DeviceCachingAllocator, DeviceCachingAllocator]:
    """An allocator with claims on sim:0 and one without on sim:1: the two devices hand
    out addresses the same way, so equal decisions give addresses exactly _SPAN apart."""
    with_claims = DeviceCachingAllocator(vram.device("sim:0"), parse_config(text))
    without = DeviceCachingAllocator(vram.device("sim:1"), parse_config(text))
    without._no_claims = True
    return with_claims, without


@pytest.mark.parametrize("pausing", [False, True], ids=["always-claim", "adaptive"])
@pytest.mark.parametrize("text", ["", "max_split_size_mb:40", "roundup_power2_divisions:4"])
def test_claims_make_the_same_decisions_as_splitting(text, pausing, monkeypatch):
    """Random programs that often free what they just allocated (the claimed case) and
    often do something else first (the settled case): pointers, stats and block layout
    agree step by step with an allocator that always splits. ``always-claim`` turns off
    the pause that claims take where they keep being settled, to exercise them most."""
    if not pausing:
        monkeypatch.setattr(_caching, "_CLAIMS_TRIED", 1 << 60)
    rng = random.Random(7)
    fast, slow = _pair(text)
    streams = [
        (vram.default_stream("sim:0").cuda_stream, vram.default_stream("sim:1").cuda_stream),
        (vram.Stream("sim:0").cuda_stream, vram.Stream("sim:1").cuda_stream),
    ]
    live: list[tuple[int, int]] = []  # (fast ptr, slow ptr)
    undone, reclaimed = [], []
    undo, malloc = fast._undo_claim, fast.malloc
    fast._undo_claim = lambda: (undone.append(1), undo())[1]

    def counting_malloc(size: int, stream: int) -> int:
        last = fast._undone
        if last is not None and (last.size, last.stream) == (size, stream):
            reclaimed.append(1)  # the repeated request takes the undone claim back
        return malloc(size, stream)

    fast.malloc = counting_malloc
    size = 0
    for step in range(4000):
        roll = rng.random()
        if live and (roll < 0.45 or len(live) > 60):
            i = len(live) - 1 if rng.random() < 0.6 else rng.randrange(len(live))
            p, q = live.pop(i)
            fast.free(p)
            slow.free(q)
        elif roll < 0.5 and live:
            p, q = rng.choice(live)
            s0, s1 = streams[1]
            fast.record_stream(p, s0)
            slow.record_stream(q, s1)
        elif roll < 0.52:
            fast.empty_cache()
            slow.empty_cache()
        else:
            if rng.random() < 0.6 or not size:  # else the same request again
                size = rng.choice([rng.randint(1, 1 << 20), rng.randint(1 << 20, 30 << 20)])
            s0, s1 = rng.choice(streams)
            p, q = fast.malloc(size, s0), slow.malloc(size, s1)
            assert q - p == _SPAN, f"different blocks chosen at step {step}"
            live.append((p, q))
        if step % 25 == 0:
            assert fast.memory_stats() == slow.memory_stats(), f"stats differ at step {step}"
            assert _layout(fast, 0) == _layout(slow, _SPAN), f"layout differs at step {step}"
    for p, q in live:
        fast.free(p)
        slow.free(q)
    assert fast.memory_stats() == slow.memory_stats()
    if not pausing:
        assert len(undone) > 200  # the claimed case was exercised, not only the settled one
        assert len(reclaimed) > 20  # and the repeated request after an undone claim
    fast.empty_cache()
    slow.empty_cache()


def _layout(allocator: DeviceCachingAllocator, offset: int) -> list[tuple]:
    return [(b.ptr - offset, b.size, b.allocated) for b in allocator.all_blocks()]


def test_a_claim_is_settled_before_anything_else_reads_the_pools(sim0):
    allocator = DeviceCachingAllocator(sim0)
    stream = vram.default_stream(sim0).cuda_stream
    a = allocator.malloc(1000, stream)
    allocator.free(a)
    b = allocator.malloc(1000, stream)
    assert b == a and allocator._claim is not None  # handed out as a claim
    blocks = allocator.all_blocks()  # reading the blocks settles it
    assert allocator._claim is None
    assert [(x.ptr - a, x.size, x.allocated) for x in blocks] == [
        (0, 1024, True),
        (1024, (2 << 20) - 1024, False),
    ]
    c = allocator.malloc(1000, stream)
    assert c == a + 1024
    stats = allocator.memory_stats()
    assert stats["allocation.all.current"] == 2
    assert stats["inactive_split.all.current"] == 1
    assert stats["allocation.all.allocated"] == 3 and stats["allocation.all.freed"] == 1
    assert stats["allocated_bytes.all.peak"] == 2048
    allocator.free(b)
    allocator.free(c)
    allocator.empty_cache()
    assert allocator.memory_stats()["reserved_bytes.all.current"] == 0


def test_claims_pause_where_they_keep_being_settled(sim0):
    allocator = DeviceCachingAllocator(sim0)
    stream = vram.default_stream(sim0).cuda_stream
    held = allocator.malloc(4096, stream)
    for _ in range(_caching._CLAIMS_TRIED):  # allocate the next, free the previous
        ptr = allocator.malloc(4096, stream)
        allocator.free(held)
        held = ptr
    assert allocator._claims_paused  # the next mallocs split at once
    ptr = allocator.malloc(4096, stream)
    assert allocator._claim is None
    allocator.free(held)
    allocator.free(ptr)
    allocator.empty_cache()
