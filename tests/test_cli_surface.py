"""The command line's surface (issue 14): output formats, one-line errors, nothing-to-do exits, generated help."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import click
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tests.conftest import ROOT, SMALLCNN, gunzip_to


def tp(*args: object, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        check=False,
    )


def one_line_error(r: subprocess.CompletedProcess, code: int) -> str:
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


def raw_kernels(nsys_sqlite: Path) -> list[tuple[int, int]]:
    """(start, duration) of every kernel, straight from the nsys export."""
    con = sqlite3.connect(nsys_sqlite)
    return con.execute('SELECT start, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start').fetchall()


def test_output_format_from_the_extension(nsys_out: Path, nsys_sqlite: Path, tmp_path: Path) -> None:
    q = "SELECT start_ns, duration_ns FROM kernels ORDER BY start_ns"
    expected = raw_kernels(nsys_sqlite)
    for name in ("k.parquet", "k.csv", "k.json"):
        r = tp("sql", nsys_out, q, "-o", tmp_path / name)
        assert r.returncode == 0, r.stderr
    assert [tuple(r.values()) for r in pq.read_table(tmp_path / "k.parquet").to_pylist()] == expected
    rows = list(csv.reader(io.StringIO((tmp_path / "k.csv").read_text())))
    assert rows[0] == ["start_ns", "duration_ns"] and [tuple(map(int, r)) for r in rows[1:]] == expected
    lines = (tmp_path / "k.json").read_text().splitlines()
    assert [tuple(json.loads(line).values()) for line in lines] == expected
    # --format still wins over the extension; an unknown extension without --format is one line, exit 2
    r = tp("sql", nsys_out, q, "-o", tmp_path / "k.txt", "--format", "csv")
    assert r.returncode == 0 and (tmp_path / "k.txt").read_text().startswith("start_ns,duration_ns\n")
    assert "cannot tell the format" in one_line_error(tp("sql", nsys_out, q, "-o", tmp_path / "k.dat"), 2)


def test_output_into_a_missing_folder_is_one_line(nsys_out: Path, tmp_path: Path) -> None:
    err = one_line_error(tp("sql", nsys_out, "SELECT 1", "-o", tmp_path / "nope" / "x.parquet"), 2)
    assert "no folder" in err and ".tmp-" not in err
    assert not (tmp_path / "nope").exists()
    err = one_line_error(tp("sql", nsys_out, "SELECT 1", "-o", nsys_out / "trace_meta" / "x.csv"), 2)
    assert "inside the normalized data" in err


def test_csv_writes_list_columns_as_json_text(nsys_out: Path, nsys_sqlite: Path) -> None:
    q = (
        "SELECT trace_id, list(duration_ns ORDER BY start_ns) AS durations, "
        "list('d' || duration_ns ORDER BY start_ns) AS labels FROM kernels GROUP BY 1"
    )
    r = tp("sql", nsys_out, q, "--format", "csv")
    assert r.returncode == 0, r.stderr
    (header, row) = list(csv.reader(io.StringIO(r.stdout)))
    assert header == ["trace_id", "durations", "labels"]
    durations = [d for _, d in raw_kernels(nsys_sqlite)]
    assert json.loads(row[1]) == durations
    assert json.loads(row[2]) == [f"d{d}" for d in durations]  # strings quoted: JSON, not DuckDB's [a, b]


def test_json_keeps_numbers_numbers(nsys_out: Path, nsys_sqlite: Path) -> None:
    q = (
        "SELECT sum(duration_ns) AS total, sum(duration_ns::HUGEINT) AS huge, "
        "sum(duration_ns)::DECIMAL(20, 3) / 1000 AS total_us, 2::DECIMAL(4,1) AS two FROM kernels"
    )
    r = tp("sql", nsys_out, q, "--format", "json")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout, parse_float=Decimal)
    total = sum(d for _, d in raw_kernels(nsys_sqlite))
    assert row == {"total": total, "huge": total, "total_us": Decimal(total) / 1000, "two": 2}
    assert isinstance(row["total"], int) and isinstance(row["huge"], int)


def test_normalize_nothing_to_do_exits_non_zero_without_creating_out(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "sub" / "notes.txt").write_text("no traces here")
    err = one_line_error(tp("normalize", empty, "--out", tmp_path / "out1"), 2)
    assert "no trace files" in err and not (tmp_path / "out1").exists()
    err = one_line_error(tp("normalize", tmp_path / "missing.sqlite", "--out", tmp_path / "out2"), 2)
    assert "missing.sqlite: no such file or folder" in err and not (tmp_path / "out2").exists()


def test_normalize_summary_shows_full_ids_and_skipped_reports(tmp_path: Path) -> None:
    folder = tmp_path / "traces" / ("a_capture_folder_with_a_long_name_" * 2 + "end")
    folder.mkdir(parents=True)
    (folder / "nsys.sqlite.gz").write_bytes((SMALLCNN / "nsys.sqlite.gz").read_bytes())
    (folder / "nsys.nsys-rep").write_bytes(b"a report whose export sits beside it")
    r = tp("normalize", tmp_path / "traces", "--out", tmp_path / "out", COLUMNS="60")
    assert r.returncode == 0, r.stderr
    trace_id = f"{folder.name}.nsys"
    cells = [line.split("│")[1].strip() for line in r.stdout.splitlines() if line.startswith("│")]
    assert "".join(cells) == trace_id  # folded over lines, never cut
    # every column is there, the last one too, within the 60 columns (a table cut at the right edge loses it)
    assert all(len(line) <= 60 for line in r.stdout.splitlines() if line.startswith(("│", "┃", "┏", "└")))
    assert "".join(line.split("│")[-2].strip() for line in r.stdout.splitlines() if line.startswith("│")) == "written"
    assert re.search(r"skipped .*nsys\.nsys-rep: its \.sqlite export beside it is read instead", r.stdout)


def test_analyze_and_sql_help_list_every_view_and_table_from_their_definitions() -> None:
    from pipeline.catalog import table_descriptions, view_descriptions
    from pipeline.schema import TABLES

    views = {p.stem for p in (ROOT / "sql").glob("*.sql") if not p.stem.startswith("_")}  # private: no entry point
    assert set(view_descriptions()) == views and all(view_descriptions().values())
    assert set(TABLES) <= set(table_descriptions()) and all(table_descriptions().values())
    # each says what the table holds, not its own name or how it is registered (a docstring's first line)
    placeholders = {n: d for n, d in table_descriptions().items() if d.startswith(f"``{n}``") or "registered" in d}
    assert placeholders == {}
    for command, expected in (("analyze", views), ("sql", views | set(table_descriptions()))):
        r = tp(command, "--help", COLUMNS="200")
        assert r.returncode == 0, r.stderr
        listed = set(re.findall(r"^  ([a-z][a-z0-9_]*)\s{2,}\S", r.stdout, flags=re.M))
        assert listed == expected, command
    r = tp("analyze", "--help", COLUMNS="200")
    first = view_descriptions()["layer_summary"].split()[:6]
    assert " ".join(first) in " ".join(r.stdout.split())  # the description comes from the SQL header


def test_analyze_without_views_exits_non_zero(monkeypatch: pytest.MonkeyPatch, nsys_out: Path, tmp_path: Path) -> None:
    from pipeline import catalog
    from pipeline.cli import main

    monkeypatch.setattr(catalog, "SQL_DIR", tmp_path / "no_views")
    result = CliRunner().invoke(main, ["analyze", str(nsys_out), "--out", str(tmp_path / "a")])
    assert result.exit_code == 1 and "no views in" in result.output
    assert not (tmp_path / "a").exists()


def _all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    for name, cmd in group.commands.items():
        found.append(((*prefix, name), cmd))
        if isinstance(cmd, click.Group):
            found += _all_commands(cmd, (*prefix, name))
    return found


def test_every_subcommand_has_examples_and_gzip_only_where_it_acts() -> None:
    from pipeline.cli import main

    commands = _all_commands(main)
    assert {"normalize", "analyze", "sql", "report", "capture", "nsys", "ncu", "torch", "all"} <= {
        path[-1] for path, _ in commands
    }
    for path, _cmd in commands:
        result = CliRunner().invoke(main, [*path, "--help"])
        assert result.exit_code == 0, path
        assert re.search(r"Examples?:\n\s+tracepipe ", result.output), path
        has_gzip = "--gzip" in result.output
        assert has_gzip == (path in (("capture", "nsys"), ("capture", "all"))), path


def test_capture_on_a_machine_without_gpu_or_nsys_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The preflight's probes pointed at an empty machine: exit 2, one line, no folder made."""
    from pipeline.capture import tools as capture_cli
    from pipeline.cli import main

    monkeypatch.setattr(capture_cli, "NVIDIA_PROC_GPUS", tmp_path / "no_driver")
    monkeypatch.setattr(capture_cli, "find_tool", lambda _name: None)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    for sub in ("nsys", "ncu", "all", "torch"):
        out = tmp_path / sub
        result = CliRunner().invoke(main, ["capture", sub, "-m", "m:f", "-i", "1,3,8,8", "-o", str(out)])
        assert result.exit_code == 2, (sub, result.output)
        assert len(result.output.strip().splitlines()) == 1 and "needs an NVIDIA GPU" in result.output
        assert ("nsys (not on PATH" in result.output) == (sub == "nsys")
        assert not out.exists()


