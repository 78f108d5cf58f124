"""vram.linalg on the simulated GPU: values against NumPy for every dtype, batch shape and way
of running a batch; PyTorch's layouts; singular inputs; bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
from linalg_helpers import DTYPES, IDS, close, random

import vram
from vram.linalg import LinAlgError, _dispatch, _libs, _reference
from vram.linalg._libs import Libs

BATCHES = [(), (3,), (2, 2)]


def reconstruct(lu: np.ndarray, pivots: np.ndarray) -> np.ndarray:
    """P L U from a packed LU (one matrix) and its 1-based pivots."""
    m, n = lu.shape
    k = min(m, n)
    lower = np.tril(lu, -1)[:, :k] + np.eye(m, k)
    product = lower @ np.triu(lu)[:k]
    for i in range(k - 1, -1, -1):
        p = pivots[i] - 1
        product[[i, p]] = product[[p, i]]
    return product


def expected_pivots(a: np.ndarray, modulus: bool = False) -> np.ndarray:
    """LAPACK's pivots of ``a`` (complex ones by |z| with ``modulus``: cuBLAS's rule)."""
    want = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64).reshape(-1, *a.shape[-2:])
    ipiv, _ = _reference.getrf(want.copy(), modulus=modulus)
    return ipiv.reshape(*a.shape[:-2], -1)


# ---- lu_factor -----------------------------------------------------------------------------


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_lu_factor_ex_values_and_layout(sim0, path, dt, batch):
    a = random((*batch, 6, 6), dt, seed=len(batch))
    LU, pivots, info = vram.linalg.lu_factor_ex(vram.tensor(a, device=sim0))
    assert LU.shape == a.shape and LU.dtype == dt
    assert LU.stride()[-2:] == (1, 6) and LU.transpose(-2, -1).is_contiguous()  # column-major
    assert pivots.shape == (*batch, 6) and pivots.dtype == vram.int32 and pivots.is_contiguous()
    assert info.shape == batch and info.dtype == vram.int32
    np.testing.assert_array_equal(info.numpy(), 0)
    np.testing.assert_array_equal(pivots.numpy(), expected_pivots(a, modulus=path == "cublas"))
    lu, piv = LU.numpy().reshape(-1, 6, 6), pivots.numpy().reshape(-1, 6)
    for i, matrix in enumerate(a.reshape(-1, 6, 6)):
        close(reconstruct(lu[i], piv[i]), matrix, dt)


@pytest.mark.parametrize("shape", [(2, 7, 4), (2, 4, 7)], ids=str)
def test_lu_factor_of_rectangular_matrices(sim0, path, shape):
    a = random(shape, vram.float64)
    LU, pivots, info = vram.linalg.lu_factor_ex(vram.tensor(a, device=sim0))
    assert LU.shape == shape and pivots.shape == (2, 4)
    np.testing.assert_array_equal(pivots.numpy(), expected_pivots(a))
    for i in range(2):
        close(reconstruct(LU.numpy()[i], pivots.numpy()[i]), a[i], vram.float64)


def test_lu_factor_without_pivoting(sim0, path):
    a = random((3, 5, 5), vram.float64) + 10 * np.eye(5)
    LU, pivots = vram.linalg.lu_factor(vram.tensor(a, device=sim0), pivot=False)
    np.testing.assert_array_equal(pivots.numpy(), np.tile(np.arange(1, 6, dtype=np.int32), (3, 1)))
    lu = LU.numpy()
    for i in range(3):
        close((np.tril(lu[i], -1) + np.eye(5)) @ np.triu(lu[i]), a[i], vram.float64)


def test_lu_factor_of_a_non_contiguous_input_leaves_it_unchanged(sim0):
    a = random((4, 5), vram.float32)
    A = vram.tensor(a.T.copy(), device=sim0).t()  # a column-major view
    LU, pivots = vram.linalg.lu_factor(A)
    np.testing.assert_array_equal(A.numpy(), a)
    close(reconstruct(LU.numpy(), pivots.numpy()), a, vram.float32)


def test_empty_inputs(sim0):
    LU, pivots, info = vram.linalg.lu_factor_ex(vram.zeros((0, 3, 3), device=sim0))
    assert LU.shape == (0, 3, 3) and pivots.shape == (0, 3) and info.shape == (0,)
    LU, pivots, info = vram.linalg.lu_factor_ex(vram.zeros((2, 0, 0), device=sim0))
    assert pivots.shape == (2, 0)
    np.testing.assert_array_equal(info.numpy(), [0, 0])
    np.testing.assert_array_equal(vram.linalg.det(vram.zeros((2, 0, 0), device=sim0)).numpy(), 1)
    assert vram.linalg.inv(vram.zeros((0, 0), device=sim0)).shape == (0, 0)


# ---- solves --------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
@pytest.mark.parametrize("adjoint", [False, True], ids=["A", "adjoint"])
def test_lu_solve_every_op(sim0, path, dt, left, adjoint):
    a = random((2, 5, 5), dt, seed=1)
    b = random((3, 1, 5, 2) if left else (3, 1, 2, 5), dt, seed=2)  # batch dims broadcast
    LU, pivots = vram.linalg.lu_factor(vram.tensor(a, device=sim0))
    X = vram.linalg.lu_solve(LU, pivots, vram.tensor(b, device=sim0), left=left, adjoint=adjoint)
    assert X.shape == (3, 2, 5, 2) if left else (3, 2, 2, 5)
    op = np.swapaxes(a, -1, -2).conj() if adjoint else a
    x = X.numpy()
    close(op @ x if left else x @ op, np.broadcast_to(b, x.shape), dt)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_solve_matches_numpy(sim0, path, dt):
    a = random((3, 6, 6), dt, seed=3)
    b = random((3, 6, 4), dt, seed=4)
    X = vram.linalg.solve(vram.tensor(a, device=sim0), vram.tensor(b, device=sim0))
    assert X.shape == (3, 6, 4) and X.stride() == (24, 1, 6)  # column-major, as PyTorch's
    close(X.numpy(), np.linalg.solve(a, b), dt)
    bt = vram.tensor(b.swapaxes(-1, -2), device=sim0)
    XR = vram.linalg.solve(vram.tensor(a, device=sim0), bt, left=False)
    assert XR.stride() == (24, 6, 1)
    close(XR.numpy() @ a, b.swapaxes(-1, -2), dt)


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "x_shape"),
    [
        ((4, 4), (4,), (4,)),  # a vector
        ((3, 4, 4), (3, 4), (3, 4)),  # a batch of vectors
        ((3, 4, 4), (4,), (3, 4)),  # one vector for every matrix
        ((2, 1, 4, 4), (3, 4, 2), (2, 3, 4, 2)),  # batch dims broadcast
        ((4, 4), (5, 4, 1), (5, 4, 1)),
    ],
    ids=str,
)
def test_solve_shapes(sim0, a_shape, b_shape, x_shape):
    a, b = random(a_shape, vram.float64, 5), random(b_shape, vram.float64, 6)
    X = vram.linalg.solve(vram.tensor(a, device=sim0), vram.tensor(b, device=sim0))
    assert X.shape == x_shape
    if len(b_shape) == 1 or b_shape == a_shape[:-1]:  # vectors
        vectors = np.broadcast_to(b, a_shape[:-1])[..., None]
        want = np.linalg.solve(a, vectors)[..., 0]
    else:
        want = np.linalg.solve(a, b)
    close(X.numpy(), want, vram.float64)


def test_solve_with_a_transposed_view_of_a(sim0, path):
    a, b = random((2, 5, 5), vram.float32, 7), random((2, 5, 3), vram.float32, 8)
    A = vram.tensor(np.swapaxes(a, -1, -2).copy(), device=sim0).transpose(-2, -1)
    X = vram.linalg.solve(A, vram.tensor(b, device=sim0))
    close(X.numpy(), np.linalg.solve(a, b), vram.float32)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_inv_det_slogdet_match_numpy(sim0, path, dt):
    a = random((2, 3, 5, 5), dt, seed=9)
    A = vram.tensor(a, device=sim0)
    inverse = vram.linalg.inv(A)
    assert inverse.stride()[-2:] == (1, 5)
    close(inverse.numpy(), np.linalg.inv(a), dt)
    det = vram.linalg.det(A)
    assert det.shape == (2, 3) and det.dtype == dt
    close(det.numpy(), np.linalg.det(a), dt)
    sign, logabs = vram.linalg.slogdet(A)
    want_sign, want_log = np.linalg.slogdet(a)
    assert sign.dtype == dt and logabs.dtype == vram.float64 if dt.np.itemsize == 16 else True
    close(sign.numpy(), want_sign, dt)
    close(logabs.numpy(), want_log, dt)
    one = vram.linalg.det(A[0, 0])
    assert one.shape == ()
    close(one.item(), np.linalg.det(a[0, 0]), dt)


# ---- singular inputs -----------------------------------------------------------------------


def singular_batch(sim0) -> vram.Tensor:
    a = random((3, 4, 4), vram.float32, 10)
    a[1, :, 2] = 0  # column 3 of matrix 1 is zero: U[3, 3] = 0
    return vram.tensor(a, device=sim0)


def test_ex_forms_report_info_without_raising(sim0, path):
    A = singular_batch(sim0)
    _, _, info = vram.linalg.lu_factor_ex(A)
    np.testing.assert_array_equal(info.numpy(), [0, 3, 0])
    _, info = vram.linalg.solve_ex(A, vram.ones((3, 4, 1), device=sim0))
    np.testing.assert_array_equal(info.numpy(), [0, 3, 0])
    _, info = vram.linalg.inv_ex(A)
    np.testing.assert_array_equal(info.numpy(), [0, 3, 0])


def test_singular_errors_name_the_batch_element_and_the_pivot(sim0):
    A = singular_batch(sim0)
    with pytest.raises(LinAlgError, match=r"lu_factor: \(Batch element 1\): U\[3,3\] is zero"):
        vram.linalg.lu_factor(A)
    with pytest.raises(LinAlgError, match=r"lu_factor_ex: \(Batch element 1\): U\[3,3\]"):
        vram.linalg.lu_factor_ex(A, check_errors=True)
    with pytest.raises(LinAlgError, match=r"solve: \(Batch element 1\): The solver failed"):
        vram.linalg.solve(A, vram.ones((3, 4), device=sim0))
    with pytest.raises(LinAlgError, match=r"inv: \(Batch element 1\): The diagonal element 3"):
        vram.linalg.inv(A)
    with pytest.raises(RuntimeError, match=r"^vram.linalg.lu_factor: U\[1,1\] is zero"):
        vram.linalg.lu_factor(vram.zeros((2, 2), device=sim0))  # one matrix: no batch element
    assert issubclass(LinAlgError, RuntimeError)


FIRST_NONZERO = (  # (info, what first_nonzero finds)
    ([0, 0, 0], None),
    ([0, 0, 3, 0, 5], (2, 3)),
    ([-4, 7], (0, -4)),
    ([0] * 7777 + [9] + [0] * 100 + [2] * 2000, (7777, 9)),  # past one pass of the block
)


@pytest.mark.parametrize("values, expected", FIRST_NONZERO)
def test_first_nonzero_finds_the_first_failing_matrix(sim0, values, expected):
    """What check_errors reads instead of every matrix's info: index and value."""
    info = vram.tensor(np.array(values, np.int32), device=sim0)
    stream = vram.current_stream(sim0)
    found = _libs.LIBS.first_nonzero(stream, info.data_ptr(), info.numel())
    assert found == expected


