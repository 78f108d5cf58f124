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


def test_wrap_keeps_a_size_with_its_unit():
    """``8.00 GiB`` is one word to wrap: a line never ends with the number alone."""
    text = "settings for gpt_train-max_split.pickle.xz, ranked by peak reserved on a 8.00 GiB "
    lines = output.wrap(text + "device; 3.39 GiB and 512 B")
    assert lines == [
        "settings for gpt_train-max_split.pickle.xz, ranked by peak reserved on a",
        "8.00 GiB device; 3.39 GiB and 512 B",
    ]


def test_a_count_takes_the_noun_that_goes_with_it():
    assert output.counted(1, "cache flush", "cache flushes") == "1 cache flush"
    assert output.counted(2, "cache flush", "cache flushes") == "2 cache flushes"


class _Terminal(rich.console.Console):
    """A console that is a terminal, writing to a buffer."""

    buffer = io.StringIO()

    def __init__(self, *args, **kwargs):
        kwargs.pop("stderr", None)
        super().__init__(*args, file=self.buffer, force_terminal=True, width=80, **kwargs)


class _Timer:
    """A timer the test fires itself: the 2 s passing, or not."""

    made: list[_Timer] = []

    def __init__(self, seconds, function):
        self.seconds, self.function, self.cancelled = seconds, function, False
        _Timer.made.append(self)

    def start(self):
        pass

    def cancel(self):
        self.cancelled = True


def _run(monkeypatch, two_seconds_pass: bool, **options) -> str:
    monkeypatch.setattr(rich.console, "Console", _Terminal)
    monkeypatch.setattr(output, "_timer", _Timer)
    _Terminal.buffer = io.StringIO()
    _Timer.made = []
    with output.progress("replaying", 10, **options) as advance:
        advance(3)
        if two_seconds_pass and _Timer.made:
            (timer,) = _Timer.made
            assert timer.seconds == 2.0
            timer.function()
        advance(7)
    assert all(t.cancelled for t in _Timer.made)
    return _Terminal.buffer.getvalue()


def test_progress_shows_only_once_the_work_has_taken_2_s(monkeypatch):
    assert _run(monkeypatch, two_seconds_pass=False) == ""  # quick work: nothing drawn
    assert "replaying" in _run(monkeypatch, two_seconds_pass=True)


def test_a_progress_inside_another_is_a_line_of_its_bar(monkeypatch):
    monkeypatch.setattr(rich.console, "Console", _Terminal)
    monkeypatch.setattr(output, "_timer", _Timer)
    _Terminal.buffer = io.StringIO()
    _Timer.made = []
    with output.progress("vram bench alloc", prints=True):
        with output.progress("timing pairs", 4) as advance:
            advance(3)
            (outer,) = output._bars
            assert [t.description for t in outer.tasks] == ["vram bench alloc", "timing pairs"]
            assert outer.tasks[1].completed == 3
        assert [t.description for t in outer.tasks] == ["vram bench alloc"]
    assert output._bars == [] and len(_Timer.made) == 1


def test_progress_never_shows_when_quiet_or_not_a_terminal(monkeypatch, capsys):
    assert _run(monkeypatch, True, enabled=False) == "" and not _Timer.made
    with output.quiet():
        assert _run(monkeypatch, True) == "" and not _Timer.made
    monkeypatch.undo()
    with output.progress("replaying", 10) as advance:  # stderr is not a terminal here
        advance(10)
    assert capsys.readouterr() == ("", "")
