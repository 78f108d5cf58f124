"""vram.distributed on simulated GPUs: the launcher's processes (2 and 3 ranks) and, in this
process, a group of one for the stream and memory rules and the argument errors."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import vram
import vram.distributed as dist
from vram.distributed._rendezvous import rendezvous, tcp_address
from vram.driver._simcomm import reduce_in_rank_order

WORKERS = Path(__file__).parent / "workers"


def launch(script: str, nproc: int) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "vram.distributed.run", "--nproc", str(nproc)]
    command += ["--device", "sim", str(WORKERS / script)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


# ----------------------------------------------------------------- several processes
@pytest.mark.parametrize("nproc", [2, 3])
def test_every_collective_matches_numpy_on_every_rank(nproc):
    result = launch("collectives.py", nproc)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(re.findall(r"rank \d+ ok", result.stdout)) == [
        f"rank {r} ok" for r in range(nproc)
    ]


def test_ranks_running_different_collectives_fail_with_invalid_usage():
    result = launch("mismatch.py", 2)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(re.findall(r"rank \d+: \w+ \w+", result.stdout)) == [
        "rank 0: ncclAllReduce ncclInvalidUsage",
        "rank 1: ncclBroadcast ncclInvalidUsage",
    ]


def test_launcher_stops_the_others_and_returns_the_failed_exit_code():
    result = launch("one_fails.py", 2)
    assert result.returncode == 3


def test_launcher_rejects_bad_arguments():
    from vram.distributed.run import launch as run

    with pytest.raises(ValueError, match="master-port"):
        run("script.py", [], nproc=2, nnodes=2, node_rank=0)
    with pytest.raises(ValueError, match="node_rank"):
        run("script.py", [], nproc=2, nnodes=2, node_rank=2, master_port=1)


def test_rendezvous_gives_every_rank_every_blob_in_rank_order():
    port = _free_port()
    results: dict[int, list[bytes]] = {}

    def rank(r: int) -> None:
        results[r] = rendezvous("127.0.0.1", port, r, 3, f"blob{r}".encode(), timeout=30)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (2, 1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {r: [b"blob0", b"blob1", b"blob2"] for r in range(3)}


def test_a_rank_whose_connection_reached_itself_lets_go_and_tries_again(monkeypatch):
    """TCP's self-connect: a rank retrying a free local port may be given that very port to
    connect from and reach itself (then rank 0 cannot bind it: "Address already in use").
    The rank closes such a socket and tries again."""
    import socket

    from vram.distributed import _rendezvous

    port = _free_port()
    connect = socket.create_connection
    closed = []

    class SelfConnected:
        def getsockname(self):
            return ("127.0.0.1", port)

        getpeername = getsockname

        def close(self):
            closed.append(self)

    def create_connection(address, timeout=None):
        if not closed:
            return SelfConnected()
        return connect(address, timeout=timeout)

    monkeypatch.setattr(_rendezvous.socket, "create_connection", create_connection)
    results: dict[int, list[bytes]] = {}

    def rank(r: int) -> None:
        results[r] = rendezvous("127.0.0.1", port, r, 2, f"blob{r}".encode(), timeout=30)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(closed) == 1
    assert results == {r: [b"blob0", b"blob1"] for r in range(2)}


def test_rendezvous_times_out_when_rank_zero_never_comes():
    with pytest.raises(TimeoutError, match="did not answer"):
        rendezvous("127.0.0.1", _free_port(), 1, 2, b"", timeout=0.3)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------- NCCL's arithmetic
def test_avg_of_integers_truncates_toward_zero_as_nccl():
    parts = [np.array([-3, 3, 5, -4], np.int32), np.array([-6, 6, 10, 1], np.int32)]
    assert reduce_in_rank_order(parts, "avg").tolist() == [-4, 4, 7, -1]


def test_avg_of_floats_premultiplies_each_rank_by_one_over_world_size():
    parts = [np.array([1.0, 3.0], np.float16), np.array([2.0, 65504.0], np.float16)]
    # 65504 * 0.5 + 3 * 0.5 is finite; (65504 + 3) / 2 would overflow float16 first
    assert reduce_in_rank_order(parts, "avg").tolist() == [1.5, 32752.0 + 0.0]
    bf = [np.array([1.0], ml_dtypes.bfloat16), np.array([2.0], ml_dtypes.bfloat16)]
    assert reduce_in_rank_order(bf, "avg").dtype == np.dtype(ml_dtypes.bfloat16)


def test_sum_runs_in_rank_order_in_the_element_type():
    parts = [np.array([1e8], np.float32), np.array([1.0], np.float32), np.array([-1e8], np.float32)]
    assert reduce_in_rank_order(parts, "sum").tolist() == [0.0]  # (1e8 + 1) - 1e8 in float32


# ------------------------------------------------------------- a group of one, here
@pytest.fixture
def group(sim0):
    dist.init_process_group(world_size=1, rank=0, device_id="sim:0")
    yield dist.default_group()
    if dist.is_initialized():
        dist.destroy_process_group()


def test_group_names_and_device(group):
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "sim")
    assert group.device == vram.device("sim:0")
    assert vram.current_device() == 0
    with pytest.raises(RuntimeError, match="twice"):
        dist.init_process_group(world_size=1, rank=0, device_id="sim:0")


def test_before_init_the_names_raise_pytorchs_error():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="has not been initialized"):
        dist.get_rank()


def test_init_without_the_launchers_environment_names_the_variable(monkeypatch):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        dist.init_process_group()
    with pytest.raises(ValueError, match="backend"):
        dist.init_process_group(backend="gloo", world_size=1, rank=0)


@pytest.mark.parametrize(
    ("init_method", "error", "message"),
    [
        (
            "bogus://x",
            RuntimeError,
            r"^No rendezvous handler for bogus:// \(vram has env://, tcp://\)",
        ),
        ("file:///tmp/rdzv", RuntimeError, r"^No rendezvous handler for file://"),
        ("localhost:29500", RuntimeError, r"^No rendezvous handler for localhost://"),
        ("tcp://localhost", ValueError, r"expected 'tcp://HOST:PORT', got 'tcp://localhost'"),
        ("tcp://:29500", ValueError, r"expected 'tcp://HOST:PORT'"),
        ("tcp://localhost:port", ValueError, r"expected 'tcp://HOST:PORT'"),
        (29500, RuntimeError, r"`url` must be a string"),
    ],
)
def test_an_init_method_without_a_handler_is_torchs_error(sim0, init_method, error, message):
    """As torch.distributed: a group of one still checks it, and joins nothing."""
    with pytest.raises(error, match=message):
        dist.init_process_group(init_method=init_method, world_size=1, rank=0, device_id="sim:0")
    assert not dist.is_initialized()


def test_env_and_tcp_init_methods_are_taken(sim0):
    for init_method in ("env://", "tcp://127.0.0.1:29500", "tcp://[::1]:29500?rank=0"):
        dist.init_process_group(init_method=init_method, world_size=1, rank=0, device_id="sim:0")
        dist.destroy_process_group()
    assert tcp_address("tcp://[::1]:29500") == ("::1", 29500)
    assert tcp_address("env://") is None


def test_collective_runs_on_the_comm_stream_after_the_current_stream(group):
    with vram.sim.deferred():
        x = vram.ones(8, device="sim:0")
        work = dist.all_reduce(x, async_op=True)
        assert not work.is_completed()  # nothing ran: the fill and the collective are held
        work.wait()  # the current stream now waits for the collective, the host does not
        assert not work.is_completed()
        y = x * 3
    assert work.is_completed()
    assert y.numpy().tolist() == [3.0] * 8


def test_a_tensor_dropped_during_its_collective_is_not_reused_under_it(group):
    """record_use on the comm stream: the block's next owner waits for the collective."""
    side = vram.Stream("sim:0")
    with vram.sim.deferred():
        with vram.stream(side):
            inp = vram.full((1024,), 5.0, device="sim:0")
            out = vram.empty(1024, device="sim:0")
            ptr = out.data_ptr()
            dist.all_gather_into_tensor(out, inp, async_op=True)  # writes out on comm
            del out
            y = vram.full((1024,), 7.0, device="sim:0")  # out's block, on the same stream
            assert y.data_ptr() == ptr
        side.synchronize()  # runs side's work, and the gather only if the fill waits for it
    assert y.numpy().tolist() == [7.0] * 1024  # the gather did not land after the fill


