"""The activations a GEMM applies itself when its library has no epilogue for them (relu and
tanh-gelu after cuBLAS, and after a K == 0 product) are the pointwise ops: every instance
they launch, for every GEMM dtype, contiguous and strided outputs, compiles with NVRTC for
sm_90 (NVRTC needs no GPU)."""

from __future__ import annotations

import pytest

import vram
from vram.blas import GEMM_DTYPES, _ops
from vram.ops import _plans, _pointwise


def test_activation_instances_compile_for_every_dtype(sim0, monkeypatch):
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    launches = []
    real = _pointwise.launcher

    def record(device, launch):
        launches.append(launch)
        return real(device, launch)

    monkeypatch.setattr(_pointwise, "launcher", record)
    _plans.PLANS.clear()
    for dt in GEMM_DTYPES:
        for activation in (1, 2):
            _ops._activate(vram.zeros((6, 7), dtype=dt, device=sim0), activation)
            _ops._activate(vram.zeros((7, 6), dtype=dt, device=sim0).t(), activation)
    _plans.PLANS.clear()
    names = tuple(sorted({launch.entry for launch in launches}))
    assert len(names) >= 2 * len(GEMM_DTYPES)
    program = compile_program(_pointwise.source(), "sm_90", names)
    assert program.kind == "cubin"
    assert all(program.lowered_names[name].startswith("_Z") for name in names)
