"""The vram.aoti tests' fixtures: the shim library bound to the simulated GPU, and the
stand-in model (fake_model.c) built with the machine's C compiler."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from aoti_helpers import Shims

from vram.aoti import find_compiler, libtorch_loaded

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _no_libtorch():
    """vram.aoti refuses a process that has loaded libtorch (an earlier test may have)."""
    found = libtorch_loaded()
    if found is not None:
        pytest.skip(f"vram.aoti refuses a process that has loaded libtorch ({found})")


@pytest.fixture
def shims(sim0):
    shims = Shims()
    before = shims.live()
    yield shims
    assert shims.live() == before, "the test left tensor handles alive"


@pytest.fixture(scope="session")
def fake_models(tmp_path_factory) -> dict[str, Path]:
    """fake_model.c built three ways: plain, weights from the raw allocation pair, and one
    that imports a shim vram lacks."""
    folder = tmp_path_factory.mktemp("fake_models")
    compiler = find_compiler()
    variants = {"plain": [], "raw": ["-DFAKE_RAW_WEIGHTS"], "missing": ["-DFAKE_MISSING_SHIM"]}
    built = {}
    for name, flags in variants.items():
        target = folder / name / "model.so"
        target.parent.mkdir()
        subprocess.run(
            [*compiler, "-std=c11", "-shared", "-fPIC", *flags, "-o", str(target),
             str(HERE / "fake_model.c")],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        built[name] = target
    return built
