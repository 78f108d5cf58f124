"""VRAM_ALLOC_CONF: PyTorch's keys, values and checks; set_allocator_settings; and
VRAM_NO_CACHING=1, which sends every allocation straight to the device."""

from __future__ import annotations

import pytest

import vram
from vram.memory import allocator_for, parse_config, set_allocator_settings
from vram.memory._config import SIZE_MAX, config_from_env

KiB = 1 << 10
MiB = 1 << 20


# ------------------------------------------------------------------------------ keys
def test_defaults_are_pytorchs():
    config = parse_config("")
    assert config.max_split_size == SIZE_MAX
    assert config.max_non_split_rounding_size == 20 * MiB
    assert config.garbage_collection_threshold == 0.0
    assert config.roundup_power2_divisions == (0,) * 16
    assert not config.expandable_segments
    assert not config.release_lock_on_cudamalloc
    assert not config.pinned_use_cuda_host_register
    assert config.pinned_num_register_threads == 1
    assert not config.pinned_use_background_threads
    assert not config.graph_capture_record_stream_reuse
    assert config.per_process_memory_fraction == 1.0
    assert config.backend == "native"
    assert not config.cross_stream_reuse


def test_every_key():
    config = parse_config(
        "max_split_size_mb:64, max_non_split_rounding_mb:32,"
        "garbage_collection_threshold:0.6,roundup_power2_divisions:[256:2,>:8],"
        "expandable_segments:True,release_lock_on_cudamalloc:True,"
        "pinned_use_cuda_host_register:True,pinned_num_register_threads:8,"
        "pinned_use_background_threads:True,graph_capture_record_stream_reuse:True,"
        "per_process_memory_fraction:0.75,backend:native,cross_stream_reuse:True"
    )
    assert config.max_split_size == 64 * MiB
    assert config.max_non_split_rounding_size == 32 * MiB
    assert config.garbage_collection_threshold == 0.6
    assert config.roundup_power2_divisions == (2,) * 9 + (8,) * 7
    assert config.expandable_segments
    assert config.release_lock_on_cudamalloc
    assert config.pinned_use_cuda_host_register
    assert config.pinned_num_register_threads == 8
    assert config.pinned_use_background_threads
    assert config.graph_capture_record_stream_reuse
    assert config.per_process_memory_fraction == 0.75
    assert config.backend == "native"
    assert config.cross_stream_reuse


@pytest.mark.parametrize(
    ("text", "table"),
    [
        ("roundup_power2_divisions:4", (4,) * 16),
        # ">" fills the intervals above the last one named, as PyTorch 2.11's parser does
        ("roundup_power2_divisions:[64:8,256:4,>:1]", (8,) * 7 + (0, 4) + (1,) * 7),
        ("roundup_power2_divisions:[>:2]", (0,) + (2,) * 15),
        ("roundup_power2_divisions:[1:4,2:8]", (4, 8) + (0,) * 14),
        ("roundup_power2_divisions:[128:0,>:4]", (0,) * 8 + (4,) * 8),
        ("roundup_power2_divisions:[65536:2]", (2,) * 16),  # beyond 64 GiB: the last entry
    ],
)
def test_roundup_power2_divisions_tables(text, table):
    assert parse_config(text).roundup_power2_divisions == table


