"""Devices on the simulator: parsing, the current device, properties, memory info, bad input."""

from __future__ import annotations

import threading

import pytest

import vram
from vram import _device
from vram.driver import cuda_usable

SIM0 = vram.Device("sim", 0)
SIM1 = vram.Device("sim", 1)


no_gpu = pytest.mark.skipif(cuda_usable(), reason="checks the machine without a GPU")


@pytest.fixture(autouse=True)
def _sim_default(monkeypatch):
    """sim:0 is the default and current device of the test's thread, whatever ran before
    (forced with VRAM_DEVICE, so that a machine with a GPU runs these tests on sim too)."""
    monkeypatch.setenv("VRAM_DEVICE", "sim:0")
    monkeypatch.setattr(_device, "_default", None)
    monkeypatch.setattr(_device._state, "current", None)
    yield
    _device._state.current = None


# ---- parsing --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("sim:0", SIM0),
        ("sim:1", SIM1),
        (" sim:1 ", SIM1),
        ("sim", SIM0),
        ("cpu", vram.Device("cpu")),
        ("cpu:0", vram.Device("cpu")),
        (0, SIM0),
        (1, SIM1),
        (SIM1, SIM1),
        (None, SIM0),
    ],
)
def test_device_parses_strings_ints_and_devices(spec, want):
    found = vram.device(spec)
    assert found == want
    assert type(found) is vram.Device


def test_device_with_type_and_index():
    assert vram.device("sim", 1) == SIM1
    assert vram.device("sim", index=0) == SIM0


def test_device_str_repr_and_fields():
    d = vram.device("sim:1")
    assert (d.type, d.index) == ("sim", 1)
    assert str(d) == "sim:1"
    assert repr(d) == "device(type='sim', index=1)"
    assert str(vram.device("cpu")) == "cpu"
    assert vram.device("cpu").index is None


def test_device_of_a_tensor_or_stream():
    t = vram.zeros(3, device="sim:1")
    assert vram.device(t) == SIM1
    assert vram.device(vram.Stream("sim:1")) == SIM1


def test_bare_type_means_the_current_index_of_that_type():
    with vram.device("sim:1"):
        assert vram.device("sim") == SIM1
        assert vram.device(0) == SIM0  # an int is an index of the current type


@no_gpu
def test_cuda_device_does_not_exist_without_a_gpu():
    with pytest.raises(ValueError, match=r"^device: cuda:0 does not exist \(0 cuda devices\)"):
        vram.device("cuda:0")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpu:0", r"^device: unknown device 'gpu:0'"),
        ("", r"^device: unknown device ''"),
        ("SIM:0", r"^device: unknown device 'SIM:0'"),
        ("sim:x", r"^device: bad device index in 'sim:x'"),
        ("sim:-1", r"^device: bad device index in 'sim:-1'"),
        ("sim:1:2", r"^device: bad device index in 'sim:1:2'"),
        ("sim:\u00b2", r"^device: bad device index"),
        ("cpu:3", r"^device: the cpu device has no index, got 'cpu:3'"),
        ("sim:7", r"^device: sim:7 does not exist \(2 sim devices\)"),
        (7, r"^device: sim:7 does not exist \(2 sim devices\)"),
        (-1, r"^device: device index must be non-negative, got -1"),
        (vram.Device("sim", -1), r"^device: bad device index -1"),
        (vram.Device("gpu", 0), r"^device: unknown device type 'gpu'"),
    ],
)
def test_bad_device_values_raise_value_error_naming_device(spec, message):
    with pytest.raises(ValueError, match=message):
        vram.device(spec)


@pytest.mark.parametrize("spec", [1.5, True, False, ("sim", 1), b"sim:0", [0]])
def test_bad_device_types_raise_type_error_naming_device(spec):
    with pytest.raises(TypeError, match=r"^device: expected a device"):
        vram.device(spec)


def test_bad_index_argument():
    with pytest.raises(TypeError, match=r"^index: expected an int, got 1.5"):
        vram.device("sim", 1.5)
    with pytest.raises(TypeError, match=r"^index: expected an int, got True"):
        vram.device("sim", True)
    with pytest.raises(ValueError, match=r"^index: device index must be non-negative"):
        vram.device("sim", -1)
    with pytest.raises(TypeError, match=r"^device: with index=, the type must be a string"):
        vram.device(0, 1)
    with pytest.raises(ValueError, match=r"^device: sim:5 does not exist"):
        vram.device("sim", 5)


# ---- the current device ---------------------------------------------------------------


@no_gpu
def test_default_device_is_sim0_without_a_gpu(monkeypatch):
    monkeypatch.delenv("VRAM_DEVICE")
    assert not vram.is_available()
    assert vram.default_device() == SIM0
    assert vram.current_device() == 0
    assert _device.current_device_obj() == SIM0


@pytest.mark.parametrize(("value", "want"), [("sim:1", SIM1), ("sim", SIM0), ("sim:0", SIM0)])
def test_vram_device_forces_the_default(monkeypatch, value, want):
    monkeypatch.setenv("VRAM_DEVICE", value)
    assert vram.default_device() == want
    assert _device.current_device_obj() == want


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("cpu", r"^VRAM_DEVICE must name a 'cuda' or 'sim' device, not 'cpu'"),
        ("gpu", r"^VRAM_DEVICE: unknown device 'gpu'"),
        ("sim:9", r"^VRAM_DEVICE: sim:9 does not exist"),
        pytest.param(
            "cuda",
            r"^VRAM_DEVICE: cuda:0 does not exist \(0 cuda devices\)",
            marks=no_gpu,
        ),
    ],
)
def test_bad_vram_device_raises_every_time(monkeypatch, value, message):
    monkeypatch.setenv("VRAM_DEVICE", value)
    for _ in range(2):  # a failed read caches nothing
        with pytest.raises(ValueError, match=message):
            vram.default_device()
    assert _device._default is None


