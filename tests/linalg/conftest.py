"""Fixtures for vram.linalg's tests on the simulated GPU."""

from __future__ import annotations

import pytest

import vram
from vram.linalg import _dispatch


@pytest.fixture(params=_dispatch.PATHS)
def path(request):
    """Each way of running a batch, pinned for the test (cuBLAS only where it applies)."""
    with _dispatch.forced(request.param, streams=3):
        yield request.param


@pytest.fixture(autouse=True)
def _default_linalg_library():
    yield
    vram.backends.cuda.preferred_linalg_library("default")
