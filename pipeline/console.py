"""Terminal output shared by every command: progress bars, tables, one-line errors.

``out`` and ``err`` (rich Consoles on stdout and stderr) are made on first use: importing rich costs ~17 ms
of a process's start (~0.04 s on the GPU host), which a quiet batch run never needs.

Widths: in a terminal a table uses the terminal's width (``COLUMNS`` honoured, as rich does); piped to a file
or another program, where no width is there to fit, stdout takes ``COLUMNS`` when it is set and otherwise
:data:`PIPED_WIDTH`, so that tables print whole at their natural width instead of being cut at rich's default
of 80 columns (`kerne…`, a normalize table without its right side).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    out: Console
    err: Console

T = TypeVar("T")

#: stdout's width when it is no terminal and COLUMNS is unset: wider than any table, so none is cut
PIPED_WIDTH = 10_000


def width() -> int | None:
    """The width tables on stdout are laid out in: None (the terminal's, or COLUMNS) for a terminal or when COLUMNS
    is set; :data:`PIPED_WIDTH` for piped output."""
    if os.environ.get("COLUMNS") or sys.stdout.isatty():
        return None
    return PIPED_WIDTH


def __getattr__(name: str) -> Console:
    """``out`` / ``err``, made (and kept as module attributes) when first asked for."""
    if name not in ("out", "err"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    # markup off: what is printed is text (paths, range and kernel names, messages), never rich markup, which
    # dropped a bracketed lowercase word as an unknown style ("[enc] conv1" printed " conv1")
    console = Console(stderr=name == "err", width=width() if name == "out" else None, markup=False)
    globals()[name] = console
    return console


def _console(name: str) -> Console:
    return globals().get(name) or __getattr__(name)


def progress(items: Iterable[T], total: int, label: str, quiet: bool = False) -> Iterator[T]:
    """Iterate with a progress bar on stderr (silent with --quiet or when not a terminal)."""
    if quiet or not _console("err").is_terminal:
        yield from items
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    cols = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=_console("err"), transient=True) as bar:
        task = bar.add_task(label, total=total)
        for item in items:
            bar.update(task, description=f"{label} {getattr(item, 'name', '')}")
            yield item
            bar.advance(task)


def fail(message: str) -> None:
    _console("err").print(styled("error:", "bold red", message), highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    _console("err").print(styled("warning:", "yellow", message), highlight=False, soft_wrap=True)


def styled(label: str, style: str, text: str = "") -> Text:
    """``label`` in ``style``, then ``text`` as it is: the consoles print text, not markup."""
    from rich.text import Text

    return Text.assemble((label, style), f" {text}" if text else "")
