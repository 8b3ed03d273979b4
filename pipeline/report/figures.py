"""The report's figures, rendered on worker processes where there are enough of them to pay for the workers.

A figure takes ~0.2 s of matplotlib (layout, text, rasterizing) and holds the GIL, so threads would not help;
the demo report has 109 of them. The page is built first with a placeholder per figure, the figures render
meanwhile, and :meth:`Figures.fill` puts each one's HTML in at the end. The PNG bytes are those of rendering
in this process: the same functions run on the same data (benchmarks/results/report_figures.txt).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from types import TracebackType

from pipeline import console

#: a worker starts in ~0.6 s (matplotlib, polars), the time of ~3 figures: one per 6 figures pays for itself
FIGURES_PER_WORKER = 6
#: at most this many workers (~120 MB each while drawing): 4 cut the demo report's figures to about a quarter
MAX_WORKERS = 4
_TOKEN = re.compile(r"\x00figure:(\d+)\x00")
#: how often a worker looks whether the report's process is still there
WATCH_S = 0.5


def workers_for(figures: int, cores: int) -> int:
    """Processes to draw ``figures`` figures on ``cores`` allowed cores: 1 (this one) when fewer than two workers
    would pay for their start, else one per :data:`FIGURES_PER_WORKER` figures, at most the cores and
    :data:`MAX_WORKERS`."""
    return max(1, min(cores, MAX_WORKERS, figures // FIGURES_PER_WORKER))


@dataclass
class Figure:
    """One figure to be: where its PNG goes, its alt text, whether the page embeds it, and its bytes (or the
    worker's promise of them)."""

    path: Path
    alt: str
    embed: bool
    png: Future[bytes] | bytes

    @property
    def name(self) -> str:  # what the progress bar shows
        return self.path.name


class Figures:
    """Collects the report's figures: :meth:`add` returns a placeholder for the page, :meth:`wait` has them all
    rendered, :meth:`fill` puts each one's HTML where its placeholder stands."""

    def __init__(self, workers: int) -> None:
        """``workers``: processes drawing (1 or fewer: this one)."""
        self.items: list[Figure] = []
        self._pool: Executor | None = None
        if workers > 1:
            try:
                # forkserver, not fork: this process runs polars' and DuckDB's threads, which a fork would copy
                # mid-flight; the server imports the plotting module once, and every worker forks from it ready
                ctx = get_context("forkserver")
                ctx.set_forkserver_preload(["pipeline.report.plots"])
                self._pool = ProcessPoolExecutor(
                    max_workers=workers, mp_context=ctx, initializer=_exit_with, initargs=(os.getpid(),)
                )
            except (OSError, NotImplementedError, ValueError):  # no semaphores or no forkserver here: draw in line
                self._pool = None

    def __enter__(self) -> Figures:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def add(self, path: Path, alt: str, embed: bool, render: Callable[..., bytes], *args: object) -> str:
        """The placeholder of ``render(*args)``'s PNG, to be written at ``path``."""
        png: Future[bytes] | bytes = self._pool.submit(render, *args) if self._pool else render(*args)
        self.items.append(Figure(path, alt, embed, png))
        return f"\x00figure:{len(self.items) - 1}\x00"

    def wait(self, quiet: bool = True) -> list[Figure]:
        """Every figure with its bytes, in the order added (progress on stderr while workers still draw)."""

        def done() -> Iterator[Figure]:
            for f in self.items:
                if isinstance(f.png, Future):
                    try:
                        f.png = f.png.result()
                    except BrokenProcessPool as e:
                        raise RuntimeError(f"a worker drawing the report's figures died ({f.path.name}): {e}") from e
                yield f

        pending = sum(isinstance(f.png, Future) for f in self.items)
        if not pending:
            return self.items
        return list(console.progress(done(), len(self.items), "report figures", quiet))

    def fill(self, text: str, html_of: Callable[[Figure], str]) -> str:
        """``text`` with each placeholder replaced by ``html_of`` its figure (after :meth:`wait`)."""
        return _TOKEN.sub(lambda m: html_of(self.items[int(m[1])]), text)


def _exit_with(pid: int) -> None:
    """In a worker: exit once process ``pid`` (the report's) is gone. A worker waits for work on a queue whose
    writing end it holds too, so a report killed (SIGKILL, the OOM killer) would leave it, and the forkserver
    above it, waiting forever."""

    def watch() -> None:
        while True:
            time.sleep(WATCH_S)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(1)

    threading.Thread(target=watch, name="tracepipe-report-watch", daemon=True).start()
