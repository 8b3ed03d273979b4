"""Where normalized traces live, and how they get there without tearing.

Public layout (hive-partitioned, one folder per trace, so one glob reads a whole run)::

    OUT/<table>/trace_id=<id>/part-0.parquet

Behind it, each write of a trace is a *generation*: a folder of one Parquet file per table, written
in full before anyone can see it, under ``OUT/.tracepipe/``::

    OUT/.tracepipe/lock                          writers' commit lock (filelock)
    OUT/.tracepipe/readers.lock                  shared by readers; old generations go only when it is free
    OUT/.tracepipe/writers/<gen>.lock            held by the live writer of <gen>
    OUT/.tracepipe/traces/<id>/<gen>/<table>.parquet
    OUT/.tracepipe/manifests/<id>.json           {"generation": <gen>, "tables": {...}}: THE switch

Committing a trace is one ``os.replace`` of its manifest: a reader that goes through the manifests
(:func:`committed_files`, used by ``pipeline.analyze.connect``) sees the old generation or the new one,
never a mix, whatever instant the writer dies at. After the switch the generation's files are hard-linked
to the public paths above (so plain globs keep working) and the generation it replaced is removed once no
reader holds ``readers.lock``. A writer killed anywhere leaves either the old or the new manifest; the
next writer into the folder removes generations nobody names and no live writer holds, and re-links public
files that a killed publish left stale. See docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock, Timeout

from pipeline.errors import BadInputError
from pipeline.schema import TABLES, conform

PART = "part-0.parquet"
STATE = ".tracepipe"
_SOURCE_SUFFIXES = (".gz", ".sqlite", ".nsys-rep", ".qdrep", ".json", ".csv", ".pt", ".trace")

# ---------------------------------------------------------------------------------------------- trace ids

#: Longest trace id: the partition folder name ``trace_id=<id>`` must stay under 255 bytes.
MAX_ID_LENGTH = 200
_SAFE_CHAR = re.compile(r"[A-Za-z0-9_-]")
#: The safe form: letters, digits, ``.``, ``_``, ``-`` and ``~XX`` escapes (two upper-case hex digits of
#: one UTF-8 byte); never starting with ``.`` (no ``.``/``..``, no hidden folders); at most 200 characters.
SAFE_ID = re.compile(r"(?:[A-Za-z0-9_-]|~[0-9A-F]{2})(?:[A-Za-z0-9._-]|~[0-9A-F]{2})*")
SAFE_ID_RULE = "letters, digits, '.', '_', '-' and ~XX escapes (not starting with '.', at most 200 characters)"


class TraceIdError(ValueError):
    """A trace id outside the safe form."""


def is_safe_trace_id(trace_id: str) -> bool:
    return len(trace_id) <= MAX_ID_LENGTH and SAFE_ID.fullmatch(trace_id) is not None


def check_trace_id(trace_id: str) -> str:
    if not is_safe_trace_id(trace_id):
        raise TraceIdError(f"trace id {trace_id!r} is not safe: use {SAFE_ID_RULE}")
    return trace_id


def encode_trace_id(name: str) -> str:
    """``name`` in the safe form: safe characters kept, every other one as ``~XX`` per UTF-8 byte, so two
    distinct names never give one id (``训练`` -> ``~E8~AE~AD~E7~BB~83``). A name whose encoding is longer
    than 200 characters keeps its first part and ends in a hash of the whole name (then not reversible)."""
    parts = []
    for i, ch in enumerate(name):
        if _SAFE_CHAR.fullmatch(ch) or (ch == "." and i > 0):
            parts.append(ch)
        else:
            parts.append("".join(f"~{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
    if sum(map(len, parts)) <= MAX_ID_LENGTH:
        return "".join(parts)
    import hashlib

    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    kept, length = [], 0
    for p in parts:  # whole escapes only, so the prefix stays in the safe form
        if length + len(p) > MAX_ID_LENGTH - 17:
            break
        kept.append(p)
        length += len(p)
    return "".join(kept) + "-" + digest


def decode_trace_id(trace_id: str) -> str:
    """The name an id was encoded from (for display)."""
    raw = bytearray()
    i = 0
    while i < len(trace_id):
        if trace_id[i] == "~" and re.fullmatch(r"[0-9A-F]{2}", trace_id[i + 1 : i + 3]):
            raw.append(int(trace_id[i + 1 : i + 3], 16))
            i += 3
        else:
            raw += trace_id[i].encode()
            i += 1
    return raw.decode("utf-8", "replace")


def trace_id_for(path: Path) -> str:
    """A stable id from the input's folder and name: ``h200_smallcnn.nsys``.

    The folder is part of the id because per-rank captures are usually many
    files with one name (``rank0/nsys.sqlite``, ``rank1/nsys.sqlite``). The folder is the one the path names,
    not a symlink's target's: ranks linked in from one store (git-annex, DVC, a shared scratch folder) keep
    their own folders' names, as their file names stay the links' own.
    """
    stem = path.name
    while stem.lower().endswith(_SOURCE_SUFFIXES):
        stem = stem[: stem.rfind(".")]
    parent = Path(os.path.abspath(path)).parent.name  # ('..' folded away, symlinks not followed)
    raw = f"{parent}.{stem}" if parent else stem
    return encode_trace_id(raw) if raw else "trace"


# ---------------------------------------------------------------------------------------------- paths


def partition_dir(out: Path, table: str, trace_id: str) -> Path:
    """The public folder of one table of one trace."""
    return Path(out) / table / f"trace_id={check_trace_id(trace_id)}"


def table_glob(out: Path, table: str) -> str:
    """The public glob of a table, for tools outside tracepipe; tracepipe reads :func:`committed_files`."""
    return str(Path(out) / table / "trace_id=*" / "*.parquet")


def _state(out: Path) -> Path:
    return Path(out) / STATE


def _manifest_path(out: Path, trace_id: str) -> Path:
    return _state(out) / "manifests" / f"{trace_id}.json"


def _generation_dir(out: Path, trace_id: str, generation: str) -> Path:
    return _state(out) / "traces" / trace_id / generation


def _writer_lock_path(out: Path, generation: str) -> Path:
    return _state(out) / "writers" / f"{generation}.lock"


# ---------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Committed:
    """One committed trace: which generation, and the file of each table it has."""

    trace_id: str
    generation: str | None  # None: written by a tracepipe before generations (public files only)
    files: dict[str, Path]


def _read_manifest(out: Path, trace_id: str) -> Committed | None:
    """The trace's committed generation, None when it has no manifest. A manifest no writer left (cut short, edited)
    or one whose generation folder is gone (removed by hand) is bad input naming the file and the fix, never a JSON
    or file-not-found error. A writer removes a generation only after switching the manifest to the next one, so a
    folder gone under a manifest just read is read again first: another name there is that switch, not damage."""
    path = _manifest_path(out, trace_id)
    named = None
    while True:
        try:
            doc = json.loads(path.read_text())
            gen, tables = str(doc["generation"]), list(doc["tables"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
            raise BadInputError(
                path, f"not a manifest tracepipe wrote (cut short or edited): delete it and normalize {trace_id} again"
            ) from e
        folder = _generation_dir(out, trace_id, gen)
        if folder.is_dir():
            return Committed(trace_id, gen, {t: folder / f"{t}.parquet" for t in tables if t in TABLES})
        if gen == named:  # named twice, and gone: removed by hand
            raise BadInputError(
                folder,
                f"missing, though {path} names it (removed by hand?): delete that file and normalize {trace_id} again",
            )
        named = gen


def committed(out: Path) -> dict[str, Committed]:
    """Every committed trace of ``out`` by id: those with a manifest, and (from older tracepipe versions)
    those whose public ``trace_meta`` file exists without one."""
    out = Path(out)
    found: dict[str, Committed] = {}
    manifests = _state(out) / "manifests"
    if manifests.is_dir():
        for m in sorted(manifests.glob("*.json")):
            tid = m.name[: -len(".json")]
            if is_safe_trace_id(tid) and (c := _read_manifest(out, tid)) is not None:
                found[tid] = c
    meta = out / "trace_meta"
    if meta.is_dir():
        for d in sorted(meta.glob("trace_id=*")):
            tid = d.name.split("=", 1)[1]
            if tid in found or not is_safe_trace_id(tid) or not (d / PART).is_file():
                continue
            files = {t: out / t / d.name / PART for t in TABLES}
            found[tid] = Committed(tid, None, {t: f for t, f in files.items() if f.is_file()})
    return found


def committed_files(out: Path, table: str) -> list[Path]:
    """The files holding ``table`` for every committed trace: what every tracepipe reader scans.
    Call :func:`hold_readers` first so none of them is removed while it is read."""
    return [c.files[table] for c in committed(out).values() if table in c.files]


def trace_ids(out: Path) -> list[str]:
    return sorted(committed(out))


def committed_file(out: Path, trace_id: str, table: str) -> Path | None:
    c = _read_manifest(out, trace_id) if is_safe_trace_id(trace_id) else None
    if c is None:
        legacy = Path(out) / table / f"trace_id={trace_id}" / PART
        return legacy if is_safe_trace_id(trace_id) and legacy.is_file() else None
    return c.files.get(table)


_READERS: dict[Path, int] = {}


def hold_readers(out: Path) -> None:
    """Take a shared lock on ``out``'s reader lock for the rest of this process, so no writer removes a
    generation this process may still read (they wait for a later run to). Quietly nothing where the
    folder cannot hold the lock file (read-only media: nobody writes there either)."""
    key = Path(out).resolve()
    if key in _READERS or os.name != "posix":
        return
    import fcntl

    try:
        _state(key).mkdir(exist_ok=True)
        fd = os.open(_state(key) / "readers.lock", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return
    fcntl.flock(fd, fcntl.LOCK_SH)
    _READERS[key] = fd


def release_readers(out: Path) -> None:
    fd = _READERS.pop(Path(out).resolve(), None)
    if fd is not None:
        os.close(fd)


@contextlib.contextmanager
def _no_readers(out: Path) -> Iterator[bool]:
    """True (and readers kept out meanwhile) when no reader holds ``out``; False otherwise."""
    if os.name != "posix":
        yield False
        return
    import fcntl

    fd = os.open(_state(out) / "readers.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------- fault hooks

#: Names of the points a writer passes; ``TRACEPIPE_KILL_AT=<n>`` SIGKILLs the writer at the n-th point it
#: reaches (counted from 1 over the whole process), for the fault-injection test. Never set it otherwise.
_KILL_AT = "TRACEPIPE_KILL_AT"
_points_passed = 0


def _point(name: str) -> None:
    global _points_passed
    target = os.environ.get(_KILL_AT)
    if not target:
        return
    _points_passed += 1
    if str(_points_passed) == target:
        os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------------------------------------- writing


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """Parquet dictionary encoding for the text columns only.

    Names, kinds and call stacks repeat and shrink to a small dictionary; ids and nanosecond timestamps
    are nearly all distinct, so a dictionary for them is built only to be abandoned page by page. Measured
    on the 500 MB chrome benchmark's tables: ops 0.063 vs 0.132 s and 1.3 vs 2.5 MB, api_calls 0.025 vs
    0.062 s and 0.9 vs 1.8 MB, against dictionary encoding every column (pyarrow's default).
    """
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]


def _delta_columns(schema: pa.Schema) -> dict[str, str]:
    """Delta encoding for the integer columns (ids, nanosecond timestamps and durations): sorted or close values
    cost a few bits each where plain encoding left zstd 8 bytes a value to squeeze. The 220k-kernel export's
    kernels and runtime calls: their writes 0.147 -> 0.116 CPU-s, 4.5 -> 0.3 MB (benchmarks/results/
    normalize_delta_44.txt)."""
    return {f.name: "DELTA_BINARY_PACKED" for f in schema if pa.types.is_integer(f.type)}


#: Seconds a writer waits for the commit lock silently before saying who it waits for.
LOCK_QUIET_S = 1.0


@contextlib.contextmanager
def commit_lock(out: Path) -> Iterator[None]:
    """The folder's writer lock; says so on stderr when another writer holds it."""
    path = _state(out) / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path)
    try:
        lock.acquire(timeout=LOCK_QUIET_S)
    except Timeout:
        print(
            f"tracepipe: waiting for another tracepipe writing into {out} (lock {path}) ...",
            file=sys.stderr,
            flush=True,
        )
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


