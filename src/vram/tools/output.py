"""What the tools print and write: consoles, tables that fit, progress, output paths."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["console", "fitted", "progress", "check_output_path", "describe_error"]

_WIDE = 120  # columns of output that is not a terminal (a file, a pipe), unless COLUMNS says


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


@contextmanager
def progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr while the block runs, advanced by the function it yields;
    shown only when stderr is a terminal (nothing is printed otherwise)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    stderr = Console(stderr=True)
    if not stderr.is_terminal or total <= 0:
        yield lambda n=1: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


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
