"""Collectives with torch.distributed's names and semantics, on the group's devices.

Streams, as ProcessGroupNCCL does them: a collective runs on the group's communication
stream, which first waits for the work queued so far on the current stream; then
- ``async_op=False`` (default): the current stream waits for the collective (no host
  synchronization: later work on the current stream sees the result);
- ``async_op=True``: a ``Work`` is returned; ``work.wait()`` makes the current stream wait.

Memory: every tensor a collective reads or writes gets ``record_use`` on the communication
stream right after the collective is queued, so a tensor dropped before the collective has
run is not reused under it (its next owner's stream waits for the collective; no host wait).

Tensors must be contiguous and on the group's device. bool travels as uint8 (SUM becomes
MAX and PRODUCT becomes MIN, as PyTorch does); complex tensors travel as their real and
imaginary parts (SUM and AVG only, for reductions).
"""

from __future__ import annotations

import enum

from .._dtypes import bool_, complex64, complex128, dtype, float32, float64
from .._streams import Event, current_stream
from .._tensor import Tensor
from ..driver import COLLECTIVE_DTYPES
from ._group import ProcessGroup, default_group

__all__ = [
    "ReduceOp",
    "Work",
    "all_reduce",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "broadcast",
    "barrier",
]


class ReduceOp(enum.Enum):
    """torch.distributed.ReduceOp: how all_reduce and reduce_scatter combine the ranks."""

    SUM = "sum"
    PRODUCT = "prod"
    MIN = "min"
    MAX = "max"
    AVG = "avg"


class Work:
    """A collective in flight (torch.distributed's Work, for async_op=True)."""

    __slots__ = ("_done", "_group")

    def __init__(self, done: Event, group: ProcessGroup) -> None:
        self._done = done
        self._group = group

    def wait(self, timeout: object = None) -> bool:
        """Make the current stream wait for the collective (no host wait); True."""
        current_stream(self._group.device).wait_event(self._done)
        return True

    def is_completed(self) -> bool:
        """True when the collective has run (does not wait)."""
        return self._done.query()

    def synchronize(self) -> None:
        """Wait on the host until the collective has run. Synchronizes."""
        self._done.synchronize()

    def __repr__(self) -> str:
        state = "completed" if self.is_completed() else "in flight"
        return f"<vram.distributed.Work {state}>"


_COMPLEX_PARTS = {complex64: float32, complex128: float64}


def _wire(dt: dtype, op: ReduceOp | None, call: str) -> tuple[str, int, str | None]:
    """(the dtype name the communicator sees, elements per tensor element, the op name)."""
    if op is not None and not isinstance(op, ReduceOp):
        raise TypeError(f"{call}: op must be a vram.distributed.ReduceOp, got {op!r}")
    name = op.value if op is not None else None
    if dt == bool_:
        if name == "sum":
            name = "max"
        elif name == "prod":
            name = "min"
        return "uint8", 1, name
    if dt in _COMPLEX_PARTS:
        if name not in (None, "sum", "avg"):
            raise ValueError(f"{call}: {op} is not defined for complex tensors (SUM or AVG)")
        return _COMPLEX_PARTS[dt].name, 2, name
    if dt.name not in COLLECTIVE_DTYPES:
        raise TypeError(f"{call}: collectives do not support {dt} tensors")
    return dt.name, 1, name


def _check(tensor: object, group: ProcessGroup, argument: str, call: str) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{call}: {argument} must be a vram.Tensor, got {type(tensor).__name__}")
    if tensor.device != group.device:
        raise ValueError(
            f"{call}: {argument} is on {tensor.device}, but this rank's device is {group.device}"
        )
    if not tensor.is_contiguous():
        raise ValueError(f"{call}: {argument} must be contiguous")
    return tensor


