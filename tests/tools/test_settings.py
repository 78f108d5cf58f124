"""Settings strings as the tools combine them: a change replaces, adds or drops recorded
settings; defaults by name; the short forms PyTorch reads."""

from __future__ import annotations

import re

import pytest

from vram.memory import parse_config
from vram.tools._settings import fraction_call, join, merge, settings_to_config

MiB = 1 << 20


def test_a_change_replaces_adds_or_drops_recorded_settings():
    recorded = "max_split_size_mb:64,roundup_power2_divisions:[256:8,>:4]"
    change = merge(recorded, "max_split_size_mb:128,expandable_segments:True")
    assert change.settings == (
        "max_split_size_mb:128,roundup_power2_divisions:[256:8,>:4],expandable_segments:True"
    )
    assert change.kind == "replaces" and change.checked and change.pytorch
    assert change.describe() == (
        "replaces max_split_size_mb:64 with max_split_size_mb:128; adds expandable_segments:True"
    )
    dropped = merge(recorded, "max_split_size_mb:-1")  # PyTorch's own spelling for no limit
    assert dropped.settings == "roundup_power2_divisions:[256:8,>:4]"
    assert dropped.kind == "drops" and dropped.describe() == "drops max_split_size_mb:64"
    instead = merge("max_split_size_mb:64", "max_split_size_mb:-1,expandable_segments:True")
    assert instead.describe() == "replaces max_split_size_mb:64 with expandable_segments:True"
    assert (
        merge("garbage_collection_threshold:0.6", "garbage_collection_threshold:0").settings == ""
    )
    assert merge("expandable_segments:True", "expandable_segments:False").settings == ""
    assert merge("", "").kind == "recorded" and merge("", "max_split_size_mb:-1").settings == ""


def test_the_replays_own_keys_and_vram_options():
    change = merge("", "garbage_collection_threshold:0.8,memory_limit:6GiB")
    assert change.memory_limit == 6 << 30 and change.pytorch and not change.checked
    assert change.describe() == (
        "adds garbage_collection_threshold:0.8, a memory fraction allowing 6.00 GiB"
    )
    assert not merge("", "expandable_segments:True,expandable_page_mb:2").pytorch
    assert not merge("", "record_use:True").pytorch


@pytest.mark.parametrize(
    "text, message",
    [
        ("max_split_size_mb:0", "-1 (no limit) is PyTorch's default"),
        ("memory_limit:lots", "memory_limit: cannot read 'lots'"),
        ("record_use:yes", "record_use: expected True or False"),
        ("max_split_size_mb", "expected 'key:value'"),
    ],
)
def test_bad_changes_name_the_key(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        merge("", text)


def test_join_lets_a_set_key_beat_an_unset_one():
    assert join("max_split_size_mb:-1,expandable_segments:True", "max_split_size_mb:128") == (
        "max_split_size_mb:128,expandable_segments:True"
    )
    assert join("garbage_collection_threshold:0.8,memory_limit:100", "max_split_size_mb:-1") == (
        "garbage_collection_threshold:0.8,max_split_size_mb:-1,memory_limit:100"
    )


@pytest.mark.parametrize(
    "text, short",
    [
        ("roundup_power2_divisions:[256:8,>:4]", "roundup_power2_divisions:[256:8,>:4]"),
        ("roundup_power2_divisions:4", "roundup_power2_divisions:4"),
        # PyTorch leaves the interval between two items at 0 (no rounding): said so
        (
            "roundup_power2_divisions:[64:8,256:4,>:1]",
            "roundup_power2_divisions:[64:8,128:0,256:4,>:1]",
        ),
        ("expandable_segments:True,expandable_page_mb:2", None),
    ],
)
def test_recorded_settings_come_back_in_the_short_forms_pytorch_reads(text, short):
    config = parse_config(text)
    rebuilt = settings_to_config(config.settings())
    assert parse_config(rebuilt).settings() | {"PYTORCH_CUDA_ALLOC_CONF": ""} == (
        config.settings() | {"PYTORCH_CUDA_ALLOC_CONF": ""}
    )
    assert rebuilt == (text if short is None else short)


def test_the_memory_fraction_call():
    assert fraction_call(6 << 30, 80 << 30) == "torch.cuda.set_per_process_memory_fraction(0.075)"
    assert fraction_call(7 * MiB, 3 * 1024 * MiB).endswith("(0.0023)")  # rounded up
    assert fraction_call(7 * MiB, None) == (
        f"torch.cuda.set_per_process_memory_fraction({7 * MiB} / "
        "torch.cuda.get_device_properties(0).total_memory)"
    )


def test_vram_rows_cap_with_vrams_own_call():
    # with vram as PyTorch's allocator, torch.cuda's cap does not reach vram
    assert fraction_call(6 << 30, 80 << 30, pytorch=False) == (
        "vram.set_per_process_memory_fraction(0.075)"
    )
