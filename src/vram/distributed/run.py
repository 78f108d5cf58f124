"""The launcher: ``python -m vram.distributed.run --nproc N script.py ARGS``.

Starts N processes of ``script.py ARGS`` on this machine, one per device, with torchrun's
environment: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``
(the node), ``MASTER_ADDR`` and ``MASTER_PORT`` (where rank 0 serves the rendezvous that
shares NCCL's unique id). Several machines: run it on each with ``--nnodes``,
``--node-rank`` and the same ``--master-addr`` / ``--master-port`` (rank 0's machine).

``--device sim`` runs the processes on simulated GPUs (``VRAM_DEVICE=sim``, enough sim
devices for every local rank). If a process fails, the others are stopped and the launcher
exits with the failed process's exit code.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

__all__ = ["main", "launch"]

_POLL = 0.05  # seconds between looks at the processes
_GRACE = 5.0  # seconds a stopped process gets before it is killed


def _free_port(addr: str) -> int:
    """A port nothing listens on now, for rank 0's rendezvous on this machine."""
    with socket.socket() as probe:
        probe.bind((addr if addr in ("127.0.0.1", "localhost") else "", 0))
        return probe.getsockname()[1]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vram.distributed.run",
        description="Start one process per device with torchrun's environment.",
    )
    parser.add_argument(
        "--nproc",
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc",
        type=int,
        default=1,
        help="processes on this machine (one per device)",
    )
    parser.add_argument("--nnodes", type=int, default=1, help="machines in the job")
    parser.add_argument(
        "--node-rank", "--node_rank", dest="node_rank", type=int, default=0, help="this machine"
    )
    parser.add_argument(
        "--master-addr",
        "--master_addr",
        dest="master_addr",
        default="127.0.0.1",
        help="rank 0's machine (an address the others can reach)",
    )
    parser.add_argument(
        "--master-port",
        "--master_port",
        dest="master_port",
        type=int,
        default=None,
        help="rank 0's rendezvous port (default: a free one; needed with --nnodes > 1)",
    )
    parser.add_argument(
        "--device",
        choices=("cuda", "sim"),
        default=None,
        help="run on GPUs or on simulated GPUs (default: vram's default device)",
    )
    parser.add_argument("script", help="the Python script each process runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return parser


def launch(
    script: str,
    args: list[str],
    nproc: int,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    device: str | None = None,
) -> int:
    """Run ``script args`` in ``nproc`` processes; the first non-zero exit code, else 0."""
    if nproc < 1 or nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ValueError(
            f"need nproc >= 1, nnodes >= 1 and 0 <= node_rank < nnodes, got "
            f"nproc={nproc}, nnodes={nnodes}, node_rank={node_rank}"
        )
    if master_port is None:
        if nnodes > 1:
            raise ValueError("--master-port is needed with --nnodes > 1 (the same on every node)")
        master_port = _free_port(master_addr)
    base = dict(os.environ)
    base.update(
        WORLD_SIZE=str(nproc * nnodes),
        LOCAL_WORLD_SIZE=str(nproc),
        GROUP_RANK=str(node_rank),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
    )
    if device == "sim":
        base["VRAM_DEVICE"] = "sim"
        sims = base.get("VRAM_SIM_DEVICES", "2")
        base["VRAM_SIM_DEVICES"] = str(max(int(sims) if sims.isdigit() else 2, nproc))
    elif device == "cuda":
        base["VRAM_DEVICE"] = "cuda"
    processes = []
    for local_rank in range(nproc):
        env = dict(base, RANK=str(node_rank * nproc + local_rank), LOCAL_RANK=str(local_rank))
        processes.append(subprocess.Popen([sys.executable, script, *args], env=env))
    return _wait(processes)


def _wait(processes: list[subprocess.Popen]) -> int:
    """Wait for every process; on the first failure (or a signal) stop the rest."""
    stopping = []

    def forward(signum: int, frame: object) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            codes = [p.poll() for p in processes]
            failed = [code for code in codes if code not in (None, 0)]
            if failed or stopping:
                _stop(processes)
                return failed[0] if failed else 128 + stopping[0]
            if all(code == 0 for code in codes):
                return 0
            time.sleep(_POLL)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop(processes: list[subprocess.Popen]) -> None:
    """Terminate the launcher's own processes that still run; kill those that linger."""
    for p in processes:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + _GRACE
    for p in processes:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv: list[str] | None = None) -> int:
    options = _parser().parse_args(argv)
    return launch(
        options.script,
        options.args,
        options.nproc,
        options.nnodes,
        options.node_rank,
        options.master_addr,
        options.master_port,
        options.device,
    )


if __name__ == "__main__":
    sys.exit(main())
