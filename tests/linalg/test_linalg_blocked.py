"""vram's blocked LU and solve (``_blocked``) on the simulated GPU, where it takes several
panels: values and pivots against LAPACK's (NumPy), rectangular and singular inputs, inputs
read where they lie (strided, broadcast), and two device allocations per factorization."""

from __future__ import annotations

import numpy as np
import pytest
from linalg_helpers import close, random
from test_linalg_sim import expected_pivots, reconstruct

import vram
from vram.linalg import _blocked, _dispatch, _replay


@pytest.fixture
def blocked():
    with _dispatch.forced("blocked"):
        yield


@pytest.mark.parametrize("shape", [(3, 70, 70), (2, 100, 40), (2, 40, 100)], ids=str)
@pytest.mark.parametrize("dt", [vram.float32, vram.float64], ids=["float32", "float64"])
def test_factors_over_several_panels(sim0, blocked, shape, dt):
    a = random(shape, dt, seed=shape[1])
    LU, pivots, info = vram.linalg.lu_factor_ex(vram.tensor(a, device=sim0))
    np.testing.assert_array_equal(pivots.numpy(), expected_pivots(a))
    np.testing.assert_array_equal(info.numpy(), 0)
    for i in range(shape[0]):
        close(reconstruct(LU.numpy()[i], pivots.numpy()[i]), a[i], dt)


def test_panels_get_wider_as_the_matrix_shrinks():
    table = _blocked.PANELS["float32"]
    widths = [_blocked.panel_config("float32", rows).width for rows, _ in table]
    assert widths == sorted(widths, reverse=True)  # taller panels are narrower
    assert all(c.threads * c.rows >= rows for rows, c in table)  # a block holds its rows
    assert _blocked.one_panel("float32", 32, 32) and not _blocked.one_panel("float32", 33, 33)
    assert not _blocked.one_panel("float32", 8, 20)  # wide: the columns past 8 need the rest


def test_singular_matrices_report_the_first_zero_pivot(sim0, blocked):
    a = random((3, 70, 70), vram.float64, seed=4)
    a[0, :, 40] = 0  # U[40, 40] = 0, in the second panel
    a[1, :, 0] = 0
    a[2] = 0
    A = vram.tensor(a, device=sim0)
    _, _, info = vram.linalg.lu_factor_ex(A)
    np.testing.assert_array_equal(info.numpy(), [41, 1, 1])
    with pytest.raises(vram.linalg.LinAlgError, match=r"Batch element 0\): U\[41,41\]"):
        vram.linalg.lu_factor(A)


def test_without_pivoting(sim0, blocked):
    a = random((2, 70, 70), vram.float64, seed=5) + 30 * np.eye(70)
    LU, pivots = vram.linalg.lu_factor(vram.tensor(a, device=sim0), pivot=False)
    np.testing.assert_array_equal(pivots.numpy(), np.tile(np.arange(1, 71), (2, 1)))
    lu = LU.numpy()
    for i in range(2):
        close((np.tril(lu[i], -1) + np.eye(70)) @ np.triu(lu[i]), a[i], vram.float64)


def test_one_panel_reads_a_strided_input_where_it_lies(sim0, blocked, monkeypatch):
    copies = []
    real = vram.Tensor.copy_

    def counted(t, src, *args):
        copies.append(src.shape)
        return real(t, src, *args)

    monkeypatch.setattr(vram.Tensor, "copy_", counted)
    a = random((3, 20, 20), vram.float32, seed=6)
    A = vram.tensor(np.ascontiguousarray(np.swapaxes(a, 1, 2)), device=sim0).transpose(-2, -1)
    LU, pivots = vram.linalg.lu_factor(A)
    assert copies == []
    np.testing.assert_array_equal(A.numpy(), a)
    np.testing.assert_array_equal(pivots.numpy(), expected_pivots(a))
    for i in range(3):
        close(reconstruct(LU.numpy()[i], pivots.numpy()[i]), a[i], vram.float32)


@pytest.mark.parametrize("left", [True, False])
def test_solves_read_b_where_it_lies_or_broadcast(sim0, blocked, left):
    n = 70
    a = random((2, 3, n, n), vram.float64, seed=7) + 8 * np.eye(n)
    A = vram.tensor(a, device=sim0)
    for shape in ((2, 3, n, 4), (n, 4), (2, 1, n, 4)):  # plain, broadcast, not one stride
        b = random(shape if left else (*shape[:-2], 4, n), vram.float64, seed=len(shape))
        X = vram.linalg.solve(A, vram.tensor(b, device=sim0), left=left)
        got = X.numpy()
        product = a @ got if left else got @ a
        close(product, np.broadcast_to(b, product.shape), vram.float64)


