"""bench/report.py: JSON results rendered as markdown and written between README markers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


README = """# x

before
<!-- viewer:start -->
old viewer
<!-- viewer:end -->
<!-- bench:start -->
old tables
<!-- bench:end -->
middle
<!-- replay:start -->
old replay
<!-- replay:end -->
after
"""

ALLOC = {
    "name": "alloc",
    "device": "cuda:0",
    "device_name": "NVIDIA H100 80GB HBM3",
    "date": "2025-01-02",
    "results": [
        {"impl": "vram raw", "size": 512, "size_label": "512 B", "us_per_pair": 1.25},
        {"impl": "vram raw", "size": 65536, "size_label": "64 KiB", "us_per_pair": 1.5},
        {"impl": "torch raw", "size": 512, "size_label": "512 B", "us_per_pair": 2.4},
    ],
}
REPLAY = {
    "name": "replay",
    "device": "sim:0",
    "date": "2025-01-03",
    "results": [{"trace": "resnet.pickle", "settings": "default", "peak_reserved_gib": 3.5}],
}


def _setup(tmp_path: Path, *results: dict) -> tuple[Path, Path]:
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    for result in results:
        name = f"{result['name']}-{result['device'].replace(':', '')}-{result['date']}.json"
        (results_dir / name).write_text(json.dumps(result))
    readme = tmp_path / "README.md"
    readme.write_text(README)
    return readme, results_dir


def test_alloc_rows_become_one_line_per_implementation(report, tmp_path):
    readme, results = _setup(tmp_path, ALLOC, REPLAY)
    assert report.main(["--readme", str(readme), "--results", str(results)]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n<!-- viewer:start -->\n")
    assert "\nmiddle\n" in text and text.endswith("<!-- replay:end -->\nafter\n")
    bench = text.split("<!-- bench:start -->\n")[1].split("\n<!-- bench:end -->")[0]
    assert bench == (
        "**alloc** on NVIDIA H100 80GB HBM3 (cuda:0), 2025-01-02\n"
        "\n"
        "| us per pair | 512 B | 64 KiB |\n"
        "| --- | ---: | ---: |\n"
        "| vram raw | 1.25 | 1.5 |\n"
        "| torch raw | 2.4 | - |"
    )
    replay = text.split("<!-- replay:start -->\n")[1].split("\n<!-- replay:end -->")[0]
    assert replay == (
        "**replay** on sim:0, 2025-01-03\n"
        "\n"
        "| trace | settings | peak_reserved_gib |\n"
        "| --- | --- | ---: |\n"
        "| resnet.pickle | default | 3.5 |"
    )
    assert "_Screenshot to come: docs/viewer.png._" in text


def test_only_the_latest_gpu_result_of_each_benchmark_is_shown(report, tmp_path):
    older = dict(ALLOC, date="2024-12-31", results=[dict(ALLOC["results"][0], us_per_pair=9.0)])
    on_sim = dict(ALLOC, device="sim:0", device_name="vram simulated GPU")
    readme, results = _setup(tmp_path, older, ALLOC, on_sim)
    report.update_readme(readme, results)
    text = readme.read_text()
    assert "| vram raw | 1.25 | 1.5 |" in text
    assert "9.0" not in text and "2024-12-31" not in text
    assert "sim:0" not in text


def test_the_doctors_results_on_sim_go_to_the_replay_spot(report, tmp_path):
    predictions = dict(
        REPLAY,
        name="predictions",
        results=[{"workload": "gpt_train", "setting": "rp2", "error": 0.0, "within_1pct": True}],
    )
    readme, results = _setup(tmp_path, predictions)
    report.update_readme(readme, results)
    text = readme.read_text()
    replay = text[text.index("<!-- replay:start -->") : text.index("<!-- replay:end -->")]
    assert "**predictions** on sim:0" in replay
    assert "| gpt_train | rp2 | 0 | True |" in replay
    assert "<!-- bench:start -->\n_not measured yet_\n<!-- bench:end -->" in text


def test_no_results_says_not_measured_yet(report, tmp_path):
    readme, results = _setup(tmp_path)
    assert report.update_readme(readme, results)
    text = readme.read_text()
    assert "<!-- bench:start -->\n_not measured yet_\n<!-- bench:end -->" in text
    assert "<!-- replay:start -->\n_not measured yet_\n<!-- replay:end -->" in text
    assert not report.update_readme(readme, results), "a second run changes nothing"


def test_the_viewer_screenshot_appears_once_it_exists(report, tmp_path):
    readme, results = _setup(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "viewer.png").write_bytes(b"\x89PNG")
    report.update_readme(readme, results)
    assert "](docs/viewer.png)\n<!-- viewer:end -->" in readme.read_text()


def test_a_broken_result_file_is_skipped(report, tmp_path, capsys):
    readme, results = _setup(tmp_path, ALLOC)
    (results / "broken.json").write_text("{not json")
    report.update_readme(readme, results)
    assert "| vram raw | 1.25 | 1.5 |" in readme.read_text()
    assert "skipping" in capsys.readouterr().err


def test_missing_markers_are_an_error(report, tmp_path):
    readme, results = _setup(tmp_path)
    readme.write_text("# no markers\n")
    with pytest.raises(ValueError, match="bench:start"):
        report.update_readme(readme, results)


def test_the_real_readme_can_be_updated(report, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    report.update_readme(readme, ROOT / "bench" / "results")
    assert readme.read_text().count("<!-- bench:end -->") == 1


def test_grid_benchmarks_render_one_line_per_row_key(report):
    rows = [
        {"trace": "gpt", "impl": "vram", "us_per_op": 2.5, "requests": 10},
        {"trace": "gpt", "impl": "pytorch", "us_per_op": 4.0, "requests": 10},
        {"trace": "cnn", "impl": "vram", "us_per_op": 2.0, "requests": 7},
    ]
    assert report.render_rows(rows, "trace_ops").splitlines() == [
        "| trace (us per op) | vram | pytorch |",
        "| --- | ---: | ---: |",
        "| gpt | 2.5 | 4 |",
        "| cnn | 2 | - |",
    ]


def test_a_grids_ratios_follow_it_as_grids_of_their_own(report):
    rows = [
        {"trace": "gpt", "impl": "vram", "us_per_op": 5.0, "ratio_to_pytorch": 1.25,
         "paired_ratio_to_pytorch": 1.2},
        {"trace": "gpt", "impl": "pytorch", "us_per_op": 4.0},
    ]  # fmt: skip
    assert report.render_rows(rows, "trace_ops").split("\n\n")[1:] == [
        "| trace (ratio to pytorch) | vram |\n| --- | ---: |\n| gpt | 1.25 |",
        "| trace (paired ratio to pytorch) | vram |\n| --- | ---: |\n| gpt | 1.2 |",
    ]


def test_alloc_pairs_pivot_and_other_rows_follow_flat(report):
    rows = [
        {"impl": "vram", "size": 512, "size_label": "512 B", "us_per_pair": 2.0},
        {"impl": "vram memory_allocated()", "us_per_call": 0.3},
    ]
    table = report.render_rows(rows, "alloc")
    assert "| vram | 2 |" in table and "| vram memory_allocated() | 0.3 |" in table


AOTI = {
    "name": "aoti",
    "device": "cuda:0",
    "device_name": "NVIDIA H100 80GB HBM3",
    "date": "2025-01-04",
    "results": [
        {"measure": "per run", "package": "mlp_A", "impl": "vram eager", "host_us": 80.5},
        {"measure": "summary", "package": "mlp_A", "graph_host_over_torch_runner": 0.2},
    ],
}


def test_a_benchmark_with_a_spot_of_its_own_is_shown_there(report, tmp_path):
    readme, results = _setup(tmp_path, ALLOC, AOTI)
    text = readme.read_text().replace(
        "middle\n", "middle\n<!-- aoti:start -->\n<!-- aoti:end -->\n"
    )
    readme.write_text(text)
    report.update_readme(readme, results)
    text = readme.read_text()
    own = text[text.index("<!-- aoti:start -->") : text.index("<!-- aoti:end -->")]
    bench = text[text.index("<!-- bench:start -->") : text.index("<!-- bench:end -->")]
    assert "**aoti** on NVIDIA H100 80GB HBM3 (cuda:0), 2025-01-04" in own
    assert "| mlp_A | vram eager | 80.5 |" in own and "| mlp_A | 0.2 |" in own
    assert "aoti" not in bench and "**alloc**" in bench


def test_without_its_spot_a_benchmark_joins_the_others(report, tmp_path):
    readme, results = _setup(tmp_path, AOTI)
    report.update_readme(readme, results)
    bench = readme.read_text().split("<!-- bench:start -->\n")[1]
    assert bench.startswith("**aoti** on NVIDIA H100 80GB HBM3 (cuda:0)")
