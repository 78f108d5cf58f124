"""The rendezvous: how the ranks of a group find each other before NCCL takes over.

Rank 0 listens at ``MASTER_ADDR:MASTER_PORT`` (as torchrun's TCP store does); every other
rank connects, sends its rank and the bytes it publishes, and gets back every rank's bytes
in rank order. For NCCL the bytes are rank 0's unique id (NCCL bootstraps itself from it
and carries all data over its own transports); for the simulated GPU, each rank's address
of the local transport. Nothing but these few bytes goes through here.

Where rank 0 listens comes from ``init_method`` as torch.distributed reads it: ``env://``
(``MASTER_ADDR`` and ``MASTER_PORT``) or ``tcp://HOST:PORT``; any other scheme is
torch's RuntimeError ("No rendezvous handler for ...").
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from urllib.parse import urlsplit

__all__ = ["rendezvous", "tcp_address"]

_HELLO = struct.Struct("<iiq")  # rank, world size, bytes that follow
_RETRY = 0.05  # seconds between attempts to reach rank 0


_HANDLERS = ("env", "tcp")  # torch.distributed also has file://, which vram does not


def tcp_address(init_method: str | None) -> tuple[str, int] | None:
    """(host, port) of a ``tcp://HOST:PORT`` init_method; None for ``env://`` (and None: the
    environment says). RuntimeError, torch.distributed's, for a scheme without a handler;
    ValueError for a tcp:// URL without a host and port."""
    if init_method is None:
        return None
    if not isinstance(init_method, str):
        raise RuntimeError(f"`url` must be a string. {type(init_method)}: {init_method}")
    url = urlsplit(init_method)
    if url.scheme not in _HANDLERS:
        known = ", ".join(f"{scheme}://" for scheme in _HANDLERS)
        raise RuntimeError(f"No rendezvous handler for {url.scheme}:// (vram has {known})")
    if url.scheme == "env":
        return None
    try:
        port = url.port
    except ValueError:
        port = None
    if not url.hostname or port is None:
        raise ValueError(f"init_method: expected 'tcp://HOST:PORT', got {init_method!r}")
    return url.hostname, port


def _send(sock: socket.socket, rank: int, world: int, data: bytes) -> None:
    sock.sendall(_HELLO.pack(rank, world, len(data)) + data)


def _recv_exact(sock: socket.socket, nbytes: int) -> bytes:
    data = bytearray()
    while len(data) < nbytes:
        chunk = sock.recv(nbytes - len(data))
        if not chunk:
            raise ConnectionError("the rendezvous connection closed early")
        data += chunk
    return bytes(data)


def _recv(sock: socket.socket) -> tuple[int, int, bytes]:
    rank, world, size = _HELLO.unpack(_recv_exact(sock, _HELLO.size))
    return rank, world, _recv_exact(sock, size)


def _bind_address(addr: str) -> str:
    """Where rank 0 listens: the loopback address itself, else every interface."""
    try:
        return addr if ipaddress.ip_address(addr).is_loopback else ""
    except ValueError:  # a host name
        return "127.0.0.1" if addr == "localhost" else ""


def rendezvous(
    addr: str, port: int, rank: int, world_size: int, data: bytes, timeout: float
) -> list[bytes]:
    """Every rank's ``data``, in rank order. Blocks until all ``world_size`` ranks arrive
    (TimeoutError after ``timeout`` seconds)."""
    if world_size == 1:
        return [data]
    deadline = time.monotonic() + timeout
    if rank == 0:
        return _serve(addr, port, world_size, data, deadline)
    return _join(addr, port, rank, world_size, data, deadline)


def _serve(addr: str, port: int, world: int, data: bytes, deadline: float) -> list[bytes]:
    published: dict[int, bytes] = {0: data}
    connections: list[socket.socket] = []
    with socket.create_server((_bind_address(addr), port)) as server:
        try:
            while len(published) < world:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(world)) - set(published))
                    raise TimeoutError(f"rendezvous: ranks {missing} did not arrive in time")
                server.settimeout(left)
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                connections.append(conn)
                conn.settimeout(max(deadline - time.monotonic(), 0.001))
                their_rank, their_world, their_data = _recv(conn)
                if their_world != world:
                    raise ValueError(
                        f"rendezvous: rank {their_rank} has world size {their_world}, "
                        f"rank 0 has {world}"
                    )
                if their_rank in published or not 0 < their_rank < world:
                    raise ValueError(f"rendezvous: rank {their_rank} arrived twice or is invalid")
                published[their_rank] = their_data
            everything = b"".join(
                struct.pack("<q", len(published[r])) + published[r] for r in range(world)
            )
            for conn in connections:
                _send(conn, 0, world, everything)
        finally:
            for conn in connections:
                conn.close()
    return [published[r] for r in range(world)]


def _join(addr: str, port: int, rank: int, world: int, data: bytes, deadline: float) -> list[bytes]:
    while True:  # rank 0 may not listen yet
        try:
            sock = socket.create_connection((addr, port), timeout=_RETRY * 20)
            if sock.getsockname() != sock.getpeername():
                break
            # TCP's self-connect: the port is free and the kernel gave this socket that very
            # port to connect from, so it reached itself (and would keep rank 0 from binding
            # it): let it go and try again
            sock.close()
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"rendezvous: rank 0 at {addr}:{port} did not answer")
        time.sleep(_RETRY)
    with sock:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        _send(sock, rank, world, data)
        _, _, everything = _recv(sock)
    published, offset = [], 0
    for _ in range(world):
        (size,) = struct.unpack_from("<q", everything, offset)
        published.append(everything[offset + 8 : offset + 8 + size])
        offset += 8 + size
    return published
