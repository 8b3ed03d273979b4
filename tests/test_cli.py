"""The tracepipe command line: batch normalize, incremental re-runs, analyze outputs, read-only sql."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import SMALLCNN

TP = [sys.executable, "-m", "pipeline.cli"]


def tp(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([*TP, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, check=False)


def test_help_teaches_every_command() -> None:
    r = tp("--help")
    assert r.returncode == 0
    for cmd in ("normalize", "analyze", "sql"):
        assert cmd in r.stdout
        sub = tp(cmd, "--help")
        assert sub.returncode == 0 and "Example" in sub.stdout, cmd


def test_batch_continues_past_a_bad_file_and_reruns_only_it(tmp_path: Path) -> None:
    traces, out = tmp_path / "traces", tmp_path / "out"
    (traces / "good").mkdir(parents=True)
    (traces / "bad").mkdir()
    shutil.copy(SMALLCNN / "nsys.sqlite.gz", traces / "good" / "nsys.sqlite.gz")
    data = (SMALLCNN / "nsys.sqlite.gz").read_bytes()
    (traces / "bad" / "nsys.sqlite.gz").write_bytes(data[: len(data) // 3])

    r = tp("normalize", traces, "--out", out, "--json")
    assert r.returncode == 2
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert {x["path"].split("/")[-2]: ("error" in x) for x in lines} == {"good": False, "bad": True}
    assert "bad/nsys.sqlite.gz" in r.stderr and "gzip stream ends early" in r.stderr
    assert "Traceback" not in r.stderr
    assert pq.read_table(next((out / "kernels").glob("trace_id=good.nsys/*.parquet"))).num_rows == 33
    assert not list(out.glob("*/trace_id=bad.nsys"))

    shutil.copy(SMALLCNN / "nsys.sqlite.gz", traces / "bad" / "nsys.sqlite.gz")
    r = tp("normalize", traces, "--out", out, "--json")
    assert r.returncode == 0, r.stderr
    status = {json.loads(x)["trace_id"]: json.loads(x)["skipped"] for x in r.stdout.splitlines()}
    assert status == {"good.nsys": True, "bad.nsys": False}


def test_analyze_writes_parquet_and_csv_on_request(nsys_out: Path, tmp_path: Path) -> None:
    r = tp("analyze", nsys_out, "--out", tmp_path, "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows["kernel_layers"] == 33 and rows["layer_timeline"] == 25
    assert pq.read_table(tmp_path / "layer_summary.parquet").num_rows == rows["layer_summary"]
    assert not list(tmp_path.glob("*.csv"))  # Parquet only unless asked
    r = tp("analyze", nsys_out, "--out", tmp_path, "--view", "layer_summary", "--csv", "-q")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "layer_summary.csv").read_text().splitlines()[0].startswith("trace_id,path,layer")
    assert not list(tmp_path.glob(".*tmp*"))
    assert "kernel_sm_load" not in rows and not (tmp_path / "kernel_sm_load.parquet").exists()  # on request only
    r = tp("analyze", nsys_out, "--out", tmp_path, "--view", "kernel_sm_load", "--json")
    assert json.loads(r.stdout) == {"kernel_sm_load": 33 * 132}


def test_sql_formats_and_read_only(nsys_out: Path, tmp_path: Path) -> None:
    r = tp("sql", nsys_out, "SELECT layer, count(*) AS n FROM kernel_layers GROUP BY 1 ORDER BY 1", "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:3] == ["layer,n", "conv1,8", "conv2,8"]
    r = tp("sql", nsys_out, "SELECT count(*) AS n FROM kernels", "--format", "json")
    assert json.loads(r.stdout) == {"n": 33}
    target = next((nsys_out / "kernels").glob("*/*.parquet"))
    before = target.read_bytes()
    r = tp("sql", nsys_out, f"COPY (SELECT 1 AS x) TO '{target}' (FORMAT parquet)")
    assert r.returncode == 2 and "read-only" in r.stderr
    r = tp("sql", nsys_out, "SET enable_external_access = true")
    assert r.returncode == 2
    assert target.read_bytes() == before


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "statement",
    [
        "COPY (SELECT 1 AS x) TO '{inside}/new.parquet' (FORMAT parquet)",  # the sandbox allows the folder
        "SELECT 1; COPY kernels TO '{inside}/kernels/extra.parquet'",  # a write behind a query
        "ATTACH '{inside}/db.duckdb' AS d",
        "EXPORT DATABASE '{inside}/export'",
        "COPY (SELECT 1 AS x) TO '{outside}/x.csv'",
        "SELECT * FROM read_csv('{outside}/passwd.csv')",
        "SELECT * FROM read_text('{inside}/../passwd.csv')",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET allowed_directories = ['/']",
        "RESET enable_external_access",
    ],
)
def test_sql_cannot_write_in_or_read_out_of_the_folder(nsys_out: Path, tmp_path: Path, statement: str) -> None:
    data = tmp_path / "norm"
    shutil.copytree(nsys_out, data)
    (tmp_path / "passwd.csv").write_text("secret\n1\n")
    before = _tree(tmp_path)
    r = tp("sql", data, statement.format(inside=data, outside=tmp_path))
    assert r.returncode == 2, (statement, r.stdout)
    assert "secret" not in r.stdout
    assert _tree(tmp_path) == before


def test_sql_reads_through_the_sandbox(nsys_out: Path) -> None:
    """Queries, plans and in-memory objects still work; the views scan the folder's Parquet natively."""
    r = tp(
        "sql",
        nsys_out,
        "CREATE TEMP TABLE t AS SELECT count(*) AS n FROM kernel_layers; SELECT n FROM t",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"n": 33}
    r = tp("sql", nsys_out, "EXPLAIN SELECT * FROM kernels", "--format", "csv")
    plan = r.stdout.upper()  # DuckDB's own scan (of the committed files), not a registered Arrow object
    assert r.returncode == 0 and ("READ_PARQUET" in plan or "PARQUET_SCAN" in plan) and "ARROW" not in plan, plan


