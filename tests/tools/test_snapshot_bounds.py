"""Untrusted snapshot files: what a file may expand to once loaded is bounded (every shared
reference followed), and sizes, addresses and device indices are numbers in range."""

from __future__ import annotations

import lzma
import pickle

import pytest

from vram import cli
from vram.tools import SnapshotLimits, check_snapshot, load_snapshot


def _snapshot() -> dict:
    event = {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 1}
    block = {"address": 4096, "size": 2 << 20, "requested_size": 512, "state": "active_allocated"}
    segment = {"device": 0, "address": 4096, "total_size": 2 << 20, "blocks": [block]}
    return {"segments": [segment], "device_traces": [[event]]}


def _bomb(path, devices: int, events: int):
    """A snapshot whose ``devices`` traces are one list of ``events`` references to one
    event: the pickle holds each reference once (a few bytes), the tools would see
    devices * events events."""
    event = {"action": "alloc", "addr": 4096, "size": 512, "stream": 0}
    trace = [event] * events
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace] * devices}))
    return path


def _argv(command: str, path, tmp_path) -> list[str]:
    return {
        "viz": ["viz", str(path), "-o", str(tmp_path / "o.html")],
        "stats": ["stats", str(path)],
        "replay": ["replay", str(path), "--json"],
        "explain": ["explain", str(path)],
    }[command]


COMMANDS = ["viz", "stats", "replay", "explain"]


# ----------------------------------------------------------------------- expansion bounds
def test_an_80_kb_file_of_400_million_events_is_refused_at_once(tmp_path):
    path = _bomb(tmp_path / "bomb.pickle", 20_000, 20_000)
    assert path.stat().st_size < 100_000
    with pytest.raises(ValueError) as caught:
        load_snapshot(path)
    assert str(caught.value) == (
        f"{path}: expands to 400,000,000 trace events once loaded, past the bound of "
        "10,000,000 (VRAM_SNAPSHOT_LIMITS=events:N raises it)"
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_the_tools_refuse_a_file_past_a_bound_in_one_line(tmp_path, capsys, monkeypatch, command):
    monkeypatch.setenv("VRAM_SNAPSHOT_LIMITS", "events:10000")
    path = _bomb(tmp_path / "bomb.pickle", 100, 400)
    assert cli.main(_argv(command, path, tmp_path)) == 2
    err = capsys.readouterr().err
    assert err == (
        f"vram {command}: error: {path}: expands to 40,000 trace events once loaded, past the "
        "bound of 10,000 (VRAM_SNAPSHOT_LIMITS=events:N raises it)\n"
    )


def test_the_setting_raises_a_bound(tmp_path, monkeypatch):
    path = _bomb(tmp_path / "bomb.pickle", 100, 400)
    monkeypatch.setenv("VRAM_SNAPSHOT_LIMITS", "events:10000")
    with pytest.raises(ValueError, match="events:N raises it"):
        load_snapshot(path)
    monkeypatch.setenv("VRAM_SNAPSHOT_LIMITS", "events:40000, string_bytes:1GiB")
    assert sum(map(len, load_snapshot(path)["device_traces"])) == 40_000
    # limits= of the API instead of the environment
    assert len(load_snapshot(path, limits=SnapshotLimits(events=40_000))["device_traces"]) == 100


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("events", "expected KEY:VALUE pairs"),
        ("evnts:5", "expected KEY:VALUE pairs, KEY one of blocks, events, frames"),
        ("events:-5", "events must be a positive whole number, got '-5'"),
        ("events:1e9", "events must be a positive whole number"),
        ("string_bytes:lots", "cannot read 'lots' as a size"),
    ],
)
def test_a_bad_setting_is_named(tmp_path, monkeypatch, capsys, text, message):
    monkeypatch.setenv("VRAM_SNAPSHOT_LIMITS", text)
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(_snapshot()))
    with pytest.raises(ValueError, match=message):
        load_snapshot(path)
    assert cli.main(["stats", str(path)]) == 2
    assert capsys.readouterr().err.startswith("vram stats: error: VRAM_SNAPSHOT_LIMITS")


def _shared_frames() -> dict:
    frame = {"filename": "model.py", "name": "forward", "line": 1}
    snapshot = _snapshot()
    snapshot["device_traces"][0][0]["frames"] = [frame] * 1000
    snapshot["device_traces"][0] *= 1000  # one event (and its frames) a thousand times
    return snapshot


@pytest.mark.parametrize(
    ("make", "limits", "amount"),
    [
        (_shared_frames, {"frames": 999_999}, "1,000,000 frames"),
        # a frame's keys and values are 31 bytes, an event's keys and action 38: a thousand
        # events of a thousand frames, and 96 bytes of the rest
        (_shared_frames, {"string_bytes": 10**6}, "31,038,096 bytes of strings"),
        (lambda: {"segments": [_snapshot()["segments"][0]] * 11}, {"segments": 10}, "11 segments"),
        (
            lambda: {"segments": [_snapshot()["segments"][0]] * 7},
            {"blocks": 6},
            "7 blocks",
        ),
    ],
)
def test_each_bound_counts_every_reference(tmp_path, make, limits, amount):
    path = tmp_path / "shared.pickle"
    path.write_bytes(pickle.dumps(make()))
    load_snapshot(path)  # within the defaults
    key = next(iter(limits))
    with pytest.raises(ValueError, match=rf"expands to {amount} .*{key}:N raises it\)$"):
        load_snapshot(path, limits=SnapshotLimits(**limits))


