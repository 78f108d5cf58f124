"""bench/sanitize/: compute-sanitizer's report read back (each record counted against the
test that was running), the deliberate API errors told from the others, and the probe's
verdict from its runs. The GPU runs themselves are bench/sanitize.sh's."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# pytest -v's lines with the tools' records in between, as one stream carries them
LOG = (ROOT / "tests" / "data" / "sanitize" / "suite.log").read_text()
RACES = (ROOT / "tests" / "data" / "sanitize" / "races.log").read_text()


@pytest.fixture
def sanitize(monkeypatch):
    """bench/sanitize/'s modules, importable as its scripts import each other."""
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "sanitize"))
    return importlib.import_module


def test_records_are_counted_against_the_test_that_printed_them(sanitize):
    report = sanitize("_sanitizer").read_report(LOG)
    assert report.outcomes == {
        "tests/gpu/test_streams_gpu.py::test_query": "PASSED",
        "tests/gpu/test_linalg_gpu.py::test_panels[float32-600-clusters]": "FAILED",
        "tests/gpu/test_cuda_driver.py::test_oom": "PASSED",
        "tests/gpu/test_graphs_gpu.py::test_illegal_work_during_capture_fails_as_on_the_sim": (
            "PASSED"
        ),
    }
    assert (report.count("device"), report.count("api"), report.summary_errors) == (2, 3, 6)
    assert report.unprinted == 1  # six counted, five printed
    [writes] = report.grouped("device")
    assert writes == {
        "what": "Invalid __shared__ write of size N bytes",
        "where": "vram_lu::panel<float, 8, 128, 1, 32>(vram_lu::PanelArgs)",
        "count": 2,
        "tests": {"tests/gpu/test_linalg_gpu.py::test_panels[float32-600-clusters]": 2},
    }
    calls = {(row["where"], row["what"]): row["count"] for row in report.grouped("api")}
    assert calls == {
        ("cuStreamSynchronize", "CUDA_ERROR_LAUNCH_FAILED"): 1,
        ("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY"): 1,
        ("cuStreamSynchronize", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"): 1,
    }


def test_racecheck_errors_and_warnings(sanitize):
    report = sanitize("_sanitizer").read_report(RACES)
    assert (report.race_errors, report.race_warnings) == (1, 1)
    [race] = report.grouped("device")
    assert race["where"] == "copy_tiled<float>(Args)" and race["count"] == 1
    assert report.grouped("warning")[0]["where"] == "getrs<float>(Args)"
    assert report.outcomes == {"tests/gpu/test_tensor_gpu.py::test_tiled": "PASSED"}


def test_deliberate_api_errors_are_listed_with_why_and_the_rest_counted(sanitize):
    suite = sanitize("suite")
    report = sanitize("_sanitizer").read_report(LOG)
    ended = {"status": 86, "seconds": 10.0, "timed_out": False}
    row = suite.summary(suite.RUNS[1], report, ended, Path("log"))
    deliberate = {(r["where"], r["what"]): r["why"] for r in row["api_errors_deliberate"]}
    assert set(deliberate) == {
        ("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY"),
        ("cuStreamSynchronize", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    }
    assert [(r["where"], r["what"]) for r in row["api_errors_unexpected"]] == [
        ("cuStreamSynchronize", "CUDA_ERROR_LAUNCH_FAILED")
    ]
    # two invalid writes, one launch failure, one error counted but not printed
    assert row["errors"] == 4
    assert row["outcomes"] == {"PASSED": 3, "FAILED": 1}
    assert row["failed"] == ["tests/gpu/test_linalg_gpu.py::test_panels[float32-600-clusters]"]
    # a capture error elsewhere than the test that makes it on purpose is not deliberate
    assert suite.why("cuStreamSynchronize", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "x") is None


def test_every_run_names_existing_tests_and_a_tool(sanitize):
    suite = sanitize("suite")
    assert {run.tool for run in suite.RUNS} == {"memcheck", "racecheck", "synccheck", "initcheck"}
    for run in suite.RUNS:
        assert run.covers and all((ROOT / test).is_file() for test in run.tests), run.name


def _forms(**changes) -> dict:
    """The probe's results where every form delivers and no tool flags anything."""
    clean = {"errors": 0}
    ran = {"line": "form lu: ran, 0 of 65536 values wrong"}
    forms = {
        form: {"built": True, "delivered": True, "bare": ran, "memcheck": dict(clean)}
        for form in ("lu", "lu_no_exit_barrier", "lu_remote", "cccl", "st_async", "dsmem")
    }
    for form in ("lu", "lu_no_exit_barrier", "dsmem"):
        forms[form].update(racecheck=dict(clean), synccheck=dict(clean))
    forms["unmapped"] = {
        "built": True,
        "delivered": False,
        "bare": {"line": "form unmapped: ran, 57344 of 65536 values wrong"},
        "memcheck": dict(clean),
    }
    for name, value in changes.items():
        form, _, tool = name.partition("__")
        if tool:
            forms[form][tool] = {"errors": value}
        else:
            forms[form]["delivered"] = value
    return forms


@pytest.mark.parametrize(
    ("changes", "first"),
    [
        ({"lu__memcheck": 8, "lu_no_exit_barrier__memcheck": 8, "cccl__memcheck": 8}, "TOOL:"),
        ({"lu__memcheck": 8, "lu_no_exit_barrier__memcheck": 8}, "FORM:"),
        ({"lu": False, "lu__memcheck": 8}, "CODE:"),
        ({}, "NOT REPRODUCED:"),
        ({"lu": None}, "NO VERDICT:"),
    ],
)
def test_the_probe_verdict(sanitize, changes, first):
    lines = sanitize("cluster_probe").verdict(_forms(**changes), None)
    assert lines[0].startswith(first)
    if first in ("TOOL:", "FORM:"):
        assert any(line.startswith("Control: a shared::cta destination") for line in lines)
        followed = [line for line in lines if line.startswith("Forms memcheck follows")]
        assert followed == [
            "Forms memcheck follows and that deliver: "
            + ("st_async, dsmem." if first == "TOOL:" else "cccl, st_async, dsmem.")
        ]


def test_the_probe_source_has_every_form(sanitize):
    """cluster_probe.cu's FORM numbers are the driver's order, and its kernel is lu.cu's
    exchange: the same instructions, text for text."""
    probe = sanitize("cluster_probe")
    source = probe.SOURCE.read_text()
    for index, form in enumerate(probe.FORMS):
        assert f"   {index} {form} " in source, form
    lu = (ROOT / "src" / "vram" / "linalg" / "kernels" / "lu.cu").read_text()
    for instruction in (
        "mapa.shared::cluster.u32 %0, %1, %2;",
        '"cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes"',
        "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;",
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;",
        "fence.proxy.async.shared::cta;",
        "barrier.cluster.arrive.release.aligned;",
        "barrier.cluster.wait.acquire.aligned;",
    ):
        assert instruction in lu and instruction in source, instruction
