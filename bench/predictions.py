"""Predictions checked against PyTorch: a replay of each workload's default trace under each
other setting, next to what PyTorch reserved when it ran under that setting.

bench/record_traces.py recorded every workload on an H100 under four settings, each in a
fresh process (tests/data/traces/). For each workload and each setting other than the
default, this replays ``<workload>-default`` through ``vram.tools.replay`` with the
setting's PYTORCH_CUDA_ALLOC_CONF string on top, and compares the predicted peak reserved
with the peak the ``<workload>-<setting>`` recording holds (and the device mallocs, and
whether the segments were the same sizes in the same order). The replay touches no data,
so this runs in seconds anywhere; the device is always ``sim:0``.

    python bench/predictions.py [--traces DIR] [--out FILE.json|DIR] [--save]
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
SETTINGS = {  # bench/record_traces.py's settings other than the default
    "max_split": "max_split_size_mb:64",
    "rp2": "roundup_power2_divisions:[256:8,>:4]",
    "expandable": "expandable_segments:True",
}
MiB = 1 << 20
TOLERANCE = 0.01  # the prediction's allowed relative error of peak reserved


def _name(path: Path) -> str:
    return path.name.split(".pickle")[0]


def pairs(directory: Path) -> list[tuple[str, str, Path, Path]]:
    """(workload, setting, default trace, that setting's trace) for each recording pair."""
    found = {_name(p): p for p in trace_files(directory)}
    out = []
    for name, path in sorted(found.items()):
        workload, _, setting = name.rpartition("-")
        if setting != "default":
            continue
        for other in SETTINGS:
            recorded = found.get(f"{workload}-{other}")
            if recorded is not None:
                out.append((workload, other, path, recorded))
    return out


def _segment_sizes(snapshot: dict) -> list[int]:
    trace = next((t for t in snapshot.get("device_traces") or [] if t), [])
    return [e["size"] for e in trace if e["action"] in ("segment_alloc", "segment_map")]


def run(found: list[tuple[str, str, Path, Path]]) -> list[dict]:
    """One row per (workload, setting)."""
    rows = []
    with progress("replaying default traces", len(found)) as advance:
        for workload, setting, default, recorded in found:
            (predicted,) = replay(default, [SETTINGS[setting]])
            snapshot = read_trace(recorded)
            pytorch = summarize(snapshot)
            error = predicted["peak_reserved"] / pytorch["peak_reserved"] - 1
            rows.append(
                {
                    "workload": workload,
                    "setting": setting,
                    "config": SETTINGS[setting],
                    "pytorch_peak_reserved_mib": round(pytorch["peak_reserved"] / MiB, 1),
                    "predicted_peak_reserved_mib": round(predicted["peak_reserved"] / MiB, 1),
                    "error": round(error, 5),
                    "within_1pct": abs(error) <= TOLERANCE,
                    "pytorch_device_mallocs": pytorch["device_mallocs"],
                    "predicted_device_mallocs": predicted["device_malloc"],
                    "same_segments": predicted["segment_sizes"] == _segment_sizes(snapshot),
                }
            )
            advance(1)
    return rows


def table(rows: list[dict]) -> str:
    header = (
        f"{'workload':<12}{'setting':<12}{'PyTorch MiB':>12}{'predicted MiB':>14}{'error':>9}"
        f"{'mallocs':>12}  same segments"
    )
    lines = [header]
    for r in rows:
        mallocs = f"{r['pytorch_device_mallocs']}/{r['predicted_device_mallocs']}"
        lines.append(
            f"{r['workload']:<12}{r['setting']:<12}{r['pytorch_peak_reserved_mib']:>12.1f}"
            f"{r['predicted_peak_reserved_mib']:>14.1f}{r['error']:>+9.2%}{mallocs:>12}  "
            f"{'yes' if r['same_segments'] else 'no'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--traces", type=Path, default=TRACES, help="folder of trace pickles")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    found = pairs(options.traces)
    if not found:
        parser.error(
            f"--traces: no <workload>-default traces with other settings in {options.traces}"
        )
    rows = run(found)
    paths = write_results("predictions", "sim:0", rows, options.out, options.save)
    print("predictions: the default trace replayed under each setting, vs PyTorch's recording")
    print(table(rows))
    held = sum(r["within_1pct"] for r in rows)
    print(f"{held} of {len(rows)} predictions within 1% of PyTorch's peak reserved")
    for path in paths:
        print(f"wrote {path}")
    if not paths:
        print("(not written: --out FILE.json or DIR writes the JSON, --save bench/results/)")
    return 0 if held == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
