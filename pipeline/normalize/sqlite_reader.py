"""The SQLite reader of nsys exports: a read-only ADBC connection handing Arrow batches over (no row passes
through Python), which knows the export's tables and columns, so that every query is built from what the file
has (``PRAGMA table_info``) and a column an older export lacks reads as NULL, said once in a warning.

``nsys``, ``nsys_raw`` and ``ranks`` read exports through it.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import struct
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_manager as adbc
import adbc_driver_sqlite as adbc_sqlite
import pyarrow as pa

from pipeline.errors import BadInputError
from pipeline.normalize import nsys_map
from pipeline.normalize.source import SQLITE_MAGIC

#: Rows per Arrow batch read from sqlite, and so per Parquet row group written.
BATCH_ROWS = 65536
#: Rows per batch of a whole result read at once (:meth:`Sqlite.arrow`): all of them in one. ADBC's sqlite driver
#: types each column from its first batch, a column NULL all through it as int64, and fails on a later string: a
#: real emit_nvtx training export, whose first CCCL-domain range came after 13,913 default-domain ones, stopped
#: normalize with "Type mismatch in column 3" (exit 1) at the default 1,024 rows. The driver grows its arrays as
#: rows come, so the size allocates nothing.
WHOLE_RESULT_ROWS = 1 << 30
#: Rows of a table (by rowid) one reader thread of :meth:`Sqlite.chunked_batches` reads at a time, and the
#: most chunks it splits a table into (rowids far sparser than 1..n make each chunk span more of them).
CHUNK_ROWS = 4 * BATCH_ROWS
MAX_CHUNKS = 1024


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
            raise BadInputError(shown, f"not a readable sqlite database ({first_line(e)})") from e
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
            stmt.set_options(**{adbc_sqlite.StatementOptions.BATCH_ROWS.value: str(WHOLE_RESULT_ROWS)})
            return self._reader(stmt, sql).read_all()
        except adbc.Error as e:
            raise BadInputError(self.shown, f"sqlite query failed ({first_line(e)})") from e
        finally:
            self._close(stmt)

    def batches(self, sql: str) -> Iterator[pa.RecordBatch]:
        stmt, reader = self._statement(), None
        try:
            reader = self._batched_reader(stmt, sql)
            yield from reader
        except adbc.Error as e:
            raise BadInputError(self.shown, f"sqlite query failed ({first_line(e)})") from e
        finally:
            if reader is not None:  # a reader left half read (the caller stopped early) goes first
                reader.close()
            self._close(stmt)

    def chunked_batches(self, table: str, select: str, readers: int) -> Iterator[pa.RecordBatch]:
        """``SELECT select FROM table ORDER BY rowid`` as :meth:`batches` gives it, read by ``readers`` threads,
        each on a connection of its own, up to :data:`CHUNK_ROWS` rowids at a time; batches come in rowid order.

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
        if last is None:
            yield from self.batches(whole)
            return
        span = int(last) - int(first)
        # At most CHUNK_ROWS rowids a chunk, but two chunks a reader at least (no fewer than BATCH_ROWS rows each):
        # a 231k-kernel table in four chunks, not one, has both readers busy (`run` 0.90x the wall on the 16-core
        # GPU host, 0.96x on 2 cores, benchmarks/results/normalize_chunks_44.txt). nsys numbers rows 1..n; a file
        # with far sparser rowids still makes at most ~MAX_CHUNKS queries.
        step = max(min(CHUNK_ROWS, max(BATCH_ROWS, span // (2 * readers) + 1)), span // MAX_CHUNKS + 1)
        if span < step:
            yield from self.batches(whole)
            return
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
            raise BadInputError(self.shown, f"sqlite query failed ({first_line(e)})") from e
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


def first_line(e: Exception) -> str:
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
