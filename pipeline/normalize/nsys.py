"""Nsight Systems ``.sqlite`` export (and ``.nsys-rep`` via ``nsys export``, ``nsys_rep``) -> normalized tables.

SQLite hands Arrow batches to us through ADBC (``sqlite_reader``), so no row passes through Python. The kernels
and runtime calls are read as stored and joined over each batch in Arrow (``nsys_raw``: names from
``StringIds``, the launching thread from the runtime table); where an export cannot be read that way,
one SQL query per table does the joins in sqlite (``nsys_sql``; the NVTX ranges' here). nsys changes its schema
between versions; every query is built from the columns the file actually has (``PRAGMA table_info``), so an
older export simply yields nulls where it lacks a column.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa

from pipeline.errors import BadInputError
from pipeline.lean import ARROW_THREADS_ENV, cores, jemalloc_pool, size_arrow_pool
from pipeline.normalize import nsys_map, nsys_raw
from pipeline.normalize.nesting import with_nesting
from pipeline.normalize.nsys_sql import (
    KERNEL_TABLE,
    PID,
    TID,
    api_calls_sql,
    devices_sql,
    graph_launches_sql,
    graph_nodes_sql,
    kernels_sql,
    memcpy_sql,
    memset_sql,
    name_sql,
    whole_graph_warning,
)
from pipeline.normalize.op_ranges import split_op_ranges
from pipeline.normalize.ranks import nsys_capture_ranks
from pipeline.normalize.source import local_file
from pipeline.normalize.sqlite_reader import Sqlite
from pipeline.store import TraceWriter

T = TypeVar("T")

#: From this many kernels on (and with 2+ cores, outside a worker pool), a child process reads and writes
#: the kernels while this one does every other table: the kernel table is the largest part. The child is a
#: fresh interpreter (~0.9 CPU-s of start and imports on a loaded 2-core VM), about half what 1M kernels cost
#: (~2.1 CPU-s): below that it would cost more CPU than the overlap saves in wall time.
PARALLEL_MIN_KERNELS = 1_000_000
#: From this many rows on (and with 2+ cores, outside a worker pool), the kernels and the runtime calls of a
#: smaller export are each read and written by a thread of this process, on a connection of its own, while
#: this thread writes the other tables: ADBC lets go of the GIL while sqlite steps through rows, Arrow while
#: it converts and Parquet while it encodes, so the tables' reads overlap: on the GPU host's 231k-kernel GPT
#: export `run` took 0.80x the wall at the same CPU, 0.89x on a 2-core VM (benchmarks/results/normalize_threads_44.txt).
THREAD_MIN_ROWS = 50_000
#: Threads reading the kernel table in that child (:meth:`Sqlite.chunked_batches`): this process reads its
#: tables meanwhile, and the child runs on alone once it is done.
KERNEL_READERS = 2
# NVTX event types (ENUM_NSYS_EVENT_TYPE): 59/70 push-pop, 60/71 start-end, 34 mark, 75 domain create.
PUSH_POP, START_END, MARK, DOMAIN_CREATE = (59, 70), (60, 71), 34, 75


def _nvtx_text(db: Sqlite) -> str:
    t = "NVTX_EVENTS"
    inline = db.col(t, "n", "text")
    by_id = name_sql(db, t, "n", "textId")
    return f"coalesce({inline}, {by_id})" if by_id != "NULL" else inline


def _nvtx_domain(db: Sqlite) -> str:
    if "domainId" not in db.columns("NVTX_EVENTS"):
        return "NULL"
    return (
        "(SELECT coalesce(d.text, " + _nvtx_text(db).replace("n.", "d.") + ") FROM NVTX_EVENTS d "
        f"WHERE d.eventType = {DOMAIN_CREATE} AND d.domainId = n.domainId AND n.domainId <> 0 LIMIT 1)"
    )


def nvtx_ranges_sql(db: Sqlite) -> str | None:
    if "NVTX_EVENTS" not in db.usable:
        return None
    c = lambda name: db.col("NVTX_EVENTS", "n", name)  # noqa: E731
    end_tid = TID.format(col="n.endGlobalTid") if "endGlobalTid" in db.columns("NVTX_EVENTS") else "NULL"
    kinds = ", ".join(map(str, PUSH_POP + START_END))
    # A range stored without an end (none seen: nsys 2025.3 ends even one the capture stopped inside, at the stop)
    # lasts to the last NVTX timestamp, as nsys's own reports read it (nvtx_kern_sum, nvtx_sum: ifnull(end,
    # max(max(start), max(end)) of NVTX_EVENTS)).
    end = 'coalesce(n."end", (SELECT max(max(start), max("end")) FROM NVTX_EVENTS))'
    return f"""
    SELECT row_number() OVER (ORDER BY n.start, {end} DESC, n.rowid) - 1 AS range_id,
           CASE WHEN n.eventType IN {PUSH_POP} THEN 'push_pop' ELSE 'start_end' END AS kind,
           'nvtx' AS source, {_nvtx_domain(db)} AS domain, {_nvtx_text(db)} AS text,
           {c("category")} AS category, {c("color")} AS color,
           n.start AS start_ns, {end} AS end_ns, {end} - n.start AS duration_ns,
           {PID.format(col="n.globalTid")} AS pid, {TID.format(col="n.globalTid")} AS tid,
           coalesce({end_tid}, {TID.format(col="n.globalTid")}) AS end_tid
    FROM NVTX_EVENTS n
    WHERE n.eventType IN ({kinds})
    ORDER BY n.start, {end} DESC, n.rowid
    """


def nvtx_marks_sql(db: Sqlite) -> str | None:
    if "NVTX_EVENTS" not in db.usable:
        return None
    return f"""
    SELECT row_number() OVER (ORDER BY n.start) - 1 AS mark_id, {_nvtx_domain(db)} AS domain,
           {_nvtx_text(db)} AS text, n.start AS ts_ns,
           {PID.format(col="n.globalTid")} AS pid, {TID.format(col="n.globalTid")} AS tid
    FROM NVTX_EVENTS n WHERE n.eventType = {MARK} ORDER BY n.start
    """


def threads_sql(db: Sqlite) -> str | None:
    """ThreadNames: each named thread (a thread renamed keeps a row per name)."""
    t = "ThreadNames"
    if t not in db.tables or not {"nameId", "globalTid"} <= db.columns(t):
        return None
    return f"""
    SELECT DISTINCT {PID.format(col="t.globalTid")} AS pid, {TID.format(col="t.globalTid")} AS tid,
           {name_sql(db, t, "t", "nameId")} AS name
    FROM {t} t ORDER BY pid, tid, name
    """


def _meta_value(db: Sqlite, table: str, key: str) -> str | None:
    table = db.table(table)
    if table is None or not {"name", "value"} <= db.columns(table):
        return None
    vals = db.column(f"SELECT value FROM {table} WHERE name = '{key}'")
    return str(vals[0]) if vals else None


def _session_start(db: Sqlite, col: str) -> object:
    t = "TARGET_INFO_SESSION_START_TIME"
    if t not in db.tables or col not in db.columns(t):
        return None
    vals = db.column(f"SELECT {col} FROM {t}")
    return vals[0] if vals else None


def read_meta(db: Sqlite) -> dict[str, object]:
    version = _meta_value(db, "META_DATA_EXPORT", "EXPORT_PRODUCT_VERSION")
    schema = _meta_value(db, "META_DATA_EXPORT", "EXPORT_SCHEMA_VERSION")
    return {
        "source_format": "nsys-sqlite",
        "source_version": f"nsys {version}; export schema {schema}" if version else None,
        "capture_time_utc": _session_start(db, "utcTime"),
        "epoch_offset_ns": _session_start(db, "utcEpochNs"),
        "host": _meta_value(db, "META_DATA_EXPORT", "EXPORT_HOST"),
        **nsys_capture_ranks(db),  # rank/local_rank from the profiled process's env or arguments
    }


def _usable_tables(db: Sqlite) -> list[str]:
    """Set ``db.usable``: the tables that have the columns their rows need (``nsys_map.REQUIRED``); return
    a warning for each table left out.  A kernel table without the columns its rows need is a bad-input error."""
    warnings, usable = [], set()
    for table, cols in nsys_map.REQUIRED.items():
        if table not in db.tables:
            continue
        missing = [c for c in cols if c not in db.columns(table)]
        if not missing:
            usable.add(table)
        elif table == KERNEL_TABLE:
            raise BadInputError(db.shown, f"table {table} lacks required column(s) {', '.join(missing)}")
        else:
            warnings.append(f"table {table} lacks column(s) {', '.join(missing)}: left out")
    db.usable = usable
    if KERNEL_TABLE in db.tables and "StringIds" not in db.tables and db.has(KERNEL_TABLE, "demangledName"):
        ids = db.column(f"SELECT count(*) FROM {KERNEL_TABLE} WHERE typeof(demangledName) = 'integer'")
        if ids[0]:
            raise BadInputError(db.shown, "kernel names are StringIds ids but the StringIds table is missing")
    return warnings


#: An nvprof database read as an export would lose kernels (nvprof keeps them in CONCURRENT_KERNEL, their names in
#: StringTable, its calls' threads in other columns): 7 of 10 real ones came out with no kernel, one with numbers
#: for names.
NVPROF = (
    "an nvprof database (`nvprof -o`: tables StringTable and Version), not an Nsight Systems export, and its layout "
    "is not read; record with Nsight Systems (`nsys profile -t cuda,nvtx -o REPORT COMMAND`, then `nsys export "
    "--type sqlite REPORT.nsys-rep`) or torch.profiler"
)


def _no_kernels(db: Sqlite) -> list[str]:
    """The warning for an export whose capture recorded no CUDA kernel (nsys writes no kernel table then), saying
    which it is: CUDA not traced; CUDA traced and no CUDA call made; CUDA calls, no kernel launched; kernels launched
    but their GPU activity not recorded (seen in real exports that traced thousands of cudaLaunchKernel calls)."""
    if KERNEL_TABLE in db.tables:
        return []
    first = f"no {KERNEL_TABLE} table: "
    traced = [t for t in nsys_raw.LAUNCH_TABLES if t in db.tables]
    if not traced:
        asked = _cuda_trace_asked(db)
        if asked:
            return [
                first + "the capture traced CUDA but recorded no CUDA API call: the profiled process made none "
                "(profile the process that runs the model on the GPU; a launcher or a CPU-only run calls none)"
            ]
        if asked is None:
            return [
                first + "the capture recorded no CUDA API call: CUDA was not traced (record with `nsys profile "
                "-t cuda`) or the profiled process made none"
            ]
        return [first + "the capture did not trace CUDA (record with `nsys profile -t cuda`)"]
    calls = sum(db.column(f"SELECT count(*) FROM {t}")[0] for t in traced)
    launches = _launch_calls(db, traced)
    if not launches:
        return [first + f"the capture traced {calls:,} CUDA API calls and no kernel launch: no GPU work to attribute"]
    return [
        first + f"the capture traced {launches:,} kernel launch call{'s' * (launches != 1)} but none of the kernels on "
        "the GPU (its CUDA API was traced, its GPU activity was not): no GPU work to attribute"
    ]


def _cuda_trace_asked(db: Sqlite) -> bool | None:
    """Whether the capture was asked to trace CUDA (``nsys_map.CUDA_TRACED``); None where the export does not say."""
    table, name, value = nsys_map.CUDA_TRACED
    if table not in db.tables:
        return None
    return bool(db.column(f"SELECT count(*) FROM {table} WHERE name = '{name}' AND value = '{value}'")[0])


def _launch_calls(db: Sqlite, tables: list[str]) -> int:
    """Calls among ``tables`` (runtime, driver) named as launches (``nsys_map.LAUNCH_CALLS``); 0 where the names
    cannot be read (no ``nameId`` or no StringIds)."""
    if "StringIds" not in db.tables:
        return 0
    like = " OR ".join(f"s.value LIKE '{p}'" for p in nsys_map.LAUNCH_CALLS)
    return sum(
        db.column(f"SELECT count(*) FROM {t} c JOIN StringIds s ON s.id = c.nameId WHERE {like}")[0]
        for t in tables
        if db.has(t, "nameId")
    )


def _missing_columns(db: Sqlite) -> list[str]:
    """One warning naming every column read but absent (its values are null), if any."""
    if not db.missing:
        return []
    names = ", ".join(f"{t}.{c}" for t, c in sorted(db.missing))
    return [f"columns this export does not have, left null: {names}"]


def _unended_ranges(db: Sqlite) -> list[str]:
    """Ranges stored with a NULL end, which nsys's own reports allow for; such a range lasts to the last NVTX
    timestamp (:func:`nvtx_ranges_sql`). No real export seen has one: nsys 2025.3 ends a range still open when the
    program ends (sample_traces/h100_nvtx_left_open) and one the capture stopped inside (h100_nvtx_capture_range)."""
    if "NVTX_EVENTS" not in db.usable:
        return []
    kinds = ", ".join(map(str, PUSH_POP + START_END))
    n = db.column(f'SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN ({kinds}) AND "end" IS NULL')[0]
    said = "each lasts to the last NVTX timestamp, as nsys's own reports read them"
    return [f"{n} NVTX range(s) stored without an end: {said}"] if n else []


class _OutOfOrder(Exception):
    """A table's stored rows are not in (start, correlation id) order."""