def test_sql_creates_only_the_views_a_query_names(nsys_out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A query gets the views its statements name (and what they read), not all ~46; a view the parser misses
    still answers, from a connection with every view."""
    from click.testing import CliRunner

    from pipeline.analyze import engine, named_relations, readonly
    from pipeline.cli import main

    q = "WITH x AS (SELECT * FROM kernel_layers) SELECT count(*) FROM x JOIN main.Layer_Summary USING (path)"
    assert named_relations(q) == {"x", "kernel_layers", "layer_summary"}  # a CTE too: no view of that name
    assert named_relations("SELECT * FROM kernel_layers k, main.layer_summary s") == {"kernel_layers", "layer_summary"}
    assert named_relations("SELECT 6 * 7 AS a; SELECT * FROM findings") == {"findings"}  # SELECT 6 * 7 needs none
    assert named_relations("SHOW TABLES") is None and named_relations("SELECT * FROM duckdb_views()") is None
    # a statement DuckDB cannot prepare with parameters in it (the Perfetto export's GPU table) still names its views
    made = "CREATE TEMP TABLE t AS SELECT * FROM kernel_layers k, kernel_waves w WHERE k.x = $t"
    assert named_relations(made) == {"t", "kernel_layers", "kernel_waves"}
    assert (
        named_relations("SELECT table_name FROM information_schema.tables") is None
    )  # it names `tables`, yet lists all
    asked: list[object] = []  # the views each creation was asked for: none at connect, then as statements name them
    real = engine.create_views

    def create_views(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        asked.append(kwargs.get("only"))
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "create_views", create_views)
    r = CliRunner().invoke(main, ["sql", str(nsys_out), "SELECT count(*) AS n FROM kernel_layers", "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.output) == {"n": 33}
    assert asked[0] == [] and asked[1:] and all(a == ["kernel_layers"] for a in asked[1:]), asked
    monkeypatch.setattr(readonly, "named_relations", lambda query: {"kernels"})  # as if the parser missed the view
    asked.clear()
    r = CliRunner().invoke(main, ["sql", str(nsys_out), "SELECT count(*) AS n FROM kernel_layers", "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.output) == {"n": 33} and asked == [[], None]  # then every view


def test_the_views_a_query_names_whatever_the_default_connection_holds() -> None:
    # A notebook's own `duckdb.execute("BEGIN")` on DuckDB's default connection: the parser's first failed try (a
    # statement with a parameter) aborted that transaction, every later one failed, and no view was found.
    import duckdb

    from pipeline.analyze import named_relations

    made = "CREATE TEMP TABLE t AS SELECT * FROM kernel_layers k, kernel_waves w WHERE k.x = $t"
    duckdb.execute("BEGIN")
    try:
        assert named_relations(made) == {"t", "kernel_layers", "kernel_waves"}
        assert named_relations("SELECT * FROM findings") == {"findings"}
    finally:
        duckdb.execute("ROLLBACK")


def test_sql_on_a_folder_that_is_not_normalized(tmp_path: Path) -> None:
    r = tp("sql", tmp_path, "SELECT 1")
    assert r.returncode == 2 and "neither a normalized folder" in r.stderr and "analysis folder" in r.stderr


def test_sql_over_an_analysis_folder_reads_its_views_as_written(nsys_out: Path, tmp_path: Path) -> None:
    """`tracepipe sql build/analysis`: analyze's Parquet by view name, read as written (the file's rows, not the view
    computed again), in the same sandbox; views analyze did not write are absent; --device needs the computation."""
    out = tmp_path / "a"
    a = tp("analyze", nsys_out, "--out", out, "--view", "layer_summary", "--view", "kernel_layers", "-q")
    assert a.returncode == 0, a.stderr
    want = pq.read_table(out / "layer_summary.parquet").select(["path", "kernels", "gpu_time_ns"]).to_pylist()
    r = tp("sql", out, "SELECT path, kernels, gpu_time_ns FROM layer_summary", "--format", "json")
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    key = lambda row: tuple((v is None, v) for v in row.values())  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key) and len(want) > 3
    # the file's rows: a row taken out of it is missing from the answer, as a computed view would not be
    pq.write_table(pq.read_table(out / "kernel_layers.parquet").slice(1), out / "kernel_layers.parquet")
    r = tp("sql", out, "SELECT count(*) AS n FROM kernel_layers", "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"n": 32}, r.stderr
    r = tp("sql", out, "SELECT count(*) FROM findings")
    assert r.returncode == 2 and "findings" in r.stderr  # not written by this analyze
    (tmp_path / "passwd.csv").write_text("secret\n1\n")
    before = _tree(tmp_path)
    for statement in (f"COPY (SELECT 1 AS x) TO '{out}/x.csv'", f"SELECT * FROM read_csv('{tmp_path}/passwd.csv')"):
        r = tp("sql", out, statement)
        assert r.returncode == 2 and "secret" not in r.stdout, statement
    assert _tree(tmp_path) == before
    r = tp("sql", out, "SELECT 1", "--device", "rtx3090")
    assert r.returncode == 2 and "--device" in r.stderr


def test_an_internal_error_on_one_input_is_data_not_the_end_of_the_batch(monkeypatch, tmp_path: Path) -> None:
    from pipeline.normalize import batch

    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(batch, "normalize_file", broken)
    outcome = batch.normalize_one(0, tmp_path / "x.sqlite", tmp_path / "out")
    assert outcome.internal and "internal error RuntimeError: boom" in outcome.error


def test_folder_scan_skips_a_report_only_beside_its_own_export(tmp_path: Path) -> None:
    from pipeline.normalize.batch import expand_inputs

    for name in (
        "rank0/nsys.nsys-rep",
        "rank1/nsys.nsys-rep",
        "rank1/nsys.sqlite.gz",
        "rank1/manifest.json",
        "rank1/capture_model.py",
        ".staging/x.sqlite",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    got = [p.relative_to(tmp_path).as_posix() for p in expand_inputs((tmp_path,))]
    assert got == ["rank0/nsys.nsys-rep", "rank1/nsys.sqlite.gz"]


def _threads_after_cli_imports(env: dict[str, str]) -> tuple[int, str]:
    """OS threads of a fresh interpreter once it has imported the command line (and with it numpy), and the
    OPENBLAS_NUM_THREADS it then sees."""
    code = (
        "import os, pipeline.cli, numpy\nprint(len(os.listdir('/proc/self/task')), os.environ['OPENBLAS_NUM_THREADS'])"
    )

    env = {**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    threads, setting = out.split()
    return int(threads), setting


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="OpenBLAS starts no thread of its own on one core")
def test_the_command_line_starts_no_openblas_thread_pool_and_keeps_a_users_setting() -> None:
    """numpy's OpenBLAS would start a spinning thread per core at import: 2 CPU-s on a 16-core host."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    unset = _threads_after_cli_imports(env)
    one = _threads_after_cli_imports({**env, "OPENBLAS_NUM_THREADS": "1"})
    assert unset == one  # the same threads as with OpenBLAS held to one by hand
    assert _threads_after_cli_imports({**env, "OPENBLAS_NUM_THREADS": "2"})[1] == "2"


