"""LAPACK's LU in NumPy, vectorized over a batch: what the simulated GPU's cuSOLVER and cuBLAS
compute (``getrf``, ``getrs``), with LAPACK's semantics:

- pivots are 1-based row interchanges, applied in order (row i was swapped with row
  ``ipiv[i] - 1``); the pivot of a column is the first entry of largest magnitude on or
  below the diagonal, magnitude |x| for real and |re| + |im| for complex (LAPACK's i?amax,
  and cuSOLVER's getrf), or the modulus |z| with ``modulus=True`` (cuBLAS's getrfBatched:
  measured against PyTorch on an H100); a NaN never wins a comparison (so a NaN is the
  pivot only where it comes first);
- ``info`` is 0, or i (1-based) for the first zero pivot U[i-1, i-1]; the factorization
  still runs to the end, as LAPACK's does; a zero pivot's column is left unscaled;
- without pivoting (``pivot=False``, cuBLAS's and cuSOLVER's null pivot array) no rows move;
- NaN and Inf go through the arithmetic as they would in LAPACK; nothing raises.

The factorization is LAPACK's recursive getrf2 (split the columns in halves, factor the
left, update the right with a triangular solve and one matmul, factor the rest), so all
but O(n) of the work is matmuls: a batch of 64 matrices of 512 x 512 takes a fraction of a
second. Arrays are (batch, m, n) NumPy views of any strides (the sim's column-major device
memory); the work is done on a row-major copy and written back.
"""

from __future__ import annotations

import numpy as np

__all__ = ["getrf", "getrs", "iamax"]

_LEAF = 8  # panels of at most this many columns, and triangular solves of this many rows,
# go column by column (row by row)


def iamax(x: np.ndarray, modulus: bool = False) -> np.ndarray:
    """LAPACK's i?amax along the last axis of (batch, k): the 0-based index of the first entry
    of largest magnitude (|re| + |im| for complex, or |z| with ``modulus``); an entry that is
    NaN never wins a comparison, so index 0 is returned where ``x[:, 0]`` is NaN."""
    if np.iscomplexobj(x) and not modulus:
        mag = np.abs(x.real) + np.abs(x.imag)
    else:
        mag = np.abs(x)
    first_nan = np.isnan(mag[:, 0])
    found = np.argmax(np.where(np.isnan(mag), -1.0, mag), axis=1)
    found[first_nan] = 0
    return found


def _swap(a: np.ndarray, swaps: np.ndarray, forward: bool = True) -> None:
    """Apply row interchanges to every matrix of ``a`` (batch, r, c): row i with row
    ``swaps[:, i]`` (0-based), for i in order (or in reverse), as one gather."""
    batch, rows = a.shape[0], a.shape[1]
    count = swaps.shape[1]
    if count == 0 or not (swaps != np.arange(count)).any():
        return
    perm = np.tile(np.arange(rows), (batch, 1))
    index = np.arange(batch)
    for i in range(count) if forward else range(count - 1, -1, -1):
        target = swaps[:, i]
        kept = perm[:, i].copy()
        perm[:, i] = perm[index, target]
        perm[index, target] = kept
    moved = np.flatnonzero((perm != np.arange(rows)).any(axis=0))  # rows any matrix moves
    a[:, moved] = a[index[:, None], perm[:, moved]]


def _getrf2(a: np.ndarray, pivot: bool, modulus: bool) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK's recursive getrf2 on a row-major (batch, m, n) array, in place: returns the
    0-based pivots (batch, min(m, n)) and info (batch,) (1-based, 0 for none). Panels of
    at most ``_LEAF`` columns are factored column by column (LAPACK's getf2)."""
    batch, m, n = a.shape
    if n <= _LEAF or m == 1:
        return _getf2(a, pivot, modulus)
    n1 = min(m, n) // 2
    p1, info1 = _getrf2(a[:, :, :n1], pivot, modulus)
    if pivot:
        _swap(a[:, :, n1:], p1)
    a12 = a[:, :n1, n1:]
    _solve_lower(a[:, :n1, :n1], a12, unit=True)
    _subtract_product(a[:, n1:, n1:], a[:, n1:, :n1], a12)
    p2, info2 = _getrf2(a[:, n1:, n1:], pivot, modulus)
    if pivot:
        _swap(a[:, n1:, :n1], p2)
    info = np.where(info1 != 0, info1, np.where(info2 != 0, info2 + n1, 0))
    return np.concatenate([p1, p2 + n1], axis=1), info


def _subtract_product(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """c -= a @ b, skipped where it cannot change c: ``a`` all zeros and ``b`` finite (so
    a diagonal or triangular input factors in O(n^2))."""
    if a.size == 0 or b.size == 0 or (not a.any() and np.isfinite(b).all()):
        return
    c -= np.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b))


