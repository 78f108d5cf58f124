"""Record PyTorch allocator traces of four workloads under four settings (issue 12).

    python3 bench/record_traces.py [--out DIR] [--jobs N] [--only WORKLOAD ...]
    python3 bench/record_traces.py --index-only [--out DIR]

Needs PyTorch and a CUDA GPU (the tests and tools read the files it writes; they need
neither). Each workload runs with fixed seeds and shapes, once per setting, each time in a
fresh process of this script (PyTorch reads PYTORCH_CUDA_ALLOC_CONF only at start-up), with
``torch.cuda.memory._record_memory_history(enabled="all", context=None)`` on from its first
CUDA allocation; the snapshot taken at its end is written, xz-compressed, as
``<workload>-<setting>.pickle.xz`` to ``--out`` (default tests/data/traces). Then the files
are read back and indexed in ``README.md`` there, and each workload's requests (the sizes
allocated and freed, in order) are checked to be the same under every setting, so that a
replay of its ``default`` trace can predict the others. About a minute on an H100.

Workloads (PyTorch only; no downloads):
- gpt_train: a GPT-style decoder trained for a few steps (bf16 autocast, AdamW).
- cnn_train: a ResNet-18-style CNN (written here, not torchvision) trained for a few steps.
- bert_infer: a BERT-base-style encoder in fp16, inference on batches of varied lengths.
- two_stream: inputs made on the default stream and read on a side stream (record_stream).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _traces import (
    first_difference,
    read_trace,
    requests,
    summarize,
    trace_file,
    write_index,
    write_trace,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "data" / "traces"
COMMAND = "python3 bench/record_traces.py"
MAX_ENTRIES = 2_000_000  # trace ring size; a recording that fills it is refused (truncated)
CHILD_TIMEOUT = 300  # seconds one recording may take

SETTINGS = {
    "default": "",
    "max_split": "max_split_size_mb:64",
    "rp2": "roundup_power2_divisions:[256:8,>:4]",
    "expandable": "expandable_segments:True",
}

WORKLOADS = {
    "gpt_train": "GPT-style decoder training: token and position embeddings, 8 pre-norm "
    "blocks (d=768, 12 heads, causal scaled_dot_product_attention, GELU MLP), vocabulary "
    "16384, batch 8 x 512 tokens, bf16 autocast, cross-entropy, AdamW; 4 steps",
    "cnn_train": "ResNet-18-style CNN training (written inline): 7x7 stem, 4 stages of 2 basic "
    "blocks (64-512 channels), BatchNorm, batch 48 x 3x160x160, cross-entropy, SGD with "
    "momentum; 3 steps",
    "bert_infer": "BERT-base-style encoder inference in fp16 under inference_mode: 12 layers, "
    "d=768, 12 heads, vocabulary 30522; 10 batches of varied (batch, length), 1x512 to 64x64",
    "two_stream": "producer/consumer on two streams: inputs made on the default stream, read by "
    "4 matmuls on a side stream, x.record_stream(side), freed on the default stream; "
    "24 iterations of varied sizes, synchronized every 6",
}


# ================================================================ the workloads (torch)
def gpt_train(torch) -> None:
    nn, F = torch.nn, torch.nn.functional
    vocab, d, layers, heads, seq, batch, steps = 16384, 768, 8, 12, 512, 8, 4

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            qkv = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(vocab, (batch, seq + 1), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, vocab), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del idx, logits, loss


def cnn_train(torch) -> None:
    nn, F = torch.nn, torch.nn.functional
    batch, size, classes, steps = 48, 160, 1000, 3

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return F.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU()
            )
            stages, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.stages = nn.Sequential(*stages)
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            x = F.max_pool2d(self.stem(x), 3, 2, 1)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.stages(x), 1), 1))

    model = ResNet().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(steps):
        images = torch.randn(batch, 3, size, size, device="cuda", generator=gen)
        labels = torch.randint(classes, (batch,), device="cuda", generator=gen)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del images, labels, loss


def bert_infer(torch) -> None:
    nn, F = torch.nn, torch.nn.functional
    vocab, d, layers, heads, ffn = 30522, 768, 12, 12, 3072
    shapes = [(32, 128), (8, 512), (64, 64), (16, 256), (4, 384), (32, 200), (1, 512),
              (48, 96), (24, 320), (64, 128)]  # fmt: skip

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc, self.out = nn.Linear(d, ffn), nn.Linear(ffn, d)

        def forward(self, x):
            b, t, _ = x.shape
            qkv = self.qkv(x).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
            x = self.ln1(x + self.proj(y.transpose(1, 2).reshape(b, t, d)))
            return self.ln2(x + self.out(F.gelu(self.fc(x))))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(512, d)
            self.ln = nn.LayerNorm(d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.pool = nn.Linear(d, d)

        def forward(self, ids):
            x = self.ln(self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device)))
            for layer in self.layers:
                x = layer(x)
            return torch.tanh(self.pool(x[:, 0]))

    model = Encoder().cuda().half().eval()
    gen = torch.Generator(device="cuda").manual_seed(0)
    pooled = []
    with torch.inference_mode():
        for batch, length in shapes:
            ids = torch.randint(vocab, (batch, length), device="cuda", generator=gen)
            pooled.append(model(ids).float().mean(0))
            del ids
        torch.stack(pooled).sum().item()


def two_stream(torch) -> None:
    rows_cycle, width, iterations, sync_every = (1024, 2048, 1536, 3072, 512, 2560), 4096, 24, 6
    gen = torch.Generator(device="cuda").manual_seed(0)
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    weight = torch.randn(width, width, device="cuda", generator=gen) / width**0.5
    results = []
    for i in range(iterations):
        rows = rows_cycle[i % len(rows_cycle)]
        x = torch.randn(rows, width, device="cuda", generator=gen)  # producer: default stream
        x = x * 0.5 + 1.0
        side.wait_stream(main)
        with torch.cuda.stream(side):  # consumer: its memory comes from the side stream
            y = x @ weight
            for _ in range(3):
                y = torch.tanh(y @ weight)
            results.append(y.sum(0))
            del y
        x.record_stream(side)  # x's block waits for the side stream's work when freed
        del x
        if i % sync_every == sync_every - 1:
            main.wait_stream(side)
            total = torch.stack(results).sum()
            for r in results:
                r.record_stream(main)
            results.clear()
            torch.cuda.synchronize()
            del total


RUNS = {
    "gpt_train": gpt_train,
    "cnn_train": cnn_train,
    "bert_infer": bert_infer,
    "two_stream": two_stream,
}


# ======================================================= one recording (a child process)
def record(workload: str, setting: str, out: Path) -> dict:
    """Run ``workload`` with history on and write its snapshot; this process's
    PYTORCH_CUDA_ALLOC_CONF must be ``SETTINGS[setting]`` (the parent sets it)."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("record_traces: no CUDA GPU usable by PyTorch here")
    expected = SETTINGS[setting]
    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") != expected:
        raise SystemExit(f"record_traces: PYTORCH_CUDA_ALLOC_CONF must be {expected!r}")
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False  # the same kernels (and workspaces) every run
    torch.backends.cudnn.deterministic = True
    start = time.perf_counter()
    torch.cuda.memory._record_memory_history(
        enabled="all", context=None, stacks="python", max_entries=MAX_ENTRIES
    )
    RUNS[workload](torch)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    seconds = time.perf_counter() - start
    recorded = snapshot.get("allocator_settings") or {}
    if recorded.get("PYTORCH_CUDA_ALLOC_CONF", expected) != expected or (
        recorded.get("expandable_segments", False) != (setting == "expandable")
    ):
        raise SystemExit(f"record_traces: PyTorch ran {workload} under {recorded}")
    events = max((len(t) for t in snapshot["device_traces"]), default=0)
    if events >= MAX_ENTRIES:
        raise SystemExit(f"record_traces: {workload} filled the trace ring ({MAX_ENTRIES})")
    snapshot["vram_recording"] = {
        "workload": workload,
        "setting": setting,
        "PYTORCH_CUDA_ALLOC_CONF": expected,
        "torch": str(torch.__version__),  # (a TorchVersion: a torch class to unpickle)
        "cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(),
        "seconds": round(seconds, 2),
    }
    path = write_trace(snapshot, out / trace_file(workload, setting))
    return {"file": path.name, "events": events, "seconds": round(seconds, 2)}


