"""`import tracepipe`: a normalized folder opened from a notebook, answers as polars DataFrames."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

import tracepipe
from pipeline.analyze import connect
from pipeline.analyze.readonly import ReadOnlyConnection
from pipeline.catalog import table_descriptions, view_descriptions
from pipeline.errors import BadInputError
from pipeline.schema import TABLES


def test_open_a_folder_by_str_and_query_it(nsys_out: Path, nsys_sqlite: Path) -> None:
    with tracepipe.open(str(nsys_out)) as tp:
        assert isinstance(tp.con, ReadOnlyConnection)
        raw = sqlite3.connect(nsys_sqlite)
        n, total = raw.execute('SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
        got = tp.sql("SELECT count(*) AS n, sum(duration_ns) AS total FROM kernels")
        assert isinstance(got, pl.DataFrame) and got.row(0) == (n, total)
        assert tp.table("kernels").height == n
        assert tp.table("kernel_layers", trace_id=tp.trace_ids()[0]).height == n
        assert tp.sql("SELECT count(*) FROM kernels WHERE duration_ns > ?", [0]).item() == n
        names = tp.tables()
        assert set(names["name"]) == set(table_descriptions()) | set(view_descriptions())
        assert not any(name.startswith("_") for name in tp.names())
        assert names.filter(pl.col("name") == "layer_summary")["kind"].item() == "view"
        assert tp.schema("kernels")["column_name"].to_list() == TABLES["kernels"].names
        for statement in (f"COPY kernels TO '{nsys_out}/x.csv'", "INSTALL httpfs"):
            with pytest.raises(duckdb.Error, match="not allowed"):  # read-only: nothing written
                tp.sql(statement)
        with pytest.raises(duckdb.Error, match="not allowed"):
            tp.sql("COPY (SELECT * FROM kernels WHERE kernel_id > ?) TO 'x.csv'", [1])
        with pytest.raises(duckdb.Error):  # the connection itself: no file outside the folder
            tp.con.execute(f"COPY kernels TO '{nsys_out.parent}/x.csv'")
        assert not (nsys_out / "x.csv").exists() and not (nsys_out.parent / "x.csv").exists()
        with pytest.raises(KeyError, match="no table or view"):
            tp.table("nope")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_read_only_connection_itself_refuses_writes_inside_the_folder(
    nsys_out: Path, nsys_sqlite: Path, tmp_path: Path
) -> None:
    """DuckDB's sandbox lets a statement write inside the folder (the scans read there): connect(read_only=True),
    what tracepipe.connect and Traces.con hand out, refuses such statements at every SQL entry point."""
    data = tmp_path / "norm"
    shutil.copytree(nsys_out, data)
    existing = next((data / "kernels").rglob("*.parquet"))
    before = _tree(tmp_path)
    statements = [
        f"COPY (SELECT 1 AS x) TO '{data}/new.parquet' (FORMAT parquet)",
        f"COPY kernels TO '{existing}' (FORMAT parquet)",  # overwrite a table's own file
        f"SELECT 1; COPY kernels TO '{data}/kernels/extra.parquet'",  # a write behind a query
        f"ATTACH '{data}/db.duckdb' AS d",
        f"EXPORT DATABASE '{data}/export'",
        # a PIVOT is a MULTI statement (DuckDB looks its columns up first): a write around it is still one
        f"COPY (PIVOT kernels ON stream_id USING count(*)) TO '{data}/pivot.csv'",
        "CREATE TABLE pivoted AS PIVOT kernels ON stream_id USING count(*)",
        "SET threads = 1",  # a SET of a setting; SET VARIABLE runs (below)
    ]
    con = connect(data, read_only=True)
    (n,) = sqlite3.connect(nsys_sqlite).execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    entries = {
        "execute": con.execute,
        "sql": con.sql,
        "query": con.query,
        "from_query": con.from_query,
        "executemany": con.executemany,
        "execute after a query": lambda q: con.execute("SELECT 1").execute(q),  # the chain stays guarded
        "cursor().execute": lambda q: con.cursor().execute(q),
        "cursor().sql": lambda q: con.cursor().sql(q),
        "tracepipe.connect": tracepipe.connect(data).execute,
    }
    for entry, run in entries.items():
        for statement in statements:
            with pytest.raises(duckdb.Error, match="not allowed"):
                run(statement)
                pytest.fail(f"{entry} ran {statement}")
    assert _tree(tmp_path) == before
    # reads still go through every entry point, parameters included
    assert con.execute("SELECT count(*) FROM kernels WHERE duration_ns > ?", [0]).fetchall() == [(n,)]
    assert con.sql("SELECT count(*) FROM kernel_layers").fetchall() == [(n,)]
    assert con.cursor().execute("SELECT count(*) FROM kernels").fetchall() == [(n,)]
    assert con.execute("CREATE TEMP TABLE t AS SELECT 1 AS x").execute("SELECT x FROM t").fetchall() == [(1,)]
    # a PIVOT query and a session variable only read: they run, as in DuckDB
    by_stream = dict(con.sql("SELECT stream_id, count(*) FROM kernels GROUP BY ALL").fetchall())
    pivoted = con.sql("PIVOT (SELECT stream_id FROM kernels) ON stream_id USING count(*)")
    (row,) = pivoted.fetchall()
    assert dict(zip(map(int, pivoted.columns), row, strict=True)) == by_stream and sum(by_stream.values()) == n
    assert con.execute("SET VARIABLE k = 7").execute("SELECT getvariable('k')").fetchall() == [(7,)]


def test_connect_takes_a_str_and_refuses_a_folder_that_is_not_normalized(tmp_path: Path, nsys_out: Path) -> None:
    con = tracepipe.connect(str(nsys_out))
    assert con.execute("SELECT count(*) FROM layer_summary").fetchone()[0] > 0
    with pytest.raises(BadInputError, match=r"neither a normalized folder .* nor an analysis folder"):
        tracepipe.open(tmp_path)


def test_python_dash_m_runs_the_cli() -> None:
    root = Path(__file__).resolve().parents[1]
    for module in ("tracepipe", "pipeline", "pipeline.cli"):
        r = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True, cwd=root, check=False
        )
        assert r.returncode == 0 and r.stdout.startswith("tracepipe, version"), (module, r.stderr)


def test_views_are_created_as_statements_name_them(nsys_out: Path) -> None:
    # Creating all ~46 views binds each body again under the views that read it (1.3-2.3 CPU-s on one trace):
    # tracepipe.connect creates none at first, then those a statement or table() names and those they read;
    # a statement that may list the catalog gets them all.
    # The views two or more of a statement's views read, and the staged ones, are computed once, into temp tables
    # (engine.lazy_views).
    from pipeline.analyze import needed_views, view_files
    from pipeline.analyze.views import computed_once, shared_views

    con = tracepipe.connect(nsys_out)
    raw = con._con  # the connection it guards, whose catalog shows what exists

    def views() -> set[str]:  # views and temp tables
        return {v for (v,) in raw.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()} | {
            t for (t,) in raw.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
        }

    tables = views()
    assert not tables & set(view_files())
    ((n,),) = con.sql("SELECT count(*) FROM layer_summary").fetchall()
    assert n > 0 and views() - tables == set(needed_views(["layer_summary"]))
    temp = {t for (t,) in raw.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
    assert temp == set(computed_once(["layer_summary"])) > set(shared_views(["layer_summary"])), temp
    assert {"nvtx_paths", "gpu_op_launches", "gpu_op_layers", "launch_point_layers"} <= temp, temp
    assert "findings" not in views()
    assert con.table("findings").columns and "findings" in views()
    con.sql("SELECT view_name FROM duckdb_views()").fetchall()
    assert set(view_files()) <= views()


def test_connect_takes_an_analysis_folder_too(nsys_out: Path, tmp_path: Path) -> None:
    # analyze's Parquet by view name, as written, read-only: the same rows as the normalized folder's view
    out = tmp_path / "a"
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "analyze", str(nsys_out), "--out", str(out), "--view", "layer_summary"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    query = "SELECT path, kernels, gpu_time_ns FROM layer_summary ORDER BY ALL"
    written = tracepipe.connect(str(out))
    assert written.sql(query).fetchall() == tracepipe.connect(nsys_out).sql(query).fetchall()
    with pytest.raises(duckdb.Error, match="not allowed"):
        written.execute(f"COPY layer_summary TO '{out}/copy.csv'")
    with pytest.raises(BadInputError, match="nor an analysis folder"):
        tracepipe.connect(tmp_path)


def test_views_created_with_the_catalog_bind_when_read(nsys_out: Path) -> None:
    # Creating a view bound its body, expanding every view below it: a statement listing the catalog created all
    # ~54 views of one small trace in 2.4-3.5 s (benchmarks/results/deferred_views.txt). With DuckDB's
    # DEFER_BINDING each view binds when a statement reads it, and the answers stay those of bound views.
    from pipeline.analyze.engine import defers_binding

    assert defers_binding()  # DuckDB 2.0 on
    con = tracepipe.connect(nsys_out)
    raw = con._con

    def bound() -> dict[str, bool]:
        return dict(raw.execute("SELECT view_name, is_bound FROM duckdb_views() WHERE NOT internal").fetchall())

    con.sql("SELECT view_name FROM duckdb_views()").fetchall()  # every view created
    assert bound()["findings"] is False and bound()["layer_summary"] is False
    got = con.sql("SELECT path, kernels, gpu_time_ns FROM layer_summary ORDER BY ALL").fetchall()
    assert bound()["layer_summary"] is True and bound()["findings"] is False
    plain = connect(nsys_out, materialize=True)  # every view computed into a table at creation
    assert got == plain.sql("SELECT path, kernels, gpu_time_ns FROM layer_summary ORDER BY ALL").fetchall()
    assert len(got) > 3


def test_a_big_traces_views_computed_once_go_to_files_the_views_read(
    nsys_out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past engine.LAZY_TABLE_OPS GPU operations every view a statement's views read is written to a Parquet file
    # in the connection's private spill folder and read from there (a 10M-kernel trace ran out of memory as temp
    # tables and inlined views): the same rows as the temp tables, no temp table, the folder gone with the
    # connection, and a user's statement still cannot write there.
    from pipeline.analyze import engine, needed_views
    from pipeline.analyze.views import computed_once

    query = "SELECT * FROM layer_summary ORDER BY ALL"
    small = tracepipe.connect(nsys_out)
    expected = small.sql(query).fetchall()
    monkeypatch.setattr(engine, "LAZY_TABLE_OPS", 0)
    con = tracepipe.connect(nsys_out)
    assert con.sql(query).fetchall() == expected and len(expected) > 3
    raw = con._con
    assert not raw.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
    (spill,) = raw.execute("SELECT current_setting('temp_directory')").fetchone()
    scratch = Path(spill) / "views"
    written = {p.stem for p in scratch.glob("*.parquet")}
    assert written == set(needed_views(["layer_summary"])) - {"layer_summary"}, written
    assert written > set(computed_once(["layer_summary"]))
    ((sql,),) = raw.execute("SELECT sql FROM duckdb_views() WHERE view_name = '_rb_gpu_op_layers'").fetchall()
    assert str(scratch / "gpu_op_layers.parquet") in sql
    with pytest.raises(duckdb.Error):
        con.execute(f"COPY kernels TO '{scratch}/x.csv'")
    assert not (scratch / "x.csv").exists()
    del con, raw
    import gc

    gc.collect()
    assert not Path(spill).exists()


def analyze(normalized: Path, out: Path) -> Path:
    """`tracepipe analyze NORMALIZED --out OUT`, every view it writes by default."""
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "analyze", str(normalized), "--out", str(out), "-q"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def run_folder(nsys_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layout `tracepipe run --out RUN` writes (and README's build/): RUN/normalized and RUN/analysis."""
    run = tmp_path_factory.mktemp("run")
    shutil.copytree(nsys_out, run / "normalized")
    analyze(run / "normalized", run / "analysis")
    return run


