"""analyze's write loop: in memory (each view a table, copied to its file) and through Parquet (each view
written, then read back) give the same files, row for row and type for type."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import pipeline.analyze.write as analyze_write
from pipeline.analyze import SIZE_TABLES, SQL_DIR, connect, default_views, input_rows, write_views
from pipeline.lean import cores
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, gunzip_to

RESNET = SAMPLES / "h200_resnet18"  # nsys + PyTorch trace + ncu + module shapes: every view has rows
TRAIN = SAMPLES / "h200_train_decoder"  # forward + backward + optimizer: the pass rules


def _normalize(dest: Path) -> Path:
    for capture, names in ((RESNET, ("nsys.sqlite.gz", "torch_trace.json.gz", "ncu_raw.csv.gz", "layer_shapes.json")),
                           (TRAIN, ("nsys.sqlite.gz",))):  # fmt: skip
        for name in names:
            normalize_file(capture / name, dest, trace_id=f"{capture.name}.{name.split('.')[0]}")
    return dest


def _raw_kernels(tmp: Path) -> int:
    """Kernels in the raw files, read without pipeline code (sqlite3, json)."""
    n = 0
    for capture in (RESNET, TRAIN):
        sqlite = gunzip_to(capture / "nsys.sqlite.gz", tmp / f"{capture.name}.sqlite")
        n += sqlite3.connect(sqlite).execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    events = json.loads(gzip.decompress((RESNET / "torch_trace.json.gz").read_bytes()))["traceEvents"]
    return n + sum(1 for e in events if e.get("cat") == "kernel" and e.get("ph") == "X")


def _differences(con: duckdb.DuckDBPyConnection, a: Path, b: Path) -> tuple[list, int, int]:
    """Column names and types that differ, then rows of ``a`` not in ``b`` and of ``b`` not in ``a`` (as bags)."""
    ta, tb = (con.execute("DESCRIBE SELECT * FROM read_parquet($p)", {"p": str(p)}).fetchall() for p in (a, b))
    only = [
        con.execute(
            "SELECT count(*) FROM (SELECT * FROM read_parquet($x) EXCEPT ALL SELECT * FROM read_parquet($y))",
            {"x": str(x), "y": str(y)},
        ).fetchall()[0][0]
        for x, y in ((a, b), (b, a))
    ]
    return [(x, y) for x, y in zip(ta, tb, strict=False) if x != y] + [len(ta) - len(tb)] * (len(ta) != len(tb)), *only


def test_in_memory_and_through_parquet_write_the_same_files(tmp_path: Path) -> None:
    """Through Parquet, in memory one view at a time, and in memory with 3 views at once (on cursors)."""
    norm = _normalize(tmp_path / "n")
    views = [*default_views(), "kernel_sm_load"]  # and one written only on request
    modes = {"parquet": (False, 1), "memory": (True, 1), "concurrent": (True, 3)}
    rows = {}
    for mode, (in_memory, workers) in modes.items():
        rows[mode] = write_views(
            connect(norm, views=[]), tmp_path / mode, views, ("parquet", "csv"), in_memory=in_memory, workers=workers
        )
    assert rows["memory"] == rows["parquet"] == rows["concurrent"]
    # the narrow attribution has one row per GPU operation, which gpu_op_layers' join keeps one to one
    keys = "trace_id, op_kind, op_row_id"
    attribution = duckdb.connect().read_parquet(str(tmp_path / "parquet" / "gpu_op_attribution.parquet"))
    assert attribution.aggregate(f"count(DISTINCT ({keys}))").fetchall()[0][0] == rows["parquet"]["gpu_op_attribution"]
    assert rows["parquet"]["gpu_op_attribution"] == rows["parquet"]["gpu_op_layers"] > rows["parquet"]["kernel_layers"]
    assert list(rows["concurrent"]) == list(rows["memory"])  # in the same (dependency) order
    con = duckdb.connect()
    for view in views:
        for mode in ("memory", "concurrent"):
            a, b = tmp_path / mode / f"{view}.parquet", tmp_path / "parquet" / f"{view}.parquet"
            assert _differences(con, a, b) == ([], 0, 0), (mode, view)
            csv = [sorted((tmp_path / m / f"{view}.csv").read_text().splitlines()) for m in (mode, "parquet")]
            assert csv[0] == csv[1], (mode, view)
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]  # no scratch or temporary file left
    # the files hold the traces' kernels, counted in the raw files
    assert rows["concurrent"]["kernel_layers"] == _raw_kernels(tmp_path) > 500
    # the cross-rank views compare ranks of one job (rank_jobs): these samples are no job, so they are empty
    cross_rank = {"rank_jobs", "layer_rank_spread", "layer_stragglers"}
    assert {v for v in cross_rank if rows["concurrent"][v] > 0} == set()
    assert (
        sum(1 for v in views if v not in cross_rank and rows["concurrent"][v] > 0) >= len(views) - len(cross_rank) - 3
    )


def test_views_computed_also_are_read_by_inspect_and_written_nowhere(tmp_path: Path) -> None:
    """``also`` views are computed with the written ones, and ``inspect`` reads their rows before the temporary files
    go: analysis_warnings beside one view equals the view analysis_warnings written alone, in every mode."""
    norm = _normalize(tmp_path / "n")
    normalize_file(SAMPLES / "h200_graph_whole" / "nsys.sqlite.gz", norm)  # whole-graph launches: no layer
    write_views(connect(norm, views=[]), tmp_path / "alone", ["analysis_warnings"], ("parquet",), in_memory=False)
    sql = "SELECT * FROM analysis_warnings ORDER BY ALL"
    alone = duckdb.connect().read_parquet(str(tmp_path / "alone" / "analysis_warnings.parquet"))
    expected = alone.query("analysis_warnings", sql).fetchall()
    assert len(expected) >= 1  # the whole-graph capture's coverage at least
    for mode, (in_memory, workers) in {"parquet": (False, 1), "memory": (True, 1), "concurrent": (True, 3)}.items():
        seen: list[list[tuple]] = []
        inspect = seen.append
        rows = write_views(
            connect(norm, views=[]), tmp_path / mode, ["kernel_name_summary"], ("parquet",), in_memory=in_memory,
            workers=workers, also=("analysis_warnings",), inspect=lambda c, keep=inspect: keep(c.sql(sql).fetchall()),
        )  # fmt: skip
        assert list(rows) == ["kernel_name_summary"] and seen == [expected], mode
        assert sorted(p.name for p in (tmp_path / mode).iterdir()) == ["kernel_name_summary.parquet"], mode


def test_input_rows_counts_the_gpu_operations_and_ranges(tmp_path: Path) -> None:
    norm = tmp_path / "n"
    normalize_file(RESNET / "nsys.sqlite.gz", norm)
    sqlite = sqlite3.connect(gunzip_to(RESNET / "nsys.sqlite.gz", tmp_path / "r.sqlite"))
    tables = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS")
    have = {t for (t,) in sqlite.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    counts = {t: sqlite.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables if t in have}
    ranges = sqlite.execute("SELECT count(*) FROM NVTX_EVENTS WHERE end IS NOT NULL AND eventType IN (59, 60)")
    expected = sum(v for t, v in counts.items() if t != "NVTX_EVENTS") + ranges.fetchone()[0]
    assert set(SIZE_TABLES) >= {"kernels", "memcpy", "memset", "nvtx_ranges"}
    assert input_rows(connect(norm, views=[])) == expected > 100


@pytest.mark.parametrize("workers", [1, 2])
def test_inputs_between_the_two_thresholds_are_analyzed_in_memory_only_with_concurrent_views(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """In memory the extra CPU of table inserts buys wall time only when views run at once: an input above the
    one-at-a-time threshold and below the concurrent one stays in memory (views become tables of the
    connection) with 2 workers and goes through Parquet (views read back their files) with 1."""
    norm = tmp_path / "n"
    normalize_file(RESNET / "nsys.sqlite.gz", norm)
    rows = input_rows(connect(norm, views=[]))
    monkeypatch.setattr(analyze_write, "IN_MEMORY_ROWS", rows)
    monkeypatch.setattr(analyze_write, "IN_MEMORY_ROWS_ONE_AT_A_TIME", rows - 1)
    con = connect(norm, views=[])
    write_views(con, tmp_path / "a", ["layer_summary"], ("parquet",), workers=workers)
    tables = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert ("layer_summary" in tables) == (workers > 1)
    assert (tmp_path / "a" / "layer_summary.parquet").is_file()


def test_views_run_side_by_side_share_the_cores_and_the_setting_comes_back(tmp_path: Path) -> None:
    """While views run at once they share the allowed cores (one DuckDB thread each on 2 cores: the views are the
    parallelism); the connection's own setting is restored afterwards, also when a view fails."""
    norm = tmp_path / "n"
    normalize_file(RESNET / "nsys.sqlite.gz", norm)
    con = connect(norm, views=[])
    con.execute("SET threads = 3")
    seen: list[int] = []
    write_views(con, tmp_path / "a", ["kernel_layers", "layer_summary"], ("parquet",), workers=2,
                done=lambda v: seen.append(con.execute("SELECT current_setting('threads')").fetchone()[0]))  # fmt: skip
    assert seen == [max(1, cores() // 2)] * 2
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 3
    sql = tmp_path / "sql"
    sql.mkdir()
    (sql / "broken.sql").write_text("-- broken\n-- Inputs:  kernels\nSELECT no_such_column FROM kernels\n")
    con = connect(norm, sql, views=[])
    con.execute("SET threads = 3")
    with pytest.raises(duckdb.BinderException):
        write_views(con, tmp_path / "b", ["broken"], ("parquet",), sql_dir=sql, in_memory=True, workers=2)
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 3


def test_a_failing_view_stops_the_concurrent_write_and_is_raised(tmp_path: Path) -> None:
    """A view that cannot be computed (here: it reads a column no table has) fails the run with DuckDB's
    error once the views already running end; no view that reads it is started, no partial file is left."""
    norm = tmp_path / "n"
    normalize_file(RESNET / "torch_trace.json.gz", norm)
    sql = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sql)
    broken = sql / "kernel_layers.sql"
    broken.write_text(broken.read_text().replace("WHERE op_kind = 'kernel'", "WHERE no_such_column", 1))
    out = tmp_path / "a"
    started: list[str] = []
    with pytest.raises(duckdb.BinderException, match="no_such_column"):
        write_views(connect(norm, sql, views=[]), out, default_views(sql), ("parquet",), sql_dir=sql, in_memory=True,
                    workers=2, done=started.append)  # fmt: skip
    assert "kernel_layers" not in started and "layer_summary" not in started
    assert not (out / "layer_summary.parquet").exists() and not (out / "kernel_layers.parquet").exists()
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]


