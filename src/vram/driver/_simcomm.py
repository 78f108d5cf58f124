"""Collectives between simulated GPUs in separate processes, with NCCL's semantics.

Each process drives its own sim device; the ranks exchange bytes over localhost sockets,
one connection between every two ranks (rank r connects to every lower rank's listener,
published at the rendezvous as "host:port").

A collective is queued on the stream like a kernel. When the stream runs it, the rank sends
its contribution to every peer, waits for theirs, and writes the result: so it completes
once every rank's call has been queued and run, as on NCCL (in eager mode the host waits
there; under ``vram.sim.deferred()`` it happens when the stream is driven). Results are
NCCL's for the same inputs: reductions run in the element type, over ranks 0, 1, 2, ...
in that order on every rank (bitwise NCCL's for two ranks); ``avg`` multiplies each
contribution by 1/world_size before summing for floats and divides the integer sum
(truncating), as NCCL does.

Every message carries the collective's sequence number, kind and size; a rank whose peer
runs another collective, or the same with another size, fails with ``ncclInvalidUsage``
instead of computing garbage. A peer that closes its connection or stays silent past
``VRAM_SIM_COMM_TIMEOUT`` seconds (default 300) fails the collective with
``ncclRemoteError`` / ``ncclSystemError``; failures of queued work surface at the next
synchronization, as on a GPU.
"""

from __future__ import annotations

import os
import selectors
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from .._errors import CudaError
from . import get_driver
from ._comm import Communicator

__all__ = ["SimCommunicator"]

_NP = {
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}
_KINDS = {"allreduce": 1, "allgather": 2, "reducescatter": 3, "broadcast": 4}
_CALLS = {
    "allreduce": "ncclAllReduce",
    "allgather": "ncclAllGather",
    "reducescatter": "ncclReduceScatter",
    "broadcast": "ncclBroadcast",
}
_HEADER = struct.Struct("<qqq")  # sequence number, collective kind, payload bytes
_CHUNK = 1 << 20  # bytes per send/recv call
_HELLO = struct.Struct("<i")  # a connecting rank says who it is


def _timeout() -> float:
    text = os.environ.get("VRAM_SIM_COMM_TIMEOUT", "300")
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"VRAM_SIM_COMM_TIMEOUT: expected seconds, got {text!r}") from None


def _np_dtype(name: str) -> np.dtype:
    try:
        return _NP[name]
    except KeyError:
        raise TypeError(f"dtype: no {name!r}; supported: {', '.join(_NP)}") from None