def questions(tp: tracepipe.Traces, steps: bool = True) -> list[pl.DataFrame]:
    """The question methods' answers that read views (trace_ids reads a table)."""
    return [tp.layers(), tp.kernels("conv2"), tp.kernels("step"), tp.findings(), *([tp.steps()] if steps else [])]


def test_open_takes_an_analysis_folder_and_its_normalized_folder_beside(run_folder: Path, nsys_sqlite: Path) -> None:
    # A user handed build/analysis to tracepipe.open as to tracepipe sql: the questions read analyze's Parquet, and
    # what only the normalized folder holds (trace_meta, the tables) comes from the normalized/ beside it.
    (n, total) = (
        sqlite3.connect(nsys_sqlite)
        .execute('SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL')
        .fetchone()
    )
    with tracepipe.open(run_folder / "normalized") as ref, tracepipe.open(str(run_folder / "analysis")) as tp:
        assert tp.analysis and tp.normalized == (run_folder / "normalized").resolve()
        assert tp.trace_ids() == ref.trace_ids() == ["h200_smallcnn.nsys"]
        assert tp.layers()["kernels"].sum() == n and tp.layers()["gpu_time_ns"].sum() == total
        assert tp.table("kernels").height == n and "kernels" not in tp.names()  # the table from normalized/
        for got, expected in zip(questions(tp), questions(ref), strict=True):
            assert got.height > 0 and got.equals(expected)
        assert "1 traces, an analysis folder beside" in repr(tp)