def test_with_device_makes_it_current_and_restores():
    assert vram.current_device() == 0
    with vram.device("sim:1") as d:
        assert d == SIM1
        assert vram.current_device() == 1
        assert vram.current_stream().device == SIM1
        assert vram.Stream().device == SIM1
    assert vram.current_device() == 0


def test_with_device_nests_and_restores_on_error():
    with vram.device("sim:1"):
        with vram.device("sim:0"):
            assert vram.current_device() == 0
            with vram.device(1):
                assert vram.current_device() == 1
            assert vram.current_device() == 0
        assert vram.current_device() == 1
        with pytest.raises(KeyError):
            with vram.device("sim:0"):
                raise KeyError("x")
        assert vram.current_device() == 1
    assert vram.current_device() == 0


def test_with_cpu_device_fails_and_leaves_nothing_behind():
    with pytest.raises(ValueError, match=r"^device: the cpu device cannot be made current"):
        with vram.device("cpu"):
            pass
    assert vram.current_device() == 0
    assert _device._state.__dict__.get("stack", []) == []


def test_set_device():
    vram.set_device(1)
    assert vram.current_device() == 1
    vram.set_device("sim:0")
    assert vram.current_device() == 0
    vram.set_device(SIM1)
    assert _device.current_device_obj() == SIM1


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        (None, TypeError, r"^device: set_device needs a device"),
        ("cpu", ValueError, r"^device: the cpu device cannot be made current"),
        (2, ValueError, r"^device: sim:2 does not exist"),
        (1.5, TypeError, r"^device: expected a device"),
        (True, TypeError, r"^device: expected a device"),
    ],
)
def test_set_device_bad_input(spec, error, message):
    with pytest.raises(error, match=message):
        vram.set_device(spec)
    assert vram.current_device() == 0


def test_current_device_is_per_thread():
    vram.set_device(1)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(vram.current_device()))
    thread.start()
    thread.join()
    assert seen == [0]
    assert vram.current_device() == 1


# ---- counts, names, properties, memory ------------------------------------------------


def test_device_count():
    assert vram.device_count() == 2  # the default device's type: sim
    assert vram.device_count("sim") == 2


@no_gpu
def test_no_cuda_devices_without_a_gpu():
    assert vram.device_count("cuda") == 0


@pytest.mark.parametrize("kind", ["cpu", "tpu", 1.5])
def test_device_count_bad_type(kind):
    with pytest.raises(ValueError, match=r"^type must be 'cuda' or 'sim'"):
        vram.device_count(kind)


def test_get_device_name_and_properties():
    assert vram.get_device_name() == "vram simulated GPU"
    assert vram.get_device_name("sim:1") == "vram simulated GPU"
    props = vram.get_device_properties(1)
    assert props.name == "vram simulated GPU"
    assert props.total_memory == 16 << 30
    assert (props.major, props.minor) == (9, 0)
    assert props.multi_processor_count == 132
    assert props.l2_cache_size == props.L2_cache_size == 50 << 20
    assert props.warp_size == 32
    assert props.max_threads_per_block == 1024
    assert props.uuid == "SIM-00000001"
    assert props.driver == "sim"
    assert vram.get_device_properties().uuid == "SIM-00000000"


def test_total_memory_follows_the_capacity():
    vram.sim.set_capacity(1, 3 << 30)
    assert vram.get_device_properties("sim:1").total_memory == 3 << 30
    assert vram.mem_get_info("sim:1")[1] == 3 << 30


def test_mem_get_info_before_and_after_an_allocation():
    free, total = vram.mem_get_info("sim:1")
    assert total == 16 << 30
    ptr = vram.memory.caching_allocator_alloc(3 << 20, "sim:1")
    # a 3 MiB request gets a 20 MiB segment from the device
    assert vram.mem_get_info("sim:1") == (free - (20 << 20), total)
    vram.memory.caching_allocator_delete(ptr)
    assert vram.mem_get_info("sim:1") == (free - (20 << 20), total)  # cached, not released
    vram.memory.empty_cache("sim:1")
    assert vram.mem_get_info("sim:1") == (free, total)


@pytest.mark.parametrize(
    "call", [vram.get_device_properties, vram.get_device_name, vram.mem_get_info, vram.synchronize]
)
def test_device_queries_reject_cpu_and_bad_devices(call):
    with pytest.raises(ValueError, match=r"^device: the cpu device has no driver"):
        call("cpu")
    with pytest.raises(ValueError, match=r"^device: sim:3 does not exist"):
        call("sim:3")
    with pytest.raises(TypeError, match=r"^device: expected a device"):
        call(1.5)


def test_synchronize_runs_everything_queued_on_the_device():
    s0, s1 = vram.Stream("sim:0"), vram.Stream("sim:1")
    ran = []
    sim = vram.sim.driver()
    with vram.sim.deferred():
        sim.enqueue(s0.cuda_stream, lambda: ran.append("s0"))
        sim.enqueue(vram.default_stream("sim:0").cuda_stream, lambda: ran.append("default"))
        sim.enqueue(s1.cuda_stream, lambda: ran.append("s1"))
        vram.synchronize()  # the current device: sim:0
        assert sorted(ran) == ["default", "s0"]
        assert (s0.query(), s1.query()) == (True, False)
        vram.synchronize("sim:1")
        assert sorted(ran) == ["default", "s0", "s1"]