def test_the_check_after_the_blocked_lu_searches_only_when_flagged(sim0, monkeypatch):
    """check_errors after vram's blocked LU runs the first_nonzero search only when a panel
    raised the zero-pivot flag (matrix 1 here, in its second panel's columns); after
    cuSOLVER, which knows no flag, it always searches."""
    searches = []
    real = Libs.first_nonzero

    def counting(self, s, info, count):
        searches.append(count)
        return real(self, s, info, count)

    monkeypatch.setattr(Libs, "first_nonzero", counting)
    a = random((3, 48, 48), vram.float32, 12)
    good = vram.tensor(a, device=sim0)
    a[1, :, 40] = 0
    bad = vram.tensor(a, device=sim0)
    with _dispatch.forced("blocked"):
        vram.linalg.lu_factor(good)
        vram.linalg.lu_factor_ex(good, check_errors=True)
        vram.linalg.solve(good, good)
        vram.linalg.inv_ex(good, check_errors=True)
        assert searches == []
        with pytest.raises(LinAlgError, match=r"\(Batch element 1\): U\[41,41\] is zero"):
            vram.linalg.lu_factor(bad)
        assert searches == [3]
        with pytest.raises(LinAlgError, match=r"solve: \(Batch element 1\)"):
            vram.linalg.solve(bad, good)
        assert searches == [3, 3]
    with _dispatch.forced("cusolver"):
        vram.linalg.lu_factor(good)
    assert searches == [3, 3, 3]


