"""Triton kernels on vram tensors without torch (needs a GPU and Triton): triton_check.py
in fresh processes, one that keeps torch out and one that lets Triton import what it will."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

CHECK = Path(__file__).with_name("triton_check.py")


def run_check(*arguments: str) -> dict:
    result = subprocess.run(
        [sys.executable, str(CHECK), *arguments], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    print(f"triton_check {' '.join(arguments)}: {result.stdout.splitlines()[-1]}")  # for -s logs
    return json.loads(result.stdout.splitlines()[-1])


def test_a_triton_kernel_runs_on_vram_in_a_process_without_torch():
    pytest.importorskip("triton")
    report = run_check("--keep-torch-out")
    assert report["torch_modules_imported"] == []
    assert report["side_stream"] == report["graph_replay"] == "ok"
    assert report["scratch"].startswith(("vram served", "skipped"))


def test_a_triton_kernel_runs_on_vram_where_triton_may_import_torch():
    pytest.importorskip("triton")
    report = run_check()
    assert report["side_stream"] == report["graph_replay"] == "ok"