def test_argument_errors_name_the_argument(group):
    t = vram.ones(4, 4, device="sim:0")
    with pytest.raises(ValueError, match="contiguous"):
        dist.all_reduce(t.t())
    with pytest.raises(ValueError, match="sim:1"):
        dist.all_reduce(vram.ones(4, device="sim:1"))
    with pytest.raises(ValueError, match="world_size times"):
        dist.all_gather_into_tensor(vram.empty(3, device="sim:0"), vram.ones(4, device="sim:0"))
    with pytest.raises(ValueError, match="times world size"):
        dist.reduce_scatter_tensor(vram.empty(3, device="sim:0"), vram.ones(4, device="sim:0"))
    with pytest.raises(ValueError, match="src"):
        dist.broadcast(t, src=1)
    with pytest.raises(TypeError, match="ReduceOp"):
        dist.all_reduce(t, op="sum")
    with pytest.raises(ValueError, match="complex"):
        dist.all_reduce(vram.zeros(2, dtype=vram.complex64, device="sim:0"), op=dist.ReduceOp.MAX)
    with pytest.raises(TypeError, match="int16"):
        dist.all_reduce(vram.zeros(2, dtype=vram.int16, device="sim:0"))


def test_destroy_then_collectives_raise(group):
    dist.destroy_process_group()
    with pytest.raises(RuntimeError, match="has not been initialized"):
        dist.all_reduce(vram.ones(2, device="sim:0"))
