"""nsys kernels and runtime calls read from raw columns and joined in Arrow (``nsys_raw``) equal what the
one-query SQL (``nsys_sql.kernels_sql`` / ``api_calls_sql``) gives, on every nsys capture in sample_traces, on
every export layout of test_nsys_layouts, and on hand-made corner cases whose values are worked out below;
where the raw reader cannot read an export exactly (a name column of mixed storage types) it steps aside
and normalize's tables are the SQL's."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.normalize import normalize_file, nsys, nsys_raw, nsys_sql, sqlite_reader
from pipeline.schema import conform
from pipeline.store import committed_file
from tests.conftest import SAMPLES, gunzip_to
from tests.test_nsys_layouts import LAYOUTS, build, schema_of

CAPTURES = sorted(SAMPLES.glob("*/nsys.sqlite.gz")) + sorted(
    p
    for p in (SAMPLES / "external").glob("*.sqlite.gz")
    if "no_kernels" not in p.name  # (no kernel table to read)
)


def _open(path: Path) -> sqlite_reader.Sqlite:
    db = sqlite_reader.Sqlite(path, path)
    nsys._usable_tables(db)
    return db


def _conformed(batches: Iterable[pa.RecordBatch], table: str) -> pa.Table | None:
    """The batches as one table of ``table``'s schema (None when there are none)."""
    got = [conform(pa.Table.from_batches([b]), table, "t") for b in batches]
    return pa.concat_tables(got) if got else None


def _raw_and_sql(db: sqlite_reader.Sqlite, table: str) -> tuple[pa.Table, pa.Table]:
    if table == "kernels":
        raw, sql = nsys_raw.kernel_batches(db), nsys_sql.kernels_sql(db, True)
    else:
        raw, sql = nsys_raw.api_call_batches(db), nsys_sql.api_calls_sql(db, True)
    want = conform(db.arrow(sql), table, "t")
    got = _conformed(raw, table)
    return (got if got is not None else want.slice(0, 0)), want


def _assert_same(db: sqlite_reader.Sqlite, table: str) -> None:
    got, want = _raw_and_sql(db, table)
    assert got.num_rows == want.num_rows
    for name in want.column_names:
        assert got[name].to_pylist() == want[name].to_pylist(), (table, name)


def _assert_both_same(path: Path) -> None:
    """Kernels, and runtime calls where they are read as stored, equal both ways."""
    db = _open(path)
    try:
        _assert_same(db, "kernels")
        if nsys_sql.api_calls_sql(db, True) is not None:
            _assert_same(db, "api_calls")
    finally:
        db.close()


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_raw_reads_equal_the_sql_on_every_sample_capture(tmp_path: Path, capture: Path) -> None:
    _assert_both_same(gunzip_to(capture, tmp_path / "t.sqlite"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_raw_reads_equal_the_sql_on_every_export_layout(tmp_path: Path, layout: str) -> None:
    schema_of("2025.3", tmp_path)  # the real export whose enum rows the fixtures copy
    _assert_both_same(build(layout, tmp_path))


def _pid_tid(pid: int, tid: int) -> int:
    return (pid << 24) | tid


KERNEL_COLS = (
    'start, "end", deviceId, contextId, streamId, correlationId, globalPid, demangledName, shortName, launchType, '
    "gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, staticSharedMemory, dynamicSharedMemory, "
    "localMemoryPerThread, graphNodeId"
)


def _corner_export(path: Path, name_values: list[object] | None = None) -> Path:
    """Two processes (7, 8) that reuse correlation ids, a launch in both the runtime and the driver table,
    calls without a thread, a kernel without a process, an unknown string id, enum values with and without
    a label."""
    db = sqlite3.connect(path)
    db.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLS})")
    for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        db.execute(f'CREATE TABLE {t} (start, "end", correlationId, globalTid, nameId, returnValue)')
    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    db.execute("CREATE TABLE ENUM_CUDA_KERNEL_LAUNCH_TYPE (id INTEGER, name TEXT, label TEXT)")
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(0, "cudaLaunchKernel"), (1, "cuLaunchKernel"), (2, "k2")])
    db.executemany("INSERT INTO ENUM_CUDA_KERNEL_LAUNCH_TYPE VALUES (?, ?, ?)", [(1, "R", "Regular"), (2, "C", None)])
    a7, b7, a8 = _pid_tid(7, 70), _pid_tid(7, 71), _pid_tid(8, 80)
    runtime = [  # (start, end, correlationId, globalTid, nameId, returnValue)
        (10, 20, 1, b7, 0, 0),  # corr 1 in process 7 from thread 71 ...
        (11, 21, 1, a8, 0, 0),  # ... and in process 8 from thread 80
        (12, 22, 2, None, 0, 0),  # corr 2: no thread here; the driver has it (thread 70)
        (13, 23, None, a7, 0, 3),  # no correlation id
        (14, 24, 4, b7, 1, 0),  # corr 4: thread 71 here, 70 in the driver: the smaller globalTid (70) wins
    ]
    driver = [(15, 25, 2, a7, 1, 0), (16, 26, 4, a7, 1, 0)]
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?)", runtime)
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_DRIVER VALUES (?, ?, ?, ?, ?, ?)", driver)
    names = name_values or [2, 2, 9, 2, 2, 2]
    kernels = [  # start, end, corr, globalPid, demangledName, launchType
        (100, 110, 1, _pid_tid(7, 0), names[0], 1),  # -> process 7 thread 71
        (101, 111, 1, _pid_tid(8, 0), names[1], 2),  # -> process 8 thread 80; label NULL -> '2'
        (102, 112, 2, _pid_tid(7, 0), names[2], 3),  # -> thread 70 (driver); name id 9 unknown; type 3 -> '3'
        (103, 113, 4, _pid_tid(7, 0), names[3], 1),  # -> thread 70 (min of 71, 70)
        (104, 114, 5, _pid_tid(7, 0), names[4], 1),  # corr 5 launched nowhere: no thread
        (105, 115, 1, None, names[5], None),  # no process: no launch matches
    ]
    db.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLS}) "
        "VALUES (?, ?, 0, 0, 7, ?, ?, ?, 2, ?, 1, 1, 1, 32, 1, 1, 16, 0, 0, 0, ?)",
        [(*k[:5], k[5], (3 << 32) | i) for i, k in enumerate(kernels)],
    )
    db.commit()
    db.close()
    return path


