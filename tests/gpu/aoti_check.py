"""Run one AOTInductor package exported by bench/aoti_export.py on vram, in this process,
which must never load torch, and check it (test_aoti_gpu.py runs it in a fresh process).

    python tests/gpu/aoti_check.py FOLDER NAME [NAME ...] [--sanitizer]

Checks, each a message and exit status 1 when it fails:
- torch is not in sys.modules, before and after everything;
- the shim library exports every aoti_* symbol the model imports (its ``nm`` list);
- the outputs equal those of torch's own AOTI runner on the same package: bitwise for way A
  (the same cubins on the same inputs), within the dtype's tolerance for B and C (their
  GEMMs are vram's cuBLASLt calls, torch's are ATen's);
- the model's memory: A and B allocate their weights themselves (cudaMalloc: not vram's),
  C's come from vram's allocator (the raw pair) and are labelled in a snapshot; every run's
  intermediates come from vram's allocator, and warm runs make no device malloc;
- outputs own vram memory and take record_use;
- a graph-captured run replays with the eager run's outputs, for new inputs too (bitwise for
  A, within the tolerance for B and C: cuBLASLt need not pick one algorithm in a capture);
- a CuPy array (a DLPack producer) is taken as input where CuPy is installed.
With ``--sanitizer`` (run it with VRAM_ALLOC_CONF=stream_sanitizer:True) it runs each model
three times against torch's outputs and checks that the stream sanitizer reported nothing.
Prints one JSON line per package with what it measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TOLERANCE = {"float32": (1e-4, 1e-4), "float16": (2e-2, 5e-2), "bfloat16": (5e-2, 1e-1)}


def fail(message: str) -> None:
    print(f"FAILED: {message}", flush=True)
    sys.exit(1)


def no_torch(when: str) -> None:
    loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    if loaded:
        fail(f"torch was imported {when}: {loaded[:5]}")


no_torch("before vram")

import numpy as np  # noqa: E402

import vram  # noqa: E402
import vram.aoti  # noqa: E402

DEVICE = vram.Device("cuda", 0)


def compare(name: str, got: np.ndarray, want: np.ndarray, exact: bool, dtype: str) -> float:
    if got.shape != want.shape or got.dtype != want.dtype:
        fail(f"{name}: {got.shape} {got.dtype}, torch gave {want.shape} {want.dtype}")
    difference = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    if exact:
        same = np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
        if not same:
            fail(f"{name}: not bitwise equal to torch's runner (max difference {difference})")
    else:
        rtol, atol = TOLERANCE[dtype]
        if not np.allclose(got, want, rtol=rtol, atol=atol):
            fail(f"{name}: max difference {difference} beyond rtol {rtol}, atol {atol}")
    return difference


def inputs_of(folder: Path, entry: dict) -> list[vram.Tensor]:
    return [vram.tensor(np.load(folder / f), device=DEVICE) for f in entry["inputs"]]


def check(folder: Path, entry: dict) -> dict:
    name, way, dtype = entry["name"], entry["way"], entry["dtype"]
    shim = vram.aoti.shim("cuda")
    needed = set(entry["aoti_symbols"])
    missing = sorted(needed - shim.exports)
    if missing:
        fail(f"{name}: the shim library lacks {missing}")
    vram.memory.empty_cache(DEVICE)
    before = vram.memory.memory_allocated(DEVICE)
    model = vram.aoti.load(folder / entry["package"], DEVICE)
    weights = vram.memory.memory_allocated(DEVICE) - before
    if way == "C":
        if weights < model.constants_bytes:
            fail(f"{name}: {weights} bytes at load, its constants {model.constants_bytes}")
        labels = [
            block["frames"][0]["name"]
            for segment in vram.memory.memory_snapshot(device=DEVICE)
            for block in segment["blocks"]
            if block["frames"] and block["frames"][0]["name"].startswith("aoti constants of")
        ]
        if not any(name in label for label in labels):
            fail(f"{name}: no snapshot block is labelled as its constants ({labels})")
    elif weights >= model.constants_bytes:
        fail(f"{name}: {weights} bytes of vram's memory at load; its weights are its own")
    x = inputs_of(folder, entry)
    first = model(*x)
    if len(first) != len(entry["torch_aoti"]):
        fail(f"{name}: {len(first)} outputs, torch's runner gave {len(entry['torch_aoti'])}")
    differences = [
        compare(f"{name} output {i}", t.numpy(), np.load(folder / f), way == "A", dtype)
        for i, (t, f) in enumerate(zip(first, entry["torch_aoti"], strict=True))
    ]
    eager_difference = float(
        np.max(np.abs(first[0].numpy().astype(np.float64) - np.load(folder / entry["eager"][0])))
    )
    # the warm pattern: a run while the previous run's outputs (and the first's) are alive,
    # whose peak the cache has seen once before the count starts
    outputs = model(*x)
    outputs = model(*x)
    runs = 3
    with vram.memory.count_device_calls(DEVICE) as calls:
        for _ in range(runs):
            outputs = model(*x)
    vram.synchronize(DEVICE)
    if calls.device_malloc:
        fail(f"{name}: {calls.device_malloc} device mallocs in {runs} warm runs")
    if calls.alloc < runs * len(outputs):
        fail(f"{name}: {calls.alloc} allocations from vram in {runs} runs, fewer than outputs")
    for t in outputs:
        if not isinstance(t._storage.owner, vram.memory.Allocation):
            fail(f"{name}: an output does not own vram memory ({type(t._storage.owner)})")
    side = vram.Stream(DEVICE)
    side.wait_stream(vram.current_stream(DEVICE))
    with vram.stream(side):
        doubled = outputs[0] + outputs[0]
    outputs[0].record_use(side)
    side.synchronize()
    compare(f"{name} read on a side stream", doubled.numpy(), 2 * first[0].numpy(), False, dtype)

    static = [t.clone() for t in x]
    graph = vram.CUDAGraph()
    with vram.graph(graph):
        captured = model(*static)
    graph.replay()
    vram.synchronize(DEVICE)
    for i, (a, b) in enumerate(zip(captured, first, strict=True)):
        compare(f"{name} replayed output {i}", a.numpy(), b.numpy(), way == "A", dtype)
    halved = [t * 0.5 for t in x]
    eager = model(*halved)
    for s, h in zip(static, halved, strict=True):
        s.copy_(h)
    graph.replay()
    vram.synchronize(DEVICE)
    for i, (a, b) in enumerate(zip(captured, eager, strict=True)):
        compare(f"{name} replayed output {i}, new inputs", a.numpy(), b.numpy(), way == "A", dtype)

    dlpack = "skipped: no cupy"
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        through = model(*(cupy.asarray(t) for t in x))
        compare(f"{name} from CuPy inputs", through[0].numpy(), first[0].numpy(), way == "A", dtype)
        dlpack = "cupy"
    return {
        "name": name,
        "max_difference_to_torch_aoti": max(differences),
        "max_difference_to_eager": eager_difference,
        "allocations_per_run": calls.alloc / runs,
        "constants_bytes": model.constants_bytes,
        "weights_in_vram_bytes": weights,
        "dlpack": dlpack,
    }


def sanitized(folder: Path, entry: dict) -> dict:
    model = vram.aoti.load(folder / entry["package"], DEVICE)
    x = inputs_of(folder, entry)
    for _ in range(3):
        outputs = model(*x)
        for i, (t, f) in enumerate(zip(outputs, entry["torch_aoti"], strict=True)):
            compare(f"{entry['name']} sanitized output {i}", t.numpy(), np.load(folder / f),
                    entry["way"] == "A", entry["dtype"])  # fmt: skip
    races = vram.memory.stream_races(DEVICE)
    if races:
        fail(f"{entry['name']}: the stream sanitizer reported {len(races)} races: {races[:3]}")
    return {"name": entry["name"], "sanitizer": "no races"}


def main() -> None:
    arguments = [a for a in sys.argv[1:] if not a.startswith("--")]
    folder, names = Path(arguments[0]), arguments[1:]
    entries = {e["name"]: e for e in json.loads((folder / "manifest.json").read_text())["packages"]}
    for name in names:
        if name not in entries:
            fail(f"{name} is not in {folder}/manifest.json (see {folder}/{name}.log)")
        if "--sanitizer" in sys.argv:
            report = sanitized(folder, entries[name])
        else:
            report = check(folder, entries[name])
        no_torch(f"by {name}")
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
