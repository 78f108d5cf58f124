"""CUDA graphs on a real GPU: a captured MLP forward-and-update step replayed 1,000 times is
bitwise the eager step, its peak is the eager step's, replays allocate nothing and keep
their addresses, graphs sharing a pool take the larger's memory; and the errors CUDA gives
for illegal work during capture are the ones the simulated GPU gives (each comparison is
printed: run with -s to see CUDA's answers)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import vram
from vram.driver import cuda_usable
from vram.driver._sim import SimDriver

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

MiB = 1 << 20
REPLAYS = 1000


@pytest.fixture
def cuda0():
    device = vram.device("cuda:0")
    with device:
        yield device


def make_mlp(
    device, seed: int = 0, batch: int = 64, d_in: int = 128, hidden: int = 256, d_out: int = 64
):
    """The MLP step of tests/graphs/test_graphs.py (forward, hand-written gradients of a mean
    squared error, fused capturable AdamW), at a GPU's size."""
    rng = np.random.default_rng(seed)

    def t(a: np.ndarray) -> vram.Tensor:
        return vram.tensor(a.astype(np.float32), device=device)

    x, target = t(rng.standard_normal((batch, d_in))), t(rng.standard_normal((batch, d_out)))
    w1, b1 = t(rng.standard_normal((hidden, d_in)) * 0.1), t(rng.standard_normal(hidden) * 0.1)
    w2, b2 = t(rng.standard_normal((d_out, hidden)) * 0.1), t(rng.standard_normal(d_out) * 0.1)
    params = [w1, b1, w2, b2]
    for p in params:
        p.grad = vram.zeros(p.shape, device=device)
    ones = vram.ones((1, batch), device=device)
    opt = vram.optim.AdamW(params, lr=1e-3, fused=True, capturable=True)

    def step() -> None:
        h = vram.addmm(b1, x, w1.t(), activation="relu")
        y = vram.addmm(b2, h, w2.t())
        dy = (y - target) * (2.0 / (batch * d_out))
        vram.mm(dy.t(), h, out=w2.grad)
        vram.mm(ones, dy, out=b2.grad.view(1, d_out))
        dh = vram.mm(dy, w2)
        relu_mask = 1.0 - vram._foreach_maximum([1.0 - h * 1e30], 0.0)[0]
        dz = dh * relu_mask
        vram.mm(dz.t(), x, out=w1.grad)
        vram.mm(ones, dz, out=b1.grad.view(1, hidden))
        opt.step()

    return params, opt, step


def test_an_mlp_step_replayed_1000_times_is_bitwise_the_eager_step(cuda0):
    eager_params, eager_opt, eager_step = make_mlp(cuda0)
    graph_params, graph_opt, graph_step = make_mlp(cuda0)
    for _ in range(3):
        eager_step()
        graph_step()
    g = vram.CUDAGraph()
    with vram.graph(g):
        graph_step()
    for _ in range(REPLAYS):
        eager_step()
        g.replay()
    vram.synchronize()
    differing = [
        i
        for i, (mine, theirs) in enumerate(zip(graph_params, eager_params, strict=True))
        if not np.array_equal(mine.numpy(), theirs.numpy())
    ]
    assert differing == []
    for mine, theirs in zip(graph_params, eager_params, strict=True):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            a, b = graph_opt.state[mine][key].numpy(), eager_opt.state[theirs][key].numpy()
            assert np.array_equal(a, b), key
    assert graph_opt.state[graph_params[0]]["step"].item() == 3 + REPLAYS
    assert not np.array_equal(graph_params[0].numpy(), make_mlp(cuda0)[0][0].numpy())


def test_peak_memory_is_the_eager_steps_and_replays_keep_addresses(cuda0):
    params, _, step = make_mlp(cuda0, seed=1)
    for _ in range(3):
        step()
    vram.synchronize()
    vram.empty_cache()  # the eager step makes its library workspaces again, as the capture does
    base = vram.memory_allocated()
    vram.reset_peak_memory_stats()
    step()
    vram.synchronize()
    eager_peak = vram.max_memory_allocated() - base
    g = vram.CUDAGraph()
    vram.reset_peak_memory_stats()
    with vram.graph(g):
        step()
    graph_peak = vram.max_memory_allocated() - base
    print("eager peak", eager_peak, "graph peak", graph_peak)
    assert graph_peak == eager_peak > 0
    stats = vram.memory_stats()
    pointers = [p.data_ptr() for p in params]
    for _ in range(100):
        g.replay()
    vram.synchronize()
    after = vram.memory_stats()
    changed = {k: (stats[k], after[k]) for k in stats if stats[k] != after[k]}
    assert changed == {}
    assert [p.data_ptr() for p in params] == pointers


