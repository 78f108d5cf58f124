"""Fragmentation benchmark: PyTorch traces replayed with and without expandable segments.

Peak reserved over peak allocated per trace.

Each ``<workload>-default`` trace in tests/data/traces/ (PyTorch memory snapshots recorded on
an H100 by bench/record_traces.py; any ``*.pickle[.xz|.gz]`` of ``--traces DIR`` when it has
no ``-default`` ones) is replayed by ``vram.tools.replay`` through a fresh caching allocator
on a simulated device, under its recorded settings, with ``expandable_segments:True`` on top,
and with vram's ``expandable_page_mb:2`` as well (2 MiB pages for the large pool, not
PyTorch's 20). Where the same workload was also recorded under expandable segments
(``<workload>-expandable``), ``pytorch_peak_reserved_mib`` is what PyTorch reserved there.
The replay touches no data, so this runs in seconds anywhere; the device is always ``sim:0``.

    python bench/fragmentation.py [--traces DIR] [--out FILE.json|DIR] [--save]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _common import add_output_arguments, description_of, write_results
from _traces import read_trace, summarize, trace_files
from vram.tools.output import progress
from vram.tools.replay import replay

TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
CONFIGS = {
    "recorded": "",
    "expandable": "expandable_segments:True",
    "expandable, 2 MiB pages": "expandable_segments:True,expandable_page_mb:2",
}
RECORDED_AS = {"expandable": "expandable"}  # config -> the setting PyTorch recorded it under
MiB = 1 << 20


def _name(path: Path) -> str:
    return path.name.split(".pickle")[0]


def pick(directory: Path) -> list[Path]:
    """The ``-default`` traces of ``directory``, or all of its traces if it has none."""
    found = trace_files(directory)
    defaults = [p for p in found if _name(p).endswith("-default")]
    return defaults or found


def _recording(default: Path, setting: str | None) -> Path | None:
    """The trace of ``default``'s workload recorded under ``setting``, if there is one."""
    if setting is None or "-default." not in default.name:
        return None
    found = default.with_name(default.name.replace("-default.", f"-{setting}."))
    return found if found.exists() else None


def run(traces: list[Path]) -> list[dict]:
    """One row per trace and configuration."""
    rows = []
    with progress("replaying traces", len(traces)) as advance:
        for path in traces:
            snapshot = read_trace(path)
            results = replay(snapshot, list(CONFIGS.values()))
            workload = _name(path).removesuffix("-default")
            for label, result in zip(CONFIGS, results, strict=True):
                reserved, allocated = result["peak_reserved"], result["peak_allocated"]
                row = {
                    "trace": workload,
                    "config": label,
                    "peak_reserved_mib": round(reserved / MiB, 1),
                    "peak_allocated_mib": round(allocated / MiB, 1),
                    "reserved_over_allocated": round(reserved / allocated, 3),
                    "device_malloc": result["device_malloc"],
                    "oom": result["oom"],
                }
                recorded = _recording(path, RECORDED_AS.get(label))
                if recorded is not None:
                    pytorch = summarize(read_trace(recorded))["peak_reserved"]
                    row["pytorch_peak_reserved_mib"] = round(pytorch / MiB, 1)
                rows.append(row)
            advance(1)
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'trace':<14}{'config':<24}{'reserved MiB':>13}{'allocated MiB':>14}{'ratio':>7}"]
    for r in rows:
        lines.append(
            f"{r['trace'][:13]:<14}{r['config']:<24}{r['peak_reserved_mib']:>13.1f}"
            f"{r['peak_allocated_mib']:>14.1f}{r['reserved_over_allocated']:>7.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--traces", type=Path, default=TRACES, help="folder of trace pickles")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    traces = pick(options.traces)
    if not traces:
        parser.error(f"--traces: no traces in {options.traces}")
    rows = run(traces)
    paths = write_results("fragmentation", "sim:0", rows, options.out, options.save)
    print("fragmentation: peak reserved / peak allocated, replayed on sim:0")
    print(table(rows))
    for path in paths:
        print(f"wrote {path}")
    if not paths:
        print("(not written: --out FILE.json or DIR writes the JSON, --save bench/results/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
