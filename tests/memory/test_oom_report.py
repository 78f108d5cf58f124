"""The OOM report: what an OutOfMemoryError says about the memory that failed the request,
the snapshot written on OOM, and ``vram explain`` reading it back."""

from __future__ import annotations

import pickle

import pytest

import vram
from vram import cli
from vram.memory import MemoryReport, memory_report
from vram.memory._oom_report import FreeBlocks, PoolUse
from vram.memory._snapshot import _record_memory_history
from vram.tools.explain import find_setting, report_from_snapshot

MiB = 1 << 20


def _fragment(alloc, free) -> list[int]:
    """Ten 9 MiB blocks, two to a 20 MiB segment; free five of them, one per segment but the
    first: 46 MiB free, no free block above 11 MiB."""
    ptrs = [alloc(9 * MiB) for _ in range(10)]
    free(*ptrs[3::2])
    return [p for i, p in enumerate(ptrs) if i < 3 or i % 2 == 0]


def _oom(alloc, size: int) -> vram.OutOfMemoryError:
    with pytest.raises(vram.OutOfMemoryError) as caught:
        alloc(size)
    return caught.value


def test_the_report_says_where_the_free_memory_is(sim0, alloc, free, capacity):
    capacity(100 * MiB)
    kept = _fragment(alloc, free)
    report = _oom(alloc, 15 * MiB).report
    assert isinstance(report, MemoryReport)
    assert (report.request, report.rounded, report.stream) == (15 * MiB, 15 * MiB, 0)
    assert report.reserved == 100 * MiB and report.allocated == 54 * MiB
    assert report.free_blocks == [FreeBlocks("large", 0, 11 * MiB, 46 * MiB, 5)]
    assert (report.split_free_bytes, report.split_free_blocks) == (46 * MiB, 5)
    assert report.pending == {} and report.private_pools == []
    assert sorted(b.address for b in report.largest_live) == sorted(kept)
    assert all(b.size == 9 * MiB and b.frames == () for b in report.largest_live)
    assert "largest free block is 11.00 MiB, less than the 15.00 MiB" in report.findings[0]
    text = str(report)
    assert "out of memory on sim:0: 15.00 MiB requested" in text
    assert "no history was recorded to replay" in text
    assert report.advice[0].startswith("expandable_segments:True")
    assert "worth trying (not checked by a replay):\n  - expandable_segments:True" in text


def test_with_history_the_report_has_stacks_and_finds_the_setting(sim0, alloc, free, capacity):
    capacity(100 * MiB)
    _record_memory_history("all", device=sim0)
    try:
        _fragment(alloc, free)
        report = _oom(alloc, 15 * MiB).report
    finally:
        _record_memory_history(None, device=sim0)
    names = [f["name"] for f in report.largest_live[0].frames]
    assert "_fragment" in names
    assert "test_with_history_the_report_has_stacks_and_finds_the_setting" in names
    assert "not searched yet" in str(report)
    result = find_setting(report)
    assert result.baseline.fits is False  # the replay runs out of memory as the program did
    assert result.makes_it_fit.config == "expandable_segments:True"
    assert report.avoided_by.startswith("expandable_segments:True")
    text = str(report)
    assert "the setting that would have avoided it: expandable_segments:True" in text
    assert "    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert "worth trying" not in text  # one source of advice: the replay's


def test_frees_waiting_on_stream_events_per_stream(sim0, alloc, free):
    side = vram.Stream(sim0)
    with vram.sim.deferred():
        ptr = alloc(3 * MiB)
        vram.memory.record_stream(ptr, side)
        vram.sim.driver().enqueue(side.cuda_stream, lambda: None)  # work still queued there
        free(ptr)
        report = memory_report(sim0)
    assert report.request is None
    assert report.pending == {side.cuda_stream: 3 * MiB}
    assert any("record_stream" in text for text in report.findings)
    assert any(text.startswith("record_use(stream)") for text in report.advice)


def test_private_pools_are_counted(sim0, alloc, free):
    pool = vram.MemPool(sim0)
    with vram.use_mem_pool(pool):
        held = alloc(5 * MiB)
    report = memory_report(sim0)
    assert report.private_pools == [PoolUse(f"MemPool {pool.id}", 20 * MiB, 5 * MiB)]
    assert any("private pools" in text for text in report.findings)
    free(held)


def test_an_oom_writes_a_snapshot_that_vram_explain_reads(
    sim0, alloc, free, capacity, tmp_path, monkeypatch, capsys
):
    capacity(100 * MiB)
    monkeypatch.setenv("VRAM_OOM_SNAPSHOT", str(tmp_path))
    _record_memory_history("all", device=sim0)
    try:
        _fragment(alloc, free)
        error = _oom(alloc, 15 * MiB)
    finally:
        _record_memory_history(None, device=sim0)
    (written,) = tmp_path.glob("oom_sim0_*.pickle")
    assert error.report.snapshot_path == str(written)
    assert f"memory snapshot written to {written}" in getattr(error, "__notes__", [""])[0]
    snapshot = pickle.loads(written.read_bytes())
    assert snapshot["vram_oom_report"]["request"] == 15 * MiB
    again = report_from_snapshot(written)
    assert [(f.pool, f.largest, f.free_bytes, f.count) for f in again.free_blocks] == [
        ("large", 11 * MiB, 46 * MiB, 5)
    ]
    assert again.split_free_bytes == 46 * MiB and again.limit == 100 * MiB
    assert cli.main(["explain", str(written)]) == 0
    out = capsys.readouterr().out
    assert "out of memory on sim:0: 15.00 MiB requested" in out
    assert "the setting that would have avoided it: expandable_segments:True" in out


