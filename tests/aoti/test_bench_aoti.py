"""bench/aoti.py's vram worker on the simulated GPU, with the stand-in model in the place of
an exported package: the rows it measures and what they must say (sim timings mean
nothing; the rows' shape and the malloc counts do)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
from aoti_helpers import K

ROOT = Path(__file__).resolve().parents[2]


def test_the_vram_worker_measures_eager_and_graph_rows(
    fake_models, tmp_path, capsys, monkeypatch, sim0
):
    np.save(tmp_path / "fake.inputs0.npy", np.ones((4, K), np.float32))
    entry = {"name": "fake_B", "package": str(fake_models["plain"]), "inputs": ["fake.inputs0.npy"]}
    (tmp_path / "manifest.json").write_text(json.dumps({"packages": [entry]}))
    spec = importlib.util.spec_from_file_location("bench_aoti", ROOT / "bench" / "aoti.py")
    bench = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec.loader.exec_module(bench)
        monkeypatch.setattr(bench, "WARMUP", 1)  # few runs: sim timings mean nothing
        monkeypatch.setattr(bench, "QUEUED", 2)
        monkeypatch.setattr(bench, "RUNS", 3)
        argv = ["--worker", "vram", "--models", str(tmp_path), "--device", "sim:0", "--reps", "3"]
        assert bench.main(argv) == 0
    finally:
        sys.path.remove(str(ROOT / "bench"))
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(r["package"], r["impl"]) for r in rows] == [
        ("fake_B", "vram eager"), ("fake_B", "vram graph replay"),
    ]  # fmt: skip
    for row in rows:
        assert row["host_us"] > 0 and row["device_us"] >= 0
        assert row["device_mallocs_per_run"] == 0  # warm: the cache serves every run
        assert row["constants_mib"] == round(312 / (1 << 20), 2)
    assert bench.summary(rows)[0]["vram_mallocs_per_run"] == 0
