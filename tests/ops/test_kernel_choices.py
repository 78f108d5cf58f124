"""The launch choices of the bandwidth-bound kernels that bench/kernel_sweep.py compares
(``_pointwise.VecLoop``, ``_reduce.InnerTuning``, ``_rows.register_layout``): each plan
launches what its choice says (sim), every choice compiles with NVRTC (no GPU needed), and on
a GPU every choice gives the production launch's results (tails, splits, ties, padding)."""

from __future__ import annotations

import numpy as np
import pytest

import vram
import vram.nn.functional as F
from vram.driver import cuda_usable
from vram.ops import _layer_norm, _pointwise, _reduce, _softmax
from vram.ops._layer_norm import LayerNormPlan
from vram.ops._math import BINARY, UNARY
from vram.ops._pointwise import VEC_LOOP, PointwisePlan, VecLoop
from vram.ops._reduce import INNER, InnerTuning, ReducePlan, multiprocessors
from vram.ops._reduce_ops import ARGMAX, SUM, VAR
from vram.ops._rows import norm_layout, online_layout, register_layout, row_layout
from vram.ops._softmax import SoftmaxPlan

SIM = vram.device("sim:0")
LOOPS = (VecLoop(2, 256, 16), VecLoop(4, 256, 0), VecLoop(1, 128, 0))
INNERS = (
    InnerTuning(4, 4),
    InnerTuning(8, 4, threads=256, waves=2),
    InnerTuning(4, 1, interleave=True),
    InnerTuning(8, 4, interleave=True),
)
ROWS = ((32, 8, 256), (16, 8, 128), (128, 1, 128))  # threads, rows per block, bound
ONLINE = ((128, 2, 8), (256, 4, 3))  # threads, vectors loaded at once, blocks an SM


def t(shape, dt, device=SIM, seed=0, ints=False):
    rng = np.random.default_rng(seed)
    values = rng.integers(-3, 4, shape) if ints else rng.standard_normal(shape)
    return vram.tensor(values.astype(dt.np), device=device)


def _vector(plan: PointwisePlan):
    (launch,) = [launch for launch in plan.launches if "pointwise_vec" in launch.entry]
    return launch


def _sum_plan(x, dims, tuning=INNER, red=SUM, out2=None):
    d = x.dtype
    out = None if red is ARGMAX else d
    return ReducePlan(red, x, dims, False, d, d, out, out2, (1.0,) if red is VAR else (), tuning)


# ---- what each choice launches (sim) ---------------------------------------------------------


def test_a_vec_loop_sets_the_unroll_block_and_grid():
    a, b = t(1 << 16, vram.float32), t(1 << 16, vram.float32, seed=1)
    bounded = _vector(PointwisePlan(BINARY["add"], (a, b), None, VecLoop(2, 256, 1)))
    assert bounded.entry.startswith("vram::pointwise_vec<4, 2, 2, vram::Add<float>")
    assert bounded.block == (256, 1, 1)
    assert bounded.grid == (min(32, multiprocessors(SIM)), 1, 1)  # 16384 packs / 512 a block
    free = _vector(PointwisePlan(BINARY["add"], (a, b), None, VecLoop(4, 128, 0)))
    assert free.entry.startswith("vram::pointwise_vec<4, 4, 2, ")
    assert (free.block, free.grid) == ((128, 1, 1), (32, 1, 1))  # 16384 packs / 512 a block
    production = _vector(PointwisePlan(BINARY["add"], (a, b), None))
    assert production.entry.startswith(f"vram::pointwise_vec<4, {VEC_LOOP.unroll}, 2, ")
    got = PointwisePlan(BINARY["add"], (a, b), None, VecLoop(4, 128, 0)).binary(a, b, (1,))
    np.testing.assert_array_equal(got.numpy(), (a + b).numpy())


