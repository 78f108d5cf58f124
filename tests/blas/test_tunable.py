"""TunableOp on the simulated GPU: deterministic choice, PyTorch's file, settings."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import vram
from vram.blas import _ops, _tunable
from vram.cuda import tunable

VALIDATORS = [
    ("VRAM_VERSION", _tunable.validators(_tunable.sim_library(0))["VRAM_VERSION"]),
    ("CUBLAS_VERSION", "sim"),
    ("CUBLASLT_VERSION", "sim"),
]


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """Every test starts with TunableOp off, no results, a results file in tmp_path."""
    for name in ("ENABLED", "TUNING", "FILENAME", "MAX_TUNING_DURATION_MS"):
        monkeypatch.delenv(f"VRAM_TUNABLEOP_{name}", raising=False)
        monkeypatch.delenv(f"PYTORCH_TUNABLEOP_{name}", raising=False)
    _tunable._reset()
    tunable.write_file_on_exit(False)
    tunable.set_filename(str(tmp_path / "results.csv"))
    yield tmp_path
    _tunable._reset()


def operands(sim0, m, k, n):
    rng = np.random.default_rng(0)
    a = vram.tensor(rng.standard_normal((m, k)).astype(np.float32), device=sim0)
    b = vram.tensor(rng.standard_normal((k, n)).astype(np.float32), device=sim0)
    return a, b


def test_off_by_default_and_nothing_is_tuned(sim0):
    assert not tunable.is_enabled() and tunable.tuning_is_enabled()
    a, b = operands(sim0, 8, 8, 8)
    a @ b
    assert tunable.get_results() == ()


def test_tuning_picks_deterministically_by_the_sims_cost_model(sim0):
    tunable.enable()
    small = operands(sim0, 8, 8, 8)
    deep = operands(sim0, 64, 4096, 64)  # one output tile, long K: split-K wins
    for _ in range(2):
        c = small[0] @ small[1]
        d = deep[0] @ deep[1]
    np.testing.assert_allclose(d.numpy(), deep[0].numpy() @ deep[1].numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(c.numpy(), small[0].numpy() @ small[1].numpy(), rtol=1e-5)
    results = {(op, params): solution for op, params, solution, _ in tunable.get_results()}
    assert results == {
        ("GemmTunableOp_float_NN", "nn_8_8_8_ld_8_8_8"): "Default",
        ("GemmTunableOp_float_NN", "nn_64_64_4096_ld_64_4096_64"): "Gemm_Cublaslt_NN_3",
    }
    assert _tunable.state.tunings == 2  # each problem tuned once, the second calls reused it


def test_problem_names_follow_pytorch(sim0):
    tunable.enable()
    a, b = operands(sim0, 6, 4, 5)
    a.t().contiguous().t() @ b  # a column-major input: read as its transpose
    bmm_a = vram.ones((3, 6, 4), dtype=vram.bfloat16, device=sim0)
    vram.bmm(bmm_a, vram.ones((3, 4, 5), dtype=vram.bfloat16, device=sim0))
    names = {(op, params) for op, params, _, _ in tunable.get_results()}
    assert names == {
        ("GemmTunableOp_float_NT", "nt_5_6_4_ld_5_6_5"),
        ("GemmStridedBatchedTunableOp_BFloat16_NN", "nn_5_6_4_B_3_ld_5_4_5"),
    }


def test_results_file_is_pytorchs_csv_and_is_read_back(sim0, fresh):
    tunable.enable()
    a, b = operands(sim0, 64, 4096, 64)
    a @ b
    path = fresh / "results.csv"
    assert tunable.write_file(str(path))
    lines = path.read_text().splitlines()
    assert lines[:3] == [f"Validator,{key},{value}" for key, value in VALIDATORS]
    op, params, solution, ms = lines[3].split(",")
    assert (op, params, solution) == (
        "GemmTunableOp_float_NN",
        "nn_64_64_4096_ld_64_4096_64",
        "Gemm_Cublaslt_NN_3",
    )
    assert float(ms) > 0
    _tunable._reset()
    tunable.write_file_on_exit(False)
    assert tunable.read_file(str(path))
    assert [r[:3] for r in tunable.get_results()] == [(op, params, solution)]


def test_a_result_from_the_file_is_used_without_tuning(sim0, fresh):
    path = fresh / "hand.csv"
    rows = [f"Validator,{k},{v}" for k, v in VALIDATORS]
    rows.append("GemmTunableOp_float_NN,nn_8_8_8_ld_8_8_8,Gemm_Cublaslt_NN_1,0.5")
    path.write_text("\n".join(rows) + "\n")
    tunable.set_filename(str(path))
    tunable.enable()
    a, b = operands(sim0, 8, 8, 8)
    out = vram.empty((8, 8), device=sim0)
    pointers = a.data_ptr() | b.data_ptr() | out.data_ptr()
    plan = _ops.product_plan(out, a, b, pointers)
    assert plan.library.algo == 2  # candidate 1 + Default
    assert _tunable.state.tunings == 0


def test_a_file_from_other_libraries_is_rejected(fresh):
    path = fresh / "other.csv"
    path.write_text(
        "Validator,VRAM_VERSION,0.0.1\nValidator,CUBLAS_VERSION,sim\n"
        "Validator,CUBLASLT_VERSION,sim\nGemmTunableOp_float_NN,nn_8_8_8_ld_8_8_8,Default,1\n"
    )
    with pytest.warns(RuntimeWarning, match="its results are not used"):
        assert not tunable.read_file(str(path))
    assert tunable.get_results() == ()


def test_a_second_process_reuses_the_file_and_tunes_nothing(fresh):
    script = textwrap.dedent(
        """
        import numpy as np, vram
        from vram.blas import _ops, _tunable
        with vram.device("sim:0"):
            a = vram.tensor(np.ones((64, 4096), np.float32))
            b = vram.tensor(np.ones((4096, 64), np.float32))
            c = a @ b
            assert float(c.numpy()[0, 0]) == 4096.0
        print(_tunable.state.tunings, len(vram.cuda.tunable.get_results()))
        """
    )
    env = {
        **__import__("os").environ,
        "VRAM_TUNABLEOP_ENABLED": "1",
        "VRAM_TUNABLEOP_FILENAME": str(fresh / "shared.csv"),
    }
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["1", "1"]  # tuned, and written at exit
    assert (fresh / "shared_sim0.csv").exists()
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["0", "1"]  # read back: nothing tuned


def test_a_candidate_that_disagrees_with_default_is_rejected():
    library = _tunable.sim_library(0)
    problem = _tunable.make_problem("float32", 0, 0, 4, 4, 4, (4, 4, 4), 1, False, 0, library)
    reference = np.arange(16, dtype=np.float32).reshape(4, 4)
    results = {0: reference, 1: reference + 1, 2: reference * (1 + 1e-6), 3: None}
    times = {0: 3.0, 1: 1.0, 2: 2.0, 3: 0.5}  # 1 is fastest but wrong; 3 cannot run
    best = _tunable.tune(problem, [0, 1, 2, 3], results.get, times.get, 1e-4)
    assert best == 2
    assert tunable.get_results()[0][2] == "Gemm_Cublaslt_NN_1"


def test_without_tuning_a_new_problem_runs_default_and_is_not_recorded(sim0):
    tunable.enable()
    tunable.tuning_enable(False)
    a, b = operands(sim0, 8, 8, 8)
    a @ b
    assert tunable.get_results() == ()


def test_environment_variables_win_and_pytorchs_names_are_read(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAM_TUNABLEOP_ENABLED", "1")
    monkeypatch.setenv("PYTORCH_TUNABLEOP_TUNING", "0")
    monkeypatch.setenv("PYTORCH_TUNABLEOP_MAX_TUNING_DURATION_MS", "7")
    _tunable._reset()
    tunable.enable(False)
    tunable.tuning_enable(True)
    tunable.set_max_tuning_duration(50)
    assert tunable.is_enabled() and not tunable.tuning_is_enabled()
    assert tunable.get_max_tuning_duration() == 7
    tunable.set_max_tuning_iterations(3)
    assert tunable.get_max_tuning_iterations() == 3


def test_filename_with_device_ordinal(sim0):
    tunable.set_filename("runs/tuned.csv", insert_device_ordinal=True)
    assert tunable.get_filename() == "runs/tuned_sim0.csv"
    tunable.set_filename("tuned%d_final.csv", insert_device_ordinal=True)
    assert tunable.get_filename() == "tuned_sim0_final.csv"


def test_validators_are_named_pairs():
    assert tunable.get_validators()[0][0] == "VRAM_VERSION"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        # a field past the csv module's 128 KiB limit raised its internal _csv.Error
        (b"Validator,CUBLAS_VERSION," + b"x" * (200 << 10) + b"\n", "field larger than"),
        (b"\xff\xfe\x00binary", "codec can't decode"),
        (b"GemmTunableOp_float_NN,nn_8_8_8_ld_8_8_8,Default,fast\n", "could not convert"),
    ],
    ids=["long-field", "binary", "bad-time"],
)
def test_a_file_that_cannot_be_read_returns_false(fresh, content, why):
    path = fresh / "bad.csv"
    path.write_bytes(b"".join(f"Validator,{k},{v}\n".encode() for k, v in VALIDATORS) + content)
    with pytest.warns(RuntimeWarning, match=f"cannot read .*{why}"):
        assert tunable.read_file(str(path)) is False
    assert tunable.get_results() == ()