def _view(sql_dir: Path, name: str, inputs: str, extra: str = "") -> None:
    first = inputs.split(",")[0].strip()
    (sql_dir / f"{name}.sql").write_text(f"-- {name}\n{extra}-- Inputs:  {inputs}\nSELECT * FROM {first}\n")


def test_a_staged_view_is_computed_once_on_its_own_even_with_one_reader(tmp_path: Path) -> None:
    """A view read by one other is inlined into it, unless its header says ``-- analyze: staged`` and the inputs
    are analyzed through Parquet; a view read by two is computed once either way (nvtx_paths)."""
    from pipeline.analyze import STAGED, _views_to_write

    _view(tmp_path, "one_reader", "kernels")
    _view(tmp_path, "staged", "kernels", f"{STAGED} (its joins apart from its reader's)\n")
    _view(tmp_path, "two_readers", "kernels")
    _view(tmp_path, "mid", "two_readers")
    _view(tmp_path, "top", "one_reader, staged, two_readers, mid")
    assert _views_to_write(["top"], tmp_path) == ["staged", "two_readers", "top"]
    assert _views_to_write(["top"], tmp_path, staged=False) == ["two_readers", "top"]  # in memory: small inputs
    # the attribution: its rules' half (one reader) staged, the launches (two readers) computed once
    assert {"gpu_op_launches", "launch_point_layers"} <= set(_views_to_write(["gpu_op_attribution"], SQL_DIR))