def test_singular_determinants(sim0):
    A = singular_batch(sim0)
    det = vram.linalg.det(A).numpy()
    assert det[1] == 0 and det[0] != 0
    sign, logabs = vram.linalg.slogdet(A)
    assert sign.numpy()[1] == 0 and logabs.numpy()[1] == -np.inf


def test_nan_and_inf_go_through(sim0, path):
    a = random((2, 3, 3), vram.float64, 11)
    a[0, 1, 1] = np.nan
    a[1, 0, 0] = np.inf
    _, _, info = vram.linalg.lu_factor_ex(vram.tensor(a, device=sim0))
    np.testing.assert_array_equal(info.numpy(), [0, 0])
    X = vram.linalg.solve(
        vram.tensor(a, device=sim0), vram.ones((2, 3), dtype=vram.float64, device=sim0)
    )
    assert np.isnan(X.numpy()[0]).any()


# ---- bad arguments -------------------------------------------------------------------------


def test_bad_arguments_are_named(sim0):
    square = vram.ones((3, 3), device=sim0)
    LU, pivots = vram.linalg.lu_factor(vram.tensor(random((3, 3), vram.float32), device=sim0))
    cases = [
        (lambda: vram.linalg.solve(vram.ones((3, 4), device=sim0), vram.ones(3, device=sim0)),
         RuntimeError, "A must be batches of square matrices, but they are 3 by 4"),
        (lambda: vram.linalg.det(vram.ones(3, device=sim0)), RuntimeError,
         "The input tensor A must have at least 2 dimensions"),
        (lambda: vram.linalg.inv(vram.ones((3, 3), dtype=vram.int32, device=sim0)), RuntimeError,
         "Expected a floating point or complex tensor as input. Got int32"),
        (lambda: vram.linalg.lu_factor(vram.ones((3, 3), dtype=vram.float16, device=sim0)),
         RuntimeError, "Got float16"),
        (lambda: vram.linalg.solve(square, vram.ones((3, 3), dtype=vram.float64, device=sim0)),
         RuntimeError, "Expected A and B to have the same dtype"),
        (lambda: vram.linalg.solve(square, vram.ones((4, 2), device=sim0)), RuntimeError,
         r"Incompatible shapes of A and B for the equation AX = B \(3x3 and 4x2\)"),
        (lambda: vram.linalg.solve(square, vram.ones((3, 2), device=sim0), left=False),
         RuntimeError, r"equation XA = B \(3x3 and 3x2\)"),
        (lambda: vram.linalg.solve(vram.ones((2, 3, 3), device=sim0), vram.ones((4, 3, 1),
         device=sim0)), RuntimeError, "cannot be broadcast"),
        (lambda: vram.linalg.lu_solve(LU, pivots, vram.ones(3, device=sim0)), RuntimeError,
         "The input tensor B must have at least 2 dimensions"),
        (lambda: vram.linalg.lu_solve(LU, vram.ones(3, dtype=vram.int64, device=sim0),
         vram.ones((3, 1), device=sim0)), RuntimeError, "pivots should be a Tensor of scalar type"),
        (lambda: vram.linalg.lu_solve(LU, pivots[:2], vram.ones((3, 1), device=sim0)),
         RuntimeError, "Number of pivots per batch"),
        (lambda: vram.linalg.lu_solve(LU, pivots.reshape(1, 3), vram.ones((3, 1), device=sim0)),
         RuntimeError, r"Expected LU.shape\[:-1\] and pivots.shape to be the same"),
        (lambda: vram.linalg.solve(square, vram.ones((3, 1), device="sim:1")), ValueError,
         "argument 'B' is on sim:1, but 'A' is on sim:0"),
        (lambda: vram.linalg.inv(vram.ones((3, 3), device="cpu")), ValueError,
         "runs on cuda and sim devices"),
        (lambda: vram.linalg.det([[1.0]]), TypeError, "argument 'A' must be a vram.Tensor"),
    ]  # fmt: skip
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
