"""What the tools and the ``vram`` command print and write: consoles, tables and text that
fit, progress bars, output paths, one-line errors.

Progress (``progress``) is drawn with rich on stderr, only when stderr is a terminal, only
once the work has taken 2 s (quick commands print nothing), and never inside ``quiet()``
(``--quiet``): a pipe or a file gets the results alone.
"""

from __future__ import annotations

import io
import os
import re
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "console",
    "fitted",
    "wrap",
    "counted",
    "progress",
    "quiet",
    "check_output_path",
    "describe_error",
]

_WIDE = 120  # columns of output that is not a terminal (a file, a pipe), unless COLUMNS says
_TEXT = 80  # columns of the tools' wrapped text
_SIZE = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB)\b")  # a size and its unit: one word to wrap
_SHOW_AFTER = 2.0  # seconds of work before a progress bar appears
_quiet = 0  # > 0 inside quiet(): no progress bars
_timer = threading.Timer  # what shows a progress bar once the work has run _SHOW_AFTER


def console() -> Any:
    """A rich console for stdout: the terminal's width; 120 columns for a file or a pipe,
    unless the COLUMNS environment variable sets the width."""
    from rich.console import Console

    found = Console()
    if found.is_terminal or os.environ.get("COLUMNS"):
        return found
    return Console(width=_WIDE)


def fitted(table: Any, width: int) -> Any:
    """``table`` if it fits ``width`` columns without cutting a cell short ("85… MiB"),
    else the same rows as records (one "column: value" line each), which always fit."""
    from rich.console import Console, Group
    from rich.text import Text

    probe = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    probe.print(table)
    if "…" not in probe.file.getvalue():  # type: ignore[attr-defined]
        return table
    columns = table.columns
    cells = [[str(c) for c in column.cells] for column in columns]
    lines: list[Any] = []
    if table.title:
        lines.append(Text(str(table.title), style="italic"))
    first = " ".join(str(columns[0].header).split())
    for row in range(table.row_count):
        lines.append(Text(f"{first}: {cells[0][row]}", style="bold"))
        for column, values in zip(columns[1:], cells[1:], strict=True):
            header = " ".join(str(column.header).split())
            lines.append(Text(f"  {header}: {values[row]}"))
    return Group(*lines)


def wrap(text: str, indent: str = "", first: str | None = None) -> list[str]:
    """``text`` as lines of at most 80 columns, broken only between words (a setting such
    as ``garbage_collection_threshold:0.8`` is never split, nor a size from its unit:
    ``8.00 GiB``); lines indented by ``indent`` (the first by ``first`` when given)."""
    kept = _SIZE.sub("\\1\u00a0\\2", text)  # a no-break space: textwrap breaks at ASCII ones only
    lines = textwrap.wrap(
        kept,
        _TEXT,
        initial_indent=indent if first is None else first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [line.replace("\u00a0", " ") for line in lines] or [""]


def counted(n: int, one: str, many: str) -> str:
    """``n`` and the noun that goes with it: ``1 cache flush``, ``2 cache flushes``."""
    return f"{n} {one if n == 1 else many}"


@contextmanager
def quiet() -> Iterator[None]:
    """No progress bars while the block runs (``--quiet``)."""
    global _quiet
    _quiet += 1
    try:
        yield
    finally:
        _quiet -= 1


_bars: list[Any] = []  # the bars being drawn, the innermost last


@contextmanager
def progress(
    description: str, total: int = 1, enabled: bool = True, prints: bool = False
) -> Iterator[Callable[..., None]]:
    """A progress bar on stderr while the block runs, advanced by the function it yields
    (``advance(n)``: n more units done; ``advance(0, total=N)``: the total is N now). Drawn
    only when ``enabled``, stderr is a terminal, outside ``quiet()``, and once the block
    has run 2 s (a timer starts it, so one long step shows it too); gone when it ends.
    ``prints``: the block prints as it goes (a benchmark): when stdout is that terminal too,
    its lines go above the bar instead of through it."""
    from rich.console import Console

    stderr = Console(stderr=True)
    if not enabled or _quiet or not stderr.is_terminal or total <= 0:
        yield lambda n=1, total=None: None
        return
    if _bars:  # inside another bar's block (a benchmark under `vram bench`): a line of it
        outer = _bars[-1]
        inner = outer.add_task(description, total=total)

        def advance_inner(n: int = 1, total: int | None = None) -> None:
            if total is not None:
                outer.update(inner, total=total)
            outer.advance(inner, n)

        try:
            yield advance_inner
        finally:
            outer.remove_task(inner)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    bar = Progress(
        *columns,
        console=stderr,
        transient=True,
        # the results stay on stdout, unless they would be drawn over on the same terminal
        redirect_stdout=prints and sys.stdout.isatty(),
        redirect_stderr=False,
    )
    task = bar.add_task(description, total=total)
    lock = threading.Lock()
    state = {"shown": False, "over": False}

    def show() -> None:
        with lock:
            if not state["over"]:
                bar.start()
                state["shown"] = True

    def advance(n: int = 1, total: int | None = None) -> None:
        if total is not None:
            bar.update(task, total=total)
        bar.advance(task, n)

    timer = _timer(_SHOW_AFTER, show)
    timer.daemon = True
    timer.start()
    _bars.append(bar)
    try:
        yield advance
    finally:
        _bars.remove(bar)
        timer.cancel()
        with lock:
            state["over"] = True
            if state["shown"]:
                bar.stop()


def check_output_path(path: str | os.PathLike, argument: str) -> Path:
    """``path`` as a Path once it can be written: its folder exists and is writable, and it
    is not a folder itself. ValueError naming ``argument`` otherwise. Call it before long
    work, so that a bad path fails at once."""
    found = Path(path)
    folder = found.parent
    if found.is_dir():
        raise ValueError(f"{argument}: {found} is a folder, not a file")
    if not folder.is_dir():
        raise ValueError(f"{argument}: {found}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (
        found.exists() and not os.access(found, os.W_OK)
    ):
        raise ValueError(f"{argument}: {found}: not writable here")
    return found


def describe_error(exc: BaseException) -> str:
    """One line saying what went wrong: an OSError's file and reason, else the message."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror}"
    elif isinstance(exc, KeyError):
        text = f"missing {exc}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())