def test_the_oom_snapshot_setting_writes_to_a_file(sim0, alloc, free, capacity, tmp_path):
    capacity(100 * MiB)
    path = tmp_path / "at_oom.pickle"
    vram.memory.set_allocator_settings(f"oom_snapshot:{path}")
    _fragment(alloc, free)
    _oom(alloc, 15 * MiB)
    assert pickle.loads(path.read_bytes())["vram_oom_report"]["rounded"] == 15 * MiB


# ======================================================= pytorch#193400, and why vram grows
def _cycles(config: str, cycles: int = 100) -> list[tuple[int, int]]:
    """pytorch#193400's pattern: each cycle allocates three 46 MiB blocks, then a small one
    that stays alive after them (fencing the merged 138 MiB free region off from the
    unmapped tail), frees the three; the small ones of two cycles back are freed.
    (reserved, allocated) after each cycle, in MiB."""
    from vram._device import Device
    from vram.driver._sim import SimDriver
    from vram.memory import DeviceCachingAllocator, parse_config

    driver = SimDriver(1, 64 << 30)
    allocator = DeviceCachingAllocator(Device("sim", 0), parse_config(config), driver=driver)
    stream = driver.default_stream(0)
    fences, out = [], []
    for _ in range(cycles):
        big = [allocator.malloc(46 * MiB, stream) for _ in range(3)]
        fences.append(allocator.malloc(MiB + 512, stream))
        for ptr in big:
            allocator.free(ptr)
        if len(fences) > 2:
            allocator.free(fences.pop(0))
        stats = allocator.memory_stats()
        out.append(
            (
                stats["reserved_bytes.all.current"] // MiB,
                stats["allocated_bytes.all.current"] // MiB,
            )
        )
    return out, allocator


def test_pytorch_193400_max_split_with_expandable_segments_grows_and_says_why():
    grown, allocator = _cycles("max_split_size_mb:128,expandable_segments:True")
    assert grown[0] == (140, 1) and grown[-1] == (13920, 2)  # +139 MiB a cycle, as reported
    report = memory_report_of(allocator)
    assert report.expandable_oversize_free >= 13 * 1024 * MiB
    assert any("pytorch#193400" in t for t in report.findings)
    assert any("drop max_split_size_mb" in t for t in report.advice)
    assert not any("expandable_segments:True:" in t for t in report.advice)  # on already
    for config in ("expandable_segments:True", "max_split_size_mb:128", ""):
        flat, _ = _cycles(config)
        assert flat[-1][0] == flat[10][0] <= 160  # either option alone stays flat


def memory_report_of(allocator) -> MemoryReport:
    from vram.memory._oom_report import report_of

    return report_of(allocator)


# ============================================================ advice and the program's frames
def test_under_expandable_segments_nothing_advises_turning_them_on(sim0, alloc, free, capacity):
    vram.memory.set_allocator_settings("expandable_segments:True")
    capacity(100 * MiB)
    small = [alloc(600 << 10) for _ in range(60)]  # small-pool segments, split
    free(*small[::2])
    error = _oom(alloc, 90 * MiB)
    assert "expandable_segments" not in str(error)
    assert error.report.expandable
    assert not any("expandable_segments:True" in text for text in error.report.advice)
    assert "expandable_segments" not in "\n".join(error.report.findings)


def test_without_expandable_segments_the_message_says_to_try_them(sim0, alloc, capacity):
    capacity(10 * MiB)
    assert "VRAM_ALLOC_CONF=expandable_segments:True" in str(_oom(alloc, 90 * MiB))


def _fill_with_tensors(device) -> list:
    held = []
    for _ in range(10):  # (a loop: a comprehension is a frame of its own before Python 3.12)
        held.append(vram.empty(9 * MiB // 4, dtype=vram.float32, device=device))
    return held


def test_the_report_shows_the_programs_frames_not_vrams(sim0, capacity):
    capacity(100 * MiB)
    _record_memory_history("all", device=sim0)
    try:
        held = _fill_with_tensors(sim0)
        del held[3::2]
        with pytest.raises(vram.OutOfMemoryError) as caught:
            vram.empty(15 * MiB // 4, dtype=vram.float32, device=sim0)
    finally:
        _record_memory_history(None, device=sim0)
    report = caught.value.report
    frames = report.largest_live[0].frames
    names = [f["name"] for f in frames]
    assert "empty" in names and "_fill_with_tensors" in names  # all frames are kept
    text = str(report)
    block = text.split("largest live blocks:")[1].split("why:")[0]
    shown = [line.split()[0] for line in block.splitlines() if line.startswith("      ")]
    test = "test_the_report_shows_the_programs_frames_not_vrams"
    assert shown[:2] == ["_fill_with_tensors", test]
    assert "empty (" not in block and "device_storage" not in block


def test_the_advice_never_contradicts_the_replay(sim0, alloc, free, capacity):
    """Fragmented memory, but a request no setting can serve: after the replay the report
    gives its verdict alone, not the unchecked advice to turn expandable segments on."""
    capacity(100 * MiB)
    _record_memory_history("all", device=sim0)
    try:
        _fragment(alloc, free)
        report = _oom(alloc, 90 * MiB).report
    finally:
        _record_memory_history(None, device=sim0)
    assert any("fragmentation" in text for text in report.findings)
    assert report.advice and report.advice[0].startswith("expandable_segments:True")
    result = find_setting(report, jobs=1)
    assert result.makes_it_fit is None and report.avoided_by.startswith("none of the")
    text = str(report)
    assert "expandable_segments:True" not in text.split("why:")[1]
