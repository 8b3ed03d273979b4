"""Normalize many inputs: serially, on a local process pool, or on a Dask distributed cluster.

All three run the same per-file function, :func:`normalize_one`, which wraps ``normalize_file``: each input
is still written by its own ``TraceWriter`` and committed atomically, and a bad input comes back as an
:class:`Outcome` carrying the error instead of stopping the batch. Only the executor differs:

* ``jobs=1``: in this process, in input order (the default, and what a single file always uses);
* ``jobs=N``: up to N worker processes at once, one per input: every input gets a fresh process, so memory
  a big trace leaves in an allocator is returned to the OS when it is done and a long batch cannot
  accumulate it, and a worker that dies (the OOM killer's SIGKILL) fails only its own input, reported
  with the signal, while the batch goes on. The processes are forked from a forkserver that has already
  imported the normalizers, so a fresh worker costs milliseconds, not an interpreter start;
* ``scheduler="tcp://host:port"``: tasks on an existing ``dask.distributed`` cluster. Its workers must see
  the inputs and the output folder at the same paths (a shared filesystem) and have tracepipe installed;
  paths are made absolute before they are sent.

Outcomes are yielded as inputs finish (input order only for the serial run); ``Outcome.index`` is the
input's position, for callers that want input order back.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from pathlib import Path

from pipeline.errors import BadInputError, SettingError, os_error_reason
from pipeline.normalize import Result, normalize_file
from pipeline.store import TraceIdError, check_trace_id, clean, trace_id_for

#: Test hook: a worker given an input of this file name SIGKILLs itself first. Never set it otherwise.
KILL_WORKER_ENV = "TRACEPIPE_KILL_WORKER"
#: Imported once by the forkserver, so each forked worker starts with them loaded.
_PRELOAD = ["pipeline.normalize", "pipeline.normalize.nsys", "pipeline.normalize.batch", "pyarrow.parquet"]

#: Files a folder scan picks up; anything else in a capture folder (scripts, manifests) is not a trace.
TRACE_SUFFIXES = (".sqlite", ".sqlite.gz", ".nsys-rep", ".qdrep", ".json", ".json.gz", ".csv", ".csv.gz")
NOT_TRACES = ("manifest.json", "layers.json")
#: Archives of traces found in a folder: listed as skipped with what to do, not silently passed over (a trace
#: shipped as .tar.gz or .zip is common; HTA's own test data holds one). Gzip of one file is read as it is.
ARCHIVE_SUFFIXES = {
    ".zip": "a ZIP archive: unzip it",
    ".tar": "a tar archive: unpack it",
    ".tar.gz": "a tar archive: unpack it",
    ".tgz": "a tar archive: unpack it",
    ".json.xz": "xz-compressed: decompress it (xz -d)",
    ".sqlite.xz": "xz-compressed: decompress it (xz -d)",
    ".json.zst": "zstd-compressed: decompress it (zstd -d)",
    ".sqlite.zst": "zstd-compressed: decompress it (zstd -d)",
    ".json.bz2": "bzip2-compressed: decompress it (bunzip2)",
}


def expand_inputs(inputs: tuple[Path, ...], skipped: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Files as given, folders scanned for traces; a ``.nsys-rep`` beside its ``.sqlite`` is skipped, and archives
    (``ARCHIVE_SUFFIXES``) are not read (each listed in ``skipped`` with the reason, when given)."""
    files: list[Path] = []
    for p in inputs:
        if not p.is_dir():
            files.append(p)
            continue
        visible = sorted(
            f for f in p.rglob("*") if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
        )
        found = [f for f in visible if f.name.lower().endswith(TRACE_SUFFIXES) and f.name not in NOT_TRACES]
        if skipped is not None:
            for f in visible:
                why = next((why for ext, why in ARCHIVE_SUFFIXES.items() if f.name.lower().endswith(ext)), None)
                if why is not None:
                    skipped.append((f, f"{why} and pass what it holds"))
        for f in found:
            if f.suffix in (".nsys-rep", ".qdrep") and _has_sqlite_beside(f):
                if skipped is not None:
                    skipped.append((f, "its .sqlite export beside it is read instead"))
                continue
            files.append(f)
    return files


#: Side files a tracepipe capture writes beside its traces (pipeline/capture/): read with any trace of the folder.
CAPTURE_SIDE_FILES = ("layer_shapes.json", "compiled_kernels.json")


