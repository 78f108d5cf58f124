"""compute-sanitizer for the scripts here: the command line they run it with, and its text
report read back (what a tool found, where, and in which test).

The options (checked against NVIDIA's Compute Sanitizer documentation):

- ``--tool memcheck|racecheck|synccheck|initcheck``;
- ``--target-processes all``: tests start Python processes of their own (a fresh process to
  count device mallocs, a second TunableOp process); their kernels are checked too;
- ``--launch-timeout 0``: a process may take long to reach its first CUDA call (Python
  importing PyTorch under the tool); no timeout, rather than a process left unchecked;
- ``--report-api-errors explicit`` (the default, written out): a CUDA call that fails is
  reported, so the deliberate ones (an OOM test's allocation, a query of unfinished work)
  are listed by the caller, not hidden with ``no``; ``all`` would add the calls libraries
  make implicitly;
- ``--check-exit-code no``: a failed test (pytest's exit status) is not a sanitizer error;
  outcomes are read from pytest's own lines;
- ``--show-backtrace device``: device frames only, so an API error is one short record;
- ``--print-limit 100000``: every record printed, polls of unfinished work included
  (records past the limit are counted by the summary only: ``Report.unprinted``, errors);
- ``--error-exitcode 86``: the tool's exit status when it found errors, apart from pytest's;
- no ``--log-file``: the report stays on the stream ``pytest -v`` writes, so that each
  record is counted against the test that was running (a log file would lose that).

Every tool prints a finding as a record: a first line after the ``=========`` prefix, its
details indented under it, and at the end of a process a summary::

    ========= Invalid __shared__ write of size 144 bytes
    =========     at void vram_lu::panel<float, 8, 128, 1, 32>(vram_lu::PanelArgs)+0xc090
    =========     by thread (0,0,0) in block (0,0,0)
    ========= Program hit CUDA_ERROR_NOT_READY (error 600) due to "device not ready" on CUDA
    API call to cuEventQuery. (one line)
    ========= Error: Race reported between Write access at ... and Read access at ...
    ========= ERROR SUMMARY: 3 errors

The runs here keep the tool's report on the same stream as ``pytest -v`` (no --log-file),
so each record is counted against the test that was running when it was printed: pytest
writes a test's id, then the test runs (the tool's lines may follow the id on its line),
then its outcome.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "OPTIONS",
    "FOUND_ERRORS",
    "find_sanitizer",
    "command",
    "Record",
    "Report",
    "read_report",
]

FOUND_ERRORS = 86  # the tool's exit status when it found errors
OPTIONS = (
    "--target-processes",
    "all",
    "--launch-timeout",
    "0",
    "--report-api-errors",
    "explicit",
    "--check-exit-code",
    "no",
    "--show-backtrace",
    "device",
    "--print-limit",
    "100000",
    "--error-exitcode",
    str(FOUND_ERRORS),
)


def find_sanitizer(nvcc: str | None = None) -> str | None:
    """compute-sanitizer: on PATH, beside ``nvcc``, or in /usr/local/cuda/bin; None if none."""
    found = shutil.which("compute-sanitizer")
    places = [Path(nvcc).parent] if nvcc else []
    for place in [*places, Path("/usr/local/cuda/bin")]:
        if found is None and (place / "compute-sanitizer").is_file():
            found = str(place / "compute-sanitizer")
    return found


def command(sanitizer: str, tool: str, program: list[str]) -> list[str]:
    """``program`` under ``tool`` of the compute-sanitizer at ``sanitizer``."""
    return [sanitizer, "--tool", tool, *OPTIONS, *program]


_MARK = re.compile(r"(?<!=)=========(?!=)")  # the tools' prefix; pytest's rules are longer
_TEST = re.compile(r"^(tests/\S+::\S+)\s?(.*)$")
_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_SUMMARY_OUTCOME = re.compile(r"^(FAILED|ERROR) (tests/\S+::\S+)")
_ERROR_SUMMARY = re.compile(r"^ERROR SUMMARY: (\d+) errors?")
_RACE_SUMMARY = re.compile(
    r"^RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)"
)
_API = re.compile(r"^Program hit (\w+).* on CUDA API call to (\w+)")
_AT = re.compile(r"^at (.+?)(?:\+0x[0-9a-f]+)?(?: in .*)?$")
_RACE_AT = re.compile(r"access at (.+?)(?=\+0x| in | and |$)")
_META = re.compile(
    r"^(COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|Target application "
    r"returned|Error: process didn't terminate|No CUDA-MEMCHECK|Saved host backtrace)"
)


@dataclass
class Record:
    """One finding: ``kind`` is "device" (an access, race, barrier or uninitialized read
    the tool calls an error), "warning" (racecheck's warnings), "api" (a CUDA call that
    failed) or "tool" (the sanitizer's own failure)."""

    kind: str
    headline: str
    test: str  # the test running when it was printed ("" before the first)
    where: str = ""  # the kernel (device records), or the CUDA call (api records)
    error: str = ""  # api records: the CUDA error's name


@dataclass
class Report:
    """What one run printed: its records, the totals its summaries gave, and each test's
    outcome (tests in the order they ran)."""

    records: list[Record] = field(default_factory=list)
    summary_errors: int = 0  # the sum of "ERROR SUMMARY: N errors" (every process)
    race_errors: int = 0
    race_warnings: int = 0
    summaries: int = 0  # how many processes printed an ERROR SUMMARY
    outcomes: dict[str, str] = field(default_factory=dict)

    def count(self, kind: str) -> int:
        return sum(record.kind == kind for record in self.records)

    @property
    def unprinted(self) -> int:
        """Errors the summaries counted past the print limit (records not seen here)."""
        printed = len(self.records)  # (racecheck's summary may count its warnings too)
        return max(self.summary_errors - printed, 0)

    def grouped(self, kind: str) -> list[dict]:
        """The records of ``kind`` grouped by what and where: count, and the tests."""
        groups: dict[tuple[str, str, str], list[Record]] = {}
        for record in self.records:
            if record.kind == kind:
                what = record.error if kind == "api" else _plain(record.headline)
                groups.setdefault((what, record.where, record.error), []).append(record)
        rows = []
        for (what, where, _), found in sorted(groups.items(), key=lambda g: -len(g[1])):
            tests = Counter(record.test or "(before the first test)" for record in found)
            rows.append({"what": what, "where": where, "count": len(found), "tests": dict(tests)})
        return rows


def _race_where(headline: str) -> str:
    """The kernel a racecheck record names in its first line ("... Write access at K+0x1a0
    in file.cu:12 and Read access at ..."); "" for other records (their "at" line says)."""
    found = _RACE_AT.search(headline) if "Race reported" in headline else None
    return found[1].removeprefix("void ") if found else ""


def _plain(headline: str) -> str:
    """A record's first line without what varies from one occurrence to the next."""
    return re.sub(r"0x[0-9a-f]+", "ADDR", re.sub(r"\b\d+ bytes", "N bytes", headline))


def read_report(text: str) -> Report:
    """The records, summaries and test outcomes in a run's combined output."""
    report = Report()
    test = ""
    current: Record | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        summary = _SUMMARY_OUTCOME.match(line)
        if summary:
            report.outcomes[summary[2]] = summary[1]
            continue
        found = _TEST.match(line)
        if found:
            test, line = found[1], found[2]
            outcome = _OUTCOME.match(line)
            if outcome:
                report.outcomes[test] = outcome[1]
                continue
        elif _OUTCOME.match(line):
            report.outcomes[test] = _OUTCOME.match(line)[1]
            continue
        mark = _MARK.search(line)
        if mark is None:
            continue
        body = line[mark.end() :]
        if body.startswith("     ") or body.startswith("\t"):  # a detail of the record above
            detail = _AT.match(body.strip())
            if current is not None and detail and not current.where:
                current.where = detail[1].removeprefix("void ")
            continue
        body = body.strip()
        current = None
        if not body:
            continue
        errors = _ERROR_SUMMARY.match(body)
        if errors:
            report.summary_errors += int(errors[1])
            report.summaries += 1
            continue
        races = _RACE_SUMMARY.match(body)
        if races:
            report.race_errors += int(races[1])
            report.race_warnings += int(races[2])
            continue
        if _META.match(body):
            continue
        api = _API.match(body)
        if api:
            current = Record("api", body, test, where=api[2], error=api[1])
        elif body.startswith("Warning:"):
            current = Record("warning", body, test, where=_race_where(body))
        elif "Internal Sanitizer Error" in body or body.startswith("Error: Internal"):
            current = Record("tool", body, test)
        else:
            current = Record("device", body, test, where=_race_where(body))
        report.records.append(current)
    return report
