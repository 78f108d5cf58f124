"""Operators: declared once in the registry, with kernels per backend (cpu, sim, cuda).

``vram.ops.get_op("add.Tensor")`` is a declared op; calling it dispatches on its tensors'
device. The elementwise functions tensors use (``binary``, ``fill``, ``copy``, ``cast``)
live in ``_elementwise``.
"""

from ._elementwise import BINARY_OPS, binary, cast, copy, fill, result_type
from ._registry import BACKENDS, Kernel, Op, Param, Schema, declare, get_op, registered_ops

__all__ = [
    "BACKENDS",
    "BINARY_OPS",
    "Kernel",
    "Op",
    "Param",
    "Schema",
    "binary",
    "cast",
    "copy",
    "declare",
    "fill",
    "get_op",
    "registered_ops",
    "result_type",
]
