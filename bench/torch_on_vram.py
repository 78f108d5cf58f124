"""PyTorch training on vram's allocator: a GPT-2-size training step with PyTorch allocating
through vram (``vram.interop.torch.use_vram_allocator()``) beside PyTorch's own allocator.

PyTorch takes its allocator once per process, so each allocator runs in a fresh process of
this script (``--child torch`` / ``--child vram``) with the same seed, data and
deterministic kernels; the parent compares them. Rows: the loss of every step (and whether
they are bitwise the same), peak reserved / peak allocated (PyTorch's counters for its own
allocator, vram's for vram), ms per step (host wall time, synchronized at each step's end),
and for vram the calls into vram and the host time spent inside them per step.

``--device sim:0`` checks the vram side without a GPU or PyTorch: vram's pluggable-allocator
callbacks (called through their C pointers, as PyTorch calls them) replay the model's
parameter, gradient and optimizer-state allocations on the simulated GPU; its numbers say
nothing about PyTorch on a GPU.

    python bench/torch_on_vram.py [--device cuda:0] [--steps 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import vram
from _common import description_of, device_name, write_results

MiB = 1 << 20
GPT2 = {"layers": 12, "hidden": 768, "heads": 12, "seq": 512, "batch": 8, "vocab": 50257}
WARMUP = 3


# ============================================================================ the model
def build(torch, config: dict, device):
    """GPT-2 (small): token and position embeddings, pre-LN blocks with causal attention
    written out (deterministic kernels only) and a 4x GELU MLP, a tied LM head."""
    nn, F = torch.nn, torch.nn.functional
    hidden, heads = config["hidden"], config["heads"]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc, self.out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x, mask):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(hidden, dim=2)
            q, k, v = (z.view(b, t, heads, hidden // heads).transpose(1, 2) for z in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) / (hidden // heads) ** 0.5
            attn = scores.masked_fill(mask[:t, :t], float("-inf")).softmax(dim=-1)
            y = (attn @ v).transpose(1, 2).reshape(b, t, hidden)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(config["vocab"], hidden)
            self.pos = nn.Embedding(config["seq"], hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(config["layers"]))
            self.ln = nn.LayerNorm(hidden)
            mask = torch.ones(config["seq"], config["seq"], dtype=torch.bool).triu(1)
            self.register_buffer("mask", mask)

        def forward(self, idx, targets):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x, self.mask)
            logits = self.ln(x) @ self.tok.weight.t()
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return GPT().to(device)


def child(allocator: str, config: dict, steps: int) -> dict:
    """One process, one allocator: train ``steps`` steps after WARMUP; its measurements."""
    if allocator == "vram":
        from vram.interop import torch as vram_torch

        vram_torch.use_vram_allocator()  # before PyTorch's first CUDA call
    import torch

    torch.use_deterministic_algorithms(True)
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = build(torch, config, device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=False, foreach=True)
    generator = torch.Generator(device="cpu").manual_seed(1)
    shape = (config["batch"], config["seq"])
    data = torch.randint(0, config["vocab"], shape, generator=generator).to(device)
    targets = torch.randint(0, config["vocab"], shape, generator=generator).to(device)
    losses, times, calls, seconds = [], [], [], []
    for step in range(WARMUP + steps):
        before = vram_torch.callback_stats() if allocator == "vram" else None
        t0 = time.perf_counter()
        loss = model(data, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        if step >= WARMUP:
            losses.append(loss.item())
            times.append(elapsed * 1e3)
            if before is not None:
                after = vram_torch.callback_stats()
                calls.append(after["alloc_calls"] - before["alloc_calls"])
                seconds.append(after["seconds"] - before["seconds"])
    result = {"losses": losses, "ms_per_step": statistics.median(times)}
    if allocator == "vram":
        stats = vram.memory.memory_stats("cuda:0")
        result["peak_reserved"] = stats["reserved_bytes.all.peak"]
        result["peak_allocated"] = stats["allocated_bytes.all.peak"]
        result["allocs_per_step"] = statistics.median(calls)
        result["callback_ms_per_step"] = statistics.median(seconds) * 1e3
        result["error"] = repr(vram_torch.last_error()) if vram_torch.last_error() else None
    else:
        result["peak_reserved"] = torch.cuda.max_memory_reserved(device)
        result["peak_allocated"] = torch.cuda.max_memory_allocated(device)
    return result


def run_child(allocator: str, config: dict, steps: int) -> dict:
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    command = [sys.executable, __file__, "--child", allocator, "--steps", str(steps)]
    command += ["--config", json.dumps(config)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"the {allocator} run failed:\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def gpu_rows(config: dict, steps: int) -> list[dict]:
    runs = {name: run_child(name, config, steps) for name in ("torch", "vram")}
    ours, theirs = runs["vram"]["losses"], runs["torch"]["losses"]
    same = ours == theirs
    diff = max(abs(a - b) for a, b in zip(ours, theirs, strict=True))
    extra = runs["vram"]["ms_per_step"] - runs["torch"]["ms_per_step"]
    rows = []
    for name, label in (("torch", "pytorch allocator"), ("vram", "vram allocator")):
        run = runs[name]
        rows.append(
            {
                "variant": label,
                "peak_reserved_mib": round(run["peak_reserved"] / MiB, 1),
                "peak_allocated_mib": round(run["peak_allocated"] / MiB, 1),
                "ms_per_step": round(run["ms_per_step"], 2),
                "final_loss": run["losses"][-1],
                "same_losses_bitwise": same,
                "max_loss_difference": diff,
                "extra_host_ms_per_step": round(extra, 3) if name == "vram" else 0.0,
                "allocs_per_step": run.get("allocs_per_step"),
                "callback_ms_per_step": round(run.get("callback_ms_per_step", 0.0), 3),
                "model": "GPT-2 small ({layers} layers, {hidden} hidden, seq {seq}, "
                "batch {batch}), fp32 AdamW".format(**config),
            }
        )
        if name == "vram" and run.get("error"):
            rows[-1]["callback_error"] = run["error"]
    return rows


# ========================================================================= sim: a check
def sim_rows(config: dict, steps: int) -> list[dict]:
    """vram's callbacks on sim:0, replaying the model's parameter, gradient and AdamW state
    allocations (sizes from the configuration) as PyTorch would ask for them."""
    from vram.interop._pluggable import _ALLOC, _FREE, Callbacks

    hidden, vocab, seq = config["hidden"], config["vocab"], config["seq"]
    per_block = [hidden] * 4 + [3 * hidden * hidden, 3 * hidden, hidden * hidden, hidden]
    per_block += [4 * hidden * hidden, 4 * hidden, 4 * hidden * hidden, hidden]
    sizes = [vocab * hidden, seq * hidden] + per_block * config["layers"] + [hidden, hidden]
    callbacks = Callbacks("sim", current_device=lambda: 0)
    alloc_address, free_address = callbacks.addresses
    alloc, free = _ALLOC(alloc_address), _FREE(free_address)
    params = [alloc(4 * n, 0, None) for n in sizes]
    state = [alloc(4 * n, 0, None) for n in sizes * 2]  # AdamW's exp_avg and exp_avg_sq
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        grads = [alloc(4 * n, 0, None) for n in sizes]
        for ptr, n in zip(grads, sizes, strict=True):
            free(ptr, 4 * n, 0, None)
        times.append((time.perf_counter() - t0) * 1e3)
    stats = vram.memory.memory_stats("sim:0")
    for ptr, n in zip(params + state, sizes * 3, strict=True):
        free(ptr, 4 * n, 0, None)
    return [
        {
            "variant": "vram allocator callbacks (sim check: parameter, gradient, AdamW sizes)",
            "peak_reserved_mib": round(stats["reserved_bytes.all.peak"] / MiB, 1),
            "peak_allocated_mib": round(stats["allocated_bytes.all.peak"] / MiB, 1),
            "ms_per_step": round(statistics.median(times), 3),
            "allocs_per_step": len(sizes),
        }
    ]


def table(rows: list[dict]) -> str:
    lines = [f"{'variant':<26}{'peak reserved MiB':>19}{'peak allocated MiB':>20}{'ms/step':>10}"]
    for r in rows:
        lines.append(
            f"{r['variant'][:26]:<26}{r['peak_reserved_mib']:>19.1f}"
            f"{r['peak_allocated_mib']:>20.1f}{r['ms_per_step']:>10.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=None, help="cuda:0 or sim:0 (default: the default)")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--child", choices=("torch", "vram"), help=argparse.SUPPRESS)
    parser.add_argument("--config", default=None, help="the model, as JSON (GPT-2 small)")
    options = parser.parse_args(argv)
    config = {**GPT2, **json.loads(options.config)} if options.config else dict(GPT2)
    if options.child:
        print(json.dumps(child(options.child, config, options.steps)))
        return 0
    device = vram.default_device() if options.device is None else vram.device(options.device)
    if device.type == "cuda":
        rows = gpu_rows(config, options.steps)
    else:
        rows = sim_rows(config, options.steps)
    paths = write_results("torch_on_vram", device, rows, options.out)
    print(f"torch_on_vram benchmark on {device} ({device_name(device)}), {options.steps} steps")
    print(table(rows))
    if device.type == "cuda":
        vram_row = rows[1]
        print(
            f"same losses bitwise: {vram_row['same_losses_bitwise']} "
            f"(max difference {vram_row['max_loss_difference']:.3g}); extra host time per "
            f"step {vram_row['extra_host_ms_per_step']:.2f} ms, of which "
            f"{vram_row['callback_ms_per_step']:.2f} ms inside vram's "
            f"{vram_row['allocs_per_step']} allocations"
        )
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
