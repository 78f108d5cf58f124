"""Is compute-sanitizer's report on lu.cu's cluster panels the kernel's fault or the tool's?

    bash bench/sanitize.sh probe        (an sm_90 GPU, nvcc and compute-sanitizer on PATH)

memcheck on an H100 reported, for every shape that takes cluster panels, ``Invalid __shared__
write of size 144 bytes ... Access to 0x880 is not located in remote CTA`` at the bulk copy
of ``panel<float, 8, 128, 1, 32>``, while the results are right without the tool. Either
the copy is given a shared::cta destination where a shared::cluster one (from mapa) is due,
or the tool cannot follow the copy. The steps:

1. bench/sanitize/cluster_probe.cu, built once per form (nvcc -arch=sm_90 -lineinfo), runs
   bare: does every offer reach every block? (The control ``unmapped`` is the hypothesis: a
   shared::cta destination delivers to the sender itself.)
2. Every form under memcheck; lu.cu's forms and dsmem under racecheck and synccheck too.
3. vram's kernel itself: lu_factor of the issue's shapes (lu_shapes.py) on cluster panels
   under memcheck, racecheck and synccheck, and under memcheck with VRAM_LINALG_CLUSTERS=0.
4. A table, the verdict, and the JSON (cluster_probe-cuda0-DATE.json) in $OUT and
   bench/results/.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _sanitizer import command, find_sanitizer, read_report

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SOURCE = HERE / "cluster_probe.cu"
FORMS = ("lu", "lu_no_exit_barrier", "lu_remote", "cccl", "st_async", "dsmem", "unmapped")
DOCUMENTED = ("cccl", "st_async", "dsmem")  # the forms NVIDIA's documents spell out
RACY = ("lu", "lu_no_exit_barrier", "dsmem")  # also under racecheck and synccheck
TOOLS = ("memcheck", "racecheck", "synccheck")
TIMEOUT = 300  # seconds a run may take before it counts as hung


def run(args: list[str], env: dict | None = None, timeout: float = TIMEOUT) -> dict:
    """Run ``args``: its exit status, combined output and seconds (status None: timed out,
    127: not found)."""
    start = time.monotonic()
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
        )
        status, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status = None
        output = (exc.stdout or b"").decode(errors="replace") if exc.stdout else ""
    except OSError as exc:  # the program is not there
        status, output = 127, f"{args[0]}: {exc.strerror}"
    return {"status": status, "output": output, "seconds": round(time.monotonic() - start, 1)}


def build(nvcc: str, folder: Path) -> dict[str, dict]:
    """Each form's binary, built in parallel: {form: {"path", "status", "output"}}."""

    def one(index: int, form: str) -> dict:
        path = folder / f"cluster_probe_{form}"
        flags = ["-std=c++17", "-O2", "-arch=sm_90", "-lineinfo", f"-DFORM={index}"]
        made = run([nvcc, *flags, "-o", str(path), str(SOURCE)])
        return {"path": str(path), **made}

    with concurrent.futures.ThreadPoolExecutor(len(FORMS)) as pool:
        futures = {form: pool.submit(one, i, form) for i, form in enumerate(FORMS)}
        return {form: future.result() for form, future in futures.items()}


def checked(sanitizer: str, tool: str, program: list[str], env: dict | None = None) -> dict:
    """``program`` under ``tool``: exit status, seconds, error count and the first records."""
    done = run(command(sanitizer, tool, program), env=env)
    report = read_report(done["output"])
    errors = report.count("device") + report.count("tool") + report.unprinted
    first = [
        f"{record.headline} [{record.where}]" for record in report.records if record.kind != "api"
    ]
    return {
        "status": done["status"],
        "seconds": done["seconds"],
        "errors": errors,
        "warnings": report.count("warning"),
        "api_errors": report.grouped("api"),
        "first": first[:3],
        "output_tail": done["output"][-1500:],
    }


def probe_form(form: str, made: dict, sanitizer: str) -> dict:
    """One built form: bare (did every offer arrive?), then under the tools."""
    entry: dict = {"built": made["status"] == 0}
    if not entry["built"]:
        entry["build_output"] = made["output"][-2000:]
        return entry
    bare = run([made["path"]])
    entry["bare"] = {"status": bare["status"], "line": bare["output"].strip()[-300:]}
    # 0: every offer arrived; 3: values wrong; anything else: it did not run (None)
    entry["delivered"] = {0: True, 3: False}.get(bare["status"])
    for tool in TOOLS if form in RACY else ("memcheck",):
        entry[tool] = checked(sanitizer, tool, [made["path"]])
    return entry


