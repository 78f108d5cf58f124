"""Tensor ops: the pointwise engine (TensorIterator, plans, one kernel template per op family)
and the ops PyTorch users reach for first, with torch's names. ``vram.ops.FUNCTIONS`` names
every function this package gives the ``vram`` namespace.
"""

from . import (  # noqa: F401 - fill dispatch
    _advanced,
    _composite,
    _creation,
    _indexing,
    _layer_norm,
    _nonzero,
    _reductions,
    _scan,
    _shapes,
    _softmax,
    return_types,
)
from ._math import FUNCTIONS, copy_, fill_
from ._pointwise import PointwiseOp, PointwisePlan
from ._promotion import can_cast, get_default_dtype, promote_types, result_type, set_default_dtype

__all__ = [
    "FUNCTIONS",
    "PointwiseOp",
    "PointwisePlan",
    "can_cast",
    "copy_",
    "fill_",
    "get_default_dtype",
    "promote_types",
    "result_type",
    "return_types",
    "set_default_dtype",
]
