"""What the tools print with: text that fits 80 columns without splitting a setting, and a
progress bar only on a terminal, only after 2 s, never when quiet."""

from __future__ import annotations

import io

import rich.console

from vram.tools import output


def test_wrap_never_splits_a_setting():
    text = "try " + "garbage_collection_threshold:0.8,max_split_size_mb:128 " * 3
    lines = output.wrap(text, "  ")
    assert all(len(line) <= 80 for line in lines)
    assert "garbage_collection_threshold:0.8,max_split_size_mb:128" in lines[1]
    assert lines[1].startswith("  ")


class _Terminal(rich.console.Console):
    """A console that is a terminal, writing to a buffer."""

    buffer = io.StringIO()

    def __init__(self, *args, **kwargs):
        kwargs.pop("stderr", None)
        super().__init__(*args, file=self.buffer, force_terminal=True, width=80, **kwargs)


def _run(monkeypatch, seconds: list[float], **options) -> str:
    clock = iter(seconds)
    monkeypatch.setattr(rich.console, "Console", _Terminal)
    monkeypatch.setattr(output.time, "monotonic", lambda: next(clock))
    _Terminal.buffer = io.StringIO()
    with output.progress("replaying", 10, **options) as advance:
        for _ in range(len(seconds) - 1):
            advance(1)
    return _Terminal.buffer.getvalue()


def test_progress_shows_only_once_the_work_has_taken_2_s(monkeypatch):
    assert _run(monkeypatch, [0.0, 0.5, 1.0, 1.9]) == ""  # quick work: nothing drawn
    assert "replaying" in _run(monkeypatch, [0.0, 0.5, 2.5, 3.0])


def test_progress_never_shows_when_quiet_or_not_a_terminal(monkeypatch, capsys):
    assert _run(monkeypatch, [0.0, 5.0, 6.0], enabled=False) == ""
    with output.quiet():
        assert _run(monkeypatch, [0.0, 5.0, 6.0]) == ""
    monkeypatch.undo()
    with output.progress("replaying", 10) as advance:  # stderr is not a terminal here
        advance(10)
    assert capsys.readouterr() == ("", "")
