"""AOTInductor-compiled PyTorch models on vram, without libtorch.

``vram.aoti.load(path)`` loads a ``.pt2`` package or a model's ``.so`` compiled with
``aot_inductor.link_libtorch=False``, and returns a callable: ``model(*tensors)`` runs it on
the current vram stream and returns vram tensors. The ``aoti_torch_*`` symbols such a model
imports come from a small C library in this package (``csrc/``), built at first use with the
system's C compiler and loaded before the model; each of its decisions is a call into vram:
memory from the caching allocator, the current stream, the GEMM fallbacks on vram's BLAS.
"""

from ._build import find_compiler
from ._model import Model, load
from ._shim import libtorch_loaded, shim

__all__ = ["Model", "load", "shim", "find_compiler", "libtorch_loaded"]
