"""The `tracepipe sql` shell, driven through a pseudo-terminal as a user types into it (pexpect)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from pipeline.catalog import table_descriptions, view_descriptions

ROOT = Path(__file__).resolve().parents[1]
#: The prompt at the start of a line (after the terminal-mode escapes prompt_toolkit writes first), so that
#: "Ctrl-D " in a result is no prompt.
PROMPT = r"(?:\n|\x1b\[\?25h)D "


def _env(history: Path) -> dict[str, str]:
    # TERM=dumb: prompt_toolkit's plain mode (no cursor-position queries a pseudo-terminal would not answer)
    return {**os.environ, "PYTHONPATH": str(ROOT), "TRACEPIPE_HISTORY": str(history), "TERM": "dumb"}


def shell(normalized: Path, history: Path, width: int = 200) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "pipeline.cli", "sql", str(normalized)],
        env=_env(history),
        encoding="utf-8",
        timeout=60,
        dimensions=(50, width),
        cwd=str(history.parent),
    )
    child.expect(PROMPT)
    return child


def settle() -> None:
    """Control keys typed before prompt_toolkit has the terminal in raw mode would reach the tty driver."""
    time.sleep(0.4)


def test_ctrl_c_cancels_the_query_and_the_line_and_keeps_the_shell(nsys_out: Path, tmp_path: Path) -> None:
    child = shell(nsys_out, tmp_path / "history")
    # long enough to still be running when Ctrl-C comes (hours of hashing), short to write
    child.sendline("SELECT count(*) FROM range(1000000000000) a WHERE hash(a.range) = 1;")
    time.sleep(1.0)
    child.sendintr()
    child.expect_exact("interrupted")
    child.expect(PROMPT)
    settle()
    child.send("SELECT 'half a line")
    child.sendintr()  # at the prompt: the line is dropped, the shell stays
    child.expect(PROMPT)
    child.sendline("SELECT 6 * 7 AS answer;")
    child.expect_exact("42")
    child.expect(PROMPT)
    child.sendline(".quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_multiline_statements_split_by_the_tokenizer(nsys_out: Path, tmp_path: Path) -> None:
    child = shell(nsys_out, tmp_path / "history")
    child.sendline("SELECT 'ends with a;")  # the ';' is inside a string: the statement goes on
    child.expect_exact("· ")
    child.sendline("' AS s, -- a comment;")
    child.expect_exact("· ")
    child.sendline("2 AS n; SELECT 3 AS m;")
    child.expect_exact("ends with a;")
    child.expect(r"│\s+m\s+│")  # the second statement of the line ran too
    child.expect(PROMPT)
    child.sendline(".quit")
    child.expect(pexpect.EOF)


def test_dot_commands(nsys_out: Path, tmp_path: Path) -> None:
    child = shell(nsys_out, tmp_path / "history")
    child.sendline(".help")
    child.expect_exact(".schema [PATTERN]")
    child.expect(PROMPT)
    child.sendline(".tables")
    child.expect(PROMPT)
    listed = [line.split()[0] for line in child.before.splitlines() if line.strip() and ".tables" not in line]
    assert set(listed) == set(table_descriptions()) | set(view_descriptions())  # no _ds_/_py_/_empty_ names
    child.sendline(".schema kernels")
    child.expect_exact("duration_ns")
    child.expect(PROMPT)
    child.sendline(".schema _py_arch_limits")
    child.expect_exact("no table or view '_py_arch_limits'")
    child.expect(PROMPT)
    child.sendline(".mode csv")
    child.expect(PROMPT)
    child.sendline("SELECT layer, count(*) AS n FROM kernel_layers WHERE layer = 'conv1' GROUP BY 1;")
    child.expect_exact("layer,n")
    child.expect_exact("conv1,8")
    child.expect(PROMPT)
    child.sendline(".mode json")
    child.expect(PROMPT)
    child.sendline("SELECT sum(duration_ns) AS total FROM kernels;")
    child.expect(r'\{"total": (\d+)\}')
    total = int(child.match.group(1))
    child.expect(PROMPT)
    child.sendline(".mode line")
    child.expect(PROMPT)
    child.sendline("SELECT 1 AS a, 'x' AS bb;")
    child.expect_exact(" a = 1")
    child.expect_exact("bb = x")
    child.expect(PROMPT)
    child.sendline(".mode markdown")
    child.expect(PROMPT)
    child.sendline("SELECT 1 AS a;")
    child.expect_exact("| a |")
    child.expect(PROMPT)
    child.sendline(".mode nope")
    child.expect_exact("unknown mode 'nope'")
    child.expect(PROMPT)
    child.sendline("\\q")
    child.expect(pexpect.EOF)
    from tests.conftest import q

    assert total == q(nsys_out, "SELECT sum(duration_ns) FROM kernels")[0][0]


def test_maxrows_and_wide_results_elide_like_duckdb(nsys_out: Path, tmp_path: Path) -> None:
    child = shell(nsys_out, tmp_path / "history", width=100)
    child.sendline(".maxrows 4")
    child.expect(PROMPT)
    child.sendline("SELECT " + ", ".join(f"{i} AS column_{i}" for i in range(41)) + " FROM range(10);")
    child.expect(PROMPT)
    out = child.before
    header = next(line for line in out.splitlines() if line.startswith("│") and "column_0" in line)
    assert "column_40" in header and "column_20" not in header and "…" in header  # middle columns elided
    assert max(len(line) for line in out.splitlines() if line.startswith(("┌", "│"))) <= 100
    assert "10 rows (4 shown)" in out and "41 columns" in out
    child.sendline(".quit")
    child.expect(pexpect.EOF)


def test_output_writes_only_a_new_file_outside_the_data(nsys_out: Path, tmp_path: Path) -> None:
    existing = tmp_path / "keep.csv"
    existing.write_text("precious\n")
    child = shell(nsys_out, tmp_path / "history")
    for target, why in (
        (existing, "exists"),
        (nsys_out / "kernels" / "x.csv", "inside the normalized data"),
        (tmp_path / "no" / "x.csv", "no folder"),
        ("|cat", "does not start programs"),
    ):
        child.sendline(f".output {target}")
        child.expect_exact(why)
        child.expect(PROMPT)
    child.sendline(".mode csv")
    child.sendline(f".output {tmp_path / 'result.csv'}")
    child.sendline("SELECT 5 AS five;")
    child.sendline(".output")
    child.sendline("SELECT 'back' AS t;")
    child.expect_exact("back")
    child.sendline(".quit")
    child.expect(pexpect.EOF)
    assert (tmp_path / "result.csv").read_text() == "five\n5\n"
    assert existing.read_text() == "precious\n"
    assert not (nsys_out / "kernels" / "x.csv").exists()


def test_history_persists_across_sessions(nsys_out: Path, tmp_path: Path) -> None:
    history = tmp_path / "history"
    child = shell(nsys_out, history)
    child.sendline("SELECT 1234 * 2 AS remembered;")
    child.expect_exact("2468")
    child.expect(PROMPT)
    settle()
    child.sendeof()
    child.expect(pexpect.EOF)
    child = shell(nsys_out, history)
    settle()
    child.send("\x1b[A")  # up arrow: the last statement of the earlier session
    settle()
    child.send("\r")
    child.expect_exact("2468")
    child.sendline(".quit")
    child.expect(pexpect.EOF)


def test_prompts_go_to_the_terminal_not_into_redirected_results(nsys_out: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    child = pexpect.spawn(
        "/bin/sh",
        ["-c", f"{sys.executable} -m pipeline.cli sql {nsys_out} --format csv > {out}"],
        env=_env(tmp_path / "history"),
        encoding="utf-8",
        timeout=60,
    )
    drawn = r"\x1b\[0mD\x08"  # prompt_toolkit draws the prompt on stderr with its full renderer
    child.expect(drawn)
    child.sendline("SELECT 8 AS eight;")
    child.expect(drawn)  # the next prompt shows on the terminal ...
    child.sendline(".quit")
    child.expect(pexpect.EOF)
    assert out.read_text() == "eight\n8\n"  # ... and the file holds only the result


@pytest.mark.parametrize("mode", ["table", "csv"])
def test_piped_input_prints_results_only(nsys_out: Path, tmp_path: Path, mode: str) -> None:
    script = "SELECT count(*) AS n FROM kernels;\n.mode json\nSELECT 'a;b' AS s\n"  # the last ';' may be missing
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "sql", str(nsys_out), "--format", mode],
        input=script,
        capture_output=True,
        text=True,
        env=_env(tmp_path / "history"),
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "D " not in r.stdout and "tracepipe sql:" not in r.stdout + r.stderr
    assert r.stdout.rstrip().splitlines()[-1] == json.dumps({"s": "a;b"})
    assert ("n\n33\n" in r.stdout) == (mode == "csv")  # 33 kernels in the sample


def test_piped_input_that_fails_exits_2_and_keeps_duckdbs_hints(nsys_out: Path, tmp_path: Path) -> None:
    # `printf 'SELEC 1;\nSELECT 2;' | tracepipe sql DIR` printed the error and exited 0 (DuckDB's CLI: 1), so a
    # script could not tell; and DuckDB's "Did you mean" line was cut off the error.
    script = "SELECT count(*) AS n FROM kernel_layer;\nSELECT 2 AS ok;\n"
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "sql", str(nsys_out), "--format", "csv"],
        input=script,
        capture_output=True,
        text=True,
        env=_env(tmp_path / "history"),
        check=False,
    )
    assert r.returncode == 2 and r.stdout == "ok\n2\n"  # the rest still ran, as DuckDB's CLI does
    assert 'Table with name kernel_layer does not exist! Did you mean "kernel_layers"?' in r.stderr, r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "sql", str(nsys_out), "--format", "csv"],
        input="SELECT 2 AS ok;\n",
        capture_output=True,
        text=True,
        env=_env(tmp_path / "history"),
        check=False,
    )
    assert r.returncode == 0 and r.stdout == "ok\n2\n"


def piped(folder: Path, script: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "sql", str(folder), *args],
        input=script,
        capture_output=True,
        text=True,
        env=_env(tmp_path / "history"),
        check=False,
    )


def test_schema_prints_create_statements_like_duckdbs_cli(nsys_out: Path, tmp_path: Path) -> None:
    # `.schema NAME` printed DESCRIBE's columns; DuckDB's CLI prints the statement that creates NAME
    import duckdb

    from tests.conftest import q

    r = piped(nsys_out, ".mode csv\n.schema kernels\n", tmp_path)  # plain SQL whatever the mode, as DuckDB's
    assert r.returncode == 0, r.stderr
    ddl = r.stdout.strip()
    assert ddl.startswith("CREATE TABLE kernels(trace_id VARCHAR, kernel_id BIGINT, ") and ddl.endswith(");")
    assert ', "name" VARCHAR, ' in ddl  # a keyword quoted as DuckDB quotes it
    scratch = duckdb.connect()
    scratch.execute(ddl)  # the statement makes the table: the normalized one's columns and types, in order
    made = scratch.execute("SELECT column_name, column_type FROM (DESCRIBE kernels)").fetchall()
    assert made == [(c, t) for c, t, *_ in q(nsys_out, "DESCRIBE kernels")]
    assert len(made) == 30

    r = piped(nsys_out, ".schema layer_summary\n", tmp_path)
    assert r.returncode == 0, r.stderr
    (statement,) = duckdb.extract_statements(r.stdout)  # one statement, as written in sql/, its comments kept
    assert statement.type == duckdb.StatementType.CREATE
    assert r.stdout.startswith("CREATE VIEW layer_summary AS\n-- layer_summary: per-layer GPU rollup")
    assert "--   gpu_time_ns           BIGINT ns: their summed duration\n" in r.stdout
    assert r.stdout.rstrip().endswith("ORDER BY p.trace_id, p.gpu_time_ns DESC;")


def test_schema_without_a_name_is_every_table_and_view_and_takes_a_pattern(nsys_out: Path, tmp_path: Path) -> None:
    import duckdb

    r = piped(nsys_out, ".schema\n", tmp_path)
    assert r.returncode == 0, r.stderr
    statements = duckdb.extract_statements(r.stdout)
    made = [st.query.split("(")[0].split()[2] for st in statements]  # CREATE TABLE|VIEW <name>
    tables, views = sorted(table_descriptions()), sorted(view_descriptions())
    assert made == tables + views  # .tables' order: tables, then views, each by name; no _private ones
    assert [st.query.split()[1] for st in statements] == ["TABLE"] * len(tables) + ["VIEW"] * len(views)
    r = piped(nsys_out, ".schema layer_%summary\n.schema nothing_like_it\n", tmp_path)
    assert r.returncode == 2  # the pattern nothing matches, said
    made = [st.query.split()[2] for st in duckdb.extract_statements(r.stdout)]
    assert made == ["layer_kernel_summary", "layer_name_summary", "layer_summary"]
    assert r.stderr == "Error: no table or view 'nothing_like_it' (.tables lists them)\n"


def test_backslash_d_keeps_describes_columns(nsys_out: Path, tmp_path: Path) -> None:
    r = piped(nsys_out, "\\d kernels\n\\d layer_summary\n", tmp_path, "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("column_name,column_type\ntrace_id,VARCHAR\nkernel_id,BIGINT\n")
    assert "column_name,column_type\ntrace_id,VARCHAR\npath,VARCHAR\nlayer,VARCHAR\ndepth,BIGINT\n" in r.stdout


def test_a_users_own_view_is_duckdbs_text_and_creating_it_prints_nothing(nsys_out: Path, tmp_path: Path) -> None:
    # DuckDB's Python API answers CREATE with a one-row "Count" table, which the shell printed; DuckDB's CLI prints
    # nothing for it
    script = 'CREATE TEMP VIEW mine AS SELECT 1 AS one;\nCREATE TEMP TABLE t AS SELECT 2 AS "select";\n'
    r = piped(nsys_out, script + ".schema mine\n.schema t\nSELECT one FROM mine;\n", tmp_path, "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout == 'CREATE TEMP VIEW mine AS SELECT 1 AS one;\nCREATE TEMP TABLE t("select" INTEGER);\none\n1\n'


def test_schema_over_an_analysis_folder_is_each_files_columns(nsys_out: Path, tmp_path: Path) -> None:
    import duckdb
    import pyarrow.parquet as pq

    out = tmp_path / "analysis"
    a = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "analyze", str(nsys_out), "--out", str(out), "--view", "layer_summary"],
        capture_output=True,
        text=True,
        env=_env(tmp_path / "history"),
        check=False,
    )
    assert a.returncode == 0, a.stderr
    r = piped(out, ".schema\n", tmp_path)  # no sql/ text: the view is the Parquet analyze wrote, no query here
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("CREATE TABLE layer_summary(trace_id VARCHAR, path VARCHAR, layer VARCHAR, depth ")
    scratch = duckdb.connect()
    scratch.execute(r.stdout)
    made = scratch.sql("SELECT * FROM layer_summary").to_arrow_table().schema
    assert made.names == pq.read_schema(out / "layer_summary.parquet").names


def test_a_dot_command_as_the_query_runs_as_in_the_shell(nsys_out: Path, tmp_path: Path) -> None:
    # `tracepipe sql DIR ".tables"` was parsed as SQL ("syntax error at or near ."), though --help lists .tables;
    # DuckDB's CLI takes `duckdb FILE ".tables"`. The same commands piped to the shell give the reference output.
    def one(script: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "sql", str(nsys_out), script, "--format", "csv"],
            capture_output=True, text=True, env=_env(tmp_path / "history"), check=False,
        )  # fmt: skip

    for script in (".tables", "\\d kernels\n.schema layer_summary"):
        r = one(script)
        assert r.returncode == 0, r.stderr
        assert r.stdout == piped(nsys_out, script + "\n", tmp_path, "--format", "csv").stdout
    listed = {line.split(",")[0] for line in one(".tables").stdout.splitlines()}
    tables = {p.name for p in nsys_out.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}  # the folder
    assert tables and tables <= listed
    bad = one(".nope")
    assert bad.returncode == 2 and bad.stderr == "Error: unknown command '.nope': .help lists them\n"


def test_intervals_and_unions_print_as_duckdb_text_in_every_format(nsys_out: Path, tmp_path: Path) -> None:
    # polars (markdown) and Parquet take no INTERVAL or UNION from Arrow: exit 1 with their errors before.
    import pyarrow.parquet as pq

    query = "SELECT INTERVAL 1 DAY AS i, 1::UNION(a INT, b VARCHAR) AS u, 2 AS n"
    env = _env(tmp_path / "history")
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "pipeline.cli", "sql", str(nsys_out), query, *a], capture_output=True, text=True, env=env
    )
    r = run("--format", "markdown")
    assert r.returncode == 0 and r.stdout.splitlines()[2] == "| 1 day | 1 | 2 |", r.stderr
    r = run("--format", "json")
    assert json.loads(r.stdout) == {"i": "1 day", "u": "1", "n": 2}
    assert run("-o", tmp_path / "r.parquet").returncode == 0
    assert pq.read_table(tmp_path / "r.parquet").to_pylist() == [{"i": "1 day", "u": "1", "n": 2}]
