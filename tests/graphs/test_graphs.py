"""CUDA graphs on sim: capture and replay, a captured MLP step against the eager one, the
graph's private pool (peak, stable addresses, sharing, release), make_graphed_callables."""

from __future__ import annotations

import numpy as np
import pytest

import vram
from vram.memory import allocator_for

MiB = 1 << 20
REPLAYS = 20  # the GPU test replays 1,000 times


def make_mlp(
    device, seed: int = 0, batch: int = 32, d_in: int = 16, hidden: int = 64, d_out: int = 8
):
    """A two-layer MLP's parameters and its forward-and-update step: the forward pass
    (addmm with a ReLU epilogue, addmm), the gradients of a mean squared error by hand (vram
    has no autograd: matmuls and elementwise ops), and a fused, capturable AdamW step."""
    rng = np.random.default_rng(seed)

    def t(a: np.ndarray) -> vram.Tensor:
        return vram.tensor(a.astype(np.float32), device=device)

    x, target = t(rng.standard_normal((batch, d_in))), t(rng.standard_normal((batch, d_out)))
    w1, b1 = t(rng.standard_normal((hidden, d_in)) * 0.3), t(rng.standard_normal(hidden) * 0.1)
    w2, b2 = t(rng.standard_normal((d_out, hidden)) * 0.3), t(rng.standard_normal(d_out) * 0.1)
    params = [w1, b1, w2, b2]
    for p in params:
        p.grad = vram.zeros(p.shape, device=device)
    ones = vram.ones((1, batch), device=device)
    opt = vram.optim.AdamW(params, lr=1e-2, fused=True, capturable=True)

    def step() -> None:
        h = vram.addmm(b1, x, w1.t(), activation="relu")
        y = vram.addmm(b2, h, w2.t())
        dy = (y - target) * (2.0 / (batch * d_out))
        vram.mm(dy.t(), h, out=w2.grad)
        vram.mm(ones, dy, out=b2.grad.view(1, d_out))
        dh = vram.mm(dy, w2)
        relu_mask = 1.0 - vram._foreach_maximum([1.0 - h * 1e30], 0.0)[0]  # 1 where h > 0
        dz = dh * relu_mask
        vram.mm(dz.t(), x, out=w1.grad)
        vram.mm(ones, dz, out=b1.grad.view(1, hidden))
        opt.step()

    return params, opt, step


def test_capture_records_the_work_and_replay_runs_it(sim0):
    x = vram.ones(4, device=sim0)
    g = vram.CUDAGraph()
    with vram.graph(g):
        x.add_(1.0)
        y = x * 2.0
        assert vram.is_current_stream_capturing()
    assert not vram.is_current_stream_capturing()
    assert x.numpy().tolist() == [1, 1, 1, 1]  # captured, not run
    for _ in range(3):
        g.replay()
    assert x.numpy().tolist() == [4, 4, 4, 4] and y.numpy().tolist() == [8, 8, 8, 8]


def test_a_replayed_mlp_step_is_bitwise_the_eager_step(sim0):
    eager_params, eager_opt, eager_step = make_mlp(sim0)
    graph_params, graph_opt, graph_step = make_mlp(sim0)
    for _ in range(3):  # warm-up: the optimizer makes its state
        eager_step()
        graph_step()
    g = vram.CUDAGraph()
    with vram.graph(g):
        graph_step()
    for _ in range(REPLAYS):
        eager_step()
        g.replay()
    for mine, theirs in zip(graph_params, eager_params, strict=True):
        assert np.array_equal(mine.numpy(), theirs.numpy())
    for mine, theirs in zip(graph_params, eager_params, strict=True):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert np.array_equal(
                graph_opt.state[mine][key].numpy(), eager_opt.state[theirs][key].numpy()
            )
    assert graph_opt.state[graph_params[0]]["step"].item() == 3 + REPLAYS


