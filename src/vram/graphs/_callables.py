"""make_graphed_callables (torch.cuda.make_graphed_callables), forward only.

vram has no autograd, so a graphed callable replays the forward work alone: PyTorch's
also captures each callable's backward pass, which has no counterpart here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from .._device import synchronize
from .._streams import Stream
from .._streams import stream as stream_context
from .._tensor import Tensor
from ._graph import CUDAGraph, graph, graph_pool_handle

__all__ = ["make_graphed_callables"]


def _flatten(value: Any) -> tuple[list[Tensor], Any]:
    """The tensors of ``value`` (a tensor, or tuples / lists / dicts of them) in order, and
    how to rebuild it from them."""
    if isinstance(value, Tensor):
        return [value], None
    if isinstance(value, (tuple, list)):
        leaves, specs = [], []
        for item in value:
            found, spec = _flatten(item)
            leaves += found
            specs.append((len(found), spec))
        return leaves, (type(value), specs)
    if isinstance(value, dict):
        leaves, specs = [], []
        for key, item in value.items():
            found, spec = _flatten(item)
            leaves += found
            specs.append((key, len(found), spec))
        return leaves, (dict, specs)
    raise TypeError(
        f"outputs of a graphed callable must be tensors, or tuples, lists or dicts of them; "
        f"got {type(value).__name__}"
    )


def _unflatten(leaves: Sequence[Tensor], spec: Any) -> Any:
    if spec is None:
        return leaves[0]
    kind, specs = spec
    at, items = 0, []
    if kind is dict:
        out = {}
        for key, count, inner in specs:
            out[key] = _unflatten(leaves[at : at + count], inner)
            at += count
        return out
    for count, inner in specs:
        items.append(_unflatten(leaves[at : at + count], inner))
        at += count
    return kind(items)


def _graphed(
    name: str, cuda_graph: CUDAGraph, static_inputs: tuple[Tensor, ...], outputs: Any
) -> Callable[..., Any]:
    static_outputs, spec = outputs

    def graphed(*args: Tensor) -> Any:
        if len(args) != len(static_inputs):
            raise TypeError(
                f"{name}: the graphed callable takes {len(static_inputs)} tensors (as its "
                f"sample_args), got {len(args)}"
            )
        for i, (static, arg) in enumerate(zip(static_inputs, args, strict=True)):
            if not isinstance(arg, Tensor):
                raise TypeError(f"{name}: argument {i} must be a vram.Tensor, got {arg!r}")
            if (arg.shape, arg.dtype, arg.device) != (static.shape, static.dtype, static.device):
                raise ValueError(
                    f"{name}: argument {i} is {tuple(arg.shape)} {arg.dtype.name} on "
                    f"{arg.device}; the graph was captured for {tuple(static.shape)} "
                    f"{static.dtype.name} on {static.device}"
                )
            if arg.data_ptr() != static.data_ptr():
                static.copy_(arg)
        cuda_graph.replay()
        return _unflatten(static_outputs, spec)

    graphed.__name__ = f"graphed_{name}"
    graphed.cuda_graph = cuda_graph  # type: ignore[attr-defined]
    return graphed


def make_graphed_callables(
    callables: Callable[..., Any] | tuple[Callable[..., Any], ...],
    sample_args: tuple[Tensor, ...] | tuple[tuple[Tensor, ...], ...],
    num_warmup_iters: int = 3,
    allow_unused_input: bool = False,
    pool: Any = None,
) -> Any:
    """Graphed versions of ``callables`` (torch.cuda.make_graphed_callables), forward only:
    vram has no autograd, so only each callable's forward work is captured and replayed.

    ``callables``: a callable, or a tuple of them; ``sample_args``: a tuple of tensors per
    callable (a tuple of such tuples for several). Each callable runs ``num_warmup_iters``
    times on a side stream, then is captured in its own graph, in order, all sharing one
    memory pool (``pool``, or a new ``graph_pool_handle()``): so run the graphed callables
    in the order given, as PyTorch requires.

    A graphed callable takes tensors of the sample arguments' shapes, dtypes and devices:
    each is copied into its sample tensor (unless it is that tensor), the graph replays,
    and the outputs are the tensors the capture made: the next call overwrites them.
    ``allow_unused_input`` is accepted for PyTorch's signature (it only matters to autograd).
    Synchronizes the device around the warm-up.
    """
    del allow_unused_input
    one = not isinstance(callables, tuple)
    funcs = (callables,) if one else callables
    args_list = (sample_args,) if one else sample_args
    if len(funcs) != len(args_list):
        raise ValueError(
            f"sample_args: {len(args_list)} argument tuples for {len(funcs)} callables"
        )
    for k, (func, args) in enumerate(zip(funcs, args_list, strict=True)):
        if not callable(func):
            raise TypeError(f"callables[{k}]: expected a callable, got {func!r}")
        if not isinstance(args, tuple) or not all(isinstance(a, Tensor) for a in args):
            raise TypeError(
                f"sample_args[{k}]: expected a tuple of vram.Tensors (sample_args for each "
                "callable must contain only tensors)"
            )
    if type(num_warmup_iters) is not int or num_warmup_iters < 0:
        raise ValueError(f"num_warmup_iters: expected an int >= 0, got {num_warmup_iters!r}")
    devices = {a.device for args in args_list for a in args}
    if len(devices) > 1:
        raise ValueError(f"sample_args: tensors on several devices {sorted(map(str, devices))}")
    device = devices.pop() if devices else None
    if device is not None:
        synchronize(device)
        with stream_context(Stream(device)):
            for func, args in zip(funcs, args_list, strict=True):
                for _ in range(num_warmup_iters):
                    func(*args)
        synchronize(device)
    mempool = graph_pool_handle() if pool is None else pool
    graphs = [CUDAGraph() for _ in funcs]
    outputs = []
    with device if device is not None else nullcontext():
        for func, args, cuda_graph in zip(funcs, args_list, graphs, strict=True):
            with graph(cuda_graph, pool=mempool):
                result = func(*args)
            outputs.append(_flatten(result))
    made = [
        _graphed(getattr(func, "__name__", f"callable{k}"), g, args, out)
        for k, (func, args, g, out) in enumerate(
            zip(funcs, args_list, graphs, outputs, strict=True)
        )
    ]
    return made[0] if one else tuple(made)
