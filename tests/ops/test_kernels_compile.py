"""Every CUDA kernel vram ships compiles with NVRTC for sm_90, for every dtype it launches.

NVRTC needs no GPU, so a broken kernel fails here in CI rather than on the GPU run.
"""

from __future__ import annotations

import pytest

from vram.ops import _launch
from vram.ops._elementwise import cuda_kernel_names

ELF_MAGIC = b"\x7fELF"


@pytest.fixture(scope="module", autouse=True)
def _nvrtc_loads():
    try:
        from vram.driver._nvrtc import nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")


def test_every_shipped_kernel_source_is_known():
    shipped = sorted(path.stem for path in _launch.KERNEL_DIR.glob("*.cu"))
    assert shipped == ["elementwise", "foreach"]


@pytest.fixture(scope="module")
def program():
    """All instances in one NVRTC program (a compile error's log names the failing one)."""
    from vram.driver._nvrtc import compile_program

    names = [name for names in cuda_kernel_names().values() for name in names]
    return compile_program(_launch.kernel_source("elementwise"), "sm_90", tuple(names))


def test_elementwise_kernels_compile_to_a_cubin(program):
    assert program.kind == "cubin" and program.image[:4] == ELF_MAGIC


@pytest.mark.parametrize("kind", sorted(cuda_kernel_names()))
def test_every_dtype_instance_has_a_symbol(program, kind):
    for name in cuda_kernel_names()[kind]:
        assert program.lowered_names[name].startswith("_Z"), name


def test_the_instances_cover_every_dtype():
    names = cuda_kernel_names()
    assert len(names["fill"]) == 12
    assert len(names["copy"]) == 144
    assert "vram::binary<__half, vram::AddOp>" in names["add"]
    assert "vram::binary_scalar<vram::complex128, vram::DivOp>" in names["div"]
    assert not any("bool" in name for name in names["sub"])
    assert not any("int" in name or "char" in name for name in names["div"])