# ========================================================= the parent: all recordings
def _record_in_child(workload: str, setting: str, out: Path) -> tuple[str, dict | str]:
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=SETTINGS[setting], PYTHONHASHSEED="0")
    for other in ("PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING"):  # they would win
        env.pop(other, None)
    command = [sys.executable, __file__, "--child", workload, setting, "--out", str(out)]
    name = trace_file(workload, setting)
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return name, f"took more than {CHILD_TIMEOUT} s"
    if done.returncode != 0:
        return name, (done.stderr.strip() or done.stdout.strip() or "failed")[-2000:]
    return name, json.loads(done.stdout.strip().splitlines()[-1])


def check_requests(out: Path, workloads: list[str]) -> list[str]:
    """One line per workload: whether its requests are the same under every setting."""
    lines = []
    for workload in workloads:
        paths = {s: out / trace_file(workload, s) for s in SETTINGS}
        if not all(p.exists() for p in paths.values()):
            lines.append(f"{workload}: not every setting was recorded")
            continue
        reference = requests(read_trace(paths["default"]))
        differ = []
        for setting, path in paths.items():
            at = first_difference(reference, requests(read_trace(path)))
            if at is not None:
                differ.append(f"{setting} (from request {at})")
        verdict = "same under every setting" if not differ else "DIFFER: " + ", ".join(differ)
        lines.append(f"{workload}: {len(reference)} requests, {verdict}")
    return lines