def vram_runs() -> dict[str, tuple]:
    """lu_shapes.py's runs: (tool or None for bare, the program, its environment)."""
    script = [sys.executable, str(HERE / "lu_shapes.py")]
    few = "600x1,1100x1"  # racecheck and synccheck are slow: both panel widths, one matrix each
    off = {**os.environ, "VRAM_LINALG_CLUSTERS": "0"}
    return {
        "bare": (None, script, None),
        "memcheck": ("memcheck", script, None),
        "racecheck": ("racecheck", [*script, few], None),
        "synccheck": ("synccheck", [*script, few], None),
        "memcheck, VRAM_LINALG_CLUSTERS=0": ("memcheck", script, off),
    }


def vram_run(sanitizer: str, tool: str | None, program: list[str], env: dict | None) -> dict:
    if tool is None:
        done = run(program, env=env)
        return {"status": done["status"], "seconds": done["seconds"], "lines": done["output"]}
    return checked(sanitizer, tool, program, env=env)


def probe(nvcc: str, sanitizer: str, folder: Path, with_vram: bool) -> tuple[dict, dict | None]:
    """Steps 1 to 3, concurrently (each run its own process on the one GPU): the forms'
    results and vram's (None without it)."""
    print("1. building the forms", flush=True)
    built = build(nvcc, folder)
    print("2-3. the forms bare and under the tools; vram's lu_factor under the tools", flush=True)
    with concurrent.futures.ThreadPoolExecutor(len(FORMS) + 5) as pool:
        vram = {}
        if with_vram:
            vram = {
                name: pool.submit(vram_run, sanitizer, *spec) for name, spec in vram_runs().items()
            }
        forms = {form: pool.submit(probe_form, form, built[form], sanitizer) for form in FORMS}
        form_results = {form: future.result() for form, future in forms.items()}
        vram_results = {name: future.result() for name, future in vram.items()}
    for form, entry in form_results.items():
        errors = {tool: entry[tool]["errors"] for tool in TOOLS if tool in entry}
        print(
            f"  {form:20s} built={entry['built']!s:5s} delivered="
            f"{entry.get('delivered')!s:5s} errors={errors}"
        )
    for name, result in vram_results.items():
        print(
            f"  vram lu_factor, {name}: exit status {result['status']}, "
            f"errors {result.get('errors', '-')}"
        )
    return form_results, vram_results if with_vram else None


