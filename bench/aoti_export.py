"""Compile the AOTInductor models vram.aoti's GPU test and benchmark run (needs torch and a
GPU; run on the GPU machine): two models, three ways each, into OUTDIR.

Models:
- ``mlp``: Linear 512 -> 1024, ReLU, Linear 1024 -> 256; float32 input [32, 512];
- ``gpt``: two GPT-2-style decoder blocks (LayerNorm, causal self-attention with 12 heads,
  LayerNorm, GELU MLP), d_model 768; float16 input [4, 128, 768]. Its softmax is written out
  (max, exp, sum): ``aten._softmax`` would let Inductor's attention patterns turn the block
  into a scaled_dot_product_attention kernel, an op vram has no shim for.

Ways (every one ``aot_inductor.link_libtorch=False``, kernels embedded in the .so, weights
in the .so):
- ``A``: ExecuTorch's CUDA backend's options (backends/cuda/cuda_backend.py): GEMMs as Triton
  kernels (max_autotune, max_autotune_gemm_backends="TRITON"), emulate_precision_casts,
  loop_ordering_after_fusion off: no GEMM shim is called;
- ``B``: Inductor's default GEMM backends without max_autotune: ATen's GEMMs, so the model
  calls aoti_torch_cuda_mm_out / addmm_out / bmm_out;
- ``C``: as B, with aot_inductor.weight_use_caching_allocator: its weights come from the
  shim's caching-allocator pair.

For each package OUTDIR gets ``<model>_<way>.pt2``, its inputs and outputs as .npy (the
outputs of torch's own AOTI runner on the package, and of eager PyTorch), ``nm -D
--undefined-only`` of its .so (``<name>.nm.txt``), a log (``<name>.log``), and an entry in
``manifest.json`` (options, versions, files, compile seconds, the aoti_* symbols it
imports). The six compile in parallel processes. Every option name is checked against
torch._inductor.config first: a missing one stops with its name.

    python bench/aoti_export.py OUTDIR [--models mlp,gpt] [--ways A,B,C] [--jobs 6]

``--device cpu`` compiles for the host instead (a check of the script on a machine without
a GPU, with a CPU build of torch; way A's Triton GEMMs need a GPU).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

MODELS = ("mlp", "gpt")
WAYS = ("A", "B", "C")
COMMON = {"aot_inductor.link_libtorch": False, "aot_inductor.embed_kernel_binary": True}
OPTIONS = {
    "A": {
        **COMMON,
        "max_autotune": True,
        "max_autotune_gemm_backends": "TRITON",
        "max_autotune_conv_backends": "TRITON",
        "emulate_precision_casts": True,
        "loop_ordering_after_fusion": False,
    },
    "B": {**COMMON, "max_autotune": False},
    "C": {**COMMON, "max_autotune": False, "aot_inductor.weight_use_caching_allocator": True},
}
# ExecuTorch's options that tune rather than define way A: left out, with a line in the log,
# where this torch lacks them
OPTIONAL = ("emulate_precision_casts", "loop_ordering_after_fusion", "max_autotune_conv_backends")
SEED = 0
COMPILE_THREADS = "8"  # Inductor's compile workers per process (six processes at once)
TIMEOUT_S = 900


def check_options(options: dict, log) -> dict:
    """The options this torch has (nested names by dots, as torch._inductor.config names
    them); a missing one stops with its name, unless it is OPTIONAL (then it is left out)."""
    import torch
    from torch._inductor import config

    missing = object()  # (an option whose default is None exists all the same)
    found = {}
    for name, value in options.items():
        node = config
        for part in name.split("."):
            node = getattr(node, part, missing)
            if node is missing:
                break
        if node is not missing:
            found[name] = value
        elif name in OPTIONAL:
            print(f"torch {torch.__version__} has no inductor option {name!r}: left out", file=log)
        else:
            raise SystemExit(
                f"aoti_export: torch {torch.__version__} has no inductor option {name!r}"
            )
    return found


def build_model(name: str, device: str):
    """The eager module (on ``device``, eval) and its inputs."""
    import torch
    from torch import nn

    torch.manual_seed(SEED)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(512, 1024)
            self.fc2 = nn.Linear(1024, 256)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self, d: int, heads: int, seq: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

        def attention(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(x).split(c, dim=2)
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
            scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
            scores = (scores - scores.amax(dim=-1, keepdim=True)).exp()
            weights = scores / scores.sum(dim=-1, keepdim=True)
            return self.proj((weights @ v).transpose(1, 2).reshape(b, t, c))

        def forward(self, x):
            x = x + self.attention(self.ln1(x))
            return x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block(768, 12, 128) for _ in range(2))

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    if name == "mlp":
        module, x = MLP(), torch.randn(32, 512)
        dtype = torch.float32
    else:
        module, x = GPT(), torch.randn(4, 128, 768)
        dtype = torch.float16
    module = module.to(device=device, dtype=dtype).eval()
    return module, (x.to(device=device, dtype=dtype),)


def promote_libtorch() -> None:
    """Make libtorch's symbols global, so that a link_libtorch=False model loaded by torch's
    own runner resolves its aoti_torch_* and cuda* imports (torch loads them privately)."""
    import torch

    folder = Path(torch.__file__).parent / "lib"
    for name in ("libtorch_cpu.so", "libtorch_cuda.so"):
        if (folder / name).exists():
            ctypes.CDLL(str(folder / name), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    with open("/proc/self/maps") as maps:
        cudart = {line.split()[-1] for line in maps if "libcudart.so" in line}
    for path in cudart:
        ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)


def undefined_symbols(package: Path, log) -> tuple[str, list[str]]:
    """``nm -D --undefined-only`` of the package's .so, and its aoti_* names."""
    with zipfile.ZipFile(package) as archive, tempfile.TemporaryDirectory() as folder:
        libraries = [n for n in archive.namelist() if n.endswith(".so")]
        if len(libraries) != 1:
            raise RuntimeError(f"{package}: expected one .so, found {libraries}")
        so = Path(folder) / "model.so"
        so.write_bytes(archive.read(libraries[0]))
        nm = shutil.which("nm")
        if nm is not None:
            text = subprocess.run(
                [nm, "-D", "--undefined-only", str(so)], capture_output=True, text=True,
                check=True,
            ).stdout  # fmt: skip
        else:  # no binutils here: the same list from the ELF tables
            from vram.aoti._elf import dynamic_symbols

            print("nm not found: the list comes from vram.aoti._elf", file=log)
            text = "".join(f"U {n}\n" for n in sorted(dynamic_symbols(so).undefined))
    names = sorted({line.split()[-1].split("@")[0] for line in text.splitlines() if line.strip()})
    return text, [n for n in names if n.startswith("aoti_")]