def test_a_compressed_file_is_bounded_while_it_inflates(tmp_path):
    snapshot = _snapshot()
    snapshot["padding"] = "x" * (8 << 20)  # 8 MiB of pickle, a few KiB of xz
    path = tmp_path / "inflates.pickle.xz"
    path.write_bytes(lzma.compress(pickle.dumps(snapshot)))
    assert path.stat().st_size < 4096
    with pytest.raises(ValueError) as caught:
        load_snapshot(path, limits=SnapshotLimits(pickle_bytes=1 << 20))
    assert str(caught.value) == (
        f"{path}: holds more than 1,048,576 bytes of pickle once decompressed "
        "(VRAM_SNAPSHOT_LIMITS=pickle_bytes:N raises it)"
    )
    assert load_snapshot(path)["padding"] == snapshot["padding"]


def test_data_that_refers_to_itself_or_nests_deep_is_refused(tmp_path):
    path = tmp_path / "odd.pickle"
    loop: list = []
    loop.append(loop)
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [loop]}))
    with pytest.raises(ValueError, match="nests more than 32 levels deep, or refers to itself"):
        load_snapshot(path)
    deep: list = []
    for _ in range(40):
        deep = [deep]
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [], "x": deep}))
    with pytest.raises(ValueError, match="nests more than 32 levels deep"):
        load_snapshot(path)


def test_limits_must_be_positive_ints():
    with pytest.raises(ValueError, match="events must be a positive int, got 0"):
        SnapshotLimits(events=0)
    with pytest.raises(ValueError, match="frames must be a positive int, got True"):
        SnapshotLimits(frames=True)


# ---------------------------------------------------------------- numbers that are numbers
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s["segments"][0].update(total_size=True),
            r"segments\[0\]: 'total_size' is a bool, not an int",
        ),
        (
            lambda s: s["segments"][0].update(address=False),
            r"segments\[0\]: 'address' is a bool, not an int",
        ),
        (
            lambda s: s["segments"][0]["blocks"][0].update(size=True),
            r"segments\[0\]\.blocks\[0\]: 'size' is a bool",
        ),
        (
            lambda s: s["segments"][0]["blocks"][0].update(address=True),
            r"blocks\[0\]: 'address' is a bool",
        ),
        (
            lambda s: s["device_traces"][0][0].update(size=True),
            r"device_traces\[0\]\[0\]: 'size' is a bool",
        ),
        (lambda s: s["device_traces"][0][0].update(addr=False), r"'addr' is a bool"),
        (lambda s: s["device_traces"][0][0].update(stream=True), r"'stream' is a bool"),
        (lambda s: s["device_traces"][0][0].update(time_us=True), r"'time_us' is a bool"),
        (lambda s: s["device_traces"][0][0].update(time_us=float("nan")), "not a finite"),
        (
            lambda s: s["segments"][0].update(device=2**40),
            r"segments\[0\]: 'device' is 1099511627776, outside 0 to 127",
        ),
        (lambda s: s["segments"][0].update(device=-1), r"'device' is -1, outside 0 to 127"),
        (
            lambda s: s["segments"][0].update(total_size=2**64),
            r"'total_size' is 18446744073709551616, outside 0 to 2\*\*64 - 1",
        ),
        (lambda s: s["device_traces"][0][0].update(size=-4096), r"'size' is -4096, outside 0 "),
        (
            lambda s: s["device_traces"][0][0].update(addr=-(2**63) - 1),
            r"'addr' is -9223372036854775809, outside -2\*\*63 to 2\*\*64 - 1",
        ),
        (lambda s: s.update(device_traces=[[]] * 129), "lists more than 128 devices"),
        (lambda s: s["segments"][0].update(device=127, stream=2**64 - 1, address=-1), None),
    ],
)
def test_sizes_addresses_and_devices_must_be_numbers_in_range(change, message):
    snapshot = _snapshot()
    change(snapshot)
    if message is None:
        check_snapshot(snapshot)  # the largest values allowed
        return
    with pytest.raises(ValueError, match=message):
        check_snapshot(snapshot, "snap.pickle")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("bad", ["bool", "device"])
def test_the_tools_refuse_bools_and_devices_out_of_range(tmp_path, capsys, command, bad):
    snapshot = _snapshot()
    if bad == "bool":
        snapshot["segments"][0]["total_size"] = True
        message = "segments[0]: 'total_size' is a bool, not an int"
    else:
        snapshot["segments"][0]["device"] = 2**40
        message = "segments[0]: 'device' is 1099511627776, outside 0 to 127"
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    assert cli.main(_argv(command, path, tmp_path)) == 2
    assert capsys.readouterr().err == f"vram {command}: error: {path}: {message}\n"