def test_an_analysis_folder_alone_answers_its_views_and_names_the_folder_for_the_rest(
    run_folder: Path, nsys_sqlite: Path, tmp_path: Path
) -> None:
    alone = tmp_path / "elsewhere" / "analysis"  # no normalized/ beside it
    shutil.copytree(run_folder / "analysis", alone)
    (alone / "step_gpu_idle.parquet").unlink()  # as after `analyze --view` without it
    (n,) = sqlite3.connect(nsys_sqlite).execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    with tracepipe.open(run_folder / "normalized") as ref, tracepipe.open(alone) as tp:
        assert tp.normalized is None and repr(tp).endswith(": an analysis folder)")
        assert tp.layers()["kernels"].sum() == n
        for got, expected in zip(questions(tp, steps=False), questions(ref, steps=False), strict=True):
            assert got.height > 0 and got.equals(expected)
        table = r"trace_meta is a table of the normalized folder, and no normalized/ .*: tracepipe\.open\(\) the"
        with pytest.raises(BadInputError, match=table):
            tp.trace_ids()
        with pytest.raises(BadInputError, match="kernels is a table of the normalized folder"):
            tp.table("kernels")
        with pytest.raises(BadInputError, match=r"analyze wrote no step_gpu_idle\.parquet here"):
            tp.steps()
        with pytest.raises(KeyError, match="no table or view"):
            tp.table("nope")
    beside = tmp_path / "beside"  # the same folder with normalized/ beside it: steps() computed there
    shutil.copytree(alone, beside / "analysis")
    shutil.copytree(run_folder / "normalized", beside / "normalized")
    with tracepipe.open(run_folder / "normalized") as ref, tracepipe.open(beside / "analysis") as tp:
        assert tp.steps().height == 1 and tp.steps().equals(ref.steps())


