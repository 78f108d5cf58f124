"""What the indexing and shape op tests share: devices, random data of every dtype, and
checks against NumPy."""

from __future__ import annotations

import numpy as np

import vram
from vram._dtypes import all_dtypes

SIM = vram.device("sim:0")
CPU = vram.device("cpu")
DEVICES = [SIM, CPU]
DTYPES = list(all_dtypes)


def random(dt: vram.dtype, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random values of ``dt`` (small integers, so that sums stay exact)."""
    rng = np.random.default_rng(seed)
    if dt == vram.bool_:
        return rng.random(shape) > 0.5
    if dt.is_complex:
        return (rng.integers(-8, 8, shape) + 1j * rng.integers(-8, 8, shape)).astype(dt.np)
    return rng.integers(-8, 8, shape).astype(dt.np)


def equal(got: vram.Tensor, want: np.ndarray) -> None:
    """``got`` holds exactly ``want`` (shape, dtype and values)."""
    array = got.numpy()
    assert array.shape == np.shape(want), (array.shape, np.shape(want))
    assert array.dtype == np.asarray(want).dtype, (array.dtype, np.asarray(want).dtype)
    np.testing.assert_array_equal(array, want)


def put(a: np.ndarray, device) -> vram.Tensor:
    """A new tensor on ``device`` holding ``a``."""
    return vram.tensor(a, device=device)
