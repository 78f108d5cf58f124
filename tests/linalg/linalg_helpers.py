"""What vram.linalg's tests share: dtypes, random inputs, tolerances."""

from __future__ import annotations

import numpy as np

import vram

DTYPES = [vram.float32, vram.float64, vram.complex64, vram.complex128]
IDS = [d.name for d in DTYPES]
TOL = {"float32": 2e-4, "complex64": 2e-4, "float64": 1e-11, "complex128": 1e-11}


def random(shape: tuple[int, ...], dt: vram.dtype, seed: int = 0) -> np.ndarray:
    """Random normal matrices (or vectors) of ``dt``, the same for the same seed."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if dt.is_complex:
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dt.np)


def close(got: np.ndarray, want: np.ndarray, dt: vram.dtype) -> None:
    tol = TOL[dt.name]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
