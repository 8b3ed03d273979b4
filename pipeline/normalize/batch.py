"""Normalize many inputs: serially, on a local process pool, or on a Dask distributed cluster.

All three run the same per-file function, :func:`normalize_one`, which wraps ``normalize_file``: each input
is still written by its own ``TraceWriter`` and committed atomically, and a bad input comes back as an
:class:`Outcome` carrying the error instead of stopping the batch. Only the executor differs:

* ``jobs=1``: in this process, in input order (the default, and what a single file always uses);
* ``jobs=N``: a ``ProcessPoolExecutor`` of N workers with ``max_tasks_per_child=1``: every input gets a
  fresh process, so memory a big trace leaves in an allocator is returned to the OS when it is done and a
  long batch cannot accumulate it. The processes are forked from a forkserver that has already imported
  the normalizers, so a fresh worker costs milliseconds, not an interpreter start;
* ``scheduler="tcp://host:port"``: tasks on an existing ``dask.distributed`` cluster. Its workers must see
  the inputs and the output folder at the same paths (a shared filesystem) and have tracepipe installed;
  paths are made absolute before they are sent.

Outcomes are yielded as inputs finish (input order only for the serial run); ``Outcome.index`` is the
input's position, for callers that want input order back.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from pipeline.errors import BadInputError
from pipeline.normalize import Result, normalize_file
from pipeline.store import trace_id_for

#: Inputs a pool worker handles before it is replaced by a fresh process (bounds its memory). Exactly 1:
#: with more, CPython 3.11-3.14's pool deadlocks once a worker retires while inputs are queued (a stale
#: idle-worker token stops the replacement; python/cpython#115634, fixed only in later releases).
MAX_TASKS_PER_CHILD = 1
#: Imported once by the forkserver, so each forked worker starts with them loaded.
_PRELOAD = ["pipeline.normalize", "pipeline.normalize.nsys", "pipeline.normalize.batch", "pyarrow.parquet"]


@dataclass
class Outcome:
    """What became of one input: a Result, or the reason it was bad. Plain data, so it pickles."""

    index: int
    path: Path
    result: Result | None = None
    error_path: Path | None = None
    error: str | None = None
    internal: bool = False  # the error is a failure of the tool, not of the input
    worker_pid: int = 0
    peak_rss_bytes: int = 0  # the worker process's peak RSS so far (its ru_maxrss), for benchmarks

    @property
    def name(self) -> str:  # shown by the progress bar
        return self.path.name

    def bad_input(self) -> BadInputError | None:
        return None if self.error is None else BadInputError(self.error_path or self.path, self.error)


def normalize_one(index: int, path: Path, out: Path, trace_id: str | None = None, force: bool = True) -> Outcome:
    """The per-input work of every executor. BadInputError becomes data: an exception with two
    constructor arguments does not survive pickling back from a worker, and one bad file must not end the batch."""
    try:
        result = normalize_file(path, out, trace_id, force=force)
    except BadInputError as e:
        return Outcome(index, path, error_path=e.path, error=e.reason, worker_pid=os.getpid(), peak_rss_bytes=_peak())
    except Exception as e:  # a bug of ours on this one file must not end the batch either
        reason = f"internal error {type(e).__name__}: {e} (please report with the file)"
        return Outcome(index, path, error=reason, internal=True, worker_pid=os.getpid(), peak_rss_bytes=_peak())
    return Outcome(index, path, result=result, worker_pid=os.getpid(), peak_rss_bytes=_peak())


def _peak() -> int:
    try:
        import resource
    except ImportError:  # not on Windows
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def check_unique_ids(files: Sequence[Path], trace_id: str | None = None) -> None:
    """Two inputs with one trace id would overwrite each other (and, run in parallel, could interleave
    their tables), so a batch refuses them up front."""
    if trace_id is not None:
        return
    seen: dict[str, Path] = {}
    for f in files:
        tid = trace_id_for(f)
        if tid in seen:
            raise BadInputError(
                f, f"has the same trace id {tid!r} as {seen[tid]}: give each rank its own folder or file name"
            )
        seen[tid] = f


def normalize_many(
    files: Sequence[Path],
    out: Path,
    *,
    trace_id: str | None = None,
    force: bool = False,
    jobs: int = 1,
    scheduler: str | None = None,
) -> Iterator[Outcome]:
    """Normalize ``files`` into ``out`` on the executor chosen by ``jobs`` / ``scheduler``; see the module doc."""
    files = [Path(f) for f in files]
    check_unique_ids(files, trace_id)
    if scheduler:
        yield from _on_dask(files, out, trace_id, force, scheduler)
    elif jobs > 1 and len(files) > 1:
        yield from _on_pool(files, out, trace_id, force, min(jobs, len(files)))
    else:
        for i, f in enumerate(files):
            yield normalize_one(i, f, out, trace_id, force)


def _on_pool(files: list[Path], out: Path, trace_id: str | None, force: bool, jobs: int) -> Iterator[Outcome]:
    # forkserver, not fork: max_tasks_per_child refuses fork, and forking this (maybe threaded) process is unsafe.
    ctx = get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    pool = ProcessPoolExecutor(jobs, mp_context=ctx, max_tasks_per_child=MAX_TASKS_PER_CHILD)
    try:
        futures = [pool.submit(normalize_one, i, f, out, trace_id, force) for i, f in enumerate(files)]
        for fut in as_completed(futures):
            yield fut.result()
    finally:
        # On an error or an interrupt, inputs not started are dropped; those running finish and commit whole.
        pool.shutdown(wait=True, cancel_futures=True)


def _on_dask(files: list[Path], out: Path, trace_id: str | None, force: bool, scheduler: str) -> Iterator[Outcome]:
    try:  # optional dependency: only --scheduler needs it
        from dask.distributed import Client
        from dask.distributed import as_completed as dask_completed
    except ImportError as e:
        raise RuntimeError("--scheduler needs dask.distributed: pip install 'tracepipe[dask]'") from e
    out = out.resolve()
    with Client(scheduler) as client:
        futures = [
            client.submit(normalize_one, i, f.resolve(), out, trace_id, force, pure=False) for i, f in enumerate(files)
        ]
        try:
            for fut in dask_completed(futures):
                yield fut.result()
        finally:
            client.cancel(futures)
