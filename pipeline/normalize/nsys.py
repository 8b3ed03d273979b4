"""Nsight Systems ``.sqlite`` export (and ``.nsys-rep`` via ``nsys export``) -> normalized tables.

SQLite hands Arrow batches to us through ADBC, so no row passes through Python. The kernels and
runtime calls are read as stored and joined over each batch in Arrow (``nsys_raw``: names from
``StringIds``, the launching thread from the runtime table); where an export cannot be read that way,
one SQL query per table does the joins in sqlite. nsys changes its schema between versions; every
query is built from the columns the file actually has (``PRAGMA table_info``), so an older export
simply yields nulls where it lacks a column.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import json
import multiprocessing
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import adbc_driver_manager as adbc
import adbc_driver_sqlite as adbc_sqlite
import numpy as np
import pyarrow as pa

from pipeline.errors import BadInputError
from pipeline.normalize import forked, nsys_map, nsys_raw
from pipeline.normalize.nesting import with_nesting
from pipeline.normalize.op_ranges import split_op_ranges
from pipeline.normalize.ranks import nsys_capture_ranks
from pipeline.normalize.source import SQLITE_MAGIC, local_file
from pipeline.store import TraceWriter

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
#: Rows per Arrow batch read from sqlite, and so per Parquet row group written.
BATCH_ROWS = 65536
#: Rows of a table (by rowid) one reader thread of :meth:`Sqlite.chunked_batches` reads at a time, and the
#: most chunks it splits a table into (rowids far sparser than 1..n make each chunk span more of them).
CHUNK_ROWS = 4 * BATCH_ROWS
MAX_CHUNKS = 1024
LAUNCH_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
#: From this many kernels on (and with 2+ cores, outside a worker pool), a child process reads and writes
#: the kernels while this one does every other table: the kernel table is the largest part. The child is a
#: fresh interpreter (~0.9 CPU-s of start and imports on a loaded 2-core VM), about half what 1M kernels cost
#: (~2.1 CPU-s): below that it would cost more CPU than the overlap saves in wall time.
PARALLEL_MIN_KERNELS = 1_000_000
#: Threads reading the kernel table in that child (:meth:`Sqlite.chunked_batches`): this process reads its
#: tables meanwhile, and the child runs on alone once it is done.
KERNEL_READERS = 2
# NVTX event types (ENUM_NSYS_EVENT_TYPE): 59/70 push-pop, 60/71 start-end, 34 mark, 75 domain create.
PUSH_POP, START_END, MARK, DOMAIN_CREATE = (59, 70), (60, 71), 34, 75
# globalTid = (pid << 24) | tid, with the vm id above; see the nsys export docs.
PID = "(({col} >> 24) & 16777215)"
TID = "({col} & 16777215)"


class Sqlite:
    """A read-only ADBC connection that knows which tables and columns exist.

    ADBC's own statements, not its DB-API layer: importing ``adbc_driver_manager.dbapi`` imports
    ``pyarrow.dataset``, pandas and polars (0.38 CPU-s per process here), and nothing here needs them."""

    def __init__(self, path: Path, shown: Path) -> None:
        self.shown = shown
        _check_not_truncated(path, shown)
        self.db = self.conn = None
        #: Statements not yet closed: a reader left half read (an error raised mid-table, whose traceback keeps
        #: the generator alive) still holds one, and ADBC will not close a connection while one is open.
        self._open: list[adbc.AdbcStatement] = []
        try:
            # A URI: the path quoted, so '?', '#' or '%' in it are not read as URI syntax.
            self.db = adbc_sqlite.connect(f"file:{urllib.parse.quote(str(path))}?mode=ro")
            self.conn = adbc.AdbcConnection(self.db)
            self.tables = set(self.column("SELECT name FROM sqlite_master WHERE type = 'table'"))
        except adbc.Error as e:
            self.close()
            raise BadInputError(shown, f"not a readable sqlite database ({_first_line(e)})") from e
        self._cols: dict[str, set[str]] = {}
        #: (table, column) read but absent from this export: left null, said once in a warning.
        self.missing: set[tuple[str, str]] = set()
        #: tables with the columns their rows need (set by ``_usable_tables``).
        self.usable: set[str] = set()

    def table(self, name: str) -> str | None:
        """The name ``name`` has in this export (``nsys_map.TABLES`` lists renamings), None if absent."""
        return next((t for t in nsys_map.TABLES.get(name, (name,)) if t in self.tables), None)

    def columns(self, table: str) -> set[str]:
        if table not in self._cols:
            self._cols[table] = set(self.column(f"SELECT name FROM pragma_table_info('{table}')"))
        return self._cols[table]

    def column(self, sql: str) -> list:
        return self.arrow(sql).column(0).to_pylist()

    def arrow(self, sql: str) -> pa.Table:
        """The whole result; an empty one keeps its columns (typed int64 where sqlite cannot tell)."""
        stmt = self._statement()
        try:
            return self._reader(stmt, sql).read_all()
        except adbc.Error as e:
            raise BadInputError(self.shown, f"sqlite query failed ({_first_line(e)})") from e
        finally:
            self._close(stmt)

    def batches(self, sql: str) -> Iterator[pa.RecordBatch]:
        stmt, reader = self._statement(), None
        try:
            reader = self._batched_reader(stmt, sql)
            yield from reader
        except adbc.Error as e:
            raise BadInputError(self.shown, f"sqlite query failed ({_first_line(e)})") from e
        finally:
            if reader is not None:  # a reader left half read (the caller stopped early) goes first
                reader.close()
            self._close(stmt)

    def chunked_batches(self, table: str, select: str, readers: int) -> Iterator[pa.RecordBatch]:
        """``SELECT select FROM table ORDER BY rowid`` as :meth:`batches` gives it, read by ``readers`` threads,
        each on a connection of its own, :data:`CHUNK_ROWS` rowids at a time; batches come in rowid order.

        ADBC's sqlite driver lets go of the GIL while it steps through rows, so the readers decode rows side by
        side while the caller works on the batches already read (the 10M-kernel export: the kernel table's
        columns read in ~6 s by one thread, ~3 s by two, benchmarks/results/sqlite_threads_10m.txt). At most
        ``readers + 2`` chunks are held at once (the one the caller is given and those read ahead; ~40 MB each
        for the kernel table's columns). Each chunk's column types are inferred from its own rows, as every
        batch's may be."""
        whole = f"SELECT {select} FROM {table} ORDER BY rowid"
        if readers < 2:
            yield from self.batches(whole)
            return
        first, last = self.arrow(f"SELECT min(rowid), max(rowid) FROM {table}").to_pylist()[0].values()
        if last is None or last - first < CHUNK_ROWS:
            yield from self.batches(whole)
            return
        # nsys numbers rows 1..n; a file with far sparser rowids still makes at most ~MAX_CHUNKS queries
        step = max(CHUNK_ROWS, (int(last) - int(first)) // MAX_CHUNKS + 1)
        local, conns, lock = threading.local(), [], threading.Lock()

        def read(lo: int) -> list[pa.RecordBatch]:
            if not hasattr(local, "conn"):
                local.conn = adbc.AdbcConnection(self.db)
                with lock:
                    conns.append(local.conn)
            stmt, reader = adbc.AdbcStatement(local.conn), None
            try:
                where = f"rowid > {lo:d} AND rowid <= {lo + step:d}"
                reader = self._batched_reader(stmt, f"SELECT {select} FROM {table} WHERE {where} ORDER BY rowid")
                return list(reader)
            finally:
                if reader is not None:
                    reader.close()
                stmt.close()

        pool = concurrent.futures.ThreadPoolExecutor(readers, thread_name_prefix="tracepipe-sqlite")
        ahead: collections.deque[concurrent.futures.Future] = collections.deque()
        starts = iter(range(int(first) - 1, int(last), step))
        try:
            for lo in itertools.islice(starts, readers + 1):
                ahead.append(pool.submit(read, lo))
            while ahead:
                batches = ahead.popleft().result()
                if (lo := next(starts, None)) is not None:
                    ahead.append(pool.submit(read, lo))
                yield from batches
        except adbc.Error as e:
            raise BadInputError(self.shown, f"sqlite query failed ({_first_line(e)})") from e
        finally:
            for f in ahead:
                f.cancel()
            pool.shutdown(wait=True)
            for conn in conns:
                with contextlib.suppress(adbc.Error):
                    conn.close()

    def _statement(self) -> adbc.AdbcStatement:
        stmt = adbc.AdbcStatement(self.conn)
        self._open.append(stmt)
        return stmt

    def _close(self, stmt: adbc.AdbcStatement) -> None:
        if stmt in self._open:
            self._open.remove(stmt)
            stmt.close()

    @classmethod
    def _batched_reader(cls, stmt: adbc.AdbcStatement, sql: str) -> pa.RecordBatchReader:
        """:meth:`_reader` in batches of :data:`BATCH_ROWS` rows. ADBC's default of 1024 rows per batch made as many
        Parquet row groups, each conformed and compressed on its own (and read back one by one): with 64k rows,
        normalizing the 231k-kernel H200 training trace took 2.9-4.3 instead of 4.2-4.9 CPU-s on a 2-core machine."""
        stmt.set_options(**{adbc_sqlite.StatementOptions.BATCH_ROWS.value: str(BATCH_ROWS)})
        return cls._reader(stmt, sql)

    @staticmethod
    def _reader(stmt: adbc.AdbcStatement, sql: str) -> pa.RecordBatchReader:
        """The result of ``sql`` as an Arrow stream (a read error of a later row raises OSError from it)."""
        stmt.set_sql_query(sql)
        stream, _ = stmt.execute_query()
        return pa.RecordBatchReader._import_from_c(stream.address)

    def col(self, table: str, alias: str, name: str, default: str = "NULL") -> str:
        if name in self.columns(table):
            return f"{alias}.{name}"
        if (table, name) not in nsys_map.ADDED_LATER:
            self.missing.add((table, name))
        return default

    def has(self, table: str, *names: str) -> bool:
        """Whether ``table`` has every column in ``names`` (a missing one is noted for the warning)."""
        return all([self.col(table, "", n, "") != "" for n in names])

    def close(self) -> None:
        for stmt in list(self._open):
            with contextlib.suppress(adbc.Error, RuntimeError):  # its stream's own error was already raised
                self._close(stmt)
        for handle in (self.conn, self.db):
            if handle is not None:
                handle.close()
        self.db = self.conn = None


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _check_not_truncated(path: Path, shown: Path) -> None:
    """SQLite's header records the page size and count; a shorter file lost its tail."""
    with open(path, "rb") as f:
        header = f.read(100)
    if not header.startswith(SQLITE_MAGIC):
        raise BadInputError(shown, "not an SQLite database (bad header)")
    if len(header) < 100:
        raise BadInputError(shown, "SQLite header is cut short (file truncated)")
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    pages = struct.unpack(">I", header[28:32])[0]
    size = path.stat().st_size
    if pages and size < page_size * pages:
        raise BadInputError(shown, f"SQLite file truncated: header says {page_size * pages} bytes, file has {size}")


def _name(db: Sqlite, table: str, alias: str, col: str) -> str:
    """A kernel/API name that is a StringIds id in new exports and inline text in old ones."""
    if col not in db.columns(table):
        return "NULL"
    if "StringIds" not in db.tables:
        return f"CAST({alias}.{col} AS TEXT)"
    return (
        f"CASE WHEN typeof({alias}.{col}) = 'integer' "
        f"THEN (SELECT value FROM StringIds WHERE id = {alias}.{col}) ELSE {alias}.{col} END"
    )


def _enum_label(db: Sqlite, enum: str, expr: str) -> str:
    """The label of enum value ``expr``: from the export's own enum table (any of its names), else from
    ``nsys_map.ENUMS``; a value neither knows stays as its number in text."""
    table = db.table(enum)
    if table is not None and "label" in db.columns(table):
        return f"coalesce((SELECT label FROM {table} WHERE id = {expr}), CAST({expr} AS TEXT))"
    values = ", ".join(f"({k}, '{v}')" for k, v in nsys_map.ENUMS[enum].items())
    return f"coalesce((SELECT column2 FROM (VALUES {values}) WHERE column1 = {expr}), CAST({expr} AS TEXT))"


def _launch_tables(db: Sqlite) -> list[str]:
    """The runtime/driver tables that can link kernels to a thread (present, with the columns needed)."""
    return [t for t in LAUNCH_TABLES if t in db.usable and db.has(t, "correlationId")]


def _launches_cte(db: Sqlite, per_process: bool = True) -> str:
    """The launching thread per correlation id, per process (correlation ids restart in each process);
    without ``per_process`` (kernels that do not record their process) per correlation id alone."""
    parts = [f"SELECT correlationId, globalTid FROM {t}" for t in _launch_tables(db)]
    if not parts:
        return "launches AS (SELECT NULL AS correlationId, NULL AS globalTid, NULL AS pid WHERE 0)"
    union = " UNION ALL ".join(parts)
    pid = PID.format(col="globalTid")
    by = f"correlationId, {pid}" if per_process else "correlationId"
    return (
        f"launches AS (SELECT correlationId, {PID.format(col='min(globalTid)')} AS pid, "
        f"min(globalTid) AS globalTid FROM ({union}) GROUP BY {by})"
    )


def kernels_sql(db: Sqlite, stored_order: bool = False) -> str:
    """The kernels, numbered and sorted by (start, correlation id); with ``stored_order`` in the order the
    export stores them and unnumbered (see :func:`_numbered_in_order`)."""
    t, k = KERNEL_TABLE, "k"
    c = lambda name, default="NULL": db.col(t, k, name, default)  # noqa: E731
    has_pid = db.has(t, "globalPid")
    pid = PID.format(col="k.globalPid") if has_pid else "l.pid"  # else: the launching thread's process
    same_process = f"AND l.pid = {pid}" if has_pid else ""
    has_type = db.has(t, "launchType")
    launch_type = _enum_label(db, "ENUM_CUDA_KERNEL_LAUNCH_TYPE", "k.launchType") if has_type else "NULL"
    corr = c("correlationId")
    number = "NULL" if stored_order else f"row_number() OVER (ORDER BY k.start, {corr}) - 1"
    order = "k.rowid" if stored_order else f"k.start, {corr}"
    return f"""
    WITH {_launches_cte(db, per_process=has_pid)}
    SELECT {number} AS kernel_id,
           {c("deviceId")} AS device_id, {c("contextId")} AS context_id, {c("streamId")} AS stream_id,
           {c("correlationId")} AS correlation_id,
           k.start AS start_ns, k."end" AS end_ns, k."end" - k.start AS duration_ns,
           coalesce({_name(db, t, k, "demangledName")}, {_name(db, t, k, "name")}) AS name,
           {_name(db, t, k, "shortName")} AS short_name,
           {c("gridX")} AS grid_x, {c("gridY")} AS grid_y, {c("gridZ")} AS grid_z,
           {c("blockX")} AS block_x, {c("blockY")} AS block_y, {c("blockZ")} AS block_z,
           {c("registersPerThread")} AS registers_per_thread,
           {c("staticSharedMemory")} AS static_smem_bytes, {c("dynamicSharedMemory")} AS dynamic_smem_bytes,
           {c("localMemoryPerThread")} AS local_mem_per_thread_bytes,
           {launch_type} AS launch_type,
           {c("graphId", _graph_of(db, t, "k"))} AS graph_id, {c("graphNodeId")} AS graph_node_id,
           {pid} AS pid, {TID.format(col="l.globalTid")} AS tid
    FROM {t} k
    LEFT JOIN launches l ON l.correlationId = {corr} {same_process}
    ORDER BY {order}
    """


def _graph_of(db: Sqlite, table: str, alias: str) -> str:
    """The graph of a node: nsys numbers graph nodes ``graphId << 32 | index`` (seen in nsys 2025.3 exports,
    whose CUDA_GRAPH_NODE_EVENTS and CUDA_GRAPH_EVENTS agree: exec graph 2's nodes are 2<<32 + k)."""
    return f"({alias}.graphNodeId >> 32)" if "graphNodeId" in db.columns(table) else "NULL"


def graph_nodes_sql(db: Sqlite) -> str | None:
    """CUDA_GRAPH_NODE_EVENTS: when and on which thread each graph node was made (a stream-captured node inside
    the launch call that made it; an instantiated node points at its original)."""
    t = "CUDA_GRAPH_NODE_EVENTS"
    if t not in db.tables or not {"graphNodeId", "start", "globalTid"} <= db.columns(t):
        return None
    return f"""
    SELECT n.graphNodeId AS graph_node_id, (n.graphNodeId >> 32) AS graph_id,
           {db.col(t, "n", "originalGraphNodeId")} AS original_graph_node_id, n.start AS created_ns,
           {PID.format(col="n.globalTid")} AS pid, {TID.format(col="n.globalTid")} AS tid
    FROM {t} n ORDER BY n.start
    """


def graph_launches_sql(db: Sqlite) -> str | None:
    """CUPTI_ACTIVITY_KIND_GRAPH_TRACE: whole-graph executions (nsys --cuda-graph-trace=graph), no kernels."""
    t = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    if t not in db.tables:
        return None
    c = lambda name: db.col(t, "g", name)  # noqa: E731
    return f"""
    SELECT row_number() OVER (ORDER BY g.start) - 1 AS launch_id, {c("deviceId")} AS device_id,
           {c("contextId")} AS context_id, {c("streamId")} AS stream_id, {c("correlationId")} AS correlation_id,
           g.start AS start_ns, g."end" AS end_ns, g."end" - g.start AS duration_ns,
           {c("graphId")} AS graph_id, {c("graphExecId")} AS graph_exec_id,
           {PID.format(col="g.globalPid") if "globalPid" in db.columns(t) else "NULL"} AS pid
    FROM {t} g ORDER BY g.start
    """


def _whole_graph_warning(db: Sqlite) -> list[str]:
    t = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    if t not in db.tables:
        return []
    n, ns = db.arrow(f'SELECT count(*), coalesce(sum("end" - start), 0) FROM {t}').to_pylist()[0].values()
    if not n:
        return []
    return [
        f"{n} CUDA graph launches ({ns} ns of GPU time) were recorded as whole graphs, without their kernels: "
        "they are in table graph_launches but on no layer; re-capture with `nsys profile "
        "--cuda-graph-trace=node` (tracepipe capture nsys does) to see each kernel"
    ]


def api_calls_sql(db: Sqlite, stored_order: bool = False) -> str | None:
    """Runtime and driver calls, numbered and sorted by (start, correlation id); with ``stored_order`` the
    runtime calls as stored, unnumbered (None when a driver table is there too: two tables need a sort)."""
    parts = []
    tables = [t for t in LAUNCH_TABLES if t in db.usable]
    if stored_order and tables != [LAUNCH_TABLES[0]]:
        return None
    for table, kind in zip(LAUNCH_TABLES, ("runtime", "driver"), strict=True):
        if table not in db.usable:
            continue
        c = lambda name, table=table: db.col(table, "r", name)  # noqa: E731
        name = _name(db, table, "r", "nameId") if "nameId" in db.columns(table) else _name(db, table, "r", "name")
        parts.append(f"""
        SELECT '{kind}' AS kind, {name} AS name, r.start AS start_ns, r."end" AS end_ns,
               r."end" - r.start AS duration_ns, {c("correlationId")} AS correlation_id,
               {c("returnValue")} AS return_value,
               {PID.format(col="r.globalTid")} AS pid, {TID.format(col="r.globalTid")} AS tid
        FROM {table} r""")
    if not parts:
        return None
    if stored_order:
        return f"SELECT NULL AS call_id, * FROM ({parts[0]} ORDER BY r.rowid)"
    return f"""SELECT row_number() OVER (ORDER BY start_ns, correlation_id) - 1 AS call_id, *
               FROM ({" UNION ALL ".join(parts)}) ORDER BY start_ns, correlation_id"""


def _nvtx_text(db: Sqlite) -> str:
    t = "NVTX_EVENTS"
    inline = db.col(t, "n", "text")
    by_id = _name(db, t, "n", "textId")
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
    return f"""
    SELECT row_number() OVER (ORDER BY n.start, n."end" DESC, n.rowid) - 1 AS range_id,
           CASE WHEN n.eventType IN {PUSH_POP} THEN 'push_pop' ELSE 'start_end' END AS kind,
           'nvtx' AS source, {_nvtx_domain(db)} AS domain, {_nvtx_text(db)} AS text,
           {c("category")} AS category, {c("color")} AS color,
           n.start AS start_ns, n."end" AS end_ns, n."end" - n.start AS duration_ns,
           {PID.format(col="n.globalTid")} AS pid, {TID.format(col="n.globalTid")} AS tid,
           coalesce({end_tid}, {TID.format(col="n.globalTid")}) AS end_tid
    FROM NVTX_EVENTS n
    WHERE n.eventType IN ({kinds}) AND n."end" IS NOT NULL
    ORDER BY n.start, n."end" DESC, n.rowid
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
           {_name(db, t, "t", "nameId")} AS name
    FROM {t} t ORDER BY pid, tid, name
    """


def memcpy_sql(db: Sqlite) -> str | None:
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if t not in db.usable:
        return None
    c = lambda name: db.col(t, "m", name)  # noqa: E731
    kind = lambda col: _enum_label(db, "ENUM_CUDA_MEM_KIND", f"m.{col}") if db.has(t, col) else "NULL"  # noqa: E731
    return f"""
    SELECT row_number() OVER (ORDER BY m.start) - 1 AS copy_id, {c("deviceId")} AS device_id,
           {c("contextId")} AS context_id, {c("streamId")} AS stream_id, {c("correlationId")} AS correlation_id,
           m.start AS start_ns, m."end" AS end_ns, m."end" - m.start AS duration_ns, {c("bytes")} AS bytes,
           {_enum_label(db, "ENUM_CUDA_MEMCPY_OPER", "m.copyKind") if db.has(t, "copyKind") else "NULL"} AS kind,
           {kind("srcKind")} AS src_kind, {kind("dstKind")} AS dst_kind, {c("graphNodeId")} AS graph_node_id,
           {PID.format(col="m.globalPid") if db.has(t, "globalPid") else "NULL"} AS pid
    FROM {t} m ORDER BY m.start
    """


def memset_sql(db: Sqlite) -> str | None:
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    if t not in db.usable:
        return None
    c = lambda name: db.col(t, "m", name)  # noqa: E731
    mem_kind = _enum_label(db, "ENUM_CUDA_MEM_KIND", "m.memKind") if db.has(t, "memKind") else "NULL"
    return f"""
    SELECT row_number() OVER (ORDER BY m.start) - 1 AS set_id, {c("deviceId")} AS device_id,
           {c("contextId")} AS context_id, {c("streamId")} AS stream_id, {c("correlationId")} AS correlation_id,
           m.start AS start_ns, m."end" AS end_ns, m."end" - m.start AS duration_ns, {c("bytes")} AS bytes,
           {c("value")} AS value, {mem_kind} AS mem_kind, {c("graphNodeId")} AS graph_node_id,
           {PID.format(col="m.globalPid") if db.has(t, "globalPid") else "NULL"} AS pid
    FROM {t} m ORDER BY m.start
    """


def devices_sql(db: Sqlite) -> str | None:
    """One row per GPU, each column from whichever layout's table and column holds it (``nsys_map``)."""
    gpu, cuda = nsys_map.GPU_TABLE, nsys_map.CUDA_GPU_TABLE
    have = {t: db.columns(t) for t in (gpu, cuda) if t in db.tables}
    if not have:
        return None
    alias = {gpu: "g", cuda: "c"}
    select = []
    for column, sources in nsys_map.DEVICE_COLUMNS.items():
        found = [f"{alias[t]}.{c}" for t, c in sources if c in have.get(t, ())]
        if found:
            select.append(f"{found[0] if len(found) == 1 else 'coalesce(' + ', '.join(found) + ')'} AS {column}")
    # The pre-2022 CUDA table has a row per GPU and process: one per GPU, joined on the device ordinal.
    cuda_rows = f"(SELECT * FROM {cuda} GROUP BY deviceId)"
    if gpu in have and cuda in have and "deviceId" in have[cuda]:
        key = next(f"g.{c}" for c in ("cuDevice", "deviceId", "id") if c in have[gpu])
        source = f"{gpu} g LEFT JOIN {cuda_rows} c ON c.deviceId = {key}"
    elif gpu in have:
        source = f"{gpu} g"
    else:
        source = f"{cuda_rows} c"
    inner = f"SELECT {', '.join(select)} FROM {source}"
    names = [s.rsplit(" AS ", 1)[1] for s in select]
    if "device_id" not in names:
        select.insert(0, "NULL AS device_id")
        inner = f"SELECT {', '.join(select)} FROM {source}"
    threads = "max_warps_per_sm * warp_size" if {"max_warps_per_sm", "warp_size"} <= set(names) else "NULL"
    return f"SELECT *, {threads} AS max_threads_per_sm FROM ({inner}) ORDER BY device_id"


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
    a warning for each table left out.  Without a usable kernel table nothing is: a bad-input error."""
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
    if "StringIds" not in db.tables and db.has(KERNEL_TABLE, "demangledName"):
        ids = db.column(f"SELECT count(*) FROM {KERNEL_TABLE} WHERE typeof(demangledName) = 'integer'")
        if ids[0]:
            raise BadInputError(db.shown, "kernel names are StringIds ids but the StringIds table is missing")
    return warnings


def _missing_columns(db: Sqlite) -> list[str]:
    """One warning naming every column read but absent (its values are null), if any."""
    if not db.missing:
        return []
    names = ", ".join(f"{t}.{c}" for t, c in sorted(db.missing))
    return [f"columns this export does not have, left null: {names}"]


def _unended_ranges(db: Sqlite) -> list[str]:
    """nsys stores a push without its pop (the capture stopped inside the range) with a NULL end."""
    if "NVTX_EVENTS" not in db.usable:
        return []
    kinds = ", ".join(map(str, PUSH_POP + START_END))
    n = db.column(f'SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN ({kinds}) AND "end" IS NULL')[0]
    return [f"{n} NVTX ranges never ended (push without pop, or start without end): dropped"] if n else []


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


def write_kernels_in(path: Path, shown: Path, writer: TraceWriter) -> int:
    """The kernels of the export at ``path`` written by ``writer``, from a connection of its own."""
    own = Sqlite(path, shown)
    try:
        _usable_tables(own)
        return _write_kernels(own, writer, KERNEL_READERS)
    finally:
        own.close()


def _child_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pipeline.normalize.nsys_kernels", *args]


def _kernels_writer(db: Sqlite, path: Path, shown: Path, writer: TraceWriter) -> Callable[[], None]:
    """Start writing the kernels table; returns what waits for it to be written. Large exports on a machine
    with 2+ cores: in a child process with its own sqlite connections, while this process writes the other
    tables; else right here. (ADBC lets go of the GIL while sqlite steps through rows, and the child reads with
    :data:`KERNEL_READERS` threads, but the Arrow and numpy work on each batch holds it: a thread of this
    process would take turns with the other tables' own work.)

    The child is a fresh interpreter (``python -m pipeline.normalize.nsys_kernels``), not a fork: importing
    pyarrow alone starts native threads (jemalloc's background thread, Arrow's), which ``threading`` does not
    see, and a fork copies only the calling thread, so a lock one of them held would stay held in the child."""
    count = db.column(f"SELECT max(rowid) FROM {KERNEL_TABLE}")[0] or 0
    # Not inside a worker process (normalize --jobs, a Dask worker): its siblings already use the other cores.
    parallel = forked.cores() > 1 and multiprocessing.parent_process() is None
    if count < PARALLEL_MIN_KERNELS or not parallel:
        _write_kernels(db, writer)
        return lambda: None
    kernels_sql(db)  # the columns it lacks go into this process's warning, as when it writes them itself
    env = {k: v for k, v in os.environ.items() if k != "TRACEPIPE_KILL_AT"}  # the crash points are ours
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the modules this process imports
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
    shown = shown or path
    with local_file(path, ".sqlite") as plain:
        db = Sqlite(plain, shown)
        try:
            if KERNEL_TABLE not in db.tables:
                raise BadInputError(
                    shown, f"no {KERNEL_TABLE} table: the capture has no CUDA kernels (was it run with -t cuda?)"
                )
            warnings = _usable_tables(db) + _unended_ranges(db) + _whole_graph_warning(db)
            kernels = _kernels_writer(db, plain, shown, writer)
            try:
                _write_other_tables(db, writer)
            except BaseException:
                with contextlib.suppress(Exception):
                    kernels()  # the child is done (or dead) before the generation is removed
                raise
            kernels()
            meta = read_meta(db)
            return {**meta, "warnings": warnings + _missing_columns(db)}
        finally:
            db.close()


def _write_other_tables(db: Sqlite, writer: TraceWriter) -> None:
    """Every table but the kernels."""
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in db.usable or "CUPTI_ACTIVITY_KIND_DRIVER" in db.usable:
        stored_sql = api_calls_sql(db, True)  # None when a driver table is there too
        raw = [lambda: nsys_raw.api_call_batches(db)] if RAW_READS and stored_sql is not None else []
        _write_in_order(writer, "api_calls", "call_id", db, raw + _stored_sql(db, stored_sql), api_calls_sql(db))
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


LIBDW_HINT = " (the importer needs libdw.so.1 and libelf.so.1 on LD_LIBRARY_PATH: see docs/capture.md)"


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


@contextmanager
def exported_sqlite(rep: Path) -> Iterator[Path]:
    """Convert a ``.nsys-rep`` to a temporary ``.sqlite`` with the nsys CLI."""
    nsys = find_nsys()
    if nsys is None:
        raise BadInputError(
            rep,
            "a .nsys-rep needs the nsys CLI to convert it (not found on PATH); "
            "run `nsys export --type sqlite` on the capture host and normalize the .sqlite",
        )
    with tempfile.TemporaryDirectory(prefix="tracepipe-nsys-") as tmp:
        out = Path(tmp) / "export.sqlite"
        proc = subprocess.run(
            [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out), str(rep)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not out.exists():
            msg = (proc.stderr or proc.stdout).strip().splitlines()
            hint = LIBDW_HINT if "libdw" in proc.stderr else ""
            raise BadInputError(rep, f"nsys export failed{hint}: {msg[-1] if msg else proc.returncode}")
        yield out


def normalize_rep(path: Path, writer: TraceWriter) -> dict[str, object]:
    with exported_sqlite(path) as sqlite:
        meta = normalize_sqlite(sqlite, writer, shown=path)
    meta["source_format"] = "nsys-rep"
    return meta