def _launch(group: ProcessGroup, tensors: tuple[Tensor, ...], queue, async_op: bool) -> Work | None:
    """Queue ``queue(stream_handle)`` on the communication stream, ordered after the current
    stream's work, with record_use on ``tensors``; the current stream waits unless async."""
    comm_stream = group.stream
    comm_stream.wait_stream(current_stream(group.device))
    queue(comm_stream.cuda_stream)
    for tensor in tensors:
        tensor.record_use(comm_stream)
    work = Work(comm_stream.record_event(), group)
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(tensor: Tensor, op: ReduceOp = ReduceOp.SUM, async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` over all ranks, in place: every rank gets the result."""
    group = default_group()
    tensor = _check(tensor, group, "tensor", "all_reduce")
    name, parts, opname = _wire(tensor.dtype, op, "all_reduce")
    count = tensor.numel() * parts
    ptr = tensor.data_ptr()

    def queue(stream: int) -> None:
        group.comm.all_reduce(ptr, ptr, count, name, opname, stream)  # type: ignore[arg-type]

    return _launch(group, (tensor,), queue, async_op)


def all_gather_into_tensor(
    output_tensor: Tensor, input_tensor: Tensor, async_op: bool = False
) -> Work | None:
    """``output_tensor`` = every rank's ``input_tensor`` concatenated in rank order (along
    the first dimension, or as world_size times as many elements)."""
    group = default_group()
    call = "all_gather_into_tensor"
    output_tensor = _check(output_tensor, group, "output_tensor", call)
    input_tensor = _check(input_tensor, group, "input_tensor", call)
    if output_tensor.dtype != input_tensor.dtype:
        raise TypeError(f"{call}: output and input dtypes differ")
    if output_tensor.numel() != input_tensor.numel() * group.world_size:
        raise ValueError(
            f"{call}: output tensor size must be equal to world_size times input tensor size "
            f"({output_tensor.numel()} != {group.world_size} * {input_tensor.numel()})"
        )
    name, parts, _ = _wire(input_tensor.dtype, None, call)
    count = input_tensor.numel() * parts
    send, recv = input_tensor.data_ptr(), output_tensor.data_ptr()

    def queue(stream: int) -> None:
        group.comm.all_gather(send, recv, count, name, stream)

    return _launch(group, (output_tensor, input_tensor), queue, async_op)


def reduce_scatter_tensor(
    output: Tensor, input: Tensor, op: ReduceOp = ReduceOp.SUM, async_op: bool = False
) -> Work | None:
    """``output`` on rank r = the reduction over ranks of block r of ``input`` (world_size
    equal blocks in rank order)."""
    group = default_group()
    call = "reduce_scatter_tensor"
    output = _check(output, group, "output", call)
    input = _check(input, group, "input", call)
    if output.dtype != input.dtype:
        raise TypeError(f"{call}: output and input dtypes differ")
    if input.numel() != output.numel() * group.world_size:
        raise ValueError(
            f"{call}: input tensor must be the same size as output size times world size "
            f"({input.numel()} != {group.world_size} * {output.numel()})"
        )
    name, parts, opname = _wire(input.dtype, op, call)
    count = output.numel() * parts
    send, recv = input.data_ptr(), output.data_ptr()

    def queue(stream: int) -> None:
        group.comm.reduce_scatter(send, recv, count, name, opname, stream)  # type: ignore[arg-type]

    return _launch(group, (output, input), queue, async_op)


def broadcast(tensor: Tensor, src: int, async_op: bool = False) -> Work | None:
    """Every rank's ``tensor`` = rank ``src``'s, in place."""
    group = default_group()
    tensor = _check(tensor, group, "tensor", "broadcast")
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < group.world_size:
        raise ValueError(f"broadcast: src must be a rank in [0, {group.world_size}), got {src!r}")
    name, parts, _ = _wire(tensor.dtype, None, "broadcast")
    count = tensor.numel() * parts
    ptr = tensor.data_ptr()

    def queue(stream: int) -> None:
        group.comm.broadcast(ptr, ptr, count, name, src, stream)

    return _launch(group, (tensor,), queue, async_op)


def barrier(async_op: bool = False) -> Work | None:
    """Wait until every rank has reached the barrier: an all_reduce of one element, as
    PyTorch's NCCL barrier; without async_op the host waits for it. Synchronizes."""
    group = default_group()
    from .._factories import zeros

    token = zeros(1, device=group.device)
    work = all_reduce(token, async_op=True)
    assert work is not None
    if async_op:
        return work
    work.synchronize()
    return None