def test_a_view_that_spills_runs_under_part_of_the_memory_limit_on_big_inputs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Through Parquet (big inputs) a view whose header says ``-- analyze: spills`` is computed under 3/4 of the
    connection's memory limit, with no more DuckDB threads than leave 128 MiB each of it, the views after it under
    the whole limit and threads again, and the connection keeps them; in memory (small inputs) every view runs
    under the whole limit. Each view writes the limit and threads DuckDB reports while it runs; the expected limits
    are DuckDB's own texts for those byte counts."""
    from pipeline import lean
    from pipeline.analyze import SPILLS

    monkeypatch.setattr(lean, "cores", lambda: 16)
    monkeypatch.delenv(lean.THREADS_ENV, raising=False)
    monkeypatch.setenv("TRACEPIPE_MEMORY_LIMIT", "300000000")  # 2 threads of 128 MiB; 3/4 of it leaves room for 1
    norm = tmp_path / "n"
    normalize_file(TRAIN / "nsys.sqlite.gz", norm, trace_id="train")
    sql_dir = tmp_path / "sql"
    sql_dir.mkdir()
    select = "SELECT current_setting('memory_limit') AS memory_limit, current_setting('threads') AS threads"
    select += " FROM kernels"
    (sql_dir / "spilling.sql").write_text(f"-- spilling\n{SPILLS} (a sort)\n-- Inputs:  kernels\n{select} LIMIT 1\n")
    (sql_dir / "after.sql").write_text(f"-- after\n-- Inputs:  kernels, spilling\n{select}, spilling LIMIT 1\n")
    reported = duckdb.connect()

    def duckdb_text(limit: int) -> str:
        reported.execute(f"SET memory_limit = '{limit}B'")
        return reported.execute("SELECT current_setting('memory_limit')").fetchone()[0]

    whole, part = (duckdb_text(300_000_000), 2), (duckdb_text(225_000_000), 1)
    for in_memory in (False, True):
        con = connect(norm, sql_dir=sql_dir, views=[])
        out = tmp_path / f"out_{in_memory}"
        write_views(con, out, ["spilling", "after"], ("parquet",), sql_dir=sql_dir, in_memory=in_memory)
        got = {v: _settings(out / f"{v}.parquet") for v in ("spilling", "after")}
        if in_memory:  # (its views run side by side, on cursors of a thread or so each: only the limit is asserted)
            assert {v: limit for v, (limit, _) in got.items()} == {"spilling": whole[0], "after": whole[0]}
        else:
            assert got == {"spilling": part, "after": whole}
        assert _settings_of(con) == whole
    con = connect(norm, sql_dir=sql_dir, views=[])  # the spilling view last: the whole limit back after it
    write_views(con, tmp_path / "last", ["spilling"], ("parquet",), sql_dir=sql_dir, in_memory=False)
    assert _settings(tmp_path / "last" / "spilling.parquet") == part
    assert _settings_of(con) == whole