def _recv_exact(sock: socket.socket, nbytes: int) -> bytes:
    data = bytearray()
    while len(data) < nbytes:
        chunk = sock.recv(nbytes - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return bytes(data)


def reduce_in_rank_order(parts: list[np.ndarray], op: str) -> np.ndarray:
    """NCCL's reduction of one contribution per rank (in rank order), in their dtype."""
    world = len(parts)
    dt = parts[0].dtype
    floating = dt.kind == "f" or dt == _NP["bfloat16"]
    if op == "avg" and floating:  # NCCL's premultiplied sum: each part times 1/world_size
        scale = np.array(1.0 / world, dtype=dt)
        result = parts[0] * scale
        for part in parts[1:]:
            result = result + part * scale
        return result
    combine = {
        "sum": np.add,
        "avg": np.add,
        "prod": np.multiply,
        "max": np.maximum,
        "min": np.minimum,
    }.get(op)
    if combine is None:
        raise ValueError(f"op: no {op!r}; supported: sum, prod, max, min, avg")
    result = parts[0].copy()
    for part in parts[1:]:
        result = combine(result, part)
    if op == "avg":  # integers: NCCL divides the sum by world_size, truncating toward zero
        quotient = result // world
        inexact_negative = (result - quotient * world != 0) & (result < 0)
        result = quotient + inexact_negative.astype(dt)
    return result


@dataclass(slots=True, eq=False)
class _Transfer:
    """One peer's side of an exchange: what is left to send, what has come in."""

    sock: socket.socket
    outgoing: memoryview
    expected: int  # payload bytes the peer should send
    header: bytearray = field(default_factory=bytearray)
    body: bytearray | None = None  # the payload, once the header has come in
    size: int = 0

    @property
    def receiving(self) -> bool:
        return self.body is None or len(self.body) < self.size


class SimCommunicator(Communicator):
    """One rank of a group of processes, each on its own sim device."""

    kind = "sim"

    def __init__(self, peers: dict[int, socket.socket], device: int, rank: int, world: int):
        super().__init__(device, rank, world)
        self._peers = peers  # rank -> connected socket (non-blocking)
        self._driver = get_driver("sim")
        self._sequence = 0  # collectives queued so far (every rank counts the same)
        self._timeout = _timeout()

    # ---- making the group ----------------------------------------------------------
    @classmethod
    def offer(cls, rank: int) -> tuple[bytes, Any]:
        """Listen on a localhost port; publish "127.0.0.1:PORT"."""
        listener = socket.create_server(("127.0.0.1", 0))
        return f"127.0.0.1:{listener.getsockname()[1]}".encode(), listener

    @classmethod
    def join(
        cls, state: Any, published: list[bytes], device: int, rank: int, world_size: int
    ) -> SimCommunicator:
        """Connect to every lower rank; accept every higher one."""
        listener: socket.socket = state
        deadline = time.monotonic() + _timeout()
        peers: dict[int, socket.socket] = {}
        try:
            for peer in range(rank):
                host, _, port = published[peer].decode().rpartition(":")
                sock = socket.create_connection((host, int(port)), timeout=_timeout())
                sock.sendall(_HELLO.pack(rank))
                peers[peer] = sock
            while len(peers) < world_size - 1:
                listener.settimeout(max(deadline - time.monotonic(), 0.001))
                conn, _ = listener.accept()
                conn.settimeout(_timeout())
                (peer,) = _HELLO.unpack(_recv_exact(conn, _HELLO.size))
                peers[peer] = conn
        except OSError as exc:
            for sock in peers.values():
                sock.close()
            raise CudaError("ncclCommInitRank", "ncclSystemError", f"rank {rank}: {exc}") from None
        finally:
            listener.close()
        for sock in peers.values():
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        return cls(peers, device, rank, world_size)

    # ---- collectives ---------------------------------------------------------------
    def _queue(self, kind: str, stream: int, buffers: tuple[int, ...], work) -> None:
        """Check the buffers (``ptr, nbytes, ptr, nbytes, ...``) now, as NCCL checks its
        arguments at the call; queue ``work`` on ``stream``. ``work(exchange)`` gets the
        function that swaps bytes with the peers for this collective."""
        if self._peers is None:
            raise CudaError(_CALLS[kind], "ncclInvalidUsage", "the communicator was destroyed")
        for ptr, size in zip(buffers[::2], buffers[1::2], strict=True):
            if size:
                self._driver.view(ptr, size)
        sequence = self._sequence
        self._sequence += 1

        def exchange(outgoing: dict[int, bytes], expected: dict[int, int]) -> dict[int, bytes]:
            return self._exchange(kind, sequence, outgoing, expected)

        self._driver.enqueue(stream, lambda: work(exchange))

    def all_reduce(
        self, send: int, recv: int, count: int, dtype: str, op: str, stream: int
    ) -> None:
        dt = _np_dtype(dtype)
        nbytes = count * dt.itemsize
        view = self._driver.view

        def work(exchange) -> None:
            mine = view(send, nbytes).copy() if nbytes else np.empty(0, np.uint8)
            got = exchange(dict.fromkeys(self._peers, mine.tobytes()), self._sizes(nbytes))
            parts = [mine if r == self.rank else np.frombuffer(got[r], np.uint8) for r in self._all]
            if nbytes:
                result = reduce_in_rank_order([p.view(dt) for p in parts], op)
                view(recv, nbytes)[...] = result.view(np.uint8)

        if op not in ("sum", "prod", "max", "min", "avg"):
            raise ValueError(f"op: no {op!r}; supported: sum, prod, max, min, avg")
        self._queue("allreduce", stream, (send, nbytes, recv, nbytes), work)

    def all_gather(self, send: int, recv: int, count: int, dtype: str, stream: int) -> None:
        nbytes = count * _np_dtype(dtype).itemsize
        view = self._driver.view

        def work(exchange) -> None:
            mine = view(send, nbytes).tobytes() if nbytes else b""
            got = exchange(dict.fromkeys(self._peers, mine), self._sizes(nbytes))
            got[self.rank] = mine
            if nbytes:
                out = view(recv, nbytes * self.world_size)
                for r in self._all:
                    out[r * nbytes : (r + 1) * nbytes] = np.frombuffer(got[r], np.uint8)

        self._queue("allgather", stream, (send, nbytes, recv, nbytes * self.world_size), work)

    def reduce_scatter(
        self, send: int, recv: int, count: int, dtype: str, op: str, stream: int
    ) -> None:
        dt = _np_dtype(dtype)
        nbytes = count * dt.itemsize
        view = self._driver.view

        def work(exchange) -> None:
            blocks = view(send, nbytes * self.world_size).copy() if nbytes else None
            outgoing = {
                p: blocks[p * nbytes : (p + 1) * nbytes].tobytes() if nbytes else b""
                for p in self._peers
            }
            got = exchange(outgoing, self._sizes(nbytes))
            if nbytes:
                mine = blocks[self.rank * nbytes : (self.rank + 1) * nbytes]
                parts = [
                    mine if r == self.rank else np.frombuffer(got[r], np.uint8) for r in self._all
                ]
                result = reduce_in_rank_order([p.view(dt) for p in parts], op)
                view(recv, nbytes)[...] = result.view(np.uint8)

        if op not in ("sum", "prod", "max", "min", "avg"):
            raise ValueError(f"op: no {op!r}; supported: sum, prod, max, min, avg")
        self._queue("reducescatter", stream, (send, nbytes * self.world_size, recv, nbytes), work)

    def broadcast(
        self, send: int, recv: int, count: int, dtype: str, root: int, stream: int
    ) -> None:
        if not 0 <= root < self.world_size:
            raise CudaError("ncclBroadcast", "ncclInvalidArgument", f"root {root}")
        nbytes = count * _np_dtype(dtype).itemsize
        view = self._driver.view
        is_root = self.rank == root

        def work(exchange) -> None:
            data = view(send, nbytes).tobytes() if is_root and nbytes else b""
            outgoing = dict.fromkeys(self._peers, data)
            expected = {p: nbytes if p == root else 0 for p in self._peers}
            got = exchange(outgoing, expected)
            if nbytes:
                view(recv, nbytes)[...] = np.frombuffer(data if is_root else got[root], np.uint8)

        self._queue("broadcast", stream, (send if is_root else recv, nbytes, recv, nbytes), work)

    def destroy(self) -> None:
        peers, self._peers = self._peers, None
        for sock in (peers or {}).values():
            sock.close()

    # ---- the transport -------------------------------------------------------------
    @property
    def _all(self) -> range:
        return range(self.world_size)

    def _sizes(self, nbytes: int) -> dict[int, int]:
        return dict.fromkeys(self._peers, nbytes)

    def _exchange(
        self, kind: str, sequence: int, outgoing: dict[int, bytes], expected: dict[int, int]
    ) -> dict[int, bytes]:
        """Send ``outgoing[peer]`` to every peer and receive what each sends, both at once
        (so that large payloads cannot deadlock); returns peer -> payload."""
        call = _CALLS[kind]
        if self._peers is None:
            raise CudaError(call, "ncclInvalidUsage", "the communicator was destroyed")
        selector = selectors.DefaultSelector()
        transfers = {}
        for peer, sock in self._peers.items():
            header = _HEADER.pack(sequence, _KINDS[kind], len(outgoing[peer]))
            transfers[peer] = _Transfer(sock, memoryview(header + outgoing[peer]), expected[peer])
            selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, peer)
        active = set(transfers)
        deadline = time.monotonic() + self._timeout
        try:
            while active:
                left = deadline - time.monotonic()
                events = selector.select(timeout=left) if left > 0 else []
                if not events:
                    raise CudaError(
                        call, "ncclSystemError", f"rank {self.rank}: peers silent for too long"
                    )
                for key, mask in events:
                    peer = key.data
                    transfer = transfers[peer]
                    if mask & selectors.EVENT_WRITE and transfer.outgoing:
                        sent = transfer.sock.send(transfer.outgoing[:_CHUNK])
                        transfer.outgoing = transfer.outgoing[sent:]
                    if mask & selectors.EVENT_READ and transfer.receiving:
                        self._receive(peer, transfer, call, sequence, kind)
                    wanted = (selectors.EVENT_WRITE if transfer.outgoing else 0) | (
                        selectors.EVENT_READ if transfer.receiving else 0
                    )
                    if not wanted:  # done both ways: never read the next collective's bytes
                        selector.unregister(transfer.sock)
                        active.discard(peer)
                    elif wanted != key.events:
                        selector.modify(transfer.sock, wanted, peer)
        except OSError as exc:
            raise CudaError(call, "ncclRemoteError", f"rank {self.rank}: {exc}") from None
        finally:
            selector.close()
        return {peer: bytes(transfer.body or b"") for peer, transfer in transfers.items()}

    def _receive(self, peer: int, transfer: _Transfer, call: str, sequence: int, kind: str) -> None:
        """Read what has come in from ``peer``: its header first, then its payload."""
        if transfer.body is None:
            wanted = _HEADER.size - len(transfer.header)
        else:
            wanted = min(transfer.size - len(transfer.body), _CHUNK)
        chunk = transfer.sock.recv(wanted)
        if not chunk:
            raise CudaError(call, "ncclRemoteError", f"rank {peer} closed its connection")
        if transfer.body is not None:
            transfer.body += chunk
            return
        transfer.header += chunk
        if len(transfer.header) < _HEADER.size:
            return
        their_sequence, their_kind, size = _HEADER.unpack(transfer.header)
        if their_sequence != sequence or their_kind != _KINDS[kind]:
            names = {code: name for name, code in _KINDS.items()}
            raise CudaError(
                call,
                "ncclInvalidUsage",
                f"rank {self.rank} runs collective #{sequence} ({kind}) while rank {peer} "
                f"runs #{their_sequence} ({names.get(their_kind, their_kind)})",
            )
        if size != transfer.expected:
            raise CudaError(
                call,
                "ncclInvalidUsage",
                f"rank {peer} sent {size} bytes for {kind} where rank {self.rank} expects "
                f"{transfer.expected} (the counts differ between ranks)",
            )
        transfer.body = bytearray()
        transfer.size = size

    def __repr__(self) -> str:
        return f"<SimCommunicator rank {self.rank}/{self.world_size} on sim:{self.device}>"
