"""The simulated libraries' LU (vram.linalg._reference) keeps LAPACK's semantics exactly:
pivots, info, NaN handling, no pivoting, and getrs for every op."""

from __future__ import annotations

import numpy as np
import pytest

from vram.linalg import _reference

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def rand(rng: np.random.Generator, shape: tuple[int, ...], dt) -> np.ndarray:
    a = rng.standard_normal(shape)
    if np.dtype(dt).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dt)


def textbook_lu(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Unblocked LAPACK getf2 on one matrix, in float64/complex128: (LU, ipiv, info)."""
    a = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)
    m, n = a.shape
    ipiv = np.zeros(min(m, n), np.int32)
    info = 0
    for j in range(min(m, n)):
        col = a[j:, j]
        mag = np.abs(col.real) + np.abs(col.imag)
        p = j + int(np.argmax(mag))
        ipiv[j] = p + 1
        if a[p, j] != 0:
            a[[j, p]] = a[[p, j]]
            a[j + 1 :, j] /= a[j, j]
        elif info == 0:
            info = j + 1
        a[j + 1 :, j + 1 :] -= np.outer(a[j + 1 :, j], a[j, j + 1 :])
    return a, ipiv, info


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(3, 6, 6), (2, 40, 40), (2, 9, 5), (2, 5, 9), (1, 1, 1)])
def test_getrf_is_lapacks_getf2(dt, shape):
    rng = np.random.default_rng(7)
    a = rand(rng, shape, dt)
    got = a.copy()
    ipiv, info = _reference.getrf(got)
    assert ipiv.dtype == np.int32 and info.dtype == np.int32
    tol = 1e-4 if np.dtype(dt) in (np.float32, np.complex64) else 1e-11
    for b in range(shape[0]):
        lu, want_piv, want_info = textbook_lu(a[b])
        np.testing.assert_array_equal(ipiv[b], want_piv)
        assert info[b] == want_info == 0
        np.testing.assert_allclose(got[b], lu, rtol=tol, atol=tol)


def test_getrf_works_in_place_on_column_major_views():
    rng = np.random.default_rng(1)
    a = rand(rng, (2, 7, 7), np.float64)
    memory = np.ascontiguousarray(np.swapaxes(a, 1, 2))  # column-major matrices, as on device
    view = np.swapaxes(memory, 1, 2)
    ipiv, _ = _reference.getrf(view)
    lu, want, _ = textbook_lu(a[1])
    np.testing.assert_array_equal(ipiv[1], want)
    np.testing.assert_allclose(memory[1].T, lu, atol=1e-12)


def test_iamax_is_lapacks():
    x = np.array(
        [
            [1.0, -3.0, 3.0, 2.0],  # the first of two largest
            [np.nan, 5.0, 1.0, 1.0],  # NaN first: it is the pivot
            [1.0, np.nan, 2.0, -2.0],  # NaN later: never wins
            [0.0, 0.0, 0.0, 0.0],  # all zero: the first
            [1.0, np.inf, 2.0, 3.0],
        ]
    )
    np.testing.assert_array_equal(_reference.iamax(x), [1, 0, 2, 0, 1])
    # complex magnitude is |re| + |im|: 2+2j (4) beats 3 (3) though |2+2j| < 3 ...
    np.testing.assert_array_equal(_reference.iamax(np.array([[3 + 0j, 2 + 2j]])), [1])
    # ... but cuBLAS's batched LU compares moduli (|2+2j| = 2.83 < 3)
    np.testing.assert_array_equal(_reference.iamax(np.array([[3 + 0j, 2 + 2j]]), True), [0])


def test_complex_pivots_by_modulus_are_cublas_ones():
    """The 12 x 12 matrix on which cuBLAS's getrfBatched and cuSOLVER's getrf chose pivot 10
    differently on an H100 (PyTorch's pivots through each library)."""
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((1, 12, 12)) + 1j * rng.standard_normal((1, 12, 12))).astype("c8")
    lapack, _ = _reference.getrf(a.copy())
    modulus, _ = _reference.getrf(a.copy(), modulus=True)
    np.testing.assert_array_equal(lapack[0], [10, 5, 10, 7, 12, 12, 11, 9, 11, 10, 11, 12])
    np.testing.assert_array_equal(modulus[0], [10, 5, 10, 7, 12, 12, 11, 9, 11, 12, 11, 12])


def test_info_names_the_first_zero_pivot_and_the_factorization_completes():
    a = np.array(
        [
            [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]],  # rank 2: the third pivot is zero
            [[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 7.0]],  # zero first column
            [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
        ]
    )
    got = a.copy()
    ipiv, info = _reference.getrf(got)
    np.testing.assert_array_equal(info, [3, 1, 1])
    for b in range(3):
        lu, want_piv, want_info = textbook_lu(a[b])
        assert want_info == info[b]
        np.testing.assert_array_equal(ipiv[b], want_piv)
        np.testing.assert_allclose(got[b], lu, atol=1e-12)
    np.testing.assert_array_equal(ipiv[2], [1, 2, 3])


def test_nan_and_inf_go_through_without_error():
    a = np.array([[[np.nan, 1.0], [1.0, 2.0]], [[1.0, np.nan], [3.0, 2.0]], [[np.inf, 1], [1, 1]]])
    ipiv, info = _reference.getrf(a)
    np.testing.assert_array_equal(ipiv, [[1, 2], [2, 2], [1, 2]])
    np.testing.assert_array_equal(info, [0, 0, 0])
    assert np.isnan(a[0, 1, 0]) and np.isnan(a[0, 1, 1])  # LAPACK's: NaN spreads
    np.testing.assert_allclose(a[1, 1, 0], 1 / 3)
    assert a[2, 1, 0] == 0 and a[2, 1, 1] == 1  # 1/inf = 0


def test_no_pivoting_keeps_the_rows():
    rng = np.random.default_rng(3)
    a = rand(rng, (2, 6, 6), np.float64) + 8 * np.eye(6)
    got = a.copy()
    ipiv, info = _reference.getrf(got, pivot=False)
    np.testing.assert_array_equal(ipiv, np.tile(np.arange(1, 7), (2, 1)))
    np.testing.assert_array_equal(info, [0, 0])
    lower = np.tril(got, -1) + np.eye(6)
    np.testing.assert_allclose(lower @ np.triu(got), a, atol=1e-12)
    zero = np.array([[[0.0, 1.0], [1.0, 1.0]]])
    _, info = _reference.getrf(zero, pivot=False)
    assert info[0] == 1


@pytest.mark.parametrize("trans", ["N", "T", "C"])
@pytest.mark.parametrize("dt", [np.float64, np.complex128])
def test_getrs_solves_each_op(trans, dt):
    rng = np.random.default_rng(11)
    a = rand(rng, (3, 20, 20), dt)
    b = rand(rng, (3, 20, 4), dt)
    lu = a.copy()
    ipiv, _ = _reference.getrf(lu)
    x = b.copy()
    _reference.getrs(lu, ipiv, x, trans)
    op = {"N": a, "T": np.swapaxes(a, 1, 2), "C": np.swapaxes(a, 1, 2).conj()}[trans]
    np.testing.assert_allclose(op @ x, b, atol=1e-10)
