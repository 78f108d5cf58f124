"""A GPT-2-small decoder block's forward pass in vram and in PyTorch eager, with the same
weights: ``x + attn(ln_1(x))``, then ``+ mlp(ln_2(x))``.

attn: one linear to q, k and v (split into heads as views), causal scaled dot product
attention, a linear back. mlp: linear + gelu (tanh form), linear. Every linear has a bias.
PyTorch's block is GPT-2's code: ``F.gelu(F.linear(...), approximate="tanh")``, and each
residual ``x + F.linear(...)``. vram's fuses them into cuBLASLt's epilogues: the first mlp
linear is ``addmm(..., activation="gelu")`` (GELU_BIAS), and each linear back with its
residual ``addmm(x, h, w.t(), bias=b)`` (C read where it is, BIAS): one GEMM, no add.

``decoder_rows`` times both per block, interleaved round by round: host µs (the wall time of
``blocks`` calls with no synchronize inside, over ``blocks``) and device µs (events around
the same calls).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

import vram

__all__ = ["SHAPES", "gpt2_weights", "vram_block", "torch_block", "decoder_rows", "tolerance"]

SHAPES = ((1, 128), (8, 128), (1, 1024), (8, 1024))  # (batch, sequence)
D_MODEL = 768
HEADS = 12
_LAUNCHES_IN_FLIGHT = 600  # kernels a timed batch may queue before the host would wait


def gpt2_weights(d: int = D_MODEL, seed: int = 0) -> dict[str, np.ndarray]:
    """float32 weights of one block, GPT-2's initialization (normal, std 0.02; the output
    projections scaled by 1 / sqrt(2 * layers) of a 12-layer model), layer norms jittered."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    out_std = 0.02 / np.sqrt(2 * 12)
    return {
        "ln_1.weight": 1 + normal(d, std=0.1),
        "ln_1.bias": normal(d, std=0.1),
        "attn.weight": normal(3 * d, d),
        "attn.bias": normal(3 * d),
        "proj.weight": normal(d, d, std=out_std),
        "proj.bias": normal(d),
        "ln_2.weight": 1 + normal(d, std=0.1),
        "ln_2.bias": normal(d, std=0.1),
        "fc.weight": normal(4 * d, d),
        "fc.bias": normal(4 * d),
        "mlp_proj.weight": normal(d, 4 * d, std=out_std),
        "mlp_proj.bias": normal(d),
    }


def vram_block(weights: dict[str, np.ndarray], device: Any, heads: int = HEADS) -> Callable:
    """The block in vram, bfloat16 weights on ``device``: ``block(x)`` for x [B, T, d]."""
    w = {
        name: vram.tensor(value.astype(ml_dtypes.bfloat16), device=device)
        for name, value in weights.items()
    }
    functional = vram.nn.functional
    proj_t, fc_t, mlp_proj_t = (w[f"{name}.weight"].t() for name in ("proj", "fc", "mlp_proj"))

    def block(x: vram.Tensor) -> vram.Tensor:
        b, t, d = x.shape
        h = functional.layer_norm(x, (d,), w["ln_1.weight"], w["ln_1.bias"])
        qkv = functional.linear(h, w["attn.weight"], w["attn.bias"])
        qkv = qkv.view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        a = functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        a = a.transpose(1, 2).reshape(b * t, d)
        x = vram.addmm(x.view(b * t, d), a, proj_t, bias=w["proj.bias"])  # x + linear(a)
        h = functional.layer_norm(x, (d,), w["ln_2.weight"], w["ln_2.bias"])
        h = vram.addmm(w["fc.bias"], h, fc_t, activation="gelu")
        return vram.addmm(x, h, mlp_proj_t, bias=w["mlp_proj.bias"]).view(b, t, d)

    return block


