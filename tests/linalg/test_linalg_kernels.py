"""vram.linalg's kernels (kernels/linalg.cu, the helpers, and kernels/lu.cu, the blocked LU)
compile with NVRTC for sm_90, every instance the GPU path may launch; NVRTC needs no GPU, so
a broken kernel fails in CI."""

from __future__ import annotations

import pytest

from vram.linalg._calls import KERNEL_SOURCE, LU_SOURCE, kernel_names, lu_kernel_names


@pytest.fixture(scope="module")
def program():
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    return compile_program(KERNEL_SOURCE.read_text(), "sm_90", tuple(kernel_names()))


def test_the_kernels_compile_to_a_cubin(program):
    assert program.kind == "cubin" and program.image[:4] == b"\x7fELF"


def test_every_instance_has_a_symbol(program):
    names = kernel_names()
    assert len(names) == 15
    for name in names:
        assert program.lowered_names[name].startswith("_Z"), name


def test_the_blocked_lu_kernels_compile():
    """Every swap and solve instance, the one-warp panel, and each kind of panel at its
    largest register tile (a kind's instances differ only in template constants; compiling
    all 25 takes minutes on two cores, the GPU run compiles each on first use)."""
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    names = lu_kernel_names()
    # block panels (7 float, 6 double), cluster panels (4 each), tall panels (2 each);
    # swap_trsm's 2 tiles, 2 getrs, getrs_columns and 2 getrs_warp each
    assert len(names) == 7 + 6 + 2 * 4 + 2 * 2 + 2 * (2 + 2 + 1 + 2)
    panels = [name for name in names if "panel" in name]
    chosen = [name for name in names if "panel" not in name]
    chosen += ["vram_lu::panel_warp<float>", "vram_lu::panel<double, 1, 256, 2, 32>"]
    chosen += ["vram_lu::panel<float, 8, 1024, 1, 32>", "vram_lu::panel<double, 8, 1024, 1, 16>"]
    chosen += ["vram_lu::panel_tall<float, 1024, 2, 8>", "vram_lu::panel_tall<double, 512, 4, 4>"]
    assert set(chosen) <= set(names) and len(panels) == 25
    program = compile_program(LU_SOURCE.read_text(), "sm_90", tuple(chosen))
    assert program.kind == "cubin"
    for name in chosen:
        assert program.lowered_names[name].startswith("_Z"), name