def test_the_graph_peak_is_the_eager_steps_and_replays_allocate_nothing(sim0):
    params, _, step = make_mlp(sim0)
    for _ in range(3):
        step()
    vram.synchronize()
    base = vram.memory_allocated()
    vram.reset_peak_memory_stats()
    step()
    eager_peak = vram.max_memory_allocated() - base
    assert vram.memory_allocated() == base
    g = vram.CUDAGraph()
    vram.reset_peak_memory_stats()
    with vram.graph(g):
        step()
    assert vram.max_memory_allocated() - base == eager_peak > 0
    stats = vram.memory_stats()
    pointers = [p.data_ptr() for p in params]
    for _ in range(5):
        g.replay()
        assert vram.memory_stats() == stats  # no allocation, no free, no new segment
        assert [p.data_ptr() for p in params] == pointers


def test_temporaries_live_in_the_graphs_pool_at_the_same_addresses(sim0):
    x = vram.ones(1024, device=sim0)
    g = vram.CUDAGraph()
    with vram.graph(g):
        y = x * 3.0
        z = y + 1.0
    pool = g.pool()
    segments = vram.memory.memory_snapshot(pool)
    assert segments and {s["segment_pool_id"] for s in segments} == {pool}
    inside = [(s["address"], s["address"] + s["total_size"]) for s in segments]
    assert all(any(lo <= t.data_ptr() < hi for lo, hi in inside) for t in (y, z))
    before = (y.data_ptr(), z.data_ptr())
    x.fill_(2.0)
    g.replay()
    assert (y.data_ptr(), z.data_ptr()) == before
    assert z.numpy()[0] == 7.0
    eager = x * 3.0  # the default pool: never the graph's memory
    assert not any(lo <= eager.data_ptr() < hi for lo, hi in inside)


def _capture_temporaries(nbytes: int, pool=None) -> vram.CUDAGraph:
    """A graph whose capture allocates ``nbytes`` twice (freed at its end). Its input is
    freed on return: these graphs are never replayed."""
    x = vram.ones(nbytes // 4, device="sim:0")
    g = vram.CUDAGraph()
    with vram.graph(g, pool=pool):
        y = x * 2.0
        z = y + 1.0
        del y, z
    return g


def test_graphs_sharing_a_pool_use_the_memory_of_the_larger(sim0):
    base = vram.memory_reserved()
    a = _capture_temporaries(8 * MiB)
    alone = vram.memory_reserved() - base  # the input x (freed since) and the pool
    pool_a = sum(s["total_size"] for s in vram.memory.memory_snapshot(a.pool()))
    b = _capture_temporaries(6 * MiB, pool=a.pool())
    assert sum(s["total_size"] for s in vram.memory.memory_snapshot(a.pool())) == pool_a
    assert vram.memory_reserved() - base == alone
    c = _capture_temporaries(6 * MiB)  # a pool of its own: the sum
    pool_c = sum(s["total_size"] for s in vram.memory.memory_snapshot(c.pool()))
    assert pool_c > 0 and vram.memory_reserved() - base == alone + pool_c
    assert b.pool() == a.pool() != c.pool()


def test_a_handle_shares_a_pool_among_graphs(sim0):
    handle = vram.graph_pool_handle()
    assert handle[0] == 0 and handle[1] > 0 and handle != vram.graph_pool_handle()
    a = _capture_temporaries(4 * MiB, pool=handle)
    b = _capture_temporaries(4 * MiB, pool=handle)
    assert a.pool() == b.pool() == handle
    assert len(vram.memory.memory_snapshot(handle)) == 1  # one 20 MiB segment, shared


def test_a_pools_memory_returns_when_its_last_graph_is_reset(sim0):
    base = vram.memory_reserved()
    a = _capture_temporaries(8 * MiB)
    b = _capture_temporaries(8 * MiB, pool=a.pool())
    pool_bytes = sum(s["total_size"] for s in vram.memory.memory_snapshot(a.pool()))
    a.reset()
    vram.empty_cache()
    assert vram.memory_reserved() == base + pool_bytes  # the inputs went; b holds the pool
    b.reset()
    vram.empty_cache()
    assert vram.memory_reserved() == base
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        a.pool()


def test_outputs_held_after_reset_keep_their_memory(sim0):
    x = vram.ones(1024, device=sim0)
    g = vram.CUDAGraph()
    with vram.graph(g):
        y = x + 1.0
    g.replay()
    g.reset()
    vram.empty_cache()
    assert y.numpy()[0] == 2.0  # the segment stays while y lives
    ptr = y.data_ptr()
    del y
    vram.empty_cache()
    assert not any(
        s["address"] <= ptr < s["address"] + s["total_size"] for s in vram.memory.memory_snapshot()
    )


def test_a_mempool_can_be_captured_into(sim0):
    pool = vram.MemPool()
    g = vram.CUDAGraph()
    x = vram.ones(1024, device=sim0)
    with vram.graph(g, pool=pool):
        y = x + 1.0
    assert g.pool() == pool.id and pool.use_count() == 2
    assert [s["segment_pool_id"] for s in pool.snapshot()] == [pool.id]
    g.reset()
    assert pool.use_count() == 1
    del y


def test_make_graphed_callables_replays_chained_forward_callables(sim0):
    w = vram.tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, device=sim0)

    def first(a):
        return vram.mm(a, w) + 1.0

    def second(b):
        return (b * 2.0, b - 1.0)

    a = vram.ones((2, 3), device=sim0)
    b = vram.ones((2, 4), device=sim0)
    graphed_first, graphed_second = vram.make_graphed_callables((first, second), ((a,), (b,)))
    assert graphed_first.cuda_graph.pool() == graphed_second.cuda_graph.pool()
    inp = vram.tensor(np.full((2, 3), 3.0, dtype=np.float32), device=sim0)
    out = graphed_first(inp)
    doubled, less = graphed_second(out)
    expected = np.full((2, 3), 3.0, dtype=np.float32) @ w.numpy() + 1.0
    assert np.array_equal(out.numpy(), expected)
    assert np.array_equal(doubled.numpy(), expected * 2) and np.array_equal(
        less.numpy(), expected - 1
    )
    with pytest.raises(ValueError, match="captured for"):
        graphed_first(vram.ones((3, 3), device=sim0))
    single = vram.make_graphed_callables(first, (a,))
    assert np.array_equal(single(inp).numpy(), expected)