def test_capture_nsys_on_this_machine(tmp_path: Path) -> None:
    """The real probes, in a real process, on a machine where the driver lists no GPU (this CPU box, CI)."""
    from pipeline.capture.tools import NVIDIA_PROC_GPUS

    if NVIDIA_PROC_GPUS.is_dir():  # a GPU host: the in-process test above covers the rule
        pytest.skip("this machine has an NVIDIA driver")
    r = tp("capture", "nsys", "-m", "torchvision.models:resnet18", "-i", "1,3,32,32", "-o", tmp_path / "cap")
    assert "capture nsys needs an NVIDIA GPU" in one_line_error(r, 2)
    assert not (tmp_path / "cap").exists()


def test_a_traces_own_texts_print_as_they_are_not_as_rich_markup(tmp_path: Path) -> None:
    # Rich reads `[...]` in a printed string as a style and drops a lowercase one it does not know: a range
    # `[enc] conv1` printed as ` conv1` in the report's and diff's summaries. The small CNN's ranges so renamed.
    db = sqlite3.connect(gunzip_to(ROOT / "sample_traces/h200_smallcnn/nsys.sqlite.gz", tmp_path / "t.sqlite"))
    assert db.execute("UPDATE NVTX_EVENTS SET text = '[enc] ' || text WHERE eventType = 59").rowcount > 0
    db.commit()
    db.close()
    r = tp("run", tmp_path / "t.sqlite", "--out", tmp_path / "o", "-q")
    assert r.returncode == 0, r.stderr
    r = tp("report", tmp_path / "o" / "analysis", "--out", tmp_path / "rep", "-j", "1", COLUMNS="200")
    assert r.returncode == 0, r.stderr
    assert re.search(r"\d% \[enc\] conv\d", r.stdout), r.stdout  # the summary table's top layer
    r = tp("diff", tmp_path / "o" / "normalized", tmp_path / "t.sqlite", COLUMNS="200")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^ \[enc\] step/\[enc\] conv1 +\d", r.stdout, flags=re.M), r.stdout  # a row of its table