def index(out: Path) -> Path:
    """Write README.md of ``out`` from the trace files there."""
    return write_index(out, WORKLOADS, SETTINGS, COMMAND)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the traces")
    parser.add_argument("--jobs", type=int, default=4, help="recordings at a time (default 4)")
    parser.add_argument("--only", nargs="+", choices=list(WORKLOADS), help="these workloads")
    parser.add_argument("--index-only", action="store_true", help="rewrite README.md only")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "SETTING"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    out = options.out
    out.mkdir(parents=True, exist_ok=True)
    if options.child:
        workload, setting = options.child
        print(json.dumps(record(workload, setting, out)))
        return 0
    sys.path.insert(0, str(ROOT / "src"))  # read the files back with this checkout's vram
    workloads = options.only or list(WORKLOADS)
    if not options.index_only:
        start = time.perf_counter()
        jobs = [(w, s) for w in workloads for s in SETTINGS]
        with ThreadPoolExecutor(max(options.jobs, 1)) as pool:
            results = list(pool.map(lambda job: _record_in_child(*job, out), jobs))
        failed = 0
        for name, result in results:
            if isinstance(result, str):
                failed += 1
                print(f"{name}: FAILED\n{result}", file=sys.stderr)
            else:
                print(f"{name}: {result['events']:,} events, {result['seconds']:.1f} s")
        print(f"recorded {len(results) - failed} of {len(results)} in "
              f"{time.perf_counter() - start:.0f} s")  # fmt: skip
        if failed:
            return 1
        for line in check_requests(out, workloads):
            print(line)
    path = index(out)
    total = sum(p.stat().st_size for p in out.glob("*.pickle.*"))
    print(f"wrote {path} ({total / 1e6:.2f} MB of traces in {out})")
    for name, text in ((p.name, summarize(read_trace(p))) for p in sorted(out.glob("*.xz"))):
        print(f"  {name}: {text['events']:,} events, {text['device_mallocs']} device mallocs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