def _numbered_in_order(batches: Iterable[pa.RecordBatch], id_col: str) -> Iterator[pa.Table]:
    """``batches`` read in stored order with ``id_col`` numbered 0, 1, ...; raises :class:`_OutOfOrder` at the
    first row that breaks (start_ns, correlation_id) order. nsys exports store kernels and runtime calls sorted
    by start (every capture in sample_traces/), so sqlite's sort of the wide rows is not needed: 1M kernels
    4.9 -> 3.2 CPU-s in sqlite."""
    n, last = 0, None
    for batch in batches:
        start, corr = batch.column("start_ns"), batch.column("correlation_id")
        if start.null_count or corr.null_count:
            raise _OutOfOrder
        s, c = start.to_numpy(), corr.to_numpy()
        if len(s):
            if last is not None and (s[0] < last[0] or (s[0] == last[0] and c[0] < last[1])):
                raise _OutOfOrder
            if not ((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (c[1:] >= c[:-1]))).all():
                raise _OutOfOrder
            last = (s[-1], c[-1])
        ids = pa.array(np.arange(n, n + len(s), dtype=np.int64))
        n += len(s)
        yield pa.Table.from_batches([batch]).set_column(batch.schema.get_field_index(id_col), id_col, ids)


def _write_in_order(
    writer: TraceWriter,
    table: str,
    id_col: str,
    db: Sqlite,
    stored: list[Callable[[], Iterable[pa.RecordBatch]]],
    sorted_sql: str | None,
) -> None:
    """``table`` numbered in (start, correlation id) order: read as stored when that is the order (the usual
    case) from the first of the ``stored`` readers that can read this export, else (at the first row out of
    order) again, sorted by sqlite."""
    for source in stored:
        try:
            writer.write_batches(table, _numbered_in_order(source(), id_col))
            return
        except nsys_raw.NotRaw:
            continue  # the next reader (the SQL) can
        except _OutOfOrder:
            break
    if sorted_sql is not None:
        writer.write_batches(table, db.batches(sorted_sql))