def _capture_temporaries(nbytes: int, pool=None) -> tuple[vram.CUDAGraph, vram.Tensor]:
    """A graph whose capture allocates ``nbytes`` twice (freed at its end), and its input
    (which must live as long as the graph replays)."""
    x = vram.ones(nbytes // 4)
    (x * 2.0) + 1.0  # warm-up: the kernels are compiled before the capture
    g = vram.CUDAGraph()
    with vram.graph(g, pool=pool):
        y = x * 2.0
        z = y + 1.0
        del y, z
    return g, x


def _pool_bytes(pool) -> int:
    return sum(s["total_size"] for s in vram.memory.memory_snapshot(pool))


def test_graphs_sharing_a_pool_use_the_memory_of_the_larger(cuda0):
    a, input_a = _capture_temporaries(64 * MiB)
    alone = _pool_bytes(a.pool())
    b, input_b = _capture_temporaries(48 * MiB, pool=a.pool())
    assert _pool_bytes(a.pool()) == alone  # b fits in what a needed
    c, input_c = _capture_temporaries(48 * MiB)  # a pool of its own
    print("pool of a and b", alone, "pool of c", _pool_bytes(c.pool()))
    assert 0 < _pool_bytes(c.pool()) < alone
    for graph in (a, b, c):
        graph.replay()
    vram.synchronize()
    pool_ab, pool_c = a.pool(), c.pool()
    a.reset()
    vram.empty_cache()
    assert _pool_bytes(pool_ab) == alone  # b still holds the pool
    b.reset()
    c.reset()
    vram.empty_cache()
    assert _pool_bytes(pool_ab) == 0 and _pool_bytes(pool_c) == 0


def test_graph_capture_record_stream_reuse(cuda0):
    side = vram.Stream(cuda0)
    n = 256 * 1024
    warm = vram.ones(n)
    warm * 2.0
    results = {}
    for reuse in (False, True):
        vram.memory.set_allocator_settings(f"graph_capture_record_stream_reuse:{reuse}")
        g = vram.CUDAGraph()
        with vram.graph(g):
            main = vram.current_stream()
            y = vram.ones(n)
            side.wait_stream(main)
            with vram.stream(side):
                y * 2.0
            y.record_stream(side)
            main.wait_stream(side)
            ptr = y.data_ptr()
            del y
            z = vram.ones(n)
            results[reuse] = z.data_ptr() == ptr
        g.replay()
        vram.synchronize()
        del z
    vram.memory.set_allocator_settings("graph_capture_record_stream_reuse:False")
    assert results == {False: False, True: True}


def test_make_graphed_callables_and_debug_dump(cuda0, tmp_path):
    w = vram.tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, device=cuda0)

    def first(a):
        return vram.mm(a, w) + 1.0

    a = vram.ones((2, 3), device=cuda0)
    graphed = vram.make_graphed_callables(first, (a,))
    inp = vram.tensor(np.full((2, 3), 3.0, dtype=np.float32), device=cuda0)
    expected = np.full((2, 3), 3.0, dtype=np.float32) @ w.numpy() + 1.0
    np.testing.assert_allclose(graphed(inp).numpy(), expected, rtol=1e-6)
    kept = vram.CUDAGraph(keep_graph=True)
    x = vram.ones(8)
    x.add_(1.0)  # warm-up: both kernels compiled before the capture
    x.mul_(1.0)
    with vram.graph(kept):
        x.add_(1.0)
        x.mul_(2.0)
    kept.debug_dump(str(tmp_path / "graph.dot"))
    assert "digraph" in (tmp_path / "graph.dot").read_text()
    kept.replay()
    assert x.numpy()[0] == 6.0