def test_launching_thread_names_and_labels_on_corner_cases(tmp_path: Path) -> None:
    path = _corner_export(tmp_path / "c.sqlite")
    db = _open(path)
    try:
        got, _ = _raw_and_sql(db, "kernels")
        _assert_same(db, "kernels")
    finally:
        db.close()
    with sqlite3.connect(path) as con:  # runtime calls alone are read as stored (a driver table needs a sort)
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_DRIVER")
    db = _open(path)
    try:
        calls, _ = _raw_and_sql(db, "api_calls")
        _assert_same(db, "api_calls")
    finally:
        db.close()
    assert calls["tid"].to_pylist() == [71, 80, None, 70, 71]
    assert calls["name"].to_pylist() == ["cudaLaunchKernel"] * 4 + ["cuLaunchKernel"]
    assert got["pid"].to_pylist() == [7, 8, 7, 7, 7, None]
    assert got["tid"].to_pylist() == [71, 80, 70, 70, None, None]
    assert got["name"].to_pylist() == ["k2", "k2", None, "k2", "k2", "k2"]
    assert got["launch_type"].to_pylist() == ["Regular", "2", "3", "Regular", "Regular", None]
    assert got["graph_id"].to_pylist() == [3] * 6


def test_a_name_column_of_mixed_types_falls_back_to_the_sql(tmp_path: Path) -> None:
    """Text where an id was expected: ADBC stops at the type change, the raw reader steps aside, and the
    normalized kernels are the SQL's (names looked up where ids, inline where text)."""
    (tmp_path / "cap").mkdir()
    path = _corner_export(tmp_path / "cap" / "nsys.sqlite", [2, 2, 2, "inline name", 2, 2])
    db = _open(path)
    try:
        with pytest.raises(nsys_raw.NotRaw):
            _raw_and_sql(db, "kernels")
    finally:
        db.close()
    out = tmp_path / "out"
    normalize_file(path, out)
    names = pq.read_table(committed_file(out, "cap.nsys", "kernels")).sort_by("kernel_id")["name"].to_pylist()
    assert names == ["k2", "k2", "k2", "inline name", "k2", "k2"]


def test_lookup_of_sparse_and_dense_ids() -> None:
    for ids in ([0, 1, 2, 5], [-3, 10**12, 7]):
        lookup = nsys_raw.Lookup(pa.array(ids, pa.int64()), pa.array([f"v{i}" for i in ids]))
        probe = pa.array([*reversed(ids), None, 4, 10**13, -1], pa.int64())
        assert lookup.take(probe).to_pylist() == [f"v{i}" for i in reversed(ids)] + [None] * 4
    with pytest.raises(nsys_raw.NotRaw):  # sqlite's sub-select would pick either
        nsys_raw.Lookup(pa.array([1, 1]), pa.array(["a", "b"]))