class TraceWriter:
    """Writes one trace's tables into a new generation, then commits them with one manifest switch."""

    def __init__(self, out: Path, trace_id: str) -> None:
        self.out = Path(out)
        self.trace_id = check_trace_id(trace_id)
        self.generation = f"g{time.time_ns():x}-{uuid.uuid4().hex[:8]}"
        lock_path = _writer_lock_path(self.out, self.generation)
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        # Held until commit or abort; taken before the folder exists, so cleanup never removes a live one.
        self._lock: FileLock | None = FileLock(lock_path)
        self._lock.acquire(timeout=0)
        self.staging = _generation_dir(self.out, trace_id, self.generation)
        self.staging.mkdir(parents=True)
        self.rows: dict[str, int] = {}
        #: Counts of ``normalize.checks`` a normalizer took exactly while writing (the check's name -> count).
        self.counted: dict[str, int] = {}

    def write(self, table: str, data: pa.Table) -> int:
        return self.write_batches(table, [data])

    def write_batches(self, table: str, batches: Iterable[pa.Table | pa.RecordBatch]) -> int:
        """Stream batches into one Parquet file, conforming each to the schema."""
        path = self.staged_file(table)
        schema = TABLES[table]
        rows = 0
        with pq.ParquetWriter(
            path,
            schema,
            compression="zstd",
            use_dictionary=_dictionary_columns(schema),
            column_encoding=_delta_columns(schema),
        ) as writer:
            for batch in batches:
                t = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
                t = conform(t, table, self.trace_id)
                writer.write_table(t)
                rows += t.num_rows
        self.rows[table] = self.rows.get(table, 0) + rows
        _point(f"wrote {table}")
        return rows

    def staged_file(self, table: str) -> Path:
        return self.staging / f"{table}.parquet"

    def commit(self) -> None:
        """Make this generation the trace's committed one (one rename), then publish it and clean up."""
        if "trace_meta" not in self.rows:
            raise RuntimeError("trace_meta must be written before commit")
        manifest = _manifest_path(self.out, self.trace_id)
        manifest.parent.mkdir(parents=True, exist_ok=True)
        doc = {"trace_id": self.trace_id, "generation": self.generation, "tables": dict(sorted(self.rows.items()))}
        with commit_lock(self.out):
            _point("locked")
            tmp = manifest.with_name(f".{manifest.name}.{self.generation}.tmp")
            tmp.write_text(json.dumps(doc))
            _point("manifest written")
            os.replace(tmp, manifest)  # the switch
            _point("switched")
            self._release()
            _publish(self.out, _read_manifest(self.out, self.trace_id))  # type: ignore[arg-type]
            _collect(self.out, self.trace_id, keep=self.generation)

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None
            _writer_lock_path(self.out, self.generation).unlink(missing_ok=True)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is not None or self._lock is not None:
            self.abort()


