"""The pointwise engine's transposing copy (kernels/copy_tiled.cu): which copies take it, that
they equal NumPy's on every dtype (its reference on sim and cpu), and that every instance it
may launch compiles with NVRTC for sm_90 (NVRTC needs no GPU)."""

from __future__ import annotations

import numpy as np
import pytest

import vram
from vram._dtypes import all_dtypes
from vram.ops import _plans, _pointwise, _tiled


@pytest.fixture
def entries(monkeypatch):
    """The kernel instances the pointwise plans made from here on."""
    found: list[str] = []
    real = _pointwise.launcher

    def record(device, launch):
        found.append(launch.entry)
        return real(device, launch)

    monkeypatch.setattr(_pointwise, "launcher", record)
    _plans.PLANS.clear()
    yield found
    _plans.PLANS.clear()


def values(dt, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dt is vram.bool:
        return rng.integers(0, 2, shape).astype(bool)
    if dt.is_complex:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt.np)
    if dt.is_floating_point:
        return rng.standard_normal(shape).astype(dt.np)
    return rng.integers(-100, 100, shape).astype(dt.np)


@pytest.mark.parametrize("dt", all_dtypes, ids=lambda d: d.name)
def test_transposing_copies_are_tiled_and_match_numpy(sim0, entries, dt):
    a = values(dt, (3, 50, 70))
    t = vram.tensor(a, device=sim0)
    cases = [
        (t.transpose(-2, -1), a.transpose(0, 2, 1)),
        (t[::2, 5:, :].transpose(-2, -1), a[::2, 5:, :].transpose(0, 2, 1)),
        (t.permute(2, 0, 1), a.transpose(2, 0, 1)),
    ]
    for view, want in cases:
        out = vram.empty(tuple(view.shape), dtype=dt, device=sim0)
        assert _tiled.dims_of(out, view) is not None
        out.copy_(view)
        np.testing.assert_array_equal(out.numpy(), want)
        assert entries[-1].startswith("vram::copy_tiled<")
    target = vram.empty((3, 70, 50), dtype=dt, device=sim0)
    target.transpose(-2, -1).copy_(t)  # into a transposed view: the same tiles
    np.testing.assert_array_equal(target.numpy(), a.transpose(0, 2, 1))
    assert entries[-1].startswith("vram::copy_tiled<")


def test_other_copies_take_the_loops(sim0, entries):
    a = values(vram.float32, (40, 30))
    t = vram.tensor(a, device=sim0)
    cases = [
        (vram.float64, (30, 40), t.t(), a.T),  # a conversion
        (vram.float32, (40, 30), t, a),  # both contiguous one way
        (vram.float32, (30, 4), t.t()[:, :4], a.T[:, :4]),  # a side under a quarter tile
    ]
    for dt, shape, src, want in cases:
        out = vram.empty(shape, dtype=dt, device=sim0)
        entries.clear()
        out.copy_(src)
        assert entries and not any(e.startswith("vram::copy_tiled<") for e in entries)
        np.testing.assert_array_equal(out.numpy(), want.astype(dt.np))


def test_the_tiled_copy_runs_on_the_cpu_too():
    a = values(vram.int16, (2, 33, 17))
    out = vram.empty((2, 17, 33), dtype=vram.int16, device="cpu")
    out.copy_(vram.tensor(a, device="cpu").transpose(-2, -1))
    np.testing.assert_array_equal(out.numpy(), a.transpose(0, 2, 1))


def test_every_tiled_instance_compiles():
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    names = tuple(
        f"vram::copy_tiled<{bits}, {index}>"
        for bits in _tiled.BITS_TYPES.values()
        for index in ("int", "long long")
    )
    program = compile_program(_tiled.COPY_TILED.source, "sm_90", names)
    assert program.kind == "cubin"
    assert all(program.lowered_names[name].startswith("_Z") for name in names)
