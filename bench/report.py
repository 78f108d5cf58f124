"""Render bench/results/*.json as markdown tables and put them into the README.

    python bench/report.py [--results bench/results] [--readme README.md]

The README holds three generated spots, each between a start and an end marker:
- ``<!-- bench:start -->`` / ``<!-- bench:end -->``: one table per benchmark and GPU, from
  its latest result (results of ``--device sim:N`` check runs time nothing real: left out);
- ``<!-- replay:start -->`` / ``<!-- replay:end -->``: the latest results of the runs that
  replay traces or measure the memory doctor (replay*, ``REPLAYED``), whichever device ran
  them (the simulated GPU replays exactly what a GPU would);
- ``<!-- viewer:start -->`` / ``<!-- viewer:end -->``: the viewer screenshot, once
  docs/viewer.png exists;
- a spot named after a benchmark in ``OWN_SPOT`` (``<!-- aoti:start -->``...), where the
  README has one: that benchmark's GPU results, in its own section instead of the bench
  spot.
A result file is what bench/_common.write_result writes: ``{"name", "device",
"device_name", "date", "results": [row, ...]}``. Numbers are shown as the files hold them;
where there are none yet, the spot says "not measured yet". Everything outside the markers
is left as it is.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_MEASURED = "_not measured yet_"
VIEWER = "docs/viewer.png"  # relative to the README
# the replay spot's results besides replay*: trace replays on the simulated GPU, checked
# against PyTorch's runs (predictions), and the memory doctor's costs
REPLAYED = ("fragmentation", "predictions", "doctor", "viewer")
OWN_SPOT = ("aoti",)  # benchmarks shown in a section of their own, where the README has it


def load_results(results: Path) -> list[dict]:
    """Every JSON result in ``results``, sorted by file name; unreadable files are reported."""
    found = []
    for path in sorted(results.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            print(f"report: skipping {path}: {exc}", file=sys.stderr)
            continue
        if isinstance(data, dict):
            data.setdefault("name", path.stem)
            data["_file"] = path.name
            found.append(data)
    return found


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):  # as the file holds it, to at most 4 significant digits
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value).replace("|", "\\|")


def markdown_table(header: list[str], body: list[list[object]]) -> str:
    """A GitHub markdown table; numbers are right-aligned."""
    numeric = [
        all(isinstance(row[i], (int, float)) or row[i] is None for row in body) and i > 0
        for i in range(len(header))
    ]
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---:" if n else "---" for n in numeric) + " |",
    ]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in body]
    return "\n".join(lines)


def _pivot(rows: list[dict], value: str) -> str:
    """Rows of (impl, size, value) as one line per impl, one column per size."""
    sizes = sorted({(r["size"], r.get("size_label", str(r["size"]))) for r in rows})
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    cell = {(r["impl"], r["size"]): r.get(value) for r in rows}
    header = [f"{value.replace('_', ' ')}"] + [label for _, label in sizes]
    body = [[impl] + [cell.get((impl, size)) for size, _ in sizes] for impl in impls]
    return markdown_table(header, body)


def _flat(rows: list[dict]) -> str:
    """Any other rows: one column per key (lists and dicts left out)."""
    keys = list(
        dict.fromkeys(
            k for r in rows for k, v in r.items() if not isinstance(v, (list, dict)) and k[0] != "_"
        )
    )
    return markdown_table(keys, [[r.get(k) for k in keys] for r in rows])


# benchmarks whose rows read best as a grid: name -> (row key, column key, value key)
GRIDS = {
    "trace_ops": ("trace", "impl", "us_per_op"),
    "scaling": ("free_blocks", "impl", "us_per_op"),
}

# ratios shown as grids of their own below a grid's values, where its rows have them
RATIO_GRIDS = ("ratio_to_pytorch", "paired_ratio_to_pytorch")


def _grid(rows: list[dict], row_key: str, column_key: str, value: str) -> str:
    """One line per ``row_key`` value, one column per ``column_key`` value."""
    lines = list(dict.fromkeys(r[row_key] for r in rows))
    columns = list(dict.fromkeys(r[column_key] for r in rows))
    cell = {(r[row_key], r[column_key]): r.get(value) for r in rows}
    header = [f"{row_key.replace('_', ' ')} ({value.replace('_', ' ')})", *map(str, columns)]
    body = [[line] + [cell.get((line, c)) for c in columns] for line in lines]
    return markdown_table(header, body)


def render_rows(rows: list[dict], name: str = "") -> str:
    grid = GRIDS.get(name.split("-")[0])
    if grid and rows and all(set(grid) <= r.keys() for r in rows):
        table = _grid(rows, *grid)
        for ratio in RATIO_GRIDS:  # and each peer's ratios, where the rows have them
            rated = [r for r in rows if ratio in r]
            if rated:
                table += "\n\n" + _grid(rated, grid[0], grid[1], ratio)
        return table
    pairs = [r for r in rows if {"impl", "size", "us_per_pair"} <= r.keys()]
    if pairs:
        table = _pivot(pairs, "us_per_pair")
        if all(r.get("runs_us") for r in pairs):  # and the fastest round of each
            fastest = [{**r, "fastest_round_us": min(r["runs_us"])} for r in pairs]
            table += "\n\n" + _pivot(fastest, "fastest_round_us")
        others = [r for r in rows if r not in pairs]  # (alloc's stats readers)
        return table + ("\n\n" + _flat(others) if others else "")
    if all("measure" in r for r in rows):  # several measurements: a table each
        measures = dict.fromkeys(r["measure"] for r in rows)
        return "\n\n".join(
            _flat(
                [{k: v for k, v in r.items() if k != "measure"} for r in rows if r["measure"] == m]
            )
            for m in measures
        )
    return _flat(rows)


def render_result(result: dict) -> str:
    """A heading naming the benchmark, device and date, then its table."""
    device = result.get("device", "?")
    name = result.get("device_name")
    where = f"{name} ({device})" if name and name != device else str(device)
    when = result.get("date", "undated")
    heading = f"**{result['name']}** on {where}, {when}"
    rows = result.get("results") or []
    if not rows:
        return f"{heading}: no rows"
    return f"{heading}\n\n{render_rows(rows, result['name'])}"


def latest(results: list[dict]) -> list[dict]:
    """The latest result of each (benchmark, device), in order of name then device."""
    newest: dict[tuple[str, str], dict] = {}
    for result in results:
        key = (result["name"], str(result.get("device", "?")))
        if key not in newest or str(result.get("date", "")) >= str(newest[key].get("date", "")):
            newest[key] = result
    return [newest[key] for key in sorted(newest)]


def render(results: list[dict]) -> str:
    if not results:
        return NOT_MEASURED
    return "\n\n".join(render_result(r) for r in latest(results))


def replace_between(text: str, name: str, content: str) -> str:
    """``text`` with what lies between ``<!-- name:start -->`` and ``:end`` set to ``content``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"the README needs exactly one {start} followed by one {end}")
    before, rest = text.split(start)
    _, after = rest.split(end)
    return f"{before}{start}\n{content}\n{end}{after}"


def update_readme(readme: Path, results_dir: Path) -> bool:
    """Rewrite the generated spots of ``readme``; True if it changed."""
    results = load_results(results_dir)
    replay = [r for r in results if r["name"].startswith("replay") or r["name"] in REPLAYED]
    bench = [r for r in results if r not in replay and str(r.get("device", "")).startswith("cuda")]
    viewer = (
        f"![The memory viewer: active memory over time, and the segments at one moment]({VIEWER})"
        if (readme.parent / VIEWER).is_file()
        else f"_Screenshot to come: {VIEWER}._"
    )
    old = readme.read_text()
    new = old
    for name in OWN_SPOT:
        if f"<!-- {name}:start -->" in new:
            new = replace_between(new, name, render([r for r in bench if r["name"] == name]))
            bench = [r for r in bench if r["name"] != name]
    new = replace_between(new, "bench", render(bench))
    new = replace_between(new, "replay", render(replay))
    new = replace_between(new, "viewer", viewer)
    if new != old:
        readme.write_text(new)
    return new != old


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Put the benchmark tables into the README.")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    options = parser.parse_args(argv)
    changed = update_readme(options.readme, options.results)
    print(f"{options.readme}: {'updated' if changed else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