def test_debug_dump_writes_the_graph(sim0, tmp_path):
    x = vram.ones(8, device=sim0)
    kept = vram.CUDAGraph(keep_graph=True)
    with vram.graph(kept):
        x.add_(1.0)
        x.mul_(2.0)
    kept.debug_dump(str(tmp_path / "kept.dot"))
    text = (tmp_path / "kept.dot").read_text()
    assert text.startswith("digraph") and "2 nodes" in text
    kept.replay()  # instantiated by the first replay
    assert x.numpy()[0] == 4.0
    plain = vram.CUDAGraph()
    with vram.graph(plain):
        x.add_(1.0)
    with pytest.warns(UserWarning, match="debug not enabled"):
        plain.debug_dump(str(tmp_path / "plain.dot"))
    assert not (tmp_path / "plain.dot").exists()


def test_an_empty_capture_warns(sim0):
    g = vram.CUDAGraph()
    with pytest.warns(UserWarning, match="The CUDA Graph is empty"), vram.graph(g):
        pass


def test_a_graph_replays_on_any_stream_of_its_device(sim0):
    x = vram.zeros(4, device=sim0)
    g = vram.CUDAGraph()
    with vram.graph(g):
        x.add_(1.0)
    with vram.stream(vram.Stream(sim0)):
        g.replay()
    g.replay()  # the default stream
    assert x.numpy()[0] == 2.0


def test_capture_arguments_are_checked(sim0):
    g = vram.CUDAGraph()
    with pytest.raises(RuntimeError, match="non-default stream"):
        g.capture_begin()
    with pytest.raises(ValueError, match="capture_error_mode"), vram.stream(vram.Stream(sim0)):
        g.capture_begin(capture_error_mode="local")
    with pytest.raises(TypeError, match="pool"), vram.stream(vram.Stream(sim0)):
        g.capture_begin(pool=(1, 2))
    with pytest.raises(RuntimeError, match="before capture_begin"):
        g.capture_end()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    assert allocator_for(sim0).routes == [] and allocator_for(sim0).lifetimes.captures == 0