def verdict(forms: dict[str, dict], vram: dict[str, dict] | None) -> list[str]:
    """What the runs show, in sentences (the first one is the answer)."""

    def flagged(form: str, tool: str = "memcheck") -> bool | None:
        found = forms.get(form, {}).get(tool)
        return None if found is None else found["errors"] > 0

    def delivered(form: str) -> bool | None:
        return forms.get(form, {}).get("delivered")

    lines: list[str] = []
    if not all(forms[form]["built"] for form in ("lu", "lu_no_exit_barrier", "unmapped")):
        return ["NO VERDICT: the probe's lu forms did not build (see build_output)."]
    if delivered("lu") is None or delivered("lu_no_exit_barrier") is None:
        return ["NO VERDICT: the lu forms did not run: " + forms["lu"]["bare"]["line"]]
    if not delivered("lu_no_exit_barrier") or not delivered("lu"):
        lines.append(
            "CODE: lu.cu's exchange does not deliver every offer to every block even without "
            "a tool (see the bare runs): the kernel is wrong."
        )
    elif flagged("lu_no_exit_barrier") or flagged("lu"):
        same_documented = flagged("cccl")
        if same_documented:
            lines.append(
                "TOOL: memcheck reports the invalid write for NVIDIA's own C++ form too (cccl: "
                "cooperative_groups' map_shared_rank and cuda::ptx::cp_async_bulk), and every "
                "form delivers every offer to every block; memcheck cannot follow a "
                "shared::cta -> shared::cluster bulk copy. The kernel is right."
            )
        elif same_documented is False:
            lines.append(
                "FORM: memcheck follows the cccl form (a generic address from map_shared_rank, "
                "cvta to shared) but not lu.cu's mapa.shared::cluster one; both deliver every "
                "offer. lu.cu should derive its addresses as the cccl form does."
            )
        else:
            lines.append("TOOL or FORM: the cccl form did not build; see the other forms below.")
        if flagged("lu_remote") is False:
            lines.append("Only the copy a block makes to itself is flagged (lu_remote is clean).")
    else:
        lines.append(
            "NOT REPRODUCED: memcheck follows the probe's copies; the report on panel<> comes "
            "from something the probe does not have (see vram's own kernel below)."
        )
    control = forms["unmapped"]
    if control.get("delivered") is False:
        lines.append(
            "Control: a shared::cta destination (the issue's hypothesis) delivers the offers to "
            "the sender itself (" + control["bare"]["line"] + "); lu.cu's destinations deliver "
            "to every block, so they are shared::cluster addresses from mapa."
        )
    followed = [f for f in DOCUMENTED if flagged(f) is False and delivered(f)]
    if followed:
        lines.append("Forms memcheck follows and that deliver: " + ", ".join(followed) + ".")
    for tool in ("racecheck", "synccheck"):
        old, new = flagged("lu_no_exit_barrier", tool), flagged("lu", tool)
        if old and not new:
            lines.append(f"{tool} flags lu.cu as it was and not with its exit barrier.")
        elif old or new:
            lines.append(f"{tool} flags the probe's lu forms (see the table).")
        else:
            lines.append(f"{tool}: the probe's lu forms are clean.")
    if vram:
        cluster = vram.get("memcheck", {})
        switched = vram.get("memcheck, VRAM_LINALG_CLUSTERS=0", {})
        lines.append(
            f"vram's lu_factor: memcheck {cluster.get('errors')} errors on cluster panels, "
            f"{switched.get('errors')} with VRAM_LINALG_CLUSTERS=0; racecheck "
            f"{vram.get('racecheck', {}).get('errors')}, synccheck "
            f"{vram.get('synccheck', {}).get('errors')} on cluster panels."
        )
    return lines


def write(result: dict, out: Path | None) -> list[Path]:
    """The JSON in bench/results/ and in ``out`` (or $OUT): the bench/_common layout."""
    date = datetime.date.today().isoformat()
    name = f"cluster_probe-cuda0-{date}.json"
    folders = [ROOT / "bench" / "results"]
    extra = out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if extra is not None:
        folders.append(extra)
    paths = []
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(json.dumps(result, indent=2) + "\n")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    parser.add_argument("--sanitizer", default=None, help="compute-sanitizer (default: PATH)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--no-vram", action="store_true", help="skip step 3 (vram's kernel)")
    options = parser.parse_args(argv)
    sanitizer = options.sanitizer or find_sanitizer(options.nvcc)
    if sanitizer is None or shutil.which(options.nvcc) is None:
        print("cluster_probe: needs nvcc and compute-sanitizer (--nvcc, --sanitizer)")
        return 2
    versions = {
        name: run([path, "--version"])["output"].strip().splitlines()[-1:]
        for name, path in (("nvcc", options.nvcc), ("compute-sanitizer", sanitizer))
    }
    gpu = run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    print(f"probe: {gpu['output'].strip()}; {versions}", flush=True)
    folder = Path(os.environ.get("OUT") or "/tmp/vram-sanitize") / "probe-build"
    folder.mkdir(parents=True, exist_ok=True)
    forms, vram = probe(options.nvcc, sanitizer, folder, not options.no_vram)
    lines = verdict(forms, vram)
    print("\nVERDICT: " + "\n  ".join(lines))
    rows = [
        {
            "form": form,
            "built": entry["built"],
            "delivered": entry.get("delivered"),
            **{f"{tool}_errors": entry[tool]["errors"] for tool in TOOLS if tool in entry},
            "details": entry,
        }
        for form, entry in forms.items()
    ]
    for name, entry in (vram or {}).items():
        rows.append({"form": f"vram lu_factor, {name}", "status": entry["status"],
                     "errors": entry.get("errors"), "details": entry})  # fmt: skip
    result = {
        "name": "cluster_probe",
        "device": "cuda:0",
        "device_name": gpu["output"].strip(),
        "date": datetime.date.today().isoformat(),
        "versions": versions,
        "verdict": lines,
        "results": rows,
    }
    for path in write(result, options.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