def _settings(path: Path) -> tuple[str, int]:
    con = duckdb.connect()  # not the default connection: a result left half read there is every later test's
    return con.execute("SELECT memory_limit, threads FROM read_parquet($p)", {"p": str(path)}).fetchone()


def _settings_of(con: duckdb.DuckDBPyConnection) -> tuple[str, int]:
    return con.execute("SELECT current_setting('memory_limit'), current_setting('threads')").fetchone()


def test_duckdb_threads_follow_the_row_groups_there_are_to_scan(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One DuckDB thread per 65,536 rows (a row group of normalize's files), at least 2, never more than the
    allowed cores; TRACEPIPE_THREADS overrides it, and connect sets it from the biggest tables (Arrow's CPU
    pool too)."""
    from pipeline import lean
    from pipeline.errors import SettingError

    monkeypatch.delenv(lean.THREADS_ENV, raising=False)
    monkeypatch.setattr(lean, "cores", lambda: 16)
    assert [lean.duckdb_threads(n) for n in (10, 65_536, 65_537, 220_011, 10_000_000)] == [2, 2, 2, 4, 16]
    assert lean.duckdb_threads() == 16
    monkeypatch.setattr(lean, "cores", lambda: 1)
    assert lean.duckdb_threads(220_011) == 1
    monkeypatch.setenv(lean.THREADS_ENV, "3")
    assert lean.duckdb_threads(10) == 3
    # Arrow's CPU pool (process-wide: restored after) is sized alike, by the nsys normalizer and by connect
    before = pa.cpu_count()
    try:
        pa.set_cpu_count(7)
        norm = _resnet_normalized(tmp_path)
        assert pa.cpu_count() == 3
        pa.set_cpu_count(7)
        con = connect(norm, views=[])
        assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 3
        assert pa.cpu_count() == 3
    finally:
        pa.set_cpu_count(before)
    monkeypatch.setenv(lean.THREADS_ENV, "many")
    with pytest.raises(SettingError, match="TRACEPIPE_THREADS"):
        lean.duckdb_threads()


def test_duckdb_threads_leave_each_thread_its_share_of_the_memory_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """At most one DuckDB thread per 128 MiB of the memory limit, at least one: on a 16-core host the 10M-kernel
    trace ran out of memory at 1.2 GB with 16 threads and finished with 8; TRACEPIPE_THREADS still overrides it, and
    connect caps by the limit it sets (TRACEPIPE_MEMORY_LIMIT, else the one sized to the input)."""
    from pipeline import lean

    monkeypatch.delenv(lean.THREADS_ENV, raising=False)
    monkeypatch.setattr(lean, "cores", lambda: 64)
    gb = 1_000_000_000
    assert [lean.duckdb_threads(10_000_000, m) for m in (int(1.6 * gb), int(1.2 * gb), 300_000_000, 10**8)] == [
        11,
        8,
        2,
        1,
    ]
    assert lean.duckdb_threads(220_011, int(1.6 * gb)) == 4  # the rows' cap where it is lower
    assert lean.duckdb_threads(10_000_000, 64 * gb) == 64  # and the cores'
    monkeypatch.setenv(lean.THREADS_ENV, "16")
    assert lean.duckdb_threads(10_000_000, 10**8) == 16
    monkeypatch.delenv(lean.THREADS_ENV)
    norm = _resnet_normalized(tmp_path)
    monkeypatch.setenv("TRACEPIPE_MEMORY_LIMIT", "200MB")
    con = connect(norm, views=[])
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 1
    monkeypatch.delenv("TRACEPIPE_MEMORY_LIMIT")
    con = connect(norm, views=[])  # the sized default (1.6 GB): the rows' cap of 2 applies
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 2


def _resnet_normalized(tmp_path: Path) -> Path:
    norm = tmp_path / "n"
    normalize_file(RESNET / "nsys.sqlite.gz", norm)
    return norm