# ---- CUDA's answers to illegal work during capture, and the sim's ----------------------
def _probe(driver, device: int) -> list[tuple[str, str]]:
    """Run illegal (and legal) capture calls on ``driver``; (step, "ok" or error name)."""
    out: list[tuple[str, str]] = []

    def step(name: str, call) -> object:
        try:
            value = call()
        except vram.CudaError as exc:
            out.append((name, exc.name))
            return None
        out.append((name, "ok"))
        return value

    def end(s: int, name: str = "end") -> None:
        step(name, lambda: driver.stream_end_capture(s))

    def status(name: str, stream: int) -> None:
        out.append((name, driver.stream_capture_info(stream).status))

    s, other, side = (driver.stream_create(device) for _ in range(3))
    buf = driver.malloc(device, MiB)

    def memset(stream: int) -> None:
        driver.memset_d8(buf, 1, 1024, stream)

    # synchronizing the capturing stream; work after it; the end
    driver.stream_begin_capture(s, "global")
    memset(s)
    step("sync capturing stream", lambda: driver.stream_synchronize(s))
    status("status after", s)
    step("work after invalidation", lambda: memset(s))
    end(s)
    status("status after end", s)
    # querying the capturing stream (relaxed); synchronizing the device (relaxed)
    for what, call in (
        ("query capturing stream", lambda: driver.stream_query(s)),
        ("device synchronize", lambda: driver.device_synchronize(device)),
    ):
        driver.stream_begin_capture(s, "relaxed")
        memset(s)
        step(what, call)
        end(s, f"end after {what}")
    # an event recorded in the capture
    event = driver.event_create(device)
    driver.stream_begin_capture(s, "relaxed")
    memset(s)
    driver.event_record(event, s)
    step("query captured event", lambda: driver.event_query(event))
    step("sync captured event", lambda: driver.event_synchronize(event))
    end(s, "end after captured event")
    step("query captured event after end", lambda: driver.event_query(event))
    driver.event_record(event, other)
    driver.stream_synchronize(other)
    step("query re-recorded event", lambda: driver.event_query(event))
    # waiting on an event from outside the capture
    outside = driver.event_create(device)
    driver.event_record(outside, other)
    driver.stream_synchronize(other)
    driver.stream_begin_capture(s, "global")
    memset(s)
    step("wait on outside event", lambda: driver.stream_wait_event(s, outside))
    end(s, "end after outside wait")
    # a device malloc: global, then relaxed thread mode
    driver.stream_begin_capture(s, "global")
    memset(s)
    ptr = step("malloc in global capture", lambda: driver.malloc(device, MiB))
    end(s, "end after malloc")
    if ptr is not None:
        driver.free(device, ptr)
    driver.stream_begin_capture(s, "global")
    memset(s)
    previous = driver.thread_exchange_capture_mode("relaxed")
    ptr = step("malloc in relaxed thread mode", lambda: driver.malloc(device, MiB))
    driver.thread_exchange_capture_mode(previous)
    end(s, "end after relaxed malloc")
    if ptr is not None:
        driver.free(device, ptr)
    # other threads, by the capture's mode
    for mode in ("global", "thread_local", "relaxed"):
        driver.stream_begin_capture(s, mode)
        memset(s)
        thread = threading.Thread(
            target=lambda mode=mode: step(
                f"{mode}: other thread's malloc",
                lambda: driver.free(device, driver.malloc(device, MiB)),
            )
        )
        thread.start()
        thread.join()
        end(s, f"end {mode}")
    # a fork not joined back
    fork = driver.event_create(device)
    driver.stream_begin_capture(s, "global")
    memset(s)
    driver.event_record(fork, s)
    step("fork", lambda: driver.stream_wait_event(side, fork))
    status("side captures", side)
    memset(side)
    end(side, "end on the forked stream")
    end(s, "end unjoined")
    status("side after end", side)
    # begin twice, end when not capturing, the default stream, another thread's end
    driver.stream_begin_capture(s, "global")
    memset(s)
    step("begin twice", lambda: driver.stream_begin_capture(s, "global"))
    thread = threading.Thread(target=lambda: end(s, "end on another thread"))
    thread.start()
    thread.join()
    status("after another thread's end", s)
    end(s, "end on its thread")
    step("end when not capturing", lambda: driver.stream_end_capture(s))
    default = driver.default_stream(device)
    step("capture the default stream", lambda: driver.stream_begin_capture(default, "global"))
    if driver.stream_capture_info(default).status != "none":
        end(default, "end default stream")
    # an empty capture ends fine
    driver.stream_begin_capture(s, "global")
    graph = step("end an empty capture", lambda: driver.stream_end_capture(s))
    if graph is not None:
        out.append(("empty graph nodes", str(driver.graph_node_count(graph))))
        driver.graph_destroy(graph)
    driver.free(device, buf)
    return out


def test_illegal_work_during_capture_fails_as_on_the_sim(cuda0):
    cuda = _probe(cuda0.driver, cuda0.index)
    sim = _probe(SimDriver(device_count=1, capacity=1 << 30), 0)
    for (step, on_cuda), (_, on_sim) in zip(cuda, sim, strict=True):
        print(f"{step:40s} cuda: {on_cuda:45s} sim: {on_sim}")
    assert cuda == sim
