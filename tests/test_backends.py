"""vram.backends.cuda: torch.backends.cuda's settings, with their defaults and checks."""

from __future__ import annotations

import pytest

import vram


@pytest.fixture(autouse=True)
def _restore_settings():
    matmul = vram.backends.cuda.matmul
    saved = {name: getattr(matmul, name) for name in type(matmul).__slots__}
    linalg = vram.backends.cuda.preferred_linalg_library()
    blas = vram.backends.cuda.preferred_blas_library()
    yield
    for name, value in saved.items():
        setattr(matmul, name, value)
    vram.backends.cuda.preferred_linalg_library(linalg)
    vram.backends.cuda.preferred_blas_library(blas)


def test_matmul_defaults_are_pytorchs():
    matmul = vram.backends.cuda.matmul
    assert matmul.allow_tf32 is False
    assert matmul.allow_fp16_reduced_precision_reduction is True
    assert matmul.allow_bf16_reduced_precision_reduction is True


def test_matmul_settings_take_bools_only():
    matmul = vram.backends.cuda.matmul
    matmul.allow_tf32 = True
    assert matmul.allow_tf32 is True
    with pytest.raises(TypeError, match="matmul.allow_tf32 must be a bool"):
        matmul.allow_tf32 = 1
    with pytest.raises(AttributeError):
        matmul.allow_tf64 = True


def test_preferred_libraries_set_and_return_the_choice():
    cuda = vram.backends.cuda
    assert cuda.preferred_linalg_library() == "default"
    assert cuda.preferred_linalg_library("cuSOLVER") == "cusolver"
    assert cuda.preferred_linalg_library() == "cusolver"
    assert cuda.preferred_blas_library() == "cublaslt"  # vram's default (PyTorch: cublas)
    assert cuda.preferred_blas_library("cuBLAS") == "cublas"


@pytest.mark.parametrize("bad", ["magma", "", 3])
def test_an_unknown_library_is_rejected_naming_the_argument(bad):
    with pytest.raises(ValueError, match="backend: expected one of default, cusolver, cublas"):
        vram.backends.cuda.preferred_linalg_library(bad)
    assert vram.backends.cuda.preferred_linalg_library() == "default"
