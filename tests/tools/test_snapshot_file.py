"""Snapshot files are read safely: plain data only, compressed or not, checked before use."""

from __future__ import annotations

import gzip
import lzma
import os
import pickle

import pytest

from vram import cli
from vram.tools import check_snapshot, load_snapshot, read_pickle


class _Touch:
    """Unpickling this calls os.system("touch PATH"): what a malicious snapshot would do."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _snapshot(**extra) -> dict:
    event = {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 1}
    block = {"address": 4096, "size": 2 << 20, "requested_size": 512, "state": "active_allocated"}
    segment = {"device": 0, "address": 4096, "total_size": 2 << 20, "blocks": [block]}
    return {"segments": [segment], "device_traces": [[event]], **extra}


def test_the_payload_runs_under_plain_pickle(tmp_path):
    """The malicious object is real: plain pickle.loads runs it (so the next test means it)."""
    marker = tmp_path / "plain-ran"
    pickle.loads(pickle.dumps(_snapshot(segments=[_Touch(marker)])))
    assert marker.exists()


@pytest.mark.parametrize("command", ["replay", "viz", "stats", "api"])
def test_a_malicious_snapshot_runs_nothing(tmp_path, capsys, command):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pickle"
    snapshot = _snapshot()
    snapshot["device_traces"][0][0]["frames"] = [_Touch(marker)]  # deep inside, as a frame
    path.write_bytes(pickle.dumps(snapshot, protocol=2))
    if command == "api":
        with pytest.raises(ValueError, match=r"asks for posix\.system.*refused, nothing was run"):
            load_snapshot(path)
    else:
        argv = [command, str(path)] + (["-o", str(tmp_path / "o.html")] if command == "viz" else [])
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "refused, nothing was run" in err
        assert err.startswith(f"vram {command}: error: {path}: not a memory snapshot pickle")
    assert not marker.exists()


def test_any_global_but_set_and_frozenset_is_refused(tmp_path):
    path = tmp_path / "ordered.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "x": complex(1, 2)}, protocol=2))
    with pytest.raises(ValueError, match=r"asks for builtins\.complex"):
        read_pickle(path)
    path.write_bytes(pickle.dumps({"segments": [], "ids": {1, 2}, "f": frozenset()}, protocol=2))
    assert read_pickle(path) == {"segments": [], "ids": {1, 2}, "f": frozenset()}


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
@pytest.mark.parametrize("compress", [None, "xz", "gz"])
def test_every_protocol_compressed_or_not(tmp_path, protocol, compress):
    snapshot = _snapshot(allocator_settings={"expandable_segments": True})
    data = pickle.dumps(snapshot, protocol=protocol)
    data = {"xz": lzma.compress, "gz": gzip.compress, None: bytes}[compress](data)
    path = tmp_path / "snap.bin"  # the content tells the format, not the name
    path.write_bytes(data)
    assert load_snapshot(path) == snapshot


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the file is empty"),
        (pickle.dumps(_snapshot())[:40], "truncated"),
        (b"root:x:0:0:root:/root:/bin/bash\n", "not a memory snapshot pickle"),
        (lzma.compress(b"not a pickle")[:-6], "not a memory snapshot pickle"),
        (pickle.dumps([1, 2]), r"not a memory snapshot \(expected a dict"),
    ],
)
def test_files_that_are_not_snapshots(tmp_path, content, message):
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        load_snapshot(path)


def test_missing_files_and_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.pickle: no such file"):
        load_snapshot(tmp_path / "missing.pickle")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        load_snapshot(tmp_path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s["segments"][0]["blocks"][0].pop("state"),
            r"segments\[0\]\.blocks\[0\] has no 'state'",
        ),
        (lambda s: s["segments"][0].pop("address"), r"segments\[0\] has no 'address'"),
        (lambda s: s["segments"][0].update(total_size="2MiB"), r"'total_size' is a str"),
        (lambda s: s["segments"].append(7), r"segments\[1\] is a int, not a segment dict"),
        (lambda s: s["device_traces"][0][0].pop("addr"), r"device_traces\[0\]\[0\] has no 'addr'"),
        (lambda s: s["device_traces"][0][0].update(stream=None), None),
        (lambda s: s["device_traces"][0][0].update(stream="0"), r"'stream' is a str"),
        (lambda s: s["device_traces"].append({}), r"device_traces\[1\] is a dict, not a list"),
        (lambda s: s["device_traces"][0][0].update(frames=["f"]), r"'frames' is not a list"),
        (lambda s: s.update(allocator_settings=[]), r"'allocator_settings' is a list"),
    ],
)
def test_malformed_contents_name_the_first_bad_entry(change, message):
    snapshot = _snapshot()
    change(snapshot)
    if message is None:
        check_snapshot(snapshot)  # allowed
        return
    with pytest.raises(ValueError, match=message):
        check_snapshot(snapshot, "snap.pickle")


@pytest.mark.parametrize("command", ["replay", "viz", "stats"])
def test_the_tools_report_malformed_contents_in_one_line(tmp_path, capsys, command):
    snapshot = _snapshot()
    del snapshot["segments"][0]["blocks"][0]["state"]
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    argv = [command, str(path)] + (["-o", str(tmp_path / "o.html")] if command == "viz" else [])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"vram {command}: error: {path}: segments[0].blocks[0] has no 'state'\n"
