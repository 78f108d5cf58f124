"""The activation kernels (relu and tanh-gelu after an unfused GEMM) compile with NVRTC for
sm_90 for every GEMM dtype; NVRTC needs no GPU."""

from __future__ import annotations

import pytest

from vram.blas import GEMM_DTYPES
from vram.blas._cuda import _activation_source
from vram.ops import _launch


def test_activation_kernels_compile_for_every_dtype():
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    names = tuple(
        f"vram_blas::activation<{_launch.c_type(dt)}, vram_blas::{op}>"
        for dt in GEMM_DTYPES
        for op in ("Relu", "GeluTanh")
    )
    program = compile_program(_activation_source(), "sm_90", names)
    assert program.kind == "cubin"
    assert all(program.lowered_names[name].startswith("_Z") for name in names)
