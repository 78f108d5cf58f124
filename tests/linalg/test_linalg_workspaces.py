"""pytorch#181997's fix, proven on the simulated GPU: one cuSOLVER workspace per call (per
stream), queried once, reused by every matrix; device mallocs O(1) in the batch; the
side-stream spread joined to the current stream by events."""

from __future__ import annotations

import numpy as np
import pytest
from linalg_helpers import close, random

import vram
from vram.linalg import _dispatch
from vram.linalg._libs import Libs


def fresh_allocator(device) -> None:
    """A new allocator for ``device`` (it reads VRAM_NO_CACHING when made), after the old
    one gave back its memory, workspaces included."""
    vram.empty_cache(device)
    vram.memory._registry._allocators.pop(device, None)


def malloc_counts(device, shape: tuple[int, int, int]) -> int:
    """Device mallocs of one cold lu_factor_ex, all of it run (diagonal input: quick)."""
    batch, n, _ = shape
    A = vram.zeros(shape, device=device)
    A._view((batch, n), (n * n, n + 1), 0).fill_(2)  # 2 I: no pivoting, a quick factorization
    vram.synchronize(device)
    with vram.memory.count_device_calls(device) as calls:
        vram.linalg.lu_factor_ex(A)
        vram.synchronize(device)
    return calls.device_malloc


@pytest.mark.parametrize("n", [511, 512, 513])
def test_device_mallocs_do_not_grow_with_the_batch(monkeypatch, n):
    """The issue's shapes, every allocation a device malloc (VRAM_NO_CACHING=1): PyTorch made
    20 at (16, 512, 512), one workspace per matrix; vram makes the same few at 16 and 64."""
    monkeypatch.setenv("VRAM_NO_CACHING", "1")
    counts = {}
    for batch in (16, 64):
        device = vram.device("sim:0")
        fresh_allocator(device)
        counts[batch] = malloc_counts(device, (batch, n, n))
    plan = _dispatch.plan_lu(n, n, 16, "float32")
    assert counts[16] == counts[64], counts
    assert counts[16] <= 3 + plan.streams + 1  # LU, pivots, info, one workspace per stream


@pytest.mark.parametrize("path", _dispatch.PATHS)
def test_device_mallocs_per_path_are_constant(monkeypatch, sim0, path):
    monkeypatch.setenv("VRAM_NO_CACHING", "1")
    counts = []
    with _dispatch.forced(path, streams=4):
        for batch in (4, 32):
            fresh_allocator(sim0)
            counts.append(malloc_counts(sim0, (batch, 8, 8)))
    assert counts[0] == counts[1]
    if path == "blocked":  # LU, and pivots with info: no workspace, no pointer array
        assert counts[0] == 2


def test_lu_factor_keeps_its_factors_in_one_allocation(monkeypatch, sim0):
    """lu_factor's LU and pivots (and the info it reads) are one allocation, freed when both
    are gone; lu_factor_ex's info has its own, apart from LU."""
    monkeypatch.setenv("VRAM_NO_CACHING", "1")
    fresh_allocator(sim0)
    a = random((4, 8, 8), vram.float32)
    A = vram.tensor(a, device=sim0)
    with _dispatch.forced("blocked"), vram.memory.count_device_calls(sim0) as calls:
        LU, pivots = vram.linalg.lu_factor(A)
    assert calls.device_malloc == 1
    want, want_pivots, _ = vram.linalg.lu_factor_ex(A)
    assert np.array_equal(LU.numpy(), want.numpy())
    assert np.array_equal(pivots.numpy(), want_pivots.numpy())
    used = vram.memory.memory_allocated(sim0)
    del LU, want, want_pivots
    assert vram.memory.memory_allocated(sim0) == used - 1024  # lu_factor_ex's LU went
    del pivots  # LU's 1024 bytes and 4 * (8 + 1) int32s, rounded up to 512 bytes
    assert vram.memory.memory_allocated(sim0) == used - 1024 - 1536


def test_one_workspace_query_and_one_workspace_per_stream(monkeypatch, sim0):
    queries, used = [], {}
    real_size, real_getrf = Libs.getrf_workspace, Libs.getrf

    def size(self, s, *args):
        queries.append(s)
        return real_size(self, s, *args)

    def getrf(self, s, dtype, m, n, a, lda, ws, *rest):
        used.setdefault(s.cuda_stream, set()).add(ws)
        return real_getrf(self, s, dtype, m, n, a, lda, ws, *rest)

    monkeypatch.setattr(Libs, "getrf_workspace", size)
    monkeypatch.setattr(Libs, "getrf", getrf)
    A = vram.tensor(random((12, 10, 10), vram.float64), device=sim0)
    for path, streams in (("cusolver", 1), ("streams", 4)):
        queries.clear()
        used.clear()
        with _dispatch.forced(path, streams=streams):
            LU, pivots = vram.linalg.lu_factor(A)
        assert len(queries) == 1  # the size, once for the whole batch
        assert len(used) == streams and all(len(spaces) == 1 for spaces in used.values())
        assert len({ws for spaces in used.values() for ws in spaces}) == streams
        with _dispatch.forced("cublas"):
            want, _ = vram.linalg.lu_factor(A)
        close(LU.numpy(), want.numpy(), vram.float64)


def test_warm_calls_make_no_device_malloc(sim0):
    A = vram.tensor(random((16, 40, 40), vram.float32), device=sim0)
    for path in _dispatch.PATHS:
        with _dispatch.forced(path, streams=4):
            vram.linalg.solve(A, A)
            with vram.memory.count_device_calls(sim0) as calls:
                vram.linalg.solve(A, A)
                vram.linalg.det(A)
            assert calls.device_malloc == 0, path


def test_side_streams_are_joined_to_the_current_stream(sim0):
    """Deferred: nothing runs until the current stream is synchronized, which runs the side
    streams' share first (it waits on their events); the result is then complete."""
    a = random((6, 12, 12), vram.float64, seed=5)
    A = vram.tensor(a, device=sim0)
    with _dispatch.forced("streams", streams=3):
        with vram.sim.deferred():
            LU, pivots, info = vram.linalg.lu_factor_ex(A)
            current = vram.current_stream(sim0)
            assert not current.query()
            current.synchronize()
            with _dispatch.forced("cublas"):
                want = vram.linalg.lu_factor_ex(A)
            vram.sim.run()
    np.testing.assert_array_equal(pivots.numpy(), want.pivots.numpy())
    close(LU.numpy(), want.LU.numpy(), vram.float64)
