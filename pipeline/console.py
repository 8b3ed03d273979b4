"""Terminal output shared by every command: progress bars, tables, one-line errors."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

T = TypeVar("T")

out = Console()
err = Console(stderr=True)


def progress(items: Iterable[T], total: int, label: str, quiet: bool = False) -> Iterator[T]:
    """Iterate with a progress bar on stderr (silent with --quiet or when not a terminal)."""
    if quiet or not err.is_terminal:
        yield from items
        return
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=err, transient=True) as bar:
        task = bar.add_task(label, total=total)
        for item in items:
            bar.update(task, description=f"{label} {getattr(item, 'name', '')}")
            yield item
            bar.advance(task)


def fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)
