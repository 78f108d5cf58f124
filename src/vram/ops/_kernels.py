"""Where the op kernels' CUDA sources live, and the C element type of each dtype in them."""

from __future__ import annotations

from pathlib import Path

from .._dtypes import dtype

__all__ = ["KERNEL_DIR", "C_TYPES", "c_type"]

KERNEL_DIR = Path(__file__).parent / "kernels"

C_TYPES = {  # vram dtype name -> the element type the kernels use (common.cuh)
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float",
    "float64": "double",
    "int8": "signed char",
    "int16": "short",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "bool": "bool",
    "complex64": "vram::complex64",
    "complex128": "vram::complex128",
}


def c_type(dt: dtype) -> str:
    """The CUDA C element type of a vram dtype."""
    return C_TYPES[dt.name]
