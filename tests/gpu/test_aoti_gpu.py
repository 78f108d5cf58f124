"""AOTInductor-compiled models on vram without torch (needs a GPU, and torch to compile).

bench/aoti_export.py first compiles the MLP and the GPT-2-style blocks three ways each (A:
ExecuTorch's options, Triton GEMMs; B: ATen GEMMs, so the shim's mm/addmm/bmm run; C: as B
with weights from the caching allocator) in a process with torch; then each package runs
in a fresh process that never loads torch (aoti_check.py, whose docstring lists the
checks). ``VRAM_AOTI_MODELS=DIR`` reuses (or keeps) the packages in DIR.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
CHECK = Path(__file__).with_name("aoti_check.py")
NAMES = [f"{model}_{way}" for model in ("mlp", "gpt") for way in "ABC"]
EXPORT_TIMEOUT_S = 1500
CHECK_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    given = os.environ.get("VRAM_AOTI_MODELS")
    folder = Path(given) if given else tmp_path_factory.mktemp("aoti_models")
    if (folder / "manifest.json").is_file():
        return folder
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode:
        pytest.skip("torch is not installed here: it compiles the models")
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "aoti_export.py"), str(folder)],
        capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S,
    )  # fmt: skip
    assert (folder / "manifest.json").is_file(), result.stdout[-6000:] + result.stderr[-6000:]
    return folder


def run_check(folder: Path, *arguments: str, env: dict | None = None) -> list[dict]:
    """aoti_check.py in a fresh process; its reports (it must exit 0)."""
    environment = {k: v for k, v in os.environ.items() if k != "VRAM_ALLOC_CONF"}
    result = subprocess.run(
        [sys.executable, str(CHECK), str(folder), *arguments],
        capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, env={**environment, **(env or {})},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("name", NAMES)
def test_a_compiled_model_runs_on_vram_without_torch(exported, name):
    manifest = json.loads((exported / "manifest.json").read_text())
    entries = {e["name"]: e for e in manifest["packages"]}
    assert name in entries, f"{name} was not exported; its log: {exported / (name + '.log')}"
    gemm_shims = {n for n in entries[name]["aoti_symbols"] if n.endswith("mm_out")}
    if name.endswith("_A"):
        assert not gemm_shims, f"way A should call no GEMM shim, it imports {gemm_shims}"
    else:
        assert gemm_shims, "ways B and C call the shim's GEMMs"
    (report,) = run_check(exported, name)
    assert report["name"] == name


def test_the_stream_sanitizer_reports_nothing(exported):
    reports = run_check(
        exported, *NAMES, "--sanitizer", env={"VRAM_ALLOC_CONF": "stream_sanitizer:True"}
    )
    assert [r["name"] for r in reports] == NAMES