def _stored_sql(db: Sqlite, sql: str | None) -> list[Callable[[], Iterable[pa.RecordBatch]]]:
    return [] if sql is None else [lambda: db.batches(sql)]


#: Whether kernels and runtime calls are read from raw columns and joined here (``nsys_raw``) before the
#: one-query SQL is tried; tests turn it off to compare the two.
RAW_READS = True


def _write_kernels(db: Sqlite, writer: TraceWriter, readers: int = 1) -> int:
    raw = [lambda: nsys_raw.kernel_batches(db, writer.counted, readers)] if RAW_READS else []
    stored = raw + _stored_sql(db, kernels_sql(db, True))
    _write_in_order(writer, "kernels", "kernel_id", db, stored, kernels_sql(db))
    return writer.rows["kernels"]


class StagedWriter(TraceWriter):
    """Another process's writer, seen from a child that writes one of its tables into the same staging folder.
    The parent holds the generation's lock and commits; the child only adds a file."""

    def __init__(self, out: Path, trace_id: str, staging: Path) -> None:
        self.out, self.trace_id, self.staging, self.rows, self.counted = Path(out), trace_id, Path(staging), {}, {}
        self._lock = None


def _on_own_connection(path: Path, shown: Path, write: Callable[[Sqlite], T]) -> T:
    """``write(db)`` on a sqlite connection of its own to the export at ``path`` (a child's, a thread's)."""
    own = Sqlite(path, shown)
    try:
        _usable_tables(own)
        return write(own)
    finally:
        own.close()


