"""The memory doctor on a real GPU: the OOM report of a CUDA allocator (the program's frames,
advice that depends on the settings in force), and the advice for a snapshot PyTorch
recorded (a setting to paste into PYTORCH_CUDA_ALLOC_CONF)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import vram
from vram import cli
from vram.driver import cuda_usable
from vram.memory import DeviceCachingAllocator, _record_memory_history, parse_config
from vram.tools.explain import find_setting
from vram.tools.suggest import suggest_settings

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

MiB = 1 << 20


def _fill(device, held: list) -> None:
    for _ in range(10):  # (a loop: a comprehension is a frame of its own before 3.12)
        held.append(vram.empty(9 * MiB // 4, dtype=vram.float32, device=device))


def test_a_cuda_oom_report_shows_the_programs_frames_and_the_replays_verdict():
    device = vram.device("cuda:0")
    vram.memory.empty_cache(device)
    free, total = vram.mem_get_info(device)
    reserved = vram.memory.memory_reserved(device)
    vram.memory.set_per_process_memory_fraction((reserved + 100 * MiB) / total, device)
    _record_memory_history("all", device=device)
    held: list = []
    try:
        _fill(device, held)
        del held[3::2]
        with pytest.raises(vram.OutOfMemoryError) as caught:
            vram.empty(15 * MiB // 4, dtype=vram.float32, device=device)
    finally:
        _record_memory_history(None, device=device)
        vram.memory.set_per_process_memory_fraction(1.0, device)
    report = caught.value.report
    block = str(report).split("largest live blocks:")[1].split("why:")[0]
    assert "_fill (" in block and "device_storage" not in block
    result = find_setting(report, jobs=1)
    assert result is not None and report.avoided_by is not None
    assert "worth trying" not in str(report)  # the replay's verdict is the one advice
    del held
    vram.memory.empty_cache(device)


def test_under_expandable_segments_the_cuda_oom_message_does_not_advise_them():
    device = vram.device("cuda:0")
    allocator = DeviceCachingAllocator(device, parse_config("expandable_segments:True"))
    allocator.set_memory_fraction(0.01)
    with pytest.raises(vram.OutOfMemoryError) as caught:
        allocator.malloc(4 << 30, vram.current_stream(device).cuda_stream)
    assert "expandable_segments" not in str(caught.value)
    assert not any("expandable_segments:True" in a for a in caught.value.report.advice)


_TORCH_SCRIPT = """
import pickle, sys
import torch

torch.cuda.memory._record_memory_history(max_entries=1_000_000)
x = []
for step in range(4):
    for n in (1000, 3 << 20, 700 << 10, 50 << 20, 8 << 20, 123_456, 30 << 20, 90 << 20):
        x.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
    del x[::2]
torch.cuda.synchronize()
with open(sys.argv[1], "wb") as f:
    pickle.dump(torch.cuda.memory._snapshot(), f)
"""


@pytest.mark.parametrize("conf", ["", "max_split_size_mb:64"])
def test_a_pytorch_snapshot_gets_a_setting_to_paste(tmp_path, capsys, conf):
    pytest.importorskip("torch")
    path = tmp_path / "torch.pickle"
    env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_TORCH_SCRIPT), str(path)],
        check=True,
        env={**os.environ, **env},
    )
    result = suggest_settings(path, jobs=1)
    assert result.baseline.settings == conf
    if result.best is not None:
        assert result.best.pytorch and result.best.how[0].startswith("PYTORCH_CUDA_ALLOC_CONF=")
    assert cli.main(["replay", str(path), "--suggest", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "PyTorch's settings (PYTORCH_CUDA_ALLOC_CONF), best first:" in out
    assert cli.main(["explain", str(path), "--capacity", "1GiB", "--jobs", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "there was no out-of-memory error" in out and "would the recorded run fit in" in out
