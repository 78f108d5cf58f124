"""The ``vram`` command, run in-process through ``main``; and the README's set-up commands."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import vram
from vram import cli

ROOT = Path(__file__).resolve().parents[1]


def test_info_lists_versions_devices_configuration_and_environment(capsys, monkeypatch):
    monkeypatch.setenv("VRAM_SIM_MEMORY", "16GiB")
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for heading in ("Versions", "Devices", "Allocator configuration", "Environment"):
        assert heading in out
    for name in ("numpy", "cuda-bindings", "cuda-core", "NVRTC", "python"):
        assert name in out
    assert "sim:0" in out and "sim:1" in out
    assert "vram simulated GPU" in out
    assert "expandable_segments" in out
    assert re.search(r"VRAM_SIM_MEMORY\s*\S\s*16GiB", out)
    assert re.search(r"VRAM_ALLOC_CONF\s*\S\s*\(unset\)", out)


def test_demo_runs_on_sim_and_shows_queued_then_completed_work(capsys):
    assert cli.main(["demo", "--device", "sim:0"]) == 0
    out = capsys.readouterr().out
    assert "vram demo on sim:0" in out
    assert "1. pipeline" in out and "2. the next allocation" in out
    assert "kept until the copy has run" in out
    # deferred mode: the three fills are queued before producer.synchronize() runs them
    assert re.search(r"queue fill of \w with 3s\s+3\s+2\s+0/5", out)
    assert re.search(r"producer\.synchronize\(\): every fill has run\s+0\s+3\s+3/6", out)
    assert re.search(r"record_stream: alloc -> \w; \w is kept for the copy", out)
    assert re.search(r"record_use: alloc -> \w at once", out)
    assert "demo finished: every batch arrived intact" in out
    assert vram.sim.driver().deferred_depth == 0


def test_demo_rejects_bad_arguments(capsys):
    assert cli.main(["demo", "--batches", "0", "--device", "sim:0"]) == 2
    assert "--batches" in capsys.readouterr().err
    assert cli.main(["demo", "--device", "cpu"]) == 2


def test_bad_or_missing_subcommand_exits_non_zero(capsys):
    assert cli.main(["no-such-command"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert cli.main([]) == 2


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"vram {vram.__version__}"


def test_a_tool_that_cannot_be_imported_is_one_line_with_status_2(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "vram.tools.replay", None)  # as a broken install
    assert cli.main(["replay", "whatever.pickle"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vram replay: error:") and err.count("\n") == 1


@pytest.mark.parametrize("command", ["viz", "replay", "trace", "stats", "explain", "bench"])
def test_every_command_parses_its_arguments_in_the_cli(command, capsys):
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: vram {command} ")
    assert cli.main([command, "--no-such-option"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"vram {command}: error:")


def _snapshot() -> dict:
    segment = 2 << 20

    def event(action: str, size: int, time_us: int) -> dict:
        return {
            "action": action,
            "addr": 0x1000,
            "size": size,
            "stream": 0,
            "time_us": time_us,
            "frames": [],
        }

    block = {
        "address": 0x1000,
        "size": segment,
        "requested_size": 0,
        "state": "inactive",
        "frames": [],
    }
    return {
        "segments": [
            {
                "device": 0,
                "address": 0x1000,
                "total_size": segment,
                "allocated_size": 0,
                "active_size": 0,
                "requested_size": 0,
                "stream": 0,
                "segment_type": "small",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": [block],
            }
        ],
        "device_traces": [
            [
                event("segment_alloc", segment, 0),
                event("alloc", 4096, 1),
                event("free_requested", 4096, 2),
                event("free_completed", 4096, 3),
            ]
        ],
        "allocator_settings": {},
    }


def test_viz_writes_the_page_and_the_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    snapshot = tmp_path / "snap.pickle"
    snapshot.write_bytes(pickle.dumps(_snapshot()))
    page, png = tmp_path / "out.html", tmp_path / "out.png"
    assert cli.main(["viz", str(snapshot), "-o", str(page), "--png", str(png)]) == 0
    assert page.read_text().lstrip().lower().startswith("<!doctype html")
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {page}" in capsys.readouterr().out


def test_viz_needs_an_output_file(capsys):
    assert cli.main(["viz", "snap.pickle"]) == 2
    assert "-o/--out" in capsys.readouterr().err


def test_bench_names_an_unknown_benchmark(capsys):
    assert cli.main(["bench", "no_such_bench"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vram bench: error: no benchmark 'no_such_bench'")
    assert cli.main(["bench"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vram bench: error: give a benchmark") and "predictions" in err
    assert cli.main(["bench", "_common"]) == 2  # a helper, not a benchmark
    assert capsys.readouterr().err.startswith("vram bench: error: no benchmark '_common'")


def test_bench_help_ends_its_sentence_and_its_errors_name_the_command(tmp_path, capsys):
    assert cli.main(["bench", "predictions", "--help"]) == 0
    out = capsys.readouterr().out
    description = " ".join(out.split("\n\n")[1].split())
    assert description.startswith("Predictions checked against PyTorch:")
    assert description.endswith("PyTorch reserved when it ran under that setting.")
    assert cli.main(["bench", "fragmentation", "--traces", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"vram bench fragmentation: error: --traces: no traces in {tmp_path}"


def test_viz_png_without_matplotlib_is_one_line_before_anything_is_written(
    tmp_path, capsys, monkeypatch
):
    snapshot = _snapshot_file(tmp_path)
    page, png = tmp_path / "out.html", tmp_path / "out.png"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as where it is not installed
    assert cli.main(["viz", str(snapshot), "-o", str(page), "--png", str(png)]) == 2
    err = capsys.readouterr().err
    assert err == (
        'vram viz: error: --png: drawing a PNG needs matplotlib: pip install -e ".[plot]" '
        "(or pip install matplotlib)\n"
    )
    assert not page.exists() and not png.exists()


def test_the_tools_are_reachable_after_import_vram():
    code = "import vram; print(vram.tools.suggest_settings.__module__, vram.tools.replay.__name__)"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.stdout.split() == ["vram.tools.suggest", "replay"], run.stderr


def test_python_dash_m_vram_is_the_same_command():
    env = dict(os.environ, PYTHONPATH=str(Path(vram.__file__).resolve().parents[1]))
    done = subprocess.run(
        [sys.executable, "-m", "vram", "--version"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"vram {vram.__version__}"


# ---------------------------------------------------------------------------- README
def _section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README has no '## {title}' section"
    return match[1]


def _setup_commands() -> list[str]:
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", _section("Set up"), re.M | re.S)
    assert [language for language, _ in blocks] == ["sh", "sh", "sh"]
    assert all(len(body.strip().splitlines()) == 1 for _, body in blocks), "one line each"
    return [body.strip() for _, body in blocks]


def test_readme_setup_makes_and_uses_a_venv_in_the_clone():
    demo, tests, quick = _setup_commands()
    assert demo == "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/vram demo"
    assert tests == (
        'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && '
        ".venv/bin/python -m pytest -q -p no:cacheprovider"
    )
    assert quick == ".venv/bin/python -m pytest -q -p no:cacheprovider -m quick"
    section = _section("Set up")
    assert "Python 3.10" in section and "`plot`" in section and "python3-venv" in section
    assert "The full run takes about" in section  # and how long the full run takes


def test_the_quick_run_leaves_out_only_tests_that_exist():
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from _quick_run import SLOW
    finally:
        sys.path.remove(str(ROOT / "tests"))
    for path, functions in SLOW.items():
        text = (ROOT / path).read_text()
        for function in () if functions == "*" else functions:
            assert f"def {function}(" in text, (path, function)


def test_ci_runs_the_readme_test_command_verbatim():
    _, tests, _ = _setup_commands()
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in lines
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


def test_readme_quickstart_runs(capsys):
    code = re.search(r"```python\n(.*?)```", _section("Quickstart"), re.S)[1]
    exec(compile(code, "README quickstart", "exec"), {})
    out = capsys.readouterr().out
    assert "[2. 2. 2. 2.]" in out
    assert "vram memory summary" in out


def test_readme_has_the_generated_spots():
    text = (ROOT / "README.md").read_text()
    for name in ("bench", "replay", "viewer"):
        assert text.count(f"<!-- {name}:start -->") == 1
        assert text.count(f"<!-- {name}:end -->") == 1


# ------------------------------------------------------------ bad input: one line, status 2
def _one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"vram {command}: error: "), err
    return err


def _snapshot_file(tmp_path, snapshot: dict | None = None, name: str = "snap.pickle") -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(_snapshot() if snapshot is None else snapshot))
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"", "not a memory snapshot pickle (the file is empty)"),
        (
            pickle.dumps(_snapshot())[:50],
            "not a memory snapshot pickle (pickle data was truncated)",
        ),
        (b"just some text\n", "not a memory snapshot pickle"),
        (Path("/etc/passwd"), "not a memory snapshot pickle"),
    ],
)
def test_viz_of_a_file_that_is_not_a_snapshot(tmp_path, capsys, content, message):
    path = tmp_path / "in.pickle"
    if isinstance(content, Path):
        if not content.is_file():
            pytest.skip(f"{content} is not here")
        path = content
    elif content is not None:
        path.write_bytes(content)
    out = tmp_path / "out.html"
    assert cli.main(["viz", str(path), "-o", str(out)]) == 2
    assert message in _one_error_line(capsys, "viz")
    assert not out.exists()


def test_viz_checks_its_output_paths_first(tmp_path, capsys):
    snapshot = _snapshot_file(tmp_path)
    assert cli.main(["viz", str(snapshot), "-o", str(tmp_path / "no" / "out.html")]) == 2
    assert "-o/--out: " in _one_error_line(capsys, "viz")
    args = ["viz", str(snapshot), "-o", str(tmp_path / "out.html"), "--png", str(tmp_path)]
    assert cli.main(args) == 2
    assert f"--png: {tmp_path} is a folder, not a file" in _one_error_line(capsys, "viz")
    assert not (tmp_path / "out.html").exists()  # nothing was written before the check


@pytest.mark.parametrize("png", [False, True])
def test_viz_of_a_device_the_snapshot_does_not_have(tmp_path, capsys, png):
    snapshot = _snapshot_file(tmp_path)
    args = ["viz", str(snapshot), "-o", str(tmp_path / "out.html"), "--device", "3"]
    args += ["--png", str(tmp_path / "out.png")] if png else []
    assert cli.main(args) == 2
    err = _one_error_line(capsys, "viz")
    assert "device: the snapshot holds nothing for device 3 (it has 0)" in err
    assert not (tmp_path / "out.html").exists()


def test_viz_of_an_empty_snapshot(tmp_path, capsys):
    empty = _snapshot_file(tmp_path, {"segments": [], "device_traces": []})
    args = ["viz", str(empty), "-o", str(tmp_path / "o.html"), "--png", str(tmp_path / "o.png")]
    assert cli.main(args) == 2
    assert "the snapshot is empty" in _one_error_line(capsys, "viz")


def test_viz_png_of_a_snapshot_with_segments_only(tmp_path):
    pytest.importorskip("matplotlib")
    state = {**_snapshot(), "device_traces": [[]]}
    args = ["viz", str(_snapshot_file(tmp_path, state)), "-o", str(tmp_path / "o.html")]
    assert cli.main([*args, "--png", str(tmp_path / "o.png")]) == 0
    assert (tmp_path / "o.png").read_bytes()[:4] == b"\x89PNG"


def _vram(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``python -m vram ARGS`` in a fresh process (the sim driver and the default device
    read their environment variables once per process)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VRAM_")}
    clean["PYTHONPATH"] = str(Path(vram.__file__).resolve().parents[1])
    return subprocess.run(
        [sys.executable, "-m", "vram", *args],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=120,
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("VRAM_SIM_MEMORY", "lots", "sim devices: VRAM_SIM_MEMORY: cannot read 'lots'"),
        ("VRAM_SIM_MEMORY", "nan", "sim devices: VRAM_SIM_MEMORY: cannot read 'nan'"),
        ("VRAM_SIM_DEVICES", "100000000", "sim devices: VRAM_SIM_DEVICES: expected 1 to 64"),
        ("VRAM_DEVICE", "gpu:0", "default device: VRAM_DEVICE: unknown device 'gpu:0'"),
    ],
)
def test_info_diagnoses_a_bad_environment(name, value, message):
    done = _vram({name: value}, "info")
    assert done.returncode == 2
    assert done.stderr.startswith(f"vram info: error: {message}"), done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert "Versions" in done.stdout and "Environment" in done.stdout  # the rest is shown
    assert re.search(rf"{name}\s*\S\s*{re.escape(value)}", done.stdout)


def test_info_reports_a_bad_allocator_setting(capsys, monkeypatch):
    if vram.default_device().type != "sim":
        pytest.skip("the default device's allocator already exists on a GPU machine")
    monkeypatch.setenv("VRAM_ALLOC_CONF", "no_such_key:1")
    assert cli.main(["info"]) == 2
    captured = capsys.readouterr()
    assert "unrecognized allocator option" in captured.out  # in the table
    assert captured.err == (
        "vram info: error: allocator configuration: VRAM_ALLOC_CONF='no_such_key:1': "
        "unrecognized allocator option: 'no_such_key'\n"
    )


def test_demo_on_a_gpu_that_is_not_there(capsys):
    if not vram.driver.cuda_usable():
        assert cli.main(["demo", "--device", "cuda:0"]) == 2
        err = _one_error_line(capsys, "demo")
        assert "--device cuda:0: no CUDA GPU is usable here" in err
    assert cli.main(["demo", "--device", "cuda:99"]) == 2
    assert "cuda:99" in _one_error_line(capsys, "demo")
    assert cli.main(["demo", "--device", "sim:99"]) == 2
    assert "--device: sim:99 does not exist" in _one_error_line(capsys, "demo")


def test_demo_under_a_bad_allocator_setting_fails_before_it_starts(capsys, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "roundup_power2_divisions:[]")
    assert cli.main(["demo", "--device", "sim:0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "vram demo: error: PYTORCH_CUDA_ALLOC_CONF='roundup_power2_divisions:[]': "
        "roundup_power2_divisions: the list is empty; give [MB:divisions,...,>:divisions]\n"
    )


def test_trace_checks_its_output_before_running_the_program(tmp_path, capsys):
    ran = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    out = tmp_path / "missing" / "out.pickle"
    assert cli.main(["trace", "-o", str(out), "--", "python", str(script)]) == 2
    assert "-o/--output: " in _one_error_line(capsys, "trace")
    assert not ran.exists()


def test_trace_runs_python_dash_c(tmp_path, capsys):
    out = tmp_path / "out.pickle"
    code = "import sys, vram; x = vram.empty(1000, device='sim:0'); print('args', sys.argv)"
    assert (
        cli.main(["trace", "-o", str(out), "--device", "sim:0", "--", "python", "-c", code, "a"])
        == 0
    )
    assert "args ['-c', 'a']" in capsys.readouterr().out
    trace = vram.tools.load_snapshot(out)["device_traces"][0]
    assert [e["size"] for e in trace if e["action"] == "alloc"] == [4000]
    assert cli.main(["trace", "-o", str(out), "--", "python", "-c", "1 +"]) == 2
    assert "invalid syntax" in _one_error_line(capsys, "trace")


def test_stats_abbreviated_on_a_snapshot(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    path = _snapshot_file(tmp_path)
    assert cli.main(["stats", str(path)]) == 0
    full = capsys.readouterr().out
    assert cli.main(["stats", str(path), "--abbreviated"]) == 0
    short = capsys.readouterr().out
    for column in ("segments", "reserved", "allocated", "active", "trace events"):
        assert column in full and column in short
    for column in ("requested", "largest free block", "segment allocs"):
        assert column in full and column not in short
    assert cli.main(["stats", str(path), "--device", "1"]) == 2
    assert "nothing for device 1" in _one_error_line(capsys, "stats")


def test_replay_labels_the_record_use_row(tmp_path, capsys):
    path = _snapshot_file(tmp_path)
    assert cli.main(["replay", str(path), "--record-use", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["config"] == "recorded, record_use"
    assert row["settings"] == "record_use:True"


def test_replay_shows_progress_over_every_entry(tmp_path, monkeypatch):
    output = importlib.import_module("vram.tools.output")
    seen = []

    @contextlib.contextmanager
    def progress(description, total=1, enabled=True, prints=False):
        seen.append((description, enabled))

        def advance(n=1, total=None):
            seen.append(("total", total) if total is not None else n)

        yield advance

    monkeypatch.setattr(output, "progress", progress)
    path = _snapshot_file(tmp_path)
    assert cli.main(["replay", str(path), "--config", "expandable_segments:True"]) == 0
    assert seen[:2] == [("replaying snap.pickle", True), ("total", 8)]  # 4 entries, 2 configs
    assert sum(n for n in seen[2:] if isinstance(n, int)) == 8
    seen.clear()
    assert cli.main(["replay", str(path), "--quiet"]) == 0
    assert seen[0] == ("replaying snap.pickle", False)


def test_bench_shows_progress_and_prints_above_it(monkeypatch, capsys):
    output = importlib.import_module("vram.tools.output")
    seen = []

    @contextlib.contextmanager
    def progress(description, total=1, enabled=True, prints=False):
        seen.append((description, enabled, prints))
        yield lambda n=1, total=None: None

    monkeypatch.setattr(output, "progress", progress)
    assert cli.main(["bench", "predictions", "--help"]) == 0
    assert seen == [("vram bench predictions", True, True)]
    assert "usage: vram bench predictions" in capsys.readouterr().out


def test_tables_fit_80_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = _snapshot_file(tmp_path)
    long = "expandable_segments:True,expandable_page_mb:2,garbage_collection_threshold:0.5"
    for argv in (
        ["info"],
        ["demo", "--device", "sim:0"],
        ["stats", str(path)],
        ["replay", str(path), "--config", long],
    ):
        assert cli.main(argv) == 0, argv
        out = capsys.readouterr().out
        assert "…" not in out, argv  # no number cut short
        for line in out.splitlines():  # but a setting, which is never wrapped
            setting = line.startswith("   settings: ") and " " not in line[13:]
            assert len(line) <= 80 or setting, (argv, line)
    assert f"   settings: {long}" in out.splitlines()


# --------------------------------------------------------------------------- vram bench
def _bench_traces(tmp_path) -> Path:
    folder = tmp_path / "traces"
    folder.mkdir()
    _snapshot_file(folder, name="tiny-default.pickle")
    return folder


def test_bench_help_is_the_benchmarks_own(capsys):
    assert cli.main(["bench", "fragmentation", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: vram bench fragmentation ")
    assert "(issue" not in out and "--save" in out and "FILE.json" in out


def test_bench_out_file_json_is_a_file_and_results_stay_untouched(tmp_path, capsys):
    results = ROOT / "bench" / "results"
    before = {p.name: p.stat().st_mtime_ns for p in results.iterdir()}
    out = tmp_path / "frag.json"
    argv = ["bench", "fragmentation", "--traces", str(_bench_traces(tmp_path)), "--out", str(out)]
    assert cli.main(argv) == 0
    assert out.is_file()
    written = json.loads(out.read_text())
    assert written["name"] == "fragmentation" and written["results"][0]["trace"] == "tiny"
    assert {p.name: p.stat().st_mtime_ns for p in results.iterdir()} == before
    assert cli.main(argv[:-1] + [str(tmp_path / "nowhere" / "x.json")]) == 2
    assert "the folder" in capsys.readouterr().err


def test_bench_save_writes_the_results_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import _common

    monkeypatch.setattr(_common, "RESULTS", tmp_path / "results")
    monkeypatch.delenv("OUT", raising=False)
    argv = ["bench", "fragmentation", "--traces", str(_bench_traces(tmp_path))]
    assert cli.main(argv) == 0
    assert "not written" in capsys.readouterr().out and not (tmp_path / "results").exists()
    assert cli.main([*argv, "--save"]) == 0
    (saved,) = (tmp_path / "results").iterdir()
    assert saved.name.startswith("fragmentation-sim0-")