def torch_block(weights: dict[str, np.ndarray], device: str, heads: int = HEADS) -> Callable:
    """The block in PyTorch eager, the same bfloat16 weights (call it under no_grad)."""
    import torch
    import torch.nn.functional as functional

    w = {
        name: torch.from_numpy(value).to(device=device, dtype=torch.bfloat16)
        for name, value in weights.items()
    }

    def block(x: Any) -> Any:
        b, t, d = x.shape
        h = functional.layer_norm(x, (d,), w["ln_1.weight"], w["ln_1.bias"])
        qkv = functional.linear(h, w["attn.weight"], w["attn.bias"])
        q, k, v = qkv.view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        a = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, t, d)
        x = x + functional.linear(a, w["proj.weight"], w["proj.bias"])
        h = functional.layer_norm(x, (d,), w["ln_2.weight"], w["ln_2.bias"])
        h = functional.gelu(functional.linear(h, w["fc.weight"], w["fc.bias"]), approximate="tanh")
        return x + functional.linear(h, w["mlp_proj.weight"], w["mlp_proj.bias"])

    return block


def tolerance(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, bool]:
    """(largest difference, within bfloat16's tolerance): a few bfloat16 steps of the
    larger values, as two orders of accumulation and rounding give."""
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    bound = 2**-5 + 2**-6 * np.abs(theirs.astype(np.float64))
    return float(diff.max()), bool(np.all(diff <= bound))


def _blocks(batch: int, seq: int) -> int:
    """Blocks per timed batch: as many as the launch queue holds without waiting (about 14
    launches a block), at most 50."""
    return max(5, min(50, _LAUNCHES_IN_FLIGHT // 14 // max(1, batch * seq // 1024)))


def _time(block: Callable, x: Any, count: int, sync: Callable, events: tuple) -> tuple:
    start, end = events
    sync()
    began = time.perf_counter()
    start.record()
    for _ in range(count):
        block(x)
    end.record()
    host = (time.perf_counter() - began) / count * 1e6
    sync()
    return host, start.elapsed_time(end) / count * 1e3


def decoder_rows(device: Any, rounds: int) -> list[dict]:
    """One row per shape in SHAPES: vram's and PyTorch's host and device µs per block,
    their ratios, and how far vram's output is from PyTorch's."""
    import torch

    weights = gpt2_weights()
    ours, theirs = vram_block(weights, device), torch_block(weights, "cuda")
    vram_sync = lambda: vram.synchronize(device)  # noqa: E731
    vram_events = (vram.Event(enable_timing=True), vram.Event(enable_timing=True))
    torch_events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
    rng = np.random.default_rng(1)
    rows = []
    with torch.no_grad():
        for batch, seq in SHAPES:
            x = rng.standard_normal((batch, seq, D_MODEL)).astype(ml_dtypes.bfloat16)
            x_ours = vram.tensor(x, device=device)
            x_theirs = torch.from_numpy(x.astype(np.float32)).cuda().to(torch.bfloat16)
            error, close = tolerance(
                ours(x_ours).numpy().astype(np.float32), theirs(x_theirs).float().cpu().numpy()
            )
            count = _blocks(batch, seq)
            runs = {
                "vram": (ours, x_ours, vram_sync, vram_events),
                "torch": (theirs, x_theirs, torch.cuda.synchronize, torch_events),
            }
            for block, x_in, sync, events in runs.values():  # warm up
                _time(block, x_in, count, sync, events)
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
            for _ in range(rounds):
                for name, (block, x_in, sync, events) in runs.items():
                    times[name].append(_time(block, x_in, count, sync, events))
            row: dict[str, Any] = {"batch": batch, "seq": seq, "blocks_per_batch": count}
            for name, found in times.items():
                row[f"{name}_host_us"] = round(statistics.median(t[0] for t in found), 1)
                row[f"{name}_device_us"] = round(statistics.median(t[1] for t in found), 1)
            row["host_vs_torch"] = round(row["vram_host_us"] / row["torch_host_us"], 3)
            rounds_host = zip(times["vram"], times["torch"], strict=True)  # (round by round)
            paired = statistics.median(mine[0] / other[0] for mine, other in rounds_host)
            row["paired_host_vs_torch"] = round(paired, 3)
            row["device_vs_torch"] = round(row["vram_device_us"] / row["torch_device_us"], 3)
            row["max_abs_diff"] = round(error, 5)
            row["within_bf16_tolerance"] = close
            rows.append(row)
    return rows