def with_capture_side_files(files: list[Path]) -> list[Path]:
    """``files`` and the capture side files (:data:`CAPTURE_SIDE_FILES`) of each one's folder that are not among
    them. The side files belong to every trace of their capture (a compiled model's kernels placed on its modules,
    the layers' shapes), so ``run cap/torch_trace.json.gz`` reads them as ``run cap/`` does; given the trace alone,
    they were dropped without a word (a new-user review)."""
    given = {f.resolve() for f in files}
    out = list(files)
    for f in files:
        for name in CAPTURE_SIDE_FILES:
            side = f.parent / name
            if side.is_file() and side.resolve() not in given:
                given.add(side.resolve())
                out.append(side)
    return out


def _has_sqlite_beside(rep: Path) -> bool:
    """The export of a report sits next to it; normalizing both would give one trace twice."""
    return any(rep.with_name(rep.stem + ext).is_file() for ext in (".sqlite", ".sqlite.gz"))


@dataclass
class Outcome:
    """What became of one input: a Result, or the reason it was bad. Plain data, so it pickles."""

    index: int
    path: Path
    result: Result | None = None
    error_path: Path | None = None
    error: str | None = None
    internal: bool = False  # the error is a failure of the tool, not of the input
    died: bool = False  # the worker process died (killed by a signal) before it could report
    worker_pid: int = 0
    peak_rss_bytes: int = 0  # the worker process's peak RSS so far (its ru_maxrss), for benchmarks

    @property
    def name(self) -> str:  # shown by the progress bar
        return self.path.name

    def bad_input(self) -> BadInputError | None:
        return None if self.error is None else BadInputError(self.error_path or self.path, self.error)


def normalize_one(
    index: int, path: Path, out: Path, trace_id: str | None = None, force: bool = True, note: str | None = None
) -> Outcome:
    """The per-input work of every executor. BadInputError becomes data: an exception with two
    constructor arguments does not survive pickling back from a worker, and one bad file must not end the batch.
    ``note`` (an id collision resolved) is added to the result's warnings."""
    try:
        result = normalize_file(path, out, trace_id, force=force)
    except BadInputError as e:
        return Outcome(index, path, error_path=e.path, error=e.reason, worker_pid=os.getpid(), peak_rss_bytes=_peak())
    except (TraceIdError, SettingError) as e:
        return Outcome(index, path, error=str(e), worker_pid=os.getpid(), peak_rss_bytes=_peak())
    except OSError as e:  # no space, no permission, read-only: the user can fix it, so not an internal error
        reason = os_error_reason(e)
        internal = reason is None
        reason = reason or f"internal error {type(e).__name__}: {e} (please report with the file)"
        return Outcome(index, path, error=reason, internal=internal, worker_pid=os.getpid(), peak_rss_bytes=_peak())
    except Exception as e:  # a bug of ours on this one file must not end the batch either
        reason = f"internal error {type(e).__name__}: {e} (please report with the file)"
        return Outcome(index, path, error=reason, internal=True, worker_pid=os.getpid(), peak_rss_bytes=_peak())
    if note:
        result.warnings.insert(0, note)
    return Outcome(index, path, result=result, worker_pid=os.getpid(), peak_rss_bytes=_peak())


def _peak() -> int:
    try:
        import resource
    except ImportError:  # not on Windows
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


@dataclass(frozen=True)
class Task:
    index: int
    path: Path
    trace_id: str
    note: str | None = None  # why this input got a trace id other than its own


def assign_ids(files: Sequence[Path], trace_id: str | None = None) -> list[Task]:
    """One trace id per input. Two inputs whose names give one id (``a/run/x.sqlite``, ``b/run/x.sqlite``)
    would overwrite each other, so the later ones get ``<id>-2``, ``<id>-3``... with a warning saying so."""
    if trace_id is not None:
        return [Task(i, f, check_trace_id(trace_id)) for i, f in enumerate(files)]
    natural = [trace_id_for(f) for f in files]
    taken = set(natural)
    first: dict[str, Path] = {}
    tasks = []
    for i, (f, tid) in enumerate(zip(files, natural, strict=True)):
        if tid not in first:
            first[tid] = f
            tasks.append(Task(i, f, tid))
            continue
        n = 2
        while f"{tid}-{n}" in taken:
            n += 1
        taken.add(new := f"{tid}-{n}")
        note = f"has the same trace id {tid!r} as {first[tid]}: normalized as {new!r} (or give it its own folder)"
        tasks.append(Task(i, f, new, note))
    return tasks


