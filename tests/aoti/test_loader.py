"""vram.aoti.load and the model it returns, on the simulated GPU, with the stand-in model
(fake_model.c) in the place of an AOTInductor-compiled one: a .so and a .pt2 package, its
outputs against NumPy, its memory (vram's allocator, labelled weights, no device malloc
once warm), streams, graph capture and replay, the sanitizer, and every refusal."""

from __future__ import annotations

import shutil
import sys
import zipfile

import numpy as np
import pytest
from aoti_helpers import K, fake_reference, fake_weights

import vram
import vram.aoti
from vram.memory import Allocation

DEVICE = vram.Device("sim", 0)


def x_of(rows: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, K)).astype(np.float32)


def package(tmp_path, library, name="model", extra=()) -> str:
    """A .pt2 as torch writes one: a root folder, the model under data/aotinductor/."""
    path = tmp_path / "fake.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("fake/archive_format", "pt2")
        archive.write(library, f"fake/data/aotinductor/{name}/abc.wrapper.so")
        archive.writestr(f"fake/data/aotinductor/{name}/abc.wrapper_metadata.json", "{}")
        for entry in extra:
            archive.writestr(entry, b"")
    return str(path)


def check_outputs(outputs, x):
    y, z, b = outputs
    np.testing.assert_allclose(y.numpy(), fake_reference(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z.numpy()[0], fake_reference(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(b.numpy().ravel(), fake_weights()[1])


@pytest.mark.parametrize("form", ["so", "pt2"])
def test_a_model_runs_on_vram_tensors(fake_models, tmp_path, sim0, form):
    library = fake_models["plain"]
    model = vram.aoti.load(library if form == "so" else package(tmp_path, library), DEVICE)
    assert (model.num_inputs, model.num_outputs) == (1, 3)
    assert model.constant_names == ("fc.weight", "fc.bias", "proj.weight")
    assert model.constants_bytes == 4 * (6 * 8 + 6 + 6 * 4)
    x = x_of()
    outputs = model(vram.tensor(x, device=DEVICE))
    check_outputs(outputs, x)
    y = outputs[0]
    assert isinstance(y._storage.owner, Allocation)  # vram's memory, the tensor's own
    check_outputs(model(vram.tensor(x, device=DEVICE)), x)


def test_weights_from_the_raw_pair_are_vram_memory_labelled_in_snapshots(fake_models, sim0):
    base = vram.memory.memory_allocated(DEVICE)
    model = vram.aoti.load(fake_models["raw"], DEVICE)
    assert vram.memory.memory_allocated(DEVICE) - base == 512  # one blob, rounded
    labels = [
        block["frames"][0]["name"]
        for segment in vram.memory.memory_snapshot(device=DEVICE)
        for block in segment["blocks"]
        if block["frames"]
    ]
    assert labels == ["aoti constants of model.so: fc.weight, fc.bias, proj.weight"]
    x = x_of()
    outputs = model(vram.tensor(x, device=DEVICE))
    check_outputs(outputs, x)
    with pytest.raises(RuntimeError, match="cannot close while 1 of its outputs view"):
        model.close()  # the bias output views the blob
    del outputs
    model.close()
    assert vram.memory.memory_allocated(DEVICE) == base


def test_a_warm_run_allocates_from_the_cache_only(fake_models, sim0):
    model = vram.aoti.load(fake_models["plain"], DEVICE)
    x = vram.tensor(x_of(), device=DEVICE)
    model(x)
    stats = vram.memory.memory_stats(DEVICE)
    with vram.memory.count_device_calls(DEVICE) as calls:
        for _ in range(3):
            model(x)
    assert calls.device_malloc == 0
    assert calls.alloc == 3 * 3  # per run: two intermediates and the bmm output
    after = vram.memory.memory_stats(DEVICE)
    assert after["allocation.all.allocated"] - stats["allocation.all.allocated"] == 9


def test_a_run_is_on_the_current_stream_and_outputs_take_record_use(fake_models, sim0):
    model = vram.aoti.load(fake_models["plain"], DEVICE)
    side = vram.Stream(DEVICE)
    x = vram.tensor(x_of(), device=DEVICE)
    side.wait_stream(vram.current_stream(DEVICE))
    with vram.stream(side):
        y, z, _ = model(x)
    allocator = vram.memory.allocator_for(DEVICE)
    assert allocator._live_block(y.data_ptr(), "test").segment.stream == side.cuda_stream
    reader = vram.Stream(DEVICE)
    reader.wait_stream(side)
    with vram.stream(reader):
        total = y + y
    y.record_use(reader)
    del y
    np.testing.assert_allclose(total.numpy(), 2 * fake_reference(x.numpy()), rtol=1e-5)


def test_a_captured_run_replays_with_new_inputs(fake_models, sim0):
    model = vram.aoti.load(fake_models["plain"], DEVICE)
    static = vram.tensor(x_of(), device=DEVICE)
    graph = vram.CUDAGraph()
    with pytest.raises(RuntimeError, match="run model.so once before capturing it"):
        with vram.graph(graph):
            model(static)
    model(static)  # warm-up
    graph = vram.CUDAGraph()
    with vram.graph(graph):
        outputs = model(static)
    private = vram.memory.memory_snapshot(mempool_id=graph.pool(), device=DEVICE)
    owned = {b["address"] for s in private for b in s["blocks"] if b["state"] == "active_allocated"}
    assert {t.data_ptr() for t in outputs[:2]} <= owned  # from the graph's private pool
    for seed in (1, 2):
        x = x_of(seed=seed)
        static.copy_(vram.tensor(x, device=DEVICE))
        graph.replay()
        check_outputs(outputs, x)


def test_the_stream_sanitizer_finds_no_race(fake_models, monkeypatch):
    monkeypatch.setenv("VRAM_ALLOC_CONF", "stream_sanitizer:True")
    with vram.device("sim:1"):  # a device whose allocator is made with the setting
        device = vram.Device("sim", 1)
        model = vram.aoti.load(fake_models["plain"], device)
        x = x_of()
        for _ in range(3):
            check_outputs(model(vram.tensor(x, device=device)), x)
        assert vram.memory.stream_races(device) == []


# ------------------------------------------------------------------------------- refusals
def test_inputs_are_checked(fake_models, sim0):
    model = vram.aoti.load(fake_models["plain"], DEVICE)
    with pytest.raises(TypeError, match="model.so takes 1 tensors, got 2"):
        model(1, 2)
    with pytest.raises(ValueError, match="input 0: a tensor on cpu; model.so runs on sim:0"):
        model(x_of())
    with pytest.raises(RuntimeError, match="fake model: the input must be a float32"):
        model(vram.tensor(x_of().astype(np.float64), device=DEVICE))
    model.close()
    with pytest.raises(RuntimeError, match="model.so is closed"):
        model(vram.tensor(x_of(), device=DEVICE))


def test_a_model_needing_a_missing_shim_is_refused_by_name(fake_models, sim0):
    with pytest.raises(RuntimeError, match=r"needs 1 shim\(s\) vram does not provide: "
                       r"aoti_torch_cuda__fake_op_out"):  # fmt: skip
        vram.aoti.load(fake_models["missing"], DEVICE)


def test_a_model_is_refused_once_torch_came_into_the_process(fake_models, monkeypatch, sim0):
    vram.aoti.shim("sim")
    monkeypatch.setitem(sys.modules, "torch", object())
    with pytest.raises(RuntimeError, match="cannot run in a process that has loaded libtorch"):
        vram.aoti.load(fake_models["plain"], DEVICE)


def test_files_that_are_no_model_are_refused(fake_models, tmp_path, sim0):
    with pytest.raises(FileNotFoundError, match="no file"):
        vram.aoti.load(tmp_path / "missing.pt2", DEVICE)
    text = tmp_path / "notes.txt"
    text.write_text("not a model")
    with pytest.raises(ValueError, match="neither a .pt2 package nor a shared library"):
        vram.aoti.load(text, DEVICE)
    shim_library = tmp_path / "libshim.so"
    shutil.copy(vram.aoti.shim("sim").path, shim_library)
    with pytest.raises(RuntimeError, match="lacks AOTInductorModelContainerCreateWithDevice"):
        vram.aoti.load(shim_library, DEVICE)
    with pytest.raises(ValueError, match=r"has no model 'model' \(it has other\)"):
        vram.aoti.load(package(tmp_path, fake_models["plain"], name="other"), DEVICE)
    pickled = package(tmp_path, fake_models["plain"], extra=["fake/data/weights/weight_0"])
    with pytest.raises(RuntimeError, match="weights are pickled torch tensors"):
        vram.aoti.load(pickled, DEVICE)