def test_an_inner_tuning_sets_the_threads_splits_and_kernel():
    x = t(1 << 20, vram.float32)
    sms = multiprocessors(SIM)
    tuning = InnerTuning(8, 4, threads=256, waves=2, interleave=True)
    first, second = _sum_plan(x, (0,), tuning).launches
    assert first.entry.endswith(", int, 4, 8, 4, true>")
    assert first.block == (256, 1, 1)
    # splits fill 2 x 2048 threads an SM in blocks of 256, at most one per 8 loads a thread
    assert first.grid == (1, min(sms * 16, (1 << 18) // (256 * 8)), 1)
    assert "reduce_partials" in second.entry
    production = _sum_plan(x, (0,)).launches[0]
    interleave = "true" if INNER.interleave else "false"
    tune = f"{INNER.unroll}, {INNER.accumulators}, {interleave}"
    assert production.entry.endswith(f", int, 4, {tune}>")
    # one block per output (no splits): interleaving has nothing to interleave
    (rows,) = _sum_plan(t((64, 64), vram.float32), (1,), tuning).launches
    assert rows.entry.endswith(", 4, 8, 4, false>") and rows.grid[1] == 1
    got = _sum_plan(x, (0,), tuning)(x)[0]
    assert float(got) == pytest.approx(float(vram.sum(x)), rel=1e-5)


def test_register_layout_gives_the_layouts_row_layout_picks():
    assert row_layout(1024, 1 << 16, 4, 4, 132) == register_layout(
        1024, 1 << 16, 4, 132, 32, 4, 128
    )
    assert row_layout(8192, 8192, 2, 4, 132) == register_layout(8192, 8192, 2, 132, 512, 1, 1024)
    wide = register_layout(8192, 8192, 2, 132, 128, 1, 128)
    assert (wide.vec, wide.items, wide.threads, wide.rows) == (8, 8, 128, 1)
    for threads, rows, bound in ((48, 1, 64), (256, 2, 256), (64, 1, 2048)):
        with pytest.raises(ValueError, match="no row layout"):
            register_layout(1024, 64, 4, 132, threads, rows, bound)
    online = online_layout(8192, 8192, 2, 132, 256, 2, 4)
    assert online.online and (online.vec, online.items, online.threads, online.blocks) == (
        8,
        2,
        256,
        4,
    )
    assert row_layout(20_000, 8, 4, 4, 132).online
    for threads, blocks in ((48, 1), (2048, 1), (512, 8)):
        with pytest.raises(ValueError, match="no online layout"):
            online_layout(8192, 64, 2, 132, threads, 2, blocks)


def test_layer_norm_takes_wide_16_bit_rows_online_when_there_are_many():
    sms = 132
    wide = norm_layout(8192, 8192, 2, 4, sms)
    assert wide == online_layout(8192, 8192, 2, sms, 128, 2, 8)
    assert norm_layout(4096, 8192, 2, 4, sms).online  # 256 threads in registers
    # rows that stay in registers: 32-bit, short, too few to fill every multiprocessor
    for n, rows, item in ((8192, 8192, 4), (2048, 8192, 2), (1024, 8192, 2), (8192, 512, 2)):
        assert norm_layout(n, rows, item, 4, sms) == row_layout(n, rows, item, 4, sms)
    assert norm_layout(20_000, 8192, 2, 4, sms) == row_layout(20_000, 8192, 2, 4, sms)


def test_a_16_bit_row_of_up_to_1024_takes_two_warps_of_two_vectors():
    assert row_layout(1024, 1 << 16, 2, 4, 132) == register_layout(
        1024, 1 << 16, 2, 132, 64, 2, 128
    )
    assert row_layout(512, 1 << 16, 2, 4, 132).threads == 32  # 2 vectors a thread in one warp
    assert row_layout(1024, 1 << 16, 4, 4, 132).threads == 32  # 32-bit rows: one warp


def test_row_plans_take_the_layout_they_are_given():
    x = t((64, 1024), vram.bfloat16)
    layout = register_layout(1024, 64, 2, multiprocessors(SIM), 16, 8, 128)
    (launch,) = SoftmaxPlan(x, 1, vram.bfloat16, False, layout).launches
    assert launch.entry.endswith(", false, 8, 8, 128>") and launch.block == (16, 2, 1)
    got = SoftmaxPlan(x, 1, vram.bfloat16, False, layout)(x)
    np.testing.assert_array_equal(got.numpy(), F.softmax(x, 1).numpy())
    w, b = t(1024, vram.bfloat16, seed=1), t(1024, vram.bfloat16, seed=2)
    (launch,) = LayerNormPlan(x, (1024,), w, b, layout).launches
    assert launch.entry.endswith(", 8, 8, 128>")
    got = LayerNormPlan(x, (1024,), w, b, layout)(x, w, b, 1e-5)
    np.testing.assert_array_equal(got.numpy(), F.layer_norm(x, (1024,), w, b).numpy())
    online = online_layout(1024, 64, 2, multiprocessors(SIM), 128, 4, 6)
    (launch,) = LayerNormPlan(x, (1024,), w, b, online).launches
    assert launch.entry.endswith(", 8, 4, 128, 6>") and launch.block == (128, 1, 1)
    got = LayerNormPlan(x, (1024,), w, b, online)(x, w, b, 1e-5)
    np.testing.assert_array_equal(got.numpy(), F.layer_norm(x, (1024,), w, b).numpy())


# ---- every choice compiles (NVRTC, no GPU) ---------------------------------------------------


def test_every_choice_compiles():
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    names: dict[str, set[str]] = {}

    def add(plan) -> None:
        for launch in plan.launches:
            names.setdefault(launch.work.source, set()).add(launch.entry)

    a = t(1 << 12, vram.bfloat16)
    for loop in LOOPS:
        add(PointwisePlan(UNARY["exp"], (a,), None, loop))
    x, ties = t(1 << 16, vram.float32), t((8, 1 << 12), vram.float32, ints=True)
    for tuning in INNERS:
        add(_sum_plan(x, (0,), tuning))
    # the ops whose combine is not a sum, with several accumulators and interleaved splits
    add(_sum_plan(ties, (1,), INNERS[-1], ARGMAX, vram.int64))
    add(_sum_plan(x, (0,), INNERS[-1], VAR))
    rows = t((16, 1024), vram.bfloat16)
    w = t(1024, vram.float32)
    for threads, per_block, bound in ROWS:
        layout = register_layout(1024, 16, 2, 132, threads, per_block, bound)
        add(SoftmaxPlan(rows, 1, vram.bfloat16, True, layout))
        add(LayerNormPlan(rows, (1024,), w, w, layout))
    for threads, unroll, blocks in ONLINE:
        add(
            LayerNormPlan(
                rows, (1024,), w, w, online_layout(1024, 16, 2, 132, threads, unroll, blocks)
            )
        )
    sources = {_pointwise.source(), _reduce.source(), _softmax.source(), _layer_norm.source()}
    assert set(names) == sources
    for source, entries in names.items():
        program = compile_program(source, "sm_90", tuple(sorted(entries)))
        assert program.image[:4] == b"\x7fELF"


# ---- on a GPU: every choice gives the production launch's results -------------------------

CUDA = "cuda:0"


@pytest.mark.parametrize("dt", [vram.float32, vram.bfloat16])
@pytest.mark.parametrize("n", [7, 12_345, (1 << 20) + 3])
@pytest.mark.gpu
@pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")
def test_vec_loops_give_the_production_results(dt, n):
    a, b = t(n, dt, CUDA), t(n, dt, CUDA, seed=1)
    for loop in LOOPS:
        added = PointwisePlan(BINARY["add"], (a, b), None, loop).binary(a, b, (1,))
        np.testing.assert_array_equal(added.numpy(), (a + b).numpy())
        exp = PointwisePlan(UNARY["exp"], (a,), None, loop).unary(a, ())
        np.testing.assert_array_equal(exp.numpy(), vram.exp(a).numpy())


@pytest.mark.parametrize("shape", [(3_000_001,), (64, 100_000), (1000, 1024)])
@pytest.mark.gpu
@pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")
def test_inner_tunings_give_the_production_results(shape):
    x = t(shape, vram.float32, CUDA)
    ties = t(shape, vram.float32, CUDA, seed=1, ints=True)  # many equal maxima: the first wins
    dims = (len(shape) - 1,)
    want_sum = _sum_plan(x, dims)(x)[0].numpy().astype(np.float64)
    want_arg = _sum_plan(ties, dims, INNER, ARGMAX, vram.int64)(ties)[1].numpy()
    want_var = _sum_plan(x, dims, INNER, VAR)(x)[0].numpy()
    scale = np.abs(x.numpy().astype(np.float64)).sum(axis=-1)
    for tuning in INNERS:
        got = _sum_plan(x, dims, tuning)(x)[0].numpy().astype(np.float64)
        assert np.all(np.abs(got - want_sum) <= 1e-6 * scale), tuning
        got_arg = _sum_plan(ties, dims, tuning, ARGMAX, vram.int64)(ties)[1].numpy()
        np.testing.assert_array_equal(got_arg, want_arg, err_msg=str(tuning))
        got_var = _sum_plan(x, dims, tuning, VAR)(x)[0].numpy()
        np.testing.assert_allclose(got_var, want_var, rtol=1e-5, err_msg=str(tuning))


@pytest.mark.parametrize("dt", [vram.float32, vram.bfloat16])
@pytest.mark.parametrize("n", [1000, 1001, 1024, 8192])
@pytest.mark.gpu
@pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")
def test_row_layouts_give_the_production_results(dt, n):
    rows = 300
    x = t((rows, n), dt, CUDA)
    w, b = t(n, dt, CUDA, seed=1), t(n, dt, CUDA, seed=2)
    rtol = 1e-5 if dt is vram.float32 else 1e-2
    item = dt.itemsize
    sms = multiprocessors(x.device)
    for threads, per_block, bound in ROWS:
        if row_layout(n, rows, item, 4, sms).online:
            continue
        layout = register_layout(n, rows, item, sms, threads, per_block, bound)
        if layout.items * layout.vec > 64:  # more than the register file holds well
            continue
        for log in (False, True):
            got = SoftmaxPlan(x, 1, dt, log, layout)(x).numpy().astype(np.float64)
            want = (F.log_softmax if log else F.softmax)(x, 1).numpy().astype(np.float64)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, err_msg=str(layout))
        got = LayerNormPlan(x, (n,), w, b, layout)(x, w, b, 1e-5).numpy().astype(np.float64)
        want = F.layer_norm(x, (n,), w, b).numpy().astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, err_msg=str(layout))
    want = F.layer_norm(x, (n,), w, b).numpy().astype(np.float64)
    for threads, unroll, blocks in ONLINE:
        layout = online_layout(n, rows, item, sms, threads, unroll, blocks)
        got = LayerNormPlan(x, (n,), w, b, layout)(x, w, b, 1e-5).numpy().astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, err_msg=str(layout))


