"""cuBLAS and cuBLASLt workspace sizes as PyTorch computes them (CublasHandlePool.cpp)."""

from __future__ import annotations

import pytest

from vram.blas import cublas_workspace_size, cublaslt_workspace_library, cublaslt_workspace_size

KiB, MiB = 1024, 1024 * 1024


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", raising=False)


def test_defaults_hopper_and_others():
    assert cublas_workspace_size(9, 0) == 32 * MiB  # :4096:8
    assert cublas_workspace_size(8, 0) == 8 * MiB + 128 * KiB  # :4096:2:16:8
    assert cublaslt_workspace_size(9, 0) == 1 * MiB  # pytorch#73328, unified or not
    assert cublaslt_workspace_size(8, 0) == 1 * MiB
    assert cublaslt_workspace_library() == "cublas"


def test_not_unified_cublaslt_has_a_workspace_of_its_own(monkeypatch):
    monkeypatch.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "0")
    assert cublaslt_workspace_size(9, 0) == 1 * MiB  # pytorch#73328
    assert cublaslt_workspace_library() == "cublaslt"


@pytest.mark.parametrize(
    ("config", "size"),
    [(":4096:8", 32 * MiB), (":4096:2:16:8", 8 * MiB + 128 * KiB), (":16:8", 128 * KiB)],
)
def test_cublas_workspace_config(monkeypatch, config, size):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", config)
    assert cublas_workspace_size(9, 0) == size


def test_an_unreadable_config_warns_and_uses_the_default(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "4096x8")
    with pytest.warns(RuntimeWarning, match="Could not parse CUBLAS_WORKSPACE_CONFIG"):
        assert cublas_workspace_size(9, 0) == 32 * MiB


def test_cublaslt_size_in_kib_capped_by_cublas_unless_not_unified(monkeypatch):
    monkeypatch.setenv("CUBLASLT_WORKSPACE_SIZE", "4096")
    assert cublaslt_workspace_size(9, 0) == 4 * MiB
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    with pytest.warns(RuntimeWarning, match="exceeds CUBLAS workspace size of 131072 bytes"):
        assert cublaslt_workspace_size(9, 0) == 128 * KiB
    monkeypatch.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "0")
    assert cublaslt_workspace_size(9, 0) == 4 * MiB
    monkeypatch.setenv("CUBLASLT_WORKSPACE_SIZE", "lots")
    with pytest.warns(RuntimeWarning, match="invalid CUBLASLT_WORKSPACE_SIZE"):
        assert cublaslt_workspace_size(9, 0) == 1 * MiB
    monkeypatch.delenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE")
    with pytest.warns(RuntimeWarning, match="default workspace size of 1024 KiB"):
        assert cublaslt_workspace_size(9, 0) == 128 * KiB  # unified: capped at cuBLAS's
