"""Library workspaces: one buffer per (library, device, stream, thread) from the caching
allocator, grown when needed, freed by empty_cache when idle, counted and labelled."""

from __future__ import annotations

import threading

import pytest

import vram
from vram.memory import count_device_calls, get_workspace

KiB, MiB = 1 << 10, 1 << 20


def test_one_buffer_is_reused_and_grown_when_a_call_needs_more(sim0):
    a = get_workspace(4 * KiB, library="cublas")
    assert get_workspace(KiB, library="cublas") == a
    assert get_workspace(4 * KiB, library="cublas") == a
    assert get_workspace(KiB, library="cusolver") != a  # each library its own
    side = vram.Stream()
    assert get_workspace(KiB, library="cublas", stream=side) != a  # and each stream
    bigger = get_workspace(8 * KiB, library="cublas")
    assert bigger != 0 and get_workspace(8 * KiB, library="cublas") == bigger
    stats = vram.memory.memory_stats()
    assert stats["workspace_bytes.all.current"] == 8 * KiB + KiB + KiB
    assert stats["workspace_bytes.all.peak"] == 8 * KiB + KiB + KiB + 4 * KiB - 4 * KiB
    assert stats["workspace_bytes.all.freed"] == 4 * KiB


def test_a_thousand_calls_make_one_device_malloc(sim0):
    with count_device_calls() as calls:
        for n in range(1000):
            get_workspace((64 * KiB, 3 * KiB, 17 * KiB)[n % 3], library="cublaslt")
    assert (calls.device_malloc, calls.alloc) == (1, 1)


def test_each_thread_has_its_own(sim0):
    mine = get_workspace(KiB, library="cublas")
    theirs = []
    thread = threading.Thread(
        target=lambda: (vram.set_device(sim0), theirs.append(get_workspace(KiB, library="cublas")))
    )
    thread.start()
    thread.join()
    assert theirs[0] not in (0, mine)


def test_empty_cache_frees_idle_workspaces_and_keeps_busy_ones(sim0):
    side = vram.Stream()
    idle = get_workspace(MiB, library="cublas")
    with vram.sim.deferred():
        vram.sim.driver().enqueue(side.cuda_stream, lambda: None)  # work in flight on side
        busy = get_workspace(MiB, library="cublas", stream=side)
        vram.empty_cache()
        assert vram.memory.memory_stats()["workspace_bytes.all.current"] == MiB
        assert get_workspace(MiB, library="cublas", stream=side) == busy
    vram.empty_cache()
    assert vram.memory.memory_stats()["workspace_bytes.all.current"] == 0
    assert vram.memory.memory_reserved() == 0
    assert idle


def test_another_threads_workspace_is_freed_once_that_thread_has_ended(sim0):
    """(Note [Who frees a workspace]) empty_cache() frees this thread's idle workspaces and
    those of ended threads, never those of a thread that may be between its hand-out and
    its launch."""
    asked, may_end = threading.Event(), threading.Event()

    def worker() -> None:
        vram.set_device(sim0)
        get_workspace(MiB, library="cublas")
        asked.set()
        may_end.wait()

    thread = threading.Thread(target=worker)
    thread.start()
    asked.wait()
    get_workspace(KiB, library="cublas")
    vram.empty_cache()
    assert vram.memory.memory_stats()["workspace_bytes.all.current"] == MiB  # the worker's
    may_end.set()
    thread.join()
    vram.empty_cache()
    assert vram.memory.memory_stats()["workspace_bytes.all.current"] == 0


def test_snapshots_label_workspace_blocks(sim0):
    get_workspace(KiB, library="cusolver")
    frames = [b["frames"] for s in vram.memory.memory_snapshot() for b in s["blocks"]]
    assert [{"filename": "<vram>", "line": 0, "name": "cusolver workspace"}] in frames


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"nbytes": 8, "library": "cudnn"}, ValueError, "library: expected one of"),
        ({"nbytes": -1, "library": "cublas"}, ValueError, "nbytes: expected a non-negative"),
        ({"nbytes": 8, "library": "cublas", "stream": 3}, TypeError, "stream: expected a"),
    ],
)
def test_bad_arguments_are_named(sim0, kwargs, error, message):
    with pytest.raises(error, match=message):
        get_workspace(**kwargs)
    assert get_workspace(0, library="cublas") == 0


def test_the_current_workspace_is_get_workspaces(sim0):
    """current_workspace (vram's libraries, with the current stream's handle) gives what
    get_workspace gives, in any order of the two, growth included, on every stream."""
    from vram.memory import current_workspace

    device = vram.current_stream().device
    side = vram.Stream()
    for stream in (vram.current_stream(), side):
        with vram.stream(stream):
            handle = vram.current_stream().cuda_stream
            first = current_workspace(4 * KiB, "cublaslt", device, handle)
            assert first == get_workspace(4 * KiB, library="cublaslt") != 0
            assert current_workspace(KiB, "cublaslt", device, handle) == first
            grown = current_workspace(16 * KiB, "cublaslt", device, handle)
            assert grown == get_workspace(16 * KiB, library="cublaslt")
            assert current_workspace(0, "cublaslt", device, handle) == 0
    assert vram.memory.memory_stats()["workspace_bytes.all.current"] == 2 * 16 * KiB
