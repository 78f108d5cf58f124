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


FILL = ("fill<float>", "fill<double>", "fill<int>")


@pytest.fixture
def disk_cache(tmp_path, monkeypatch):
    """An empty on-disk kernel cache, and none of this process's compiled programs."""
    monkeypatch.setenv("VRAM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_nvrtc, "_cache", {})
    monkeypatch.setattr(_nvrtc, "_batch_images", {})
    return tmp_path


def test_a_batch_is_one_image_that_each_kernel_finds(disk_cache):
    assert _nvrtc.compile_batch(HALF_KERNELS, "sm_90", FILL) == 3
    (image,) = disk_cache.glob("*.img")
    assert image.read_bytes().startswith(ELF_MAGIC)
    assert len(list(disk_cache.glob("*.bin"))) == 3
    programs = [compile_program(HALF_KERNELS, "sm_90", (name,)) for name in FILL]
    assert {p.image_file for p in programs} == {image.name}
    assert programs[0].image is programs[1].image  # one bytes object for the batch
    assert programs[2].lowered_names == {"fill<int>": "_Z4fillIiEvPT_S0_i"}
    assert _nvrtc.compile_batch(HALF_KERNELS, "sm_90", FILL) == 0  # all cached already


def test_a_batch_compiles_only_what_the_cache_lacks(disk_cache):
    compile_program(HALF_KERNELS, "sm_90", ("fill<float>",))
    assert _nvrtc.compile_batch(HALF_KERNELS, "sm_90", FILL) == 2


def test_a_damaged_or_foreign_batch_image_is_compiled_again(disk_cache):
    _nvrtc.compile_batch(HALF_KERNELS, "sm_90", FILL[:2])
    (image,) = disk_cache.glob("*.img")
    image.unlink()
    _nvrtc._batch_images.clear()
    program = compile_program(HALF_KERNELS, "sm_90", ("fill<float>",))
    assert program.image.startswith(ELF_MAGIC) and program.image_file == ""
    entry = _nvrtc._disk_path(HALF_KERNELS, "sm_90", ("fill<double>",))
    header, _ = entry.read_bytes().split(b"\n", 1)
    entry.write_bytes(header.replace(image.name.encode(), b"../../etc/passwd") + b"\n")
    _nvrtc._cache.clear()
    assert compile_program(HALF_KERNELS, "sm_90", ("fill<double>",)).image_file == ""


def test_without_a_disk_cache_a_batch_does_nothing(monkeypatch):
    monkeypatch.setenv("VRAM_KERNEL_CACHE", "0")
    assert _nvrtc.compile_batch(HALF_KERNELS, "sm_90", FILL) == 0
