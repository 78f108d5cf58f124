"""NCCL collectives through nccl4py's low-level bindings (``nccl.bindings.nccl``).

One communicator per process and device, made with ``ncclCommInitRankScalable`` from the
unique id rank 0 publishes at the rendezvous. Every NCCL call goes through ``_check``, which
turns nccl4py's ``NCCLError`` into ``vram.CudaError(call, "ncclInvalidUsage")`` and the like.
Pointers and stream handles are the ints vram's CUDA driver uses (a stream's int is its
``cudaStream_t``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nccl.bindings import nccl as _nccl

from .._errors import CudaError
from . import get_driver
from ._comm import Communicator

__all__ = ["NcclCommunicator"]

_DTYPES = {
    "int8": _nccl.DataType.Int8,
    "uint8": _nccl.DataType.Uint8,
    "int32": _nccl.DataType.Int32,
    "int64": _nccl.DataType.Int64,
    "float16": _nccl.DataType.Float16,
    "bfloat16": _nccl.DataType.Bfloat16,
    "float32": _nccl.DataType.Float32,
    "float64": _nccl.DataType.Float64,
}
_OPS = {
    "sum": _nccl.RedOp.Sum,
    "prod": _nccl.RedOp.Prod,
    "max": _nccl.RedOp.Max,
    "min": _nccl.RedOp.Min,
    "avg": _nccl.RedOp.Avg,
}


def _check(call: str, fn: Callable[..., Any], *args: Any) -> Any:
    """The checker for every NCCL call: its result, or CudaError named after NCCL's error."""
    try:
        return fn(*args)
    except _nccl.NCCLError as exc:
        status = getattr(exc, "status", None)
        try:
            name = "nccl" + _nccl.Result(status).name
        except ValueError:
            name = f"ncclError{status}"
        raise CudaError(call, name, str(exc)) from None


def _dtype(name: str) -> int:
    try:
        return int(_DTYPES[name])
    except KeyError:
        raise TypeError(f"dtype: NCCL has no {name!r}; supported: {', '.join(_DTYPES)}") from None


def _op(name: str) -> int:
    try:
        return int(_OPS[name])
    except KeyError:
        raise ValueError(f"op: NCCL has no {name!r}; supported: {', '.join(_OPS)}") from None


class NcclCommunicator(Communicator):
    """One rank of an NCCL communicator on a CUDA device."""

    kind = "cuda"

    def __init__(self, comm: Any, device: int, rank: int, world_size: int) -> None:
        super().__init__(device, rank, world_size)
        self._comm = comm

    @classmethod
    def offer(cls, rank: int) -> tuple[bytes, Any]:
        """Rank 0 publishes a fresh NCCL unique id (its bootstrap address); others nothing."""
        if rank != 0:
            return b"", None
        return bytes(_check("ncclGetUniqueId", _nccl.get_unique_id)), None

    @classmethod
    def join(
        cls, state: Any, published: list[bytes], device: int, rank: int, world_size: int
    ) -> NcclCommunicator:
        """ncclCommInitRankScalable with rank 0's unique id, on ``device`` (made current
        first: NCCL binds a communicator to the calling thread's current device)."""
        get_driver("cuda").set_device(device)
        comm = _check(
            "ncclCommInitRankScalable",
            _nccl.comm_init_rank_scalable,
            world_size,
            rank,
            1,
            bytearray(published[0]),
            0,
        )
        return cls(comm, device, rank, world_size)

    def _live(self, call: str) -> Any:
        if self._comm is None:
            raise CudaError(call, "ncclInvalidUsage", "the communicator was destroyed")
        return self._comm

    def all_reduce(
        self, send: int, recv: int, count: int, dtype: str, op: str, stream: int
    ) -> None:
        comm = self._live("ncclAllReduce")
        args = (send, recv, count, _dtype(dtype), _op(op), comm, stream)
        _check("ncclAllReduce", _nccl.all_reduce, *args)

    def all_gather(self, send: int, recv: int, count: int, dtype: str, stream: int) -> None:
        comm = self._live("ncclAllGather")
        _check("ncclAllGather", _nccl.all_gather, send, recv, count, _dtype(dtype), comm, stream)

    def reduce_scatter(
        self, send: int, recv: int, count: int, dtype: str, op: str, stream: int
    ) -> None:
        comm = self._live("ncclReduceScatter")
        args = (send, recv, count, _dtype(dtype), _op(op), comm, stream)
        _check("ncclReduceScatter", _nccl.reduce_scatter, *args)

    def broadcast(
        self, send: int, recv: int, count: int, dtype: str, root: int, stream: int
    ) -> None:
        comm = self._live("ncclBroadcast")
        args = (send, recv, count, _dtype(dtype), root, comm, stream)
        _check("ncclBroadcast", _nccl.broadcast, *args)

    def destroy(self) -> None:
        """ncclCommFinalize then ncclCommDestroy (waits for the communicator's queued work)."""
        comm, self._comm = self._comm, None
        if comm is not None:
            _check("ncclCommFinalize", _nccl.comm_finalize, comm)
            _check("ncclCommDestroy", _nccl.comm_destroy, comm)

    def __repr__(self) -> str:
        return f"<NcclCommunicator rank {self.rank}/{self.world_size} on cuda:{self.device}>"