def test_later_keys_win_and_spaces_are_ignored():
    config = parse_config(" max_split_size_mb : 40 , max_split_size_mb:50 ")
    assert config.max_split_size == 50 * MiB


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("no_such_key:1", "no_such_key"),
        ("expandable_segments:true", "expandable_segments"),
        ("expandable_segments:1", "expandable_segments"),
        ("release_lock_on_cudamalloc:yes", "release_lock_on_cudamalloc"),
        ("cross_stream_reuse:", "cross_stream_reuse"),
        ("max_split_size_mb:20", "max_split_size_mb"),
        ("max_split_size_mb:0", "max_split_size_mb"),
        ("max_split_size_mb:-40", "max_split_size_mb"),
        ("max_split_size_mb:40.5", "max_split_size_mb"),
        ("max_split_size_mb", "max_split_size_mb"),
        ("max_non_split_rounding_mb:10", "max_non_split_rounding_mb"),
        ("roundup_power2_divisions:3", "roundup_power2_divisions"),
        ("roundup_power2_divisions:0", "roundup_power2_divisions"),
        ("roundup_power2_divisions:[64:3]", "roundup_power2_divisions"),
        ("roundup_power2_divisions:[48:4]", "roundup_power2_divisions"),
        ("roundup_power2_divisions:[64]", "roundup_power2_divisions"),
        ("roundup_power2_divisions:[]", "roundup_power2_divisions: the list is empty"),
        ("roundup_power2_divisions:[ , ]", "roundup_power2_divisions: the list is empty"),
        ("roundup_power2_divisions:[>:4,64:8]", "roundup_power2_divisions: '>' must be the last"),
        (f"max_split_size_mb:{1 << 44}", r"max_split_size_mb: at most 17592186044415 \(2\^64"),
        ("per_process_memory_fraction:.", "per_process_memory_fraction: expected a number"),
        ("per_process_memory_fraction:nan", "per_process_memory_fraction"),
        ("roundup_power2_divisions:[64:4", "bracket"),
        ("roundup_power2_divisions:64:4]", "bracket"),
        ("a:],b:[", "bracket"),
        ("garbage_collection_threshold:0", "garbage_collection_threshold"),
        ("garbage_collection_threshold:1.0", "garbage_collection_threshold"),
        ("garbage_collection_threshold:1.5", "garbage_collection_threshold"),
        ("garbage_collection_threshold:-0.5", "garbage_collection_threshold"),
        ("garbage_collection_threshold:half", "garbage_collection_threshold"),
        ("pinned_num_register_threads:3", "pinned_num_register_threads"),
        ("pinned_num_register_threads:256", "pinned_num_register_threads"),
        ("per_process_memory_fraction:1.5", "per_process_memory_fraction"),
        ("backend:hipMallocAsync", "backend: unknown allocator backend"),
        ("expandable_page_mb:3", "expandable_page_mb"),
        ("expandable_page_mb:0", "expandable_page_mb"),
        ("expandable_page_mb:2048", "expandable_page_mb"),
    ],
)
def test_bad_settings_raise_naming_the_key(text, named):
    with pytest.raises(ValueError, match=named):
        parse_config(text)


def test_settings_must_be_a_string():
    with pytest.raises(TypeError, match="string"):
        parse_config(None)  # type: ignore[arg-type]