@pytest.mark.parametrize("n", [4096, 8192])
@pytest.mark.gpu
@pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")
def test_wide_16_bit_layer_norm_online_gives_the_register_layouts_results(n):
    rows = 8 * multiprocessors(vram.device(CUDA))  # enough rows for norm_layout's online route
    x = t((rows, n), vram.bfloat16, CUDA)
    w, b = t(n, vram.float32, CUDA, seed=1), t(n, vram.float32, CUDA, seed=2)
    got = F.layer_norm(x, (n,), w, b)
    assert LayerNormPlan(x, (n,), w, b).launches[0].entry.startswith("vram::layer_norm_online<")
    registers = row_layout(n, rows, 2, 4, multiprocessors(x.device))
    want = LayerNormPlan(x, (n,), w, b, registers)(x, w, b, 1e-5)
    np.testing.assert_allclose(
        got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=1e-2, atol=1e-2
    )


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")
def test_layer_norm_with_misaligned_weights_matches_aligned_ones():
    x = t((64, 1024), vram.bfloat16, CUDA)
    params = t(2 * 1025, vram.float32, CUDA, seed=1)
    w, b = params[1:1025], params[1026:]  # 4-byte aligned only: the element-wise launch
    got = F.layer_norm(x, (1024,), w, b).numpy().astype(np.float64)
    want = F.layer_norm(x, (1024,), w.clone(), b.clone()).numpy().astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