@pytest.mark.parametrize("command", ["run", "normalize", "analyze"])
def test_an_out_that_is_a_file_is_bad_input_before_any_work(tmp_path: Path, command: str) -> None:
    # `run --out FILE` was NotADirectoryError, `normalize` FileExistsError, `analyze` NotADirectoryError: exit 1,
    # which says "a bug in the tool".
    taken = tmp_path / "taken"
    taken.write_text("a user's file")
    src = ROOT / "sample_traces/h200_smallcnn/nsys.sqlite.gz"
    if command == "analyze":
        assert tp("normalize", src, "--out", tmp_path / "n", "-q").returncode == 0
        src = tmp_path / "n"
    for out in (taken, taken / "sub"):
        r = tp(command, src, "--out", out, "-q")
        line = one_line_error(r, 2)
        assert f"cannot write into {out}: {taken} is a file; give a folder (--out)" in line
    assert taken.read_text() == "a user's file"


def test_a_misspelt_view_is_refused_before_normalizing_with_the_closest_name(tmp_path: Path) -> None:
    r = tp("run", SMALLCNN / "nsys.sqlite.gz", "--out", tmp_path / "o", "--view", "kernel_layer", "-q")
    assert r.returncode == 2 and "no such view(s): kernel_layer (did you mean kernel_layers?)" in r.stderr
    assert not (tmp_path / "o").exists()  # nothing normalized first