def _orphans_by_sqlite3(path: Path) -> int:
    """Kernels no runtime/driver call matches on (correlation id, process), counted with plain sqlite3 as the
    staged check defines it (a call without a thread has no process, and matches a kernel without one). An
    export whose kernels do not record their process gives each the process of its launch (none without
    one): there a kernel is unmatched exactly when no call has its correlation id."""
    db = sqlite3.connect(path)
    has_pid = "globalPid" in {r[1] for r in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
    same_process = "AND ((a.globalTid >> 24) & 16777215) IS ((k.globalPid >> 24) & 16777215)" if has_pid else ""
    match = "SELECT 1 FROM {t} a WHERE a.correlationId = k.correlationId " + same_process
    runtime, driver = (match.format(t=t) for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"))
    n = db.execute(
        f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE NOT EXISTS ({runtime}) AND NOT EXISTS ({driver})"
    ).fetchone()[0]
    db.close()
    return n


def _counted(path: Path) -> dict[str, int]:
    """The check counts the raw kernel reader takes while it reads every kernel of ``path``."""
    db = _open(path)
    try:
        counted: dict[str, int] = {}
        list(nsys_raw.kernel_batches(db, counted))
        return counted
    finally:
        db.close()


def _orphan_warning(out: Path, trace_id: str) -> str | None:
    warnings = pq.read_table(committed_file(out, trace_id, "trace_meta"))["warnings"][0].as_py() or ""
    return next((w for w in warnings.split('"') if "match no launching API call" in w), None)


@pytest.mark.parametrize("thread_less_call", [False, True])
def test_kernels_without_a_launch_counted_while_joining_equal_the_staged_check(
    tmp_path: Path, thread_less_call: bool
) -> None:
    """normalize counts the kernels it finds no launch for while joining them (not with an anti-join of the
    staged files), where that count is exact: no call lacks a thread. With a call without a thread the
    staged check's rule differs (its NULL process matches a kernel without one) and the check runs as SQL."""
    (tmp_path / "cap").mkdir()
    path = _corner_export(tmp_path / "cap" / "nsys.sqlite")
    with sqlite3.connect(path) as con:
        # The kernel without a process launches as corr 2, whose runtime call has no thread (or gets one).
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = 2 WHERE globalPid IS NULL")
        if not thread_less_call:
            con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = {_pid_tid(9, 90)} WHERE globalTid IS NULL")
    counted = _counted(path)
    # By hand: corr 5 is launched nowhere; the kernel without a process (corr 2) matches the thread-less call.
    expected = 1 if thread_less_call else 2
    assert _orphans_by_sqlite3(path) == expected
    assert counted == ({} if thread_less_call else {"kernels_without_call": expected})
    normalize_file(path, tmp_path / "out")
    assert _orphan_warning(tmp_path / "out", "cap.nsys").startswith(f"{expected} kernels match no launching API call")


def _chunked_kernels(db: sqlite_reader.Sqlite, readers: int = 2) -> pa.Table:
    return _conformed(nsys_raw.kernel_batches(db, None, readers), "kernels")


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_kernels_read_by_two_threads_in_chunks_equal_the_sql(
    tmp_path: Path, capture: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernels child's two readers, each reading chunks of rowids on its own connection, give the rows the
    one-query SQL gives, in the same order (chunks of a seventh of the table: 7-8 chunks, the last partial)."""
    db = _open(gunzip_to(capture, tmp_path / "t.sqlite"))
    try:
        want = conform(db.arrow(nsys_sql.kernels_sql(db, True)), "kernels", "t")
        monkeypatch.setattr(sqlite_reader, "CHUNK_ROWS", max(1, want.num_rows // 7))
        got = _chunked_kernels(db)
        assert got.num_rows == want.num_rows
        for name in want.column_names:
            assert got[name].to_pylist() == want[name].to_pylist(), name
    finally:
        db.close()


def test_chunks_follow_rowids_with_gaps_and_below_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rowids need not run 1..n: a table whose rows were deleted, or inserted with rowids of 0 and below,
    is read whole and in rowid order by chunks of 2 rowids (some chunks empty)."""
    monkeypatch.setattr(sqlite_reader, "CHUNK_ROWS", 2)
    path = _corner_export(tmp_path / "c.sqlite")
    db = sqlite3.connect(path)
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = rowid + 100")
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = (rowid - 100) * 3 - 9")  # -6, -3, 0, 3, 6, 9
    db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 3")
    db.commit()
    db.close()
    db = _open(path)
    try:
        got = _chunked_kernels(db)
        assert got["start_ns"].to_pylist() == [100, 101, 102, 104, 105]
        assert got["tid"].to_pylist() == [71, 80, 70, None, None]
    finally:
        db.close()


def test_a_mixed_type_column_in_a_later_chunk_steps_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chunk infers its own types: text among the name ids of the third chunk stops that chunk's reader,
    and the raw reader steps aside (NotRaw) as it does when one reader meets it."""
    monkeypatch.setattr(sqlite_reader, "CHUNK_ROWS", 2)
    db = _open(_corner_export(tmp_path / "c.sqlite", [2, 2, 2, 2, 2, "inline name"]))
    try:
        with pytest.raises(nsys_raw.NotRaw):
            _chunked_kernels(db)
    finally:
        db.close()


def test_a_chunked_read_left_early_stops_its_threads_and_frees_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that stops after the first batch: the reader threads end and their connections close, so the
    database itself can close (ADBC refuses while a connection is open)."""
    import threading

    monkeypatch.setattr(sqlite_reader, "CHUNK_ROWS", 1)
    db = _open(_corner_export(tmp_path / "c.sqlite"))
    before = threading.active_count()
    batches = db.chunked_batches("CUPTI_ACTIVITY_KIND_KERNEL", "start", 2)
    assert next(batches).column(0).to_pylist() == [100]
    assert threading.active_count() > before
    batches.close()
    assert threading.active_count() == before
    db.close()  # raises if a reader's connection were still open
    assert db.db is None


def test_sparse_rowids_make_a_bounded_number_of_chunk_queries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rowids 1 .. 10^12 with six rows: chunks of 2 rowids would be 5 * 10^11 queries; each chunk spans more
    rowids instead, so at most MAX_CHUNKS (+ 1) queries read the table, and every row comes back in order."""
    monkeypatch.setattr(sqlite_reader, "CHUNK_ROWS", 2)
    path = _corner_export(tmp_path / "c.sqlite")
    db = sqlite3.connect(path)
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = rowid * 200000000000 WHERE rowid > 1")
    db.commit()
    db.close()
    queries = []
    reader = sqlite_reader.Sqlite._reader

    def counted(stmt: object, sql: str) -> pa.RecordBatchReader:
        queries.append(sql)
        assert len(queries) <= sqlite_reader.MAX_CHUNKS + 10, "one query per CHUNK_ROWS rowids"
        return reader(stmt, sql)

    monkeypatch.setattr(sqlite_reader.Sqlite, "_reader", staticmethod(counted))
    db = _open(path)
    try:
        assert _chunked_kernels(db)["start_ns"].to_pylist() == [100, 101, 102, 103, 104, 105]
    finally:
        db.close()
    chunked = [q for q in queries if "rowid >" in q]
    assert 2 <= len(chunked) <= sqlite_reader.MAX_CHUNKS + 1


def test_a_table_smaller_than_a_chunk_is_still_split_two_chunks_a_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mid-size table (fewer rowids than CHUNK_ROWS) is read in two chunks a reader, none under BATCH_ROWS rows:
    rowids 1..6 (a span of 5), two readers: BATCH_ROWS 1 -> chunks of 5 // 4 + 1 = 2 rowids, three queries;
    BATCH_ROWS 4 -> chunks of 4, two queries; BATCH_ROWS 6 -> more than the span: the one query of the whole."""
    monkeypatch.setattr(sqlite_reader, "CHUNK_ROWS", 1000)
    path = _corner_export(tmp_path / "c.sqlite")
    for batch_rows, chunks in ((1, 3), (4, 2), (6, 0)):
        monkeypatch.setattr(sqlite_reader, "BATCH_ROWS", batch_rows)
        queries: list[str] = []
        reader = sqlite_reader.Sqlite._reader

        def counted(stmt: object, sql: str, _queries: list[str] = queries, _reader=reader) -> pa.RecordBatchReader:
            _queries.append(sql)
            return _reader(stmt, sql)

        monkeypatch.setattr(sqlite_reader.Sqlite, "_reader", staticmethod(counted))
        db = _open(path)
        try:
            starts = pa.concat_arrays(
                [b.column(0) for b in db.chunked_batches("CUPTI_ACTIVITY_KIND_KERNEL", "start", 2)]
            ).to_pylist()
        finally:
            db.close()
        assert starts == [100, 101, 102, 103, 104, 105], batch_rows
        assert len([q for q in queries if "rowid >" in q]) == chunks, (batch_rows, queries)
        monkeypatch.setattr(sqlite_reader.Sqlite, "_reader", staticmethod(reader))