def test_the_users_program_under_capture_gets_the_environment_the_user_gave() -> None:
    """The OpenBLAS setting is tracepipe's own: a training script run by `capture` keeps its numpy threads (and a
    user's own OPENBLAS_NUM_THREADS reaches it as given)."""
    code = (
        "import os, pathlib, pipeline.cli\n"
        "from pipeline.capture.cli import Job\n"
        "job = Job(pathlib.Path('o'), None, '', (), 'cuda', 'float32', 1, 1, 'model', 'step', None, (), None, False,\n"
        "          inductor_cache=pathlib.Path('c'))\n"
        "print(os.environ['OPENBLAS_NUM_THREADS'], job.env().get('OPENBLAS_NUM_THREADS', 'unset'))"
    )
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    base["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    for given, want in ((None, "1 unset"), ("3", "3 3")):
        env = base if given is None else {**base, "OPENBLAS_NUM_THREADS": given}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        assert out.stdout.split() == want.split(), (given, out.stdout)


def test_sql_findings_equal_analyzes(nsys_out: Path, tmp_path: Path) -> None:
    """`findings` read through `tracepipe sql` (its shared views computed once into temp tables) gives analyze's rows;
    as nested views its tree of 24 views ran out of DuckDB's memory on a 231k-kernel export."""
    r = tp(
        "sql",
        nsys_out,
        "SELECT rule, path, kernel, launches, gpu_time_ns FROM findings ORDER BY ALL",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    got = [tuple(json.loads(line).values()) for line in r.stdout.splitlines() if line.strip()]  # JSON lines
    a = tp("analyze", nsys_out, "--out", tmp_path / "a", "--view", "findings", "-q")
    assert a.returncode == 0, a.stderr
    t = pq.read_table(tmp_path / "a" / "findings.parquet").select(["rule", "path", "kernel", "launches", "gpu_time_ns"])
    want = sorted(
        zip(*(c.to_pylist() for c in t.columns), strict=True), key=lambda row: tuple((v is None, v) for v in row)
    )
    assert want
    assert sorted(got, key=lambda row: tuple((v is None, v) for v in row)) == want


def test_a_wrong_folder_is_said_for_what_it_is_with_the_folder_to_give(tmp_path: Path) -> None:
    # A user's first hour: the parent folder `tracepipe run --out` wrote, a path that does not exist and a trace
    # file were all told "neither a normalized folder nor an analysis folder", and report, given the normalized
    # folder, advised analyzing it into itself.
    run = tmp_path / "run"
    (run / "normalized" / "trace_meta").mkdir(parents=True)
    (run / "analysis").mkdir()
    trace = SMALLCNN / "nsys.sqlite.gz"
    cases = [
        (
            ("sql", run, "SELECT 1"),
            f"the folder `tracepipe run` wrote: give {run / 'analysis'} or {run / 'normalized'}",
        ),
        (("findings", run), f"give {run / 'analysis'} or {run / 'normalized'}"),
        (("report", run, "--out", tmp_path / "r"), f"the folder `tracepipe run` wrote: give {run / 'analysis'}"),
        (("export", "perfetto", run), f"the folder `tracepipe run` wrote: give {run / 'normalized'}"),
        (("sql", tmp_path / "nope", "SELECT 1"), "no such folder"),
        (("findings", trace), "a file, not a folder: give an --out folder of tracepipe (a trace file: `tracepipe run"),
        (("report", run / "normalized", "--out", tmp_path / "r"), f"run `tracepipe analyze {run / 'normalized'} --out"),
    ]
    for args, said in cases:
        r = tp(*args)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
