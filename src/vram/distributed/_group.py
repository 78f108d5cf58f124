"""The default process group: torch.distributed's init_process_group and friends.

One process per device. ``init_process_group()`` reads what torchrun (and
``python -m vram.distributed.run``) put in the environment: ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, and ``MASTER_ADDR`` / ``MASTER_PORT`` for the rendezvous. The process
works on device ``cuda:LOCAL_RANK`` (``sim:LOCAL_RANK`` where the default device is the
simulated GPU), through NCCL on CUDA and the local transport on sim, with one
communication stream per device on which every collective runs.
"""

from __future__ import annotations

import datetime
import os
import threading
from dataclasses import dataclass

from .._device import Device, as_device, default_device, set_device
from .._streams import Stream
from ..driver import Communicator, communicator_type
from ._rendezvous import rendezvous, tcp_address

__all__ = [
    "ProcessGroup",
    "init_process_group",
    "destroy_process_group",
    "is_initialized",
    "get_rank",
    "get_world_size",
    "get_backend",
    "default_group",
]

_DEFAULT_TIMEOUT = 600.0  # seconds, as torch.distributed's default for NCCL


@dataclass(eq=False)
class ProcessGroup:
    """The processes running collectives together, as seen from one rank."""

    rank: int
    world_size: int
    device: Device
    backend: str  # "nccl" (cuda) or "sim"
    comm: Communicator
    stream: Stream  # the communication stream: every collective of the group runs on it

    def __repr__(self) -> str:
        return (
            f"<vram.distributed.ProcessGroup rank {self.rank}/{self.world_size} "
            f"on {self.device}, {self.backend}>"
        )


_group: ProcessGroup | None = None
_lock = threading.Lock()


def _env_int(name: str, given: int) -> int:
    if given is not None and given >= 0:
        return given
    text = os.environ.get(name)
    if text is None:
        raise ValueError(
            f"init_process_group: environment variable {name} expected, but not set "
            "(start the script with python -m vram.distributed.run, or torchrun)"
        )
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {text!r}") from None


def _master() -> tuple[str, int]:
    """Where rank 0 listens by ``env://``: MASTER_ADDR and MASTER_PORT."""
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise ValueError(
                f"init_process_group: environment variable {name} expected, but not set"
            )
    port = os.environ["MASTER_PORT"]
    if not port.isdigit():
        raise ValueError(f"MASTER_PORT: expected a port number, got {port!r}")
    return os.environ["MASTER_ADDR"], int(port)


def _seconds(timeout: object) -> float:
    if timeout is None:
        return _DEFAULT_TIMEOUT
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
        return float(timeout)
    raise TypeError(f"timeout: expected a datetime.timedelta or seconds, got {timeout!r}")


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: datetime.timedelta | float | None = None,
    world_size: int = -1,
    rank: int = -1,
    device_id: object = None,
) -> None:
    """Join the default process group (torch.distributed's signature and environment).

    ``backend``: None or "nccl" (NCCL on CUDA devices; on sim devices the local transport
    with NCCL's semantics, so the same script runs on both), or "sim". ``device_id``: the
    device of this process (default ``cuda:LOCAL_RANK``, or ``sim:LOCAL_RANK``), made the
    current device. Blocks until every rank has joined.
    """
    global _group
    if backend not in (None, "nccl", "sim"):
        raise ValueError(f"backend: vram runs 'nccl' (or 'sim'), got {backend!r}")
    address = tcp_address(init_method)  # a bad init_method fails at once, alone or not
    with _lock:
        if _group is not None:
            raise RuntimeError("trying to initialize the default process group twice!")
        world = _env_int("WORLD_SIZE", world_size)
        me = _env_int("RANK", rank)
        if world < 1 or not 0 <= me < world:
            raise ValueError(f"rank {me} and world size {world}: need 0 <= rank < world size")
        device = _device(device_id)
        if backend == "sim" and device.type != "sim":
            raise ValueError(f"backend: 'sim' runs on sim devices, not {device}")
        set_device(device)
        kind = communicator_type(device.type)
        published, state = kind.offer(me)
        seconds = _seconds(timeout)
        if world > 1:
            addr, port = address or _master()
            everyone = rendezvous(addr, port, me, world, published, seconds)
        else:
            everyone = [published]
        comm = kind.join(state, everyone, device.index, me, world)  # type: ignore[arg-type]
        _group = ProcessGroup(
            rank=me,
            world_size=world,
            device=device,
            backend="nccl" if device.type == "cuda" else "sim",
            comm=comm,
            stream=Stream(device),
        )


def _device(device_id: object) -> Device:
    if device_id is not None:
        found = as_device(device_id)
        if found.type == "cpu" or found.index is None:
            raise ValueError(f"device_id: expected cuda:N or sim:N, got {device_id!r}")
        return found
    local = os.environ.get("LOCAL_RANK", "0")
    if not local.isdigit():
        raise ValueError(f"LOCAL_RANK: expected a number, got {local!r}")
    found = Device(default_device().type, int(local))
    count = found.driver.device_count()
    if found.index >= count:  # type: ignore[operator]
        raise ValueError(
            f"LOCAL_RANK {local}: this machine has {count} {found.type} devices "
            "(one process per device)"
        )
    return found


def default_group() -> ProcessGroup:
    """The default group; RuntimeError (PyTorch's message) before init_process_group."""
    group = _group
    if group is None:
        raise RuntimeError(
            "Default process group has not been initialized, please make sure to call "
            "init_process_group."
        )
    return group


def destroy_process_group() -> None:
    """Leave the group: wait for its queued collectives, then free the communicator."""
    global _group
    with _lock:
        group = default_group()
        group.stream.synchronize()
        group.comm.destroy()
        _group = None


def is_initialized() -> bool:
    return _group is not None


def get_rank() -> int:
    """This process's rank in the default group."""
    return default_group().rank


def get_world_size() -> int:
    """How many processes the default group has."""
    return default_group().world_size


def get_backend() -> str:
    """ "nccl" on CUDA devices, "sim" on simulated ones."""
    return default_group().backend
