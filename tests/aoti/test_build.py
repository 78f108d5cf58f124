"""Building the shim library: with this machine's compiler, cached, with a clear error where
no compiler is found; what it exports; its refusal of a process with libtorch."""

from __future__ import annotations

import os
import sys

import pytest

from vram.aoti import _build, find_compiler
from vram.aoti._elf import dynamic_symbols
from vram.aoti._shim import Shim

# What a CUDA model compiled by torch 2.11 with link_libtorch=False imports from its shim
# library (the core set that torch's model headers and wrapper code use; ops beyond the
# GEMM fallbacks are the model's own kernels).
CORE = {
    "aoti_torch_create_tensor_from_blob", "aoti_torch_create_tensor_from_blob_v2",
    "aoti_torch_empty_strided", "aoti_torch_delete_tensor_object",
    "aoti_torch__reinterpret_tensor", "aoti_torch__alloc_from_pool",
    "aoti_torch_new_tensor_handle", "aoti_torch_assign_tensors_out", "aoti_torch_copy_",
    "aoti_torch_zero_", "aoti_torch_clone", "aoti_torch_clone_preserve_strides",
    "aoti_torch_get_data_ptr", "aoti_torch_get_sizes", "aoti_torch_get_strides",
    "aoti_torch_get_dim", "aoti_torch_get_numel", "aoti_torch_get_dtype",
    "aoti_torch_get_device_type", "aoti_torch_get_device_index", "aoti_torch_get_storage_offset",
    "aoti_torch_get_storage_size", "aoti_torch_dtype_float32", "aoti_torch_dtype_bfloat16",
    "aoti_torch_dtype_float16", "aoti_torch_dtype_int64", "aoti_torch_device_type_cpu",
    "aoti_torch_device_type_cuda", "aoti_torch_layout_strided", "aoti_torch_grad_mode_is_enabled",
    "aoti_torch_grad_mode_set_enabled", "aoti_torch_check", "aoti_torch_warn",
    "aoti_torch_create_cuda_guard", "aoti_torch_delete_cuda_guard",
    "aoti_torch_cuda_guard_set_index", "aoti_torch_create_cuda_stream_guard",
    "aoti_torch_delete_cuda_stream_guard", "aoti_torch_get_current_cuda_stream",
    "aoti_torch_cuda_caching_allocator_raw_alloc", "aoti_torch_cuda_caching_allocator_raw_delete",
    "aoti_torch_cuda_mm_out", "aoti_torch_cuda_addmm_out", "aoti_torch_cuda_bmm_out",
}  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    env = {**os.environ, "VRAM_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    return env, _build.library_path(env)


def test_it_builds_with_this_machines_compiler_and_exports_the_shims(built):
    _, path = built
    exports = dynamic_symbols(path).defined
    assert CORE <= exports, sorted(CORE - exports)
    assert all(n.startswith(("aoti_torch_", "vram_aoti_")) for n in exports), sorted(
        n for n in exports if not n.startswith(("aoti_torch_", "vram_aoti_"))
    )


def test_a_cached_library_needs_no_compiler(built):
    env, path = built
    mtime = path.stat().st_mtime_ns
    assert _build.library_path({**env, "PATH": "", "CC": ""}) == path
    assert path.stat().st_mtime_ns == mtime


def test_no_compiler_is_a_clear_error(tmp_path):
    env = {"PATH": str(tmp_path), "VRAM_CACHE_DIR": str(tmp_path / "cache")}
    with pytest.raises(RuntimeError, match="none of cc, gcc, clang is on PATH"):
        _build.library_path(env)
    with pytest.raises(RuntimeError, match=r"the C compiler CC='no-such-cc' was not found"):
        find_compiler({"PATH": str(tmp_path), "CC": "no-such-cc"})


def test_a_failed_build_says_what_the_compiler_said(tmp_path):
    script = tmp_path / "cc"
    script.write_text("#!/bin/sh\necho 'cc: fatal error: no space left' >&2\nexit 1\n")
    script.chmod(0o755)
    env = {"PATH": str(tmp_path), "VRAM_CACHE_DIR": str(tmp_path / "cache")}
    with pytest.raises(RuntimeError, match="(?s)building the shim library failed.*no space left"):
        _build.library_path(env)
    assert not list((tmp_path / "cache" / "aoti").iterdir())  # no half-built library left


def test_it_refuses_a_process_that_has_loaded_libtorch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", object())
    with pytest.raises(RuntimeError, match=r"loaded libtorch .*pytorch#190922"):
        Shim("sim")