def test_a_normalized_folder_of_other_traces_beside_is_not_the_source(run_folder: Path, tmp_path: Path) -> None:
    # normalized/ made again from other traces after analyze: its trace_meta would answer for traces the analysis
    # does not hold, so it is not taken
    from pipeline.normalize import normalize_file
    from tests.conftest import SMALLCNN

    normalize_file(SMALLCNN / "torch_trace.json.gz", tmp_path / "normalized")
    shutil.copytree(run_folder / "analysis", tmp_path / "analysis")
    with tracepipe.open(tmp_path / "analysis") as tp:
        assert tp.normalized is None and tp.layers().height > 0
        with pytest.raises(BadInputError, match="trace_meta is a table of the normalized folder"):
            tp.trace_ids()


def test_open_refuses_the_run_folder_as_tracepipe_sql_does(run_folder: Path) -> None:
    # RUN holds both analysis/ and normalized/: sql names them rather than guess, and so does open
    with pytest.raises(BadInputError) as refused:
        tracepipe.open(run_folder)
    wanted = f"give {run_folder / 'analysis'} or {run_folder / 'normalized'}"
    assert str(refused.value) == f"{run_folder}: the folder `tracepipe run` wrote: {wanted}"
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "sql", str(run_folder), "SELECT 1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 2 and wanted in r.stderr, r.stderr