def export_one(out: Path, model_name: str, way: str, device: str) -> dict:
    """Compile one package, run torch's runner and eager PyTorch on its inputs, save all."""
    import numpy as np
    import torch

    name = f"{model_name}_{way}"
    log = open(out / f"{name}.log", "a", buffering=1)  # noqa: SIM115 - kept open for the run
    where = torch.cuda.get_device_name() if device == "cuda" else device
    print(f"== {name}: torch {torch.__version__}, {where}", file=log)
    options = check_options(OPTIONS[way], log)
    module, inputs = build_model(model_name, device)
    with torch.no_grad():
        eager = module(*inputs)
        program = torch.export.export(module, inputs)
        start = time.perf_counter()
        package = torch._inductor.aoti_compile_and_package(
            program, package_path=str(out / f"{name}.pt2"), inductor_configs=options
        )
        seconds = time.perf_counter() - start
    print(f"compiled {package} in {seconds:.1f} s", file=log)
    nm_text, aoti = undefined_symbols(Path(package), log)
    (out / f"{name}.nm.txt").write_text(nm_text)
    print(f"imports {len(aoti)} aoti_* symbols: {' '.join(aoti)}", file=log)
    promote_libtorch()
    runner = torch._inductor.aoti_load_package(str(package))
    with torch.no_grad():
        found = runner(*inputs)
    found = list(found) if isinstance(found, (list, tuple)) else [found]
    if device == "cuda":
        torch.cuda.synchronize()
    files = {"inputs": [], "torch_aoti": [], "eager": []}
    for kind, tensors in (("inputs", inputs), ("torch_aoti", found), ("eager", [eager])):
        for i, t in enumerate(tensors):
            path = f"{name}.{kind}{i}.npy"
            np.save(out / path, t.detach().cpu().numpy())
            files[kind].append(path)
    entry = {
        "name": name,
        "model": model_name,
        "way": way,
        "package": f"{name}.pt2",
        "nm": f"{name}.nm.txt",
        "aoti_symbols": aoti,
        "options": {k: v for k, v in options.items()},
        "dtype": str(inputs[0].dtype).removeprefix("torch."),
        "compile_s": round(seconds, 1),
        "torch": torch.__version__,
        "device": device,
        "cuda": torch.version.cuda,
        "triton": _triton_version(),
        **files,
    }
    (out / f"{name}.json").write_text(json.dumps(entry, indent=2))
    print("done", file=log)
    return entry


def _triton_version() -> str | None:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--jobs", type=int, default=6, help="packages compiled at once")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # model:way, a worker
    options = parser.parse_args(argv)
    out = options.outdir
    out.mkdir(parents=True, exist_ok=True)
    if options.one:
        model_name, way = options.one.split(":")
        try:
            export_one(out, model_name, way, options.device)
        except BaseException:
            with open(out / f"{model_name}_{way}.log", "a") as log:
                traceback.print_exc(file=log)
            raise
        return 0
    wanted = [
        (m, w)
        for m in options.models.split(",")
        for w in options.ways.split(",")
        if m in MODELS and w in WAYS
    ]
    if not wanted:
        parser.error(f"--models: choose from {MODELS}; --ways: from {WAYS}")
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": COMPILE_THREADS}
    running: list[tuple[str, subprocess.Popen, float]] = []
    failed: list[str] = []
    pending = list(wanted)
    start = time.perf_counter()
    while pending or running:
        while pending and len(running) < max(1, options.jobs):
            m, w = pending.pop(0)
            command = [sys.executable, __file__, str(out), "--one", f"{m}:{w}"]
            command += ["--device", options.device]
            with open(out / f"{m}_{w}.log", "w") as log:
                process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
            running.append((f"{m}_{w}", process, time.perf_counter()))
        time.sleep(0.5)
        for item in list(running):
            name, process, began = item
            if process.poll() is None and time.perf_counter() - began < TIMEOUT_S:
                continue
            if process.poll() is None:
                process.kill()
                process.wait()
            running.remove(item)
            took = time.perf_counter() - began
            if process.returncode != 0:
                failed.append(name)
                tail = (out / f"{name}.log").read_text().splitlines()[-15:]
                print(f"{name}: FAILED ({took:.0f} s):\n  " + "\n  ".join(tail), flush=True)
            else:
                print(f"{name}: ok ({took:.0f} s)", flush=True)
    entries = [
        json.loads((out / f"{m}_{w}.json").read_text())
        for m, w in wanted
        if (out / f"{m}_{w}.json").exists() and f"{m}_{w}" not in failed
    ]
    (out / "manifest.json").write_text(json.dumps({"packages": entries}, indent=2))
    print(
        f"{len(entries)} of {len(wanted)} packages in {out} ({time.perf_counter() - start:.0f} s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
