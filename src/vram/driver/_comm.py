"""Communicators: one rank's end of a group of processes that run collectives together.

Two implementations stand behind ``Communicator``, as behind ``Driver``: ``nccl`` for CUDA
devices (NCCL through nccl4py, ``_nccl.py``) and ``sim`` for simulated devices (a local
transport with NCCL's semantics, ``_simcomm.py``).

Conventions every implementation keeps (NCCL's):
- Collectives take raw device pointers, element counts and a stream handle; they are queued
  on the stream and complete, asynchronously, once every rank's call has been queued and
  run. Every rank calls the same collectives in the same order with matching counts.
- ``dtype`` is a vram dtype name (``DTYPES``), ``op`` a reduction name (``OPS``).
- Making a communicator is two steps around a rendezvous the caller runs: ``offer(rank)``
  gives the bytes this rank publishes (NCCL: rank 0's unique id), then ``join`` with every
  rank's bytes, in rank order, connects the group.
- Failures raise ``vram.CudaError(call, name)`` with NCCL's error name (``ncclInvalidUsage``,
  ``ncclRemoteError``, ...); failures of queued work surface at the next synchronization.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

__all__ = ["Communicator", "communicator_type", "DTYPES", "OPS"]

DTYPES = ("int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64")
OPS = ("sum", "prod", "max", "min", "avg")


class Communicator(ABC):
    """One rank of a group; collectives on device memory of ``device``."""

    kind: str  # the device type it serves: "cuda" or "sim"

    def __init__(self, device: int, rank: int, world_size: int) -> None:
        self.device = device
        self.rank = rank
        self.world_size = world_size

    @classmethod
    @abstractmethod
    def offer(cls, rank: int) -> tuple[bytes, Any]:
        """(the bytes this rank publishes at the rendezvous, state to pass to ``join``)."""

    @classmethod
    @abstractmethod
    def join(
        cls, state: Any, published: list[bytes], device: int, rank: int, world_size: int
    ) -> Communicator:
        """Connect the group, given every rank's published bytes in rank order.
        Every rank calls it; it returns once all have (it synchronizes the group)."""

    @abstractmethod
    def all_reduce(
        self, send: int, recv: int, count: int, dtype: str, op: str, stream: int
    ) -> None:
        """``recv`` = the reduction over ranks of ``send`` (``count`` elements each)."""

    @abstractmethod
    def all_gather(self, send: int, recv: int, count: int, dtype: str, stream: int) -> None:
        """``recv`` = every rank's ``count`` elements of ``send``, in rank order."""

    @abstractmethod
    def reduce_scatter(
        self, send: int, recv: int, count: int, dtype: str, op: str, stream: int
    ) -> None:
        """``recv`` = the reduction over ranks of block ``rank`` of ``send`` (world_size
        blocks of ``count`` elements)."""

    @abstractmethod
    def broadcast(
        self, send: int, recv: int, count: int, dtype: str, root: int, stream: int
    ) -> None:
        """``recv`` = ``root``'s ``send`` (``count`` elements) on every rank."""

    @abstractmethod
    def destroy(self) -> None:
        """Free the communicator once its queued work has completed (idempotent)."""


def communicator_type(kind: str) -> type[Communicator]:
    """The communicator class for devices of ``kind`` ("cuda": NCCL, "sim": the local one)."""
    if kind == "cuda":
        from ._nccl import NcclCommunicator

        return NcclCommunicator
    if kind == "sim":
        from ._simcomm import SimCommunicator

        return SimCommunicator
    raise ValueError(f"device type must be 'cuda' or 'sim' for collectives, got {kind!r}")