def test_sql_prints_every_statements_result_in_order(nsys_out: Path) -> None:
    # `tracepipe sql DIR "SELECT 1 AS a; SELECT 2 AS b"` printed only b; DuckDB's CLI prints each result
    r = tp("sql", nsys_out, "SELECT 1 AS a; SELECT 'x;y' AS b; SELECT count(*) AS n FROM kernels", "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "a\n1\nb\nx;y\nn\n33\n"  # split by DuckDB's parser: the ';' in the string splits nothing
    r = tp("sql", nsys_out, "SELECT 1 AS first_one; SELECT 2 AS second_one")
    assert r.returncode == 0, r.stderr
    assert re.search(r"│\s+first_one\s+│.*│\s+1\s+│.*│\s+second_one\s+│.*│\s+2\s+│", r.stdout, re.S), r.stdout
    # CREATE prints nothing (DuckDB's Python API answers it with a "Count" table), as in DuckDB's CLI
    r = tp("sql", nsys_out, "CREATE TEMP TABLE t AS SELECT count(*) AS n FROM kernels; SELECT n * 2 AS twice FROM t")
    assert r.returncode == 0 and "Count" not in r.stdout and re.search(r"│\s+66\s+│", r.stdout), r.stdout


def test_sql_stops_at_the_first_failing_statement(nsys_out: Path) -> None:
    # DuckDB's CLI (-c, or one line of a script) stops there too: the rest most often read what it was to make
    r = tp("sql", nsys_out, "SELECT 1 AS a; SELECT nope FROM kernels; SELECT 3 AS c", "--format", "csv")
    err = one_line_error(r, 2)
    assert r.stdout == "a\n1\n"
    assert err.startswith('error: query failed: Binder Error: Referenced column "nope" not found'), err
    # a syntax error or a statement that could write, anywhere in QUERY: said before any statement runs
    for query, said in (
        ("SELECT 1 AS a; SELEC 2", 'Parser Error: syntax error at or near "SELEC"'),
        ("SELECT 1 AS a; COPY kernels TO 'k.csv'", "COPY statements are not allowed"),
    ):
        r = tp("sql", nsys_out, query, "--format", "csv")
        assert said in one_line_error(r, 2) and r.stdout == ""


def test_sql_runs_a_pivot_and_a_session_variable(nsys_out: Path, nsys_sqlite: Path) -> None:
    # DuckDB makes a PIVOT without an IN list a MULTI statement and SET VARIABLE a SET: both only read, both run
    raw = dict(
        sqlite3.connect(nsys_sqlite).execute("SELECT streamId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1")
    )
    r = tp("sql", nsys_out, "PIVOT (SELECT stream_id FROM kernels) ON stream_id USING count(*)", "--format", "csv")
    assert r.returncode == 0, r.stderr
    (row,) = csv.DictReader(io.StringIO(r.stdout))
    assert {int(k): int(v) for k, v in row.items()} == raw
    r = tp("sql", nsys_out, "SET VARIABLE n = 33; SELECT getvariable('n') * 2 AS twice", "--format", "csv")
    assert r.returncode == 0 and r.stdout == "twice\n66\n", (r.stdout, r.stderr)


def test_sql_output_file_takes_one_result(nsys_out: Path, tmp_path: Path) -> None:
    # one file holds one table: two results to -o are refused before anything runs, naming the fix
    target = tmp_path / "two.parquet"
    err = one_line_error(tp("sql", nsys_out, "SELECT 1 AS a; SELECT 2 AS b", "-o", target), 2)
    assert "writes one result and QUERY has 2 statements that return rows" in err and "leave out -o" in err
    assert not target.exists()
    # statements that make what the one result reads are no result: the file holds that one
    target = tmp_path / "one.csv"
    r = tp("sql", nsys_out, "CREATE TEMP TABLE t AS SELECT count(*) AS n FROM kernels; SELECT n FROM t", "-o", target)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert target.read_text() == "n\n33\n"


def test_view_help_names_every_view_written_only_on_request() -> None:
    # `--view`'s default: every public view but those whose header says `-- analyze: on request`; the help named one
    # of four. Read from the SQL headers here, so a view marked on request later fails this until the help says so.
    from pipeline.analyze.views import ON_REQUEST
    from pipeline.catalog import SQL_DIR

    on_request = sorted(p.stem for p in SQL_DIR.glob("*.sql") if ON_REQUEST in p.read_text())
    assert len(on_request) == 4
    for command in ("analyze", "run"):
        text = " ".join(click.unstyle(tp(command, "--help").stdout).split())
        option = text.split("--view TEXT")[1].split(" --")[0]
        assert "four written on request" in option and all(v in option for v in on_request), (command, option)


def test_a_scheduler_that_is_not_one_is_a_bad_setting(tmp_path: Path) -> None:
    # `--scheduler notaurl` gave dask's ValueError, an unreachable one its OSError, with exit 1 (a bug's code).
    r = tp("normalize", SMALLCNN / "torch_trace.json.gz", "--out", tmp_path / "n", "--scheduler", "notaurl")
    said = one_line_error(r, 2)
    assert "--scheduler notaurl: no Dask scheduler answers there" in said
