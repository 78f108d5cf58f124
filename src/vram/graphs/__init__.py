"""CUDA graphs (torch.cuda.graphs): capture device work once and replay it with one launch,
with memory from private pools so that its addresses stay the graph's."""

from ._callables import make_graphed_callables
from ._graph import CUDAGraph, graph, graph_pool_handle, is_current_stream_capturing

__all__ = [
    "CUDAGraph",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "make_graphed_callables",
]
