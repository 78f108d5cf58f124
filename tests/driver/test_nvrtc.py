"""NVRTC compiles kernels on any machine: no GPU, no driver."""

from __future__ import annotations

import pytest

from vram._errors import CudaError
from vram.driver import _nvrtc
from vram.driver._nvrtc import arch_for, compile_cuda, compile_program, nvrtc_version

ELF_MAGIC = b"\x7fELF"

HALF_KERNELS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void widen(const __half* h, const __nv_bfloat16* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __half2float(h[i]) + __bfloat162float(b[i]);
}

template <typename T>
__global__ void fill(T* out, T value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
"""


@pytest.fixture(scope="module", autouse=True)
def _nvrtc_loads():
    try:
        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")


def test_version_is_cuda_12_or_newer():
    assert nvrtc_version() >= (12, 0)


def test_half_and_bfloat16_kernel_compiles_to_a_cubin():
    cubin = compile_cuda(HALF_KERNELS, "sm_90")
    assert isinstance(cubin, bytes)
    assert cubin[:4] == ELF_MAGIC


def test_template_kernels_get_their_lowered_names():
    program = compile_program(HALF_KERNELS, "sm_90", ("widen", "fill<__half>"))
    assert program.kind == "cubin"
    assert program.lowered_names["widen"] == "widen"  # extern "C": not mangled
    assert program.lowered_names["fill<__half>"].startswith("_Z4fill")


def test_virtual_arch_gives_ptx():
    program = compile_program(HALF_KERNELS, "compute_90")
    assert program.kind == "ptx"
    assert b".target sm_90" in program.image
    assert program.image.endswith(b"\0")  # cuModuleLoadData wants NUL-terminated PTX


def test_syntax_error_raises_with_the_compile_log():
    source = 'extern "C" __global__ void broken(float* x) { x[0] = undeclared_thing; }'
    with pytest.raises(CudaError) as info:
        compile_cuda(source, "sm_90")
    assert isinstance(info.value, RuntimeError)
    assert info.value.call == "nvrtcCompileProgram"
    assert info.value.name == "NVRTC_ERROR_COMPILATION"
    assert "undeclared_thing" in info.value.detail
    assert "undeclared_thing" in str(info.value)


def test_cache_returns_the_same_object():
    source = 'extern "C" __global__ void cached(int* x) { x[threadIdx.x] = 7; }'
    first = compile_cuda(source, "sm_90")
    assert compile_cuda(source, "sm_90") is first
    assert compile_cuda(source, "sm_80") is not first


def test_arch_for_known_and_unknown_devices():
    assert arch_for(9, 0) == "sm_90"
    assert arch_for(8, 0) == "sm_80"
    newest = max(_nvrtc._supported_archs())
    assert arch_for(99, 9) == f"compute_{newest}"  # a future GPU gets PTX to JIT


def test_headers_are_found():
    (directory,) = _nvrtc.include_dirs()
    assert directory.endswith("include")