def _publish(out: Path, c: Committed) -> None:
    """Make the public files of trace ``c`` the ones of its generation (hard links; a copy where the file
    system has none), and remove public partitions of tables the generation does not have."""
    for table in TABLES:
        dest_dir = out / table / f"trace_id={c.trace_id}"
        dest = dest_dir / PART
        src = c.files.get(table)
        if src is None:
            if dest_dir.exists():
                shutil.rmtree(dest_dir, ignore_errors=True)
                _point(f"unpublished {table}")
            continue
        if dest.exists() and os.path.samefile(src, dest):
            continue
        dest_dir.mkdir(parents=True, exist_ok=True)
        tmp = dest_dir / f".{PART}.{c.generation}.tmp"
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
        _point(f"published {table}")


def _collect(out: Path, trace_id: str, keep: str | None) -> None:
    """Under the commit lock: remove the generations of ``trace_id`` other than ``keep`` that no live writer
    holds, but only while no reader holds the folder (otherwise a later writer does it)."""
    trace_dir = _state(out) / "traces" / trace_id
    if not trace_dir.is_dir():
        return
    with _no_readers(out) as free:
        if not free:
            return
        for gen_dir in trace_dir.iterdir():
            if gen_dir.name != keep and not _writer_alive(out, gen_dir.name):
                shutil.rmtree(gen_dir, ignore_errors=True)
                _point(f"removed {gen_dir.name}")
        with contextlib.suppress(OSError):
            trace_dir.rmdir()  # only when empty


