"""The ``vram`` command, run in-process through ``main``; and the README's set-up commands."""

from __future__ import annotations

import os
import pickle
import re
import shlex
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


def test_info_reports_a_bad_allocator_setting(capsys, monkeypatch):
    if vram.default_device().type != "sim":
        pytest.skip("the default device's allocator already exists on a GPU machine")
    monkeypatch.setenv("VRAM_ALLOC_CONF", "no_such_key:1")
    assert cli.main(["info"]) == 1
    assert "unrecognized allocator option" in capsys.readouterr().out


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


def test_a_missing_tool_is_a_clear_error_with_status_2(capsys, monkeypatch):
    monkeypatch.setitem(cli._TOOLS, "replay", ("vram.tools.not_there", "main_replay", "x"))
    assert cli.main(["replay", "whatever.pickle"]) == 2
    assert "vram.tools.not_there cannot be imported" in capsys.readouterr().err
    monkeypatch.setitem(cli._TOOLS, "replay", ("vram.tools", "main_not_there", "x"))
    assert cli.main(["replay"]) == 2
    assert "has no main_not_there()" in capsys.readouterr().err


def test_tools_get_their_arguments_as_given(monkeypatch):
    seen = []

    def tool(argv):
        seen.append(argv)
        return 3

    monkeypatch.setattr(cli, "_load", lambda module, function: tool)
    assert cli.main(["stats", "a.pickle", "-o", "x", "--json"]) == 3
    assert seen == [["a.pickle", "-o", "x", "--json"]]


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
    assert "no benchmark 'no_such_bench'" in capsys.readouterr().err
    assert cli.main(["bench"]) == 2


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


def _ci_commands() -> list[str]:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line.strip() for line in lines if line.startswith("python3 ")]


def test_readme_has_exactly_two_setup_commands_matching_ci():
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", _section("Set up"), re.M | re.S)
    assert len(blocks) == 2
    commands = []
    for language, body in blocks:
        assert language == "sh"
        assert len(body.strip().splitlines()) == 1, "each set-up command is one line"
        commands.append(body.strip())
    demo, tests = (command.split(" && ") for command in commands)
    ci_install, ci_test = _ci_commands()
    ci_install_args = [arg for arg in shlex.split(ci_install) if arg != "-q"]
    assert shlex.split(demo[0]) == ci_install_args
    assert shlex.split(tests[0]) == ci_install_args
    assert demo[1:] == ["python3 -m vram demo"]
    assert tests[1:] == [ci_test]


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