# ------------------------------------------------------------------ environment
def test_vram_alloc_conf_wins_over_pytorch_cuda_alloc_conf(monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:100")
    assert config_from_env().max_split_size == 100 * MiB
    monkeypatch.setenv("VRAM_ALLOC_CONF", "max_split_size_mb:40")
    assert config_from_env().max_split_size == 40 * MiB
    monkeypatch.setenv("VRAM_ALLOC_CONF", "")  # set, even empty: PyTorch's is not read
    assert config_from_env().max_split_size == SIZE_MAX


@pytest.mark.parametrize("variable", ["VRAM_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"])
def test_a_bad_environment_string_names_its_variable_and_key(monkeypatch, variable):
    monkeypatch.setenv(variable, "expandable_segments:True,per_process_memory_fraction:.")
    with pytest.raises(ValueError) as caught:
        config_from_env()
    assert str(caught.value) == (
        f"{variable}='expandable_segments:True,per_process_memory_fraction:.': "
        "per_process_memory_fraction: expected a number in [0, 1], got '.'"
    )


def test_a_new_allocator_reads_the_environment(monkeypatch, alloc, stats):
    monkeypatch.setenv("VRAM_ALLOC_CONF", "max_split_size_mb:40")
    assert stats("max_split_size") == 40 * MiB


def test_a_bad_environment_fails_at_first_use(monkeypatch, sim0):
    monkeypatch.setenv("VRAM_ALLOC_CONF", "max_split_size_mb:4")
    with pytest.raises(ValueError, match="max_split_size_mb"):
        vram.memory.caching_allocator_alloc(512, sim0)


def test_per_process_memory_fraction_key_caps_a_new_allocator(monkeypatch, sim0, capacity):
    total = capacity(1 << 30)
    monkeypatch.setenv("VRAM_ALLOC_CONF", "per_process_memory_fraction:0.5")
    assert vram.memory.get_per_process_memory_fraction(sim0) == 0.5
    assert allocator_for(sim0).allowed_memory_maximum == total // 2


# ------------------------------------------------------------- set_allocator_settings
def test_set_allocator_settings_applies_now_and_later(sim0, allocator, stats):
    set_allocator_settings("max_split_size_mb:40,expandable_segments:True")
    assert stats("max_split_size") == 40 * MiB
    assert allocator.config.expandable_segments
    assert allocator_for("sim:1").config.max_split_size == 40 * MiB  # made after the call
    settings = vram.memory.get_allocator_settings(sim0)
    assert settings["max_split_size"] == 40 * MiB
    assert settings["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:40,expandable_segments:True"


def test_set_allocator_settings_resets_three_keys_as_pytorch_does(allocator, stats):
    set_allocator_settings(
        "max_split_size_mb:40,roundup_power2_divisions:4,garbage_collection_threshold:0.5,"
        "max_non_split_rounding_mb:30,expandable_segments:True"
    )
    set_allocator_settings("pinned_num_register_threads:4")
    config = allocator.config
    assert config.max_split_size == SIZE_MAX  # reset unless named again
    assert config.roundup_power2_divisions == (0,) * 16
    assert config.garbage_collection_threshold == 0.0
    assert config.max_non_split_rounding_size == 30 * MiB  # kept
    assert config.expandable_segments
    assert config.pinned_num_register_threads == 4
    assert config.text == "pinned_num_register_threads:4"
    assert stats("max_split_size") == -1


def test_set_allocator_settings_error_changes_nothing(allocator):
    with pytest.raises(ValueError, match="max_split_size_mb"):
        set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:1")
    assert allocator.config.garbage_collection_threshold == 0.0


def test_settings_change_the_rounding_of_the_next_request(alloc, stats):
    alloc(5000)
    set_allocator_settings("roundup_power2_divisions:4")
    alloc(5000)
    assert stats("allocated_bytes.all.current") == 5120 + 5120


# ----------------------------------------------------------------- VRAM_NO_CACHING
@pytest.fixture
def uncached(monkeypatch, sim0):
    monkeypatch.setenv("VRAM_NO_CACHING", "1")
    allocator = allocator_for(sim0)
    assert allocator.no_caching
    return allocator


def test_no_caching_each_request_is_a_device_allocation(uncached, alloc, free, stats):
    device_free = vram.sim.driver().mem_get_info(0)[0]
    a = alloc(1000)
    b = alloc(1000)
    s = stats()
    assert (s["num_device_alloc"], s["segment.small_pool.current"]) == (2, 2)
    assert s["reserved_bytes.all.current"] == 2 * 1024  # the rounded sizes, no 2 MiB buffers
    assert s["allocated_bytes.all.current"] == 2 * 1024
    assert s["requested_bytes.all.current"] == 2000
    free(a)
    s = stats()
    assert (s["num_device_free"], s["segment.all.current"]) == (1, 1)
    assert (s["reserved_bytes.all.current"], s["active.all.current"]) == (1024, 1)
    free(b)
    s = stats()
    assert s["reserved_bytes.all.current"] == 0
    assert s["inactive_split.all.current"] == 0
    assert s["allocation.all.allocated"] == s["allocation.all.freed"] == 2
    assert vram.sim.driver().mem_get_info(0)[0] == device_free


def test_no_caching_large_request(uncached, alloc, free, stats):
    ptr = alloc(3 * MiB + 1)
    s = stats()
    assert s["reserved_bytes.large_pool.current"] == 3 * MiB + 512
    assert s["inactive_split.large_pool.current"] == 0
    free(ptr)
    assert stats("reserved_bytes.large_pool.current") == 0


def test_no_caching_free_waits_for_the_streams(uncached, sim0, alloc, free, stats):
    side = vram.Stream(sim0)
    ran: list[str] = []
    with vram.sim.deferred():
        ptr = alloc(4 * KiB)
        drv = vram.sim.driver()
        drv.enqueue(vram.current_stream(sim0).cuda_stream, lambda: ran.append("own"))
        drv.enqueue(side.cuda_stream, lambda: ran.append("side"))
        vram.memory.record_stream(ptr, side)
        free(ptr)
        assert sorted(ran) == ["own", "side"]
        assert stats("reserved_bytes.all.current") == 0


def test_no_caching_out_of_memory(uncached, capacity, alloc):
    capacity(MiB)
    alloc(MiB)
    with pytest.raises(vram.OutOfMemoryError, match=r"Tried to allocate 512 bytes"):
        alloc(1)


def test_no_caching_is_read_when_the_allocator_is_made(monkeypatch, sim0, allocator):
    monkeypatch.setenv("VRAM_NO_CACHING", "1")
    assert not allocator.no_caching
    monkeypatch.setenv("VRAM_NO_CACHING", "0")
    assert not allocator_for("sim:1").no_caching