def test_lu_solve_adjoint_and_inverse(sim0, blocked):
    n = 45
    a = random((2, n, n), vram.float64, seed=8) + 8 * np.eye(n)
    b = random((2, n, 9), vram.float64, seed=9)
    A, B = vram.tensor(a, device=sim0), vram.tensor(b, device=sim0)
    LU, pivots = vram.linalg.lu_factor(A)
    X = vram.linalg.lu_solve(LU, pivots, B, adjoint=True)
    close(np.swapaxes(a, 1, 2) @ X.numpy(), b, vram.float64)
    close(vram.linalg.inv(A).numpy() @ a, np.broadcast_to(np.eye(n), a.shape), vram.float64)


def test_batch_stride_is_the_one_stride_between_matrices(sim0):
    """``_lu.batch_stride``: the stride that steps through the matrices of a tensor taken as
    a flat batch (0 for one matrix or a broadcast one), None where no one stride does."""
    from vram.linalg._lu import batch_stride

    base = vram.zeros((2, 3, 4, 5), device=sim0)
    assert batch_stride(base) == 20
    assert batch_stride(base[0]) == 20
    assert batch_stride(base[:1, :1]) == 0  # one matrix
    assert batch_stride(base[:, :1]) == 60  # a dimension of size 1 does not count
    assert batch_stride(base.reshape(6, 4, 5)[::2]) == 40
    assert batch_stride(base[:, :2]) is None  # rows of 2 then a jump: no one stride
    assert batch_stride(base.transpose(0, 1)) is None
    assert batch_stride(base[0, 0].expand(7, 4, 5)) == 0
    assert batch_stride(base[:, :1].expand(2, 3, 4, 5)) is None
    assert batch_stride(base.reshape(1, 6, 4, 5)) == 20


@pytest.mark.parametrize("shape", [(130, 130), (2, 100, 70), (70, 100)], ids=str)
@pytest.mark.parametrize("dt", [vram.float32, vram.float64], ids=["float32", "float64"])
def test_look_ahead_is_queued_then_captured_then_replayed(sim0, blocked, monkeypatch, shape, dt):
    """The look-ahead (the next panel on a stream of its own, updated by its own kernel)
    gives LAPACK's factors; the same call three times is queued directly, captured into a
    graph and launched, then launched again: the same bits each time."""
    monkeypatch.setattr(_blocked, "AHEAD_FROM", ((4, 40),))
    a = random(shape, dt, seed=sum(shape))
    A = vram.tensor(a, device=sim0)
    before = _replay.replay_stats()
    runs = []
    for _ in range(3):
        LU, pivots, info = vram.linalg.lu_factor_ex(A)
        runs.append((LU.numpy(), pivots.numpy(), info.numpy()))
        del LU, pivots, info  # (the next call's tensors take their memory: the same key)
    after = _replay.replay_stats()
    assert after["captured"] - before["captured"] == 1
    assert after["replayed"] - before["replayed"] == 2
    for got in runs[1:]:
        for value, first in zip(got, runs[0], strict=True):
            np.testing.assert_array_equal(value, first)
    lu, pivots, info = runs[0]
    np.testing.assert_array_equal(pivots, expected_pivots(a))
    np.testing.assert_array_equal(info, 0)
    m, n = shape[-2:]
    factors, rows = lu.reshape(-1, m, n), pivots.reshape(-1, min(m, n))
    for i, matrix in enumerate(a.reshape(-1, m, n)):
        close(reconstruct(factors[i], rows[i]), matrix, dt)


def test_look_ahead_in_a_user_graph_is_part_of_it(sim0, blocked, monkeypatch):
    """Inside a capture of the caller's, the look-ahead is queued, not replayed: the caller's
    graph takes it in, and its replay factors the matrix again."""
    monkeypatch.setattr(_blocked, "AHEAD_FROM", ((4, 40),))
    a = random((100, 100), vram.float32, seed=1)
    A = vram.tensor(a, device=sim0)
    want = vram.linalg.lu_factor_ex(A)
    stream = vram.Stream(sim0)
    before = _replay.replay_stats()
    with vram.stream(stream):
        graph = vram.graphs.CUDAGraph()
        with vram.graphs.graph(graph):
            LU, pivots, info = vram.linalg.lu_factor_ex(A)
        LU.zero_()
        graph.replay()
    vram.synchronize(sim0)
    assert _replay.replay_stats()["captured"] == before["captured"]
    np.testing.assert_array_equal(LU.numpy(), want.LU.numpy())
    np.testing.assert_array_equal(pivots.numpy(), want.pivots.numpy())
