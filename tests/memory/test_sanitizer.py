"""The stream sanitizer (stream_sanitizer:True) on sim: torchrec#4231's missing
record_stream is reported with the stream and the stacks; record_use and record_stream
programs report nothing; freed blocks are poisoned and reused most recent first."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import vram
from vram.memory import StreamRaceWarning, set_allocator_settings, stream_races
from vram.memory._sanitizer import POISON, sanitizer_of

N = 1 << 18  # float32 elements: a 1 MiB tensor (the small pool)


@pytest.fixture
def sanitized(sim0):
    set_allocator_settings("stream_sanitizer:True")
    yield sim0
    set_allocator_settings("stream_sanitizer:False")


# The torchrec#4231 program, one step per function so that each stack names its step.
def make_input(device):
    return vram.full((N,), 1.0, device=device)


def use_on_side(x, side, main):
    side.wait_stream(main)
    with vram.stream(side):
        out = vram.empty(N, device=x.device)
        out.copy_(x)  # x is read on the side stream
    return out


def drop(box):
    box.clear()  # the last reference to x: freed on its stream (the default one)


def reuse(device):
    z = vram.empty(N, device=device)  # the next request on the default stream
    z.fill_(0.0)  # the new owner writes the memory the side stream may still read
    return z


def _program(device, lifetime: str | None):
    main, side = vram.current_stream(device), vram.Stream(device)
    box = [make_input(device)]
    address = box[0].data_ptr()
    out = use_on_side(box[0], side, main)
    if lifetime is not None:
        getattr(box[0], lifetime)(side)  # x.record_use(side) / x.record_stream(side)
    drop(box)
    z = reuse(device)
    return side, address, out, z


def test_torchrec_4231_a_missing_record_stream_is_reported(sanitized):
    with pytest.warns(StreamRaceWarning, match="stream race"):
        side, address, _, z = _program(sanitized, None)
    assert z.data_ptr() == address  # reused at once
    (race,) = stream_races(sanitized)
    assert race.kind == "reuse" and race.address == address and race.size == 4 * N
    assert race.stream == side.cuda_stream  # the stream whose use nothing covers
    assert race.access_stream == 0  # the new owner writes on the default stream
    assert race.use_frames[0]["name"] == "use_on_side"
    assert race.alloc_frames[0]["name"] == "make_input"
    assert race.free_frames[0]["name"] == "drop"
    assert race.reuse_frames[0]["name"] == "reuse"
    assert race.access_frames[0]["name"] == "reuse"
    text = str(race)
    assert f"while stream {side.cuda_stream:#x} may still use it" in text
    for name in ("use_on_side", "make_input", "drop", "reuse"):
        assert f"    {name} (" in text


@pytest.mark.parametrize("lifetime", ["record_use", "record_stream"])
def test_the_same_program_with_a_lifetime_call_reports_nothing(sanitized, lifetime):
    with warnings.catch_warnings():
        warnings.simplefilter("error", StreamRaceWarning)
        side, address, out, z = _program(sanitized, lifetime)
    assert stream_races(sanitized) == []
    assert z.data_ptr() == address  # record_use: at once; record_stream: its event is done
    assert (out.numpy() == 1.0).all()


def test_deferred_the_poison_makes_the_corruption_visible(sanitized):
    main, side = vram.current_stream(sanitized), vram.Stream(sanitized)
    with pytest.warns(StreamRaceWarning, match="stream race"):
        with vram.sim.deferred():  # nothing runs until the end of the block
            box = [make_input(sanitized)]
            out = use_on_side(box[0], side, main)
            drop(box)  # poisoned on the default stream, queued after the fill
            tiny = vram.empty(1, device=sanitized)  # takes the front of x's block at once
            tiny.fill_(0.0)
    # the default stream ran first (the fill of x, its poison, tiny's fill), then the side
    # stream's copy: it read the poison, NaN, where it should have read 1.0
    host = out.numpy()
    assert host[0] == 0.0 and np.isnan(host[1:]).all()


def test_deferred_record_stream_keeps_the_data_intact(sanitized):
    main, side = vram.current_stream(sanitized), vram.Stream(sanitized)
    with vram.sim.deferred():
        box = [make_input(sanitized)]
        out = use_on_side(box[0], side, main)
        box[0].record_stream(side)
        drop(box)
        tiny = vram.empty(1, device=sanitized)  # not x's block: it waits for the side stream
        tiny.fill_(0.0)
    assert (out.numpy() == 1.0).all()
    assert stream_races(sanitized) == []


def test_a_kernel_queued_on_freed_memory_is_a_use_after_free(sanitized, alloc, free):
    side = vram.Stream(sanitized)
    ptr = alloc(4096)
    free(ptr)
    with pytest.warns(StreamRaceWarning):
        vram.sim.driver().enqueue(side.cuda_stream, lambda: None, ((ptr, 16),))
    (race,) = stream_races(sanitized)
    assert race.kind == "use after free" and race.access_stream == side.cuda_stream
    test = "test_a_kernel_queued_on_freed_memory_is_a_use_after_free"
    assert [f["name"] for f in race.alloc_frames[:2]] == ["allocate", test]
    assert [f["name"] for f in race.free_frames[:2]] == ["release", test]


def test_freed_blocks_are_poisoned_on_their_stream(sanitized, alloc, free):
    ptr = alloc(4096)
    vram.sim.driver().memset_d8(ptr, 7, 4096, vram.current_stream(sanitized).cuda_stream)
    free(ptr)
    assert (vram.sim.driver().view(ptr, 4096) == POISON).all()


def test_the_most_recently_freed_block_is_reused_first(sim0, alloc, free):
    a, b, c = alloc(4096), alloc(4096), alloc(4096)
    free(a)
    free(c)
    assert alloc(4096) == a  # best fit: the lowest address of equal blocks
    free(a)
    set_allocator_settings("stream_sanitizer:True")
    try:
        free(b)  # merges with a and c: the one free block (a 2 MiB segment)
        first = alloc(4096)
        second = alloc(8192)
        free(second)
        assert alloc(4096) == second  # the block freed last, not the lowest address
        free(first)
    finally:
        set_allocator_settings("stream_sanitizer:False")


def test_cross_stream_reuse_waits_for_the_poison_too(sim0, alloc, free):
    set_allocator_settings("stream_sanitizer:True,cross_stream_reuse:True")
    try:
        other = vram.Stream(sim0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", StreamRaceWarning)
            ptr = alloc(30 << 20)  # a segment of its own
            vram.sim.driver().memset_d8(ptr, 1, 30 << 20, vram.current_stream(sim0).cuda_stream)
            free(ptr)
            again = alloc(30 << 20, other)  # the whole free segment moves to the other stream
            vram.sim.driver().memset_d8(again, 2, 30 << 20, other.cuda_stream)
        assert again == ptr and stream_races(sim0) == []
        free(again)
    finally:
        set_allocator_settings("stream_sanitizer:False")


def test_off_by_default_and_detached_when_turned_off(sim0):
    allocator = vram.memory.allocator_for(sim0)
    assert sanitizer_of(allocator) is None and allocator.recorder is None
    set_allocator_settings("stream_sanitizer:True")
    sanitizer = sanitizer_of(allocator)
    assert sanitizer is not None and allocator._finder == sanitizer._find_free_block
    assert allocator._drop_hook == sanitizer._note_drop
    set_allocator_settings("stream_sanitizer:False")
    assert sanitizer_of(allocator) is None and allocator.recorder is None
    assert allocator._finder is None and allocator._drop_hook is None
    assert not vram.sim.driver().observers