def _getf2(a: np.ndarray, pivot: bool, modulus: bool) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK's getf2 (column by column) on a row-major (batch, m, n) array, in place."""
    batch, m, n = a.shape
    k = min(m, n)
    index = np.arange(batch)
    ipiv = np.zeros((batch, k), np.int64)
    info = np.zeros(batch, np.int64)
    for j in range(k):
        p = j + iamax(a[:, j:, j], modulus) if pivot else np.full(batch, j)
        ipiv[:, j] = p
        d = a[index, p, j]
        usable = d != 0  # LAPACK: a zero pivot is neither swapped nor divided by
        moved = index[usable & (p != j)]
        if moved.size:
            upper = a[moved, j, :].copy()
            a[moved, j, :] = a[moved, p[moved], :]
            a[moved, p[moved], :] = upper
        info[(info == 0) & ~usable] = j + 1
        if j + 1 < m:
            a[:, j + 1 :, j] /= np.where(usable, a[:, j, j], 1)[:, None]
            if j + 1 < n:
                a[:, j + 1 :, j + 1 :] -= a[:, j + 1 :, j : j + 1] * a[:, j : j + 1, j + 1 :]
    return ipiv, info


def getrf(
    a: np.ndarray, pivot: bool = True, modulus: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """P A = L U in place for every matrix of ``a`` (batch, m, n); returns (ipiv (batch, k)
    int32 1-based, info (batch,) int32), k = min(m, n). ``modulus``: complex pivots by |z|
    (cuBLAS's rule) rather than |re| + |im|. See the module docstring."""
    batch, m, n = a.shape
    k = min(m, n)
    if k == 0 or batch == 0:
        return np.zeros((batch, k), np.int32), np.zeros(batch, np.int32)
    work = np.array(a, order="C")
    with np.errstate(all="ignore"):
        ipiv, info = _getrf2(work, pivot, modulus)
    a[...] = work
    return (ipiv + 1).astype(np.int32), info.astype(np.int32)


def _solve_lower(t: np.ndarray, x: np.ndarray, unit: bool) -> None:
    """x <- tril(t)^-1 x in place (recursive halves, row by row at the leaves)."""
    n = t.shape[1]
    if n <= _LEAF:
        for i in range(n):
            if i:
                x[:, i, :] -= np.matmul(t[:, i : i + 1, :i], x[:, :i, :])[:, 0, :]
            if not unit:
                x[:, i, :] /= t[:, i, i][:, None]
        return
    h = n // 2
    _solve_lower(t[:, :h, :h], x[:, :h], unit)
    _subtract_product(x[:, h:], t[:, h:, :h], x[:, :h])
    _solve_lower(t[:, h:, h:], x[:, h:], unit)


def _solve_upper(t: np.ndarray, x: np.ndarray, unit: bool) -> None:
    """x <- triu(t)^-1 x in place (recursive halves, row by row at the leaves)."""
    n = t.shape[1]
    if n <= _LEAF:
        for i in range(n - 1, -1, -1):
            if i + 1 < n:
                x[:, i, :] -= np.matmul(t[:, i : i + 1, i + 1 :], x[:, i + 1 :, :])[:, 0, :]
            if not unit:
                x[:, i, :] /= t[:, i, i][:, None]
        return
    h = n // 2
    _solve_upper(t[:, h:, h:], x[:, h:], unit)
    _subtract_product(x[:, :h], t[:, :h, h:], x[:, h:])
    _solve_upper(t[:, :h, :h], x[:, :h], unit)


def getrs(lu: np.ndarray, ipiv: np.ndarray, b: np.ndarray, trans: str = "N") -> None:
    """Solve op(A) X = B in place of ``b`` (batch, n, nrhs) from getrf's ``lu`` and ``ipiv``;
    ``trans`` "N" (A), "T" (A^T) or "C" (A^H). A zero pivot gives Inf/NaN, as LAPACK's."""
    swaps = ipiv.astype(np.int64) - 1
    t = np.array(lu, order="C")
    x = np.array(b, order="C")
    with np.errstate(all="ignore"):
        if trans == "N":
            _swap(x, swaps)
            _solve_lower(t, x, unit=True)
            _solve_upper(t, x, unit=False)
        else:
            t = np.swapaxes(t, 1, 2)
            if trans == "C":
                t = t.conj()
            _solve_lower(t, x, unit=False)  # U^T y = b
            _solve_upper(t, x, unit=True)  # L^T z = y
            _swap(x, swaps, forward=False)
    b[...] = x