def normalize_many(
    files: Sequence[Path],
    out: Path,
    *,
    trace_id: str | None = None,
    force: bool = False,
    jobs: int = 1,
    scheduler: str | None = None,
) -> Iterator[Outcome]:
    """Normalize ``files`` into ``out`` on the executor chosen by ``jobs`` / ``scheduler``; see the module doc.
    What killed writers left in ``out`` is tidied first (``store.clean``)."""
    tasks = assign_ids([Path(f) for f in files], trace_id)
    clean(out)
    if scheduler:
        yield from _on_dask(tasks, out, force, scheduler)
    elif jobs > 1 and len(tasks) > 1:
        yield from _on_workers(tasks, out, force, min(jobs, len(tasks)))
    else:
        for t in tasks:
            yield normalize_one(t.index, t.path, out, t.trace_id, force, t.note)


def _work(send: Connection, task: Task, out: Path, force: bool) -> None:
    """A worker process: one input, its outcome sent back, exit."""
    if os.environ.get(KILL_WORKER_ENV) == task.path.name:  # the test of a worker killed like the OOM killer does
        os.kill(os.getpid(), signal.SIGKILL)
    send.send(normalize_one(task.index, task.path, out, task.trace_id, force, task.note))
    send.close()


def _on_workers(tasks: list[Task], out: Path, force: bool, jobs: int) -> Iterator[Outcome]:
    """Up to ``jobs`` worker processes at once, a fresh one per input. A worker that exits without sending
    its outcome (SIGKILL by the OOM killer, a crash in native code) fails only its input."""
    # forkserver, not fork: forking this (maybe threaded) process is unsafe.
    ctx = get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    pending = list(reversed(tasks))
    running: dict[Connection, tuple[object, Task]] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                task = pending.pop()
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_work, args=(send, task, out, force), name=f"tracepipe-{task.index}")
                proc.start()
                send.close()  # the worker holds the only writer: its exit makes recv() see EOF
                running[recv] = (proc, task)
            for conn in wait(list(running)):
                proc, task = running.pop(conn)  # type: ignore[call-overload]
                try:
                    outcome: Outcome | None = conn.recv()  # type: ignore[attr-defined]
                except (EOFError, OSError):
                    outcome = None
                conn.close()  # type: ignore[attr-defined]
                proc.join()  # type: ignore[attr-defined]
                yield outcome or _died(task, proc.exitcode, proc.pid)  # type: ignore[attr-defined]
    finally:
        # On an error or an interrupt, inputs not started are dropped; those running finish and commit whole.
        for proc, _ in running.values():
            proc.join()  # type: ignore[attr-defined]


def _died(task: Task, exitcode: int | None, pid: int | None) -> Outcome:
    if exitcode is not None and exitcode < 0:
        how = f"was killed by {signal.Signals(-exitcode).name}"
        hint = " (out of memory? see dmesg; try fewer --jobs)" if exitcode == -signal.SIGKILL else ""
    else:
        how, hint = f"exited with code {exitcode} without reporting", ""
    reason = f"its worker process {pid} {how}{hint}; nothing of it was committed, the batch went on"
    return Outcome(task.index, task.path, error=reason, died=True, worker_pid=pid or 0)


def _on_dask(tasks: list[Task], out: Path, force: bool, scheduler: str) -> Iterator[Outcome]:
    try:  # optional dependency: only --scheduler needs it
        from dask.distributed import Client
        from dask.distributed import as_completed as dask_completed
    except ImportError as e:
        raise SettingError("--scheduler needs dask.distributed: pip install 'tracepipe[dask]'") from e
    out = out.resolve()
    try:
        client = Client(scheduler)
    except (OSError, ValueError, TypeError) as e:  # no scheduler there (timed out, refused), or not an address
        said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SettingError(
            f"--scheduler {scheduler}: no Dask scheduler answers there ({said}): give the tcp://HOST:PORT that "
            "`dask scheduler` prints, with workers that see the same paths"
        ) from e
    with client:
        futures = [
            client.submit(normalize_one, t.index, t.path.resolve(), out, t.trace_id, force, t.note, pure=False)
            for t in tasks
        ]
        try:
            for fut in dask_completed(futures):
                yield fut.result()
        finally:
            client.cancel(futures)