def write_kernels_in(path: Path, shown: Path, writer: TraceWriter) -> int:
    """The kernels of the export at ``path`` written by ``writer``, from a connection of its own."""
    return _on_own_connection(path, shown, lambda db: _write_kernels(db, writer, KERNEL_READERS))


def _in_thread(fn: Callable[..., object], *args: object) -> Callable[[], None]:
    """``fn(*args)`` started on a thread of its own; returns what waits for it (and raises what it raised)."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tracepipe-normalize")
    try:
        done = pool.submit(fn, *args)
    finally:
        pool.shutdown(wait=False)

    def wait() -> None:
        done.result()

    return wait


def _side_work_allowed() -> bool:
    """Whether a table may be written beside this thread: 2+ cores, and not inside a worker process
    (normalize --jobs, a Dask worker), whose siblings already use the other cores."""
    return cores() > 1 and multiprocessing.parent_process() is None


def _wait_all(waits: list[Callable[[], None]]) -> None:
    """Wait for every one of ``waits`` (none left writing into the generation), then raise the first failure."""
    failures = []
    for wait in waits:
        try:
            wait()
        except BaseException as e:  # re-raised below, once all are done
            failures.append(e)
    if failures:
        raise failures[0]


def _child_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pipeline.normalize.nsys_kernels", *args]


def _kernels_writer(db: Sqlite, path: Path, shown: Path, writer: TraceWriter) -> Callable[[], None]:
    """Start writing the kernels table; returns what waits for it to be written. Large exports on a machine
    with 2+ cores: in a child process with its own sqlite connections, while this process writes the other
    tables; mid-size ones (:data:`THREAD_MIN_ROWS`): on a thread of this process; else right here. (ADBC lets
    go of the GIL while sqlite steps through rows, and the child reads with :data:`KERNEL_READERS` threads, but
    the Arrow and numpy work on each batch holds it: on a large export a thread of this process would take turns
    with the other tables' own work for long; a child has a GIL of its own.)

    The child is a fresh interpreter (``python -m pipeline.normalize.nsys_kernels``), not a fork: importing
    pyarrow alone starts native threads (jemalloc's background thread, Arrow's), which ``threading`` does not
    see, and a fork copies only the calling thread, so a lock one of them held would stay held in the child."""
    count = db.column(f"SELECT max(rowid) FROM {KERNEL_TABLE}")[0] or 0
    threads = size_arrow_pool(count)  # this process's Arrow pool, and the child's below (lean.size_arrow_pool)
    if count < min(THREAD_MIN_ROWS, PARALLEL_MIN_KERNELS) or not _side_work_allowed():
        _write_kernels(db, writer)
        return lambda: None
    kernels_sql(db)  # the columns it lacks go into this process's warning, as when it writes them itself
    if count < PARALLEL_MIN_KERNELS:
        return _in_thread(write_kernels_in, path, shown, writer)
    env = {k: v for k, v in os.environ.items() if k != "TRACEPIPE_KILL_AT"}  # the crash points are ours
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the modules this process imports
    env[ARROW_THREADS_ENV] = str(threads)
    args = [str(path), str(shown), str(writer.out), writer.trace_id, str(writer.staging)]
    proc = subprocess.Popen(
        _child_command(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )

    def wait() -> None:
        out, err = proc.communicate()
        try:
            kind, value = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            said = (err.strip().splitlines() or ["(nothing on stderr)"])[-1]
            kind, value = "error", f"the process writing the kernels exited {proc.returncode}: {said}"
        if kind == "bad":
            raise BadInputError(shown, value)
        if kind == "error":
            raise RuntimeError(f"writing the kernels of {shown}: {value}")
        writer.rows["kernels"], counted = value
        writer.counted.update(counted)

    return wait


def normalize_sqlite(path: Path, writer: TraceWriter, shown: Path | None = None) -> dict[str, object]:
    with jemalloc_pool():  # less held than with mimalloc (lean.jemalloc_pool)
        return _normalize_sqlite(path, writer, shown)


def _normalize_sqlite(path: Path, writer: TraceWriter, shown: Path | None = None) -> dict[str, object]:
    shown = shown or path
    with local_file(path, ".sqlite") as plain:
        db = Sqlite(plain, shown)
        try:
            if db.tables >= nsys_map.NVPROF_TABLES and "StringIds" not in db.tables:
                raise BadInputError(shown, NVPROF)
            if not any(t.startswith(nsys_map.NSYS_TABLE_PREFIXES) for t in db.tables):
                raise BadInputError(
                    shown,
                    "an SQLite database but no Nsight Systems export: none of nsys's tables (CUPTI_ACTIVITY_KIND_*, "
                    "NVTX_EVENTS, TARGET_INFO_*) is in it; export the capture with `nsys export --type sqlite`",
                )
            warnings = _usable_tables(db) + _unended_ranges(db) + whole_graph_warning(db) + _no_kernels(db)
            # An export without kernels (an idle rank, a capture without -t cuda) is still a trace: its calls,
            # ranges and copies are normalized and its kernels table left out, as a chrome trace without kernel
            # events is, so one such rank does not stop a whole job's analysis.
            waits = [_kernels_writer(db, plain, shown, writer)] if KERNEL_TABLE in db.tables else []
            try:
                waits.append(_api_calls_writer(db, plain, shown, writer))
                _write_other_tables(db, writer)
            except BaseException:
                with contextlib.suppress(BaseException):
                    _wait_all(waits)  # the child and threads are done (or dead) before the generation is removed
                raise
            _wait_all(waits)
            meta = read_meta(db)
            return {**meta, "warnings": warnings + _missing_columns(db)}
        finally:
            db.close()


def _write_api_calls(db: Sqlite, writer: TraceWriter) -> None:
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in db.usable or "CUPTI_ACTIVITY_KIND_DRIVER" in db.usable:
        stored_sql = api_calls_sql(db, True)  # None when a driver table is there too
        raw = [lambda: nsys_raw.api_call_batches(db)] if RAW_READS and stored_sql is not None else []
        _write_in_order(writer, "api_calls", "call_id", db, raw + _stored_sql(db, stored_sql), api_calls_sql(db))


def write_api_calls_in(path: Path, shown: Path, writer: TraceWriter) -> None:
    """The runtime and driver calls of the export at ``path`` written by ``writer``, from a connection of its own."""
    _on_own_connection(path, shown, lambda db: _write_api_calls(db, writer))


def _api_calls_writer(db: Sqlite, path: Path, shown: Path, writer: TraceWriter) -> Callable[[], None]:
    """Start writing the api_calls table: on a thread of its own from :data:`THREAD_MIN_ROWS` runtime calls
    on (as the kernels), else right here; returns what waits for it to be written."""
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    count = (db.column(f"SELECT max(rowid) FROM {table}")[0] or 0) if table in db.usable else 0
    if count < THREAD_MIN_ROWS or not _side_work_allowed():
        _write_api_calls(db, writer)
        return lambda: None
    api_calls_sql(db, True)  # the columns they lack go into this process's warning
    api_calls_sql(db)
    return _in_thread(write_api_calls_in, path, shown, writer)


def _write_other_tables(db: Sqlite, writer: TraceWriter) -> None:
    """Every table but the kernels and the API calls."""
    for table, sql in (
        ("nvtx_marks", nvtx_marks_sql(db)),
        ("memcpy", memcpy_sql(db)),
        ("memset", memset_sql(db)),
        ("devices", devices_sql(db)),
        ("graph_nodes", graph_nodes_sql(db)),
        ("graph_launches", graph_launches_sql(db)),
        ("threads", threads_sql(db)),
    ):
        if sql is not None:
            writer.write_batches(table, db.batches(sql))
    ranges_sql = nvtx_ranges_sql(db)
    if ranges_sql is not None:
        ranges, ops = split_op_ranges(db.arrow(ranges_sql))  # emit_nvtx op ranges are ops, not layers
        writer.write("nvtx_ranges", with_nesting(ranges))
        if ops is not None:
            writer.write("ops", ops)


def find_nsys() -> str | None:
    """nsys from PATH, else the copy that ships inside an Nsight Compute install."""
    found = shutil.which("nsys")
    if found:
        return found
    for root in (Path("/opt/nvidia"), Path("/usr/local/cuda")):
        if root.is_dir():
            for cand in sorted(root.glob("**/target-linux-x64/nsys"), reverse=True):
                if cand.is_file():
                    return str(cand)
    return None
