"""vram.linalg's helper kernels (kernels/linalg.cu) compile with NVRTC for sm_90, every
instance the GPU path may launch; NVRTC needs no GPU, so a broken kernel fails in CI."""

from __future__ import annotations

import pytest

from vram.linalg._cuda_libs import KERNEL_SOURCE, kernel_names


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
    assert len(names) == 14
    for name in names:
        assert program.lowered_names[name].startswith("_Z"), name