def clean(out: Path) -> None:
    """What a run does before its first input, under the commit lock: re-publish traces a killed writer
    left half published, remove generations no manifest names and no live writer holds (old ones only
    when no reader holds the folder), and leftover temporary and lock files."""
    out = Path(out)
    if not _state(out).is_dir():
        return
    with commit_lock(out):
        current = committed(out)
        for c in current.values():
            if c.generation is not None:
                _publish(out, c)
        for table in TABLES:  # a killed link-and-rename leaves a hidden temporary file
            for tmp in (out / table).glob("trace_id=*/.part-0.parquet.*.tmp"):
                tmp.unlink(missing_ok=True)
        manifests = _state(out) / "manifests"
        for tmp in manifests.glob(".*.tmp") if manifests.is_dir() else ():
            if not _writer_alive(out, tmp.name.rsplit(".", 2)[-2]):
                tmp.unlink(missing_ok=True)
        traces = _state(out) / "traces"
        for trace_dir in sorted(traces.iterdir()) if traces.is_dir() else ():
            keep = current.get(trace_dir.name)
            _collect(out, trace_dir.name, keep.generation if keep else None)
        for stale in (_state(out) / "writers").glob("*.lock"):
            if not _writer_alive(out, stale.stem):
                stale.unlink(missing_ok=True)


def _writer_alive(out: Path, generation: str) -> bool:
    """True while the writer of ``generation`` holds its lock."""
    path = _writer_lock_path(out, generation)
    if not path.exists():
        return False
    probe = FileLock(path)
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return True
    probe.release()
    return False
