"""Query results in every output format, and the interactive SQL shell of ``tracepipe sql``.

The shell follows the DuckDB CLI its users know: ``.help``, ``.tables``, ``.schema``, ``.mode``, ``.maxrows``,
``.output``; Ctrl-C cancels the line being typed or the query running and keeps the shell; history persists
across sessions.  Well-kept parts do the work: prompt_toolkit edits lines and keeps history, SQLite's tokenizer
(``sqlite3.complete_statement``) says when a statement is complete and DuckDB's parser
(``duckdb.extract_statements``) splits it, so a ``;`` inside a string or comment splits nothing; DuckDB's box
renderer draws tables (eliding middle columns and rows to fit), DuckDB writes CSV, polars writes Markdown.
"""

from __future__ import annotations

import contextlib
import decimal
import io
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import nullcontext, redirect_stdout
from pathlib import Path
from typing import IO, Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.analyze.readonly import read_only_query, reading_statements
from pipeline.analyze.views import view_body, view_files
from pipeline.catalog import descriptions, is_public
from pipeline.errors import EXIT_BAD_INPUT, OutputError
from pipeline.outputs import check_new_file, is_normalized, writing

__all__ = ["OutputError", "check_new_file"]  # where the sql command has always found them

#: Formats a result can be printed in (the shell's ``.mode``) and written to a file in (``-o``).
MODES = ("table", "csv", "json", "markdown", "line")
FILE_FORMATS = ("csv", "json", "parquet")
#: ``-o FILE`` without ``--format``: the format from the file's extension.
EXTENSIONS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json", ".parquet": "parquet"}
#: The most rows ``.maxrows`` and ``sql --max-rows`` take: DuckDB's renderer counts them in 64 bits (a larger
#: number was its TypeError, exit 1).
MAX_ROWS = 2**63 - 1
#: Statements whose rows are an answer to print, as DuckDB's CLI prints them. CREATE, DROP and the like print nothing
#: there, where DuckDB's Python API hands back a one-row ``Count`` or an empty ``Success`` table for them: printed,
#: ``CREATE TEMP TABLE t AS ...; SELECT n FROM t`` would show a ``Count`` the user never asked for.
#: MULTI: a PIVOT query, the one kind of them ``readonly.reading_statements`` lets run.
RESULT_STATEMENTS = frozenset(
    {
        duckdb.StatementType.SELECT,
        duckdb.StatementType.EXPLAIN,
        duckdb.StatementType.PRAGMA,
        duckdb.StatementType.CALL,
        duckdb.StatementType.MULTI,
    }
)
HISTORY_ENV = "TRACEPIPE_HISTORY"
DEFAULT_HISTORY = Path("~/.tracepipe_history")


def format_for(output: Path, fmt: str | None) -> str:
    """The format of ``-o output``: ``--format`` when given, else the extension's."""
    if fmt is not None:
        if fmt not in FILE_FORMATS:
            raise OutputError(f"--format {fmt} prints to the terminal; a file takes one of {', '.join(FILE_FORMATS)}")
        return fmt
    by_ext = EXTENSIONS.get(output.suffix.lower())
    if by_ext is None:
        raise OutputError(
            f"cannot tell the format of {output} from its extension: name it .csv, .json or .parquet, "
            "or give --format csv|json|parquet"
        )
    return by_ext


def _plain(value: Any) -> Any:
    """JSON for what ``json`` cannot encode: exact integers stay integers (HUGEINT sums), DECIMAL a number."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def json_lines(table: pa.Table) -> Iterator[str]:
    """One JSON object per row (JSON Lines); numbers stay numbers, lists and structs nest."""
    for row in table.to_pylist():
        yield json.dumps(row, default=_plain, ensure_ascii=False)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def write_csv(table: pa.Table, dest: Path) -> None:
    """CSV by DuckDB's writer; LIST, STRUCT and MAP columns are written as JSON text (``[1,2]``,
    ``{"a":1}``), which any CSV reader passes through and any JSON parser reads back."""
    con = duckdb.connect()
    con.register("result", table)
    nested = [f.name for f in table.schema if pa.types.is_nested(f.type)]
    replace = ", ".join(f"to_json({_quoted(n)}) AS {_quoted(n)}" for n in nested)
    select = f"SELECT * REPLACE ({replace}) FROM result" if nested else "SELECT * FROM result"
    path = str(dest).replace("'", "''")
    con.execute(f"COPY ({select}) TO '{path}' (FORMAT csv, HEADER true)")
    con.close()


def csv_text(table: pa.Table) -> str:
    """CSV for the terminal, through a temp file of DuckDB's writer (a full TMPDIR names it: OutputError)."""
    with tempfile.TemporaryDirectory() as d:
        with writing(Path(d) / "result.csv"):
            write_csv(table, Path(d) / "result.csv")
        return (Path(d) / "result.csv").read_text()


def render_table(table: pa.Table, max_rows: int, max_width: int) -> str:
    """DuckDB's own box renderer: rows and middle columns elided to fit, with the counts shown."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        duckdb.connect().from_arrow(table).show(max_width=max_width, max_rows=max_rows)
    return buf.getvalue()


def render_markdown(table: pa.Table) -> str:
    import polars as pl

    with pl.Config(
        tbl_formatting="MARKDOWN",
        tbl_hide_column_data_types=True,
        tbl_hide_dataframe_shape=True,
        tbl_rows=-1,
        tbl_cols=-1,
        fmt_str_lengths=10_000,
        fmt_table_cell_list_len=-1,
    ):
        return str(pl.from_arrow(table)) + "\n"


def render_lines(table: pa.Table) -> str:
    """DuckDB's ``.mode line``: one ``column = value`` line per column, a blank line between rows."""
    width = max((len(n) for n in table.column_names), default=0)
    rows = (
        "\n".join(f"{k.rjust(width)} = {'NULL' if v is None else v}" for k, v in r.items()) for r in table.to_pylist()
    )
    return "\n\n".join(rows) + ("\n" if table.num_rows else "")


def render(table: pa.Table, mode: str, max_rows: int = 40, max_width: int | None = None) -> str:
    if mode == "csv":
        return csv_text(table)
    if mode == "json":
        return "".join(line + "\n" for line in json_lines(table))
    if mode == "markdown":
        return render_markdown(table)
    if mode == "line":
        return render_lines(table)
    return render_table(table, max_rows, max_width or shutil.get_terminal_size((120, 24)).columns)


def write_result(table: pa.Table, output: Path, fmt: str) -> None:
    """Write a result file atomically (temp file beside it, then rename): a failure leaves no partial file, and
    a full disk is OutputError naming ``output``."""
    tmp = output.with_name(f".{output.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with writing(output):
            if fmt == "parquet":
                pq.write_table(table, tmp, compression="zstd")
            elif fmt == "json":
                tmp.write_text("".join(line + "\n" for line in json_lines(table)))
            else:
                write_csv(table, tmp)
            os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)


def run_interruptible(con: duckdb.DuckDBPyConnection, work: Callable[[], Any]) -> Any:
    """Run ``work`` (a query on ``con``) in a thread; Ctrl-C in the main thread interrupts the query
    (``con.interrupt()``) and raises KeyboardInterrupt once it has stopped, leaving the connection usable."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as e:
            box["error"] = e

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    interrupted = False
    while worker.is_alive():
        try:
            worker.join(0.05)
        except KeyboardInterrupt:
            interrupted = True
            con.interrupt()
    if interrupted:
        raise KeyboardInterrupt
    if "error" in box:
        raise box["error"]
    return box.get("value")


#: Lines of a DuckDB error kept after its first: its own hints, as its CLI prints them.
HINT_LINES = ("Did you mean", "Candidate bindings", "Candidate functions")


def first_line(e: BaseException) -> str:
    """The error in one line: its first, and DuckDB's hints (``Did you mean "kernel_layers"?``) after it."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    return " ".join([lines[0], *(line for line in lines[1:] if line.startswith(HINT_LINES))])


HELP = """\
.help                 this text
.tables [PATTERN]     tables and views (LIKE pattern), each with a line on what it holds
.schema [PATTERN]     the CREATE statement of each table and view (LIKE pattern; every one without):
                      a view's SQL as sql/ defines it, a table's columns and types
.mode [MODE]          table (default) | csv | json | markdown | line
.maxrows [N]          rows the table mode shows (first and last half; default 40)
.output [FILE]        write results to a new FILE (never an existing file, never inside the data);
                      .output alone goes back to the terminal
.quit / .exit         leave (Ctrl-D too)
\\d [NAME]             .tables without a NAME; with one, its columns and types (DESCRIBE)
Statements end with ';' and may span lines. Ctrl-C cancels the line or the running query.
The connection is read-only: queries cannot write files or change the data."""


class Shell:
    """One interactive session over a read-only connection."""

    def __init__(self, con: duckdb.DuckDBPyConnection, normalized: Path | None = None) -> None:
        self.con = con  # a read-only connection creates the views each statement names as it comes (readonly.py)
        self.normalized = normalized
        self.mode = "table"
        self.max_rows = 40
        self.out: IO[str] = sys.stdout
        self.out_path: Path | None = None
        #: whether a statement or command failed: piped input then ends with exit 2, as a one-shot query does
        self.failed = False

    # -- output ---------------------------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        """``text`` to the terminal or the ``.output`` file; a file the disk refuses (full, quota...) is said
        in one line naming it, and results go to the terminal again."""
        try:
            with writing(self.out_path) if self.out_path is not None else nullcontext():
                self.out.write(text if text.endswith("\n") else text + "\n")
                self.out.flush()
        except OutputError as e:
            self.error(f"{e}; results go to the terminal again")
            self.close()

    def error(self, text: str) -> None:
        self.failed = True
        sys.stderr.write(f"Error: {text}\n")
        sys.stderr.flush()

    # -- statements -----------------------------------------------------------------------------------------------
    def execute(self, sql: str) -> None:
        """Run every statement of ``sql`` and print each result; the first error stops the rest (as DuckDB's CLI
        does with the statements of one line), and a statement that could write refuses them all before any runs."""
        try:
            statements = reading_statements(sql)
        except duckdb.Error as e:
            self.error(first_line(e))
            return
        for statement in statements:
            try:
                table = run_statement(self.con, statement)
            except KeyboardInterrupt:
                self.error("interrupted")
                return
            except duckdb.Error as e:
                self.error(first_line(e))
                return
            if table is not None:
                try:
                    self.say(render(table, self.mode, self.max_rows))
                except OutputError as e:  # csv's temp file on a full TMPDIR
                    self.error(str(e))

    # -- dot commands ---------------------------------------------------------------------------------------------
    def dot(self, line: str) -> bool:
        """Run one dot command (or ``\\d``); False when it asks to quit."""
        word, _, arg = line.strip().partition(" ")
        arg = arg.strip()
        if word in (".quit", ".exit", "\\q"):
            return False
        if word == ".help":
            self.say(HELP)
        elif word == ".tables" or (word == "\\d" and not arg):
            listing = self.tables(arg or None)
            self.say(render(listing, self.mode, 10_000) if self.mode != "table" else _aligned(listing))
        elif word == "\\d":
            self.describe(arg)
        elif word == ".schema":
            self.schema(arg)
        elif word == ".mode":
            if not arg:
                self.say(f"current mode: {self.mode}")
            elif arg in MODES:
                self.mode = arg
            else:
                self.error(f"unknown mode {arg!r}: one of {', '.join(MODES)}")
        elif word == ".maxrows":
            if not arg:
                self.say(f"current max rows: {self.max_rows}")
            elif (n := row_count(arg)) is not None:
                self.max_rows = n
            else:
                self.error(f".maxrows takes a whole number from 1 to {MAX_ROWS}")
        elif word == ".output":
            self.output(arg)
        else:
            self.error(f"unknown command {word!r}: .help lists them")
        return True

    def tables(self, pattern: str | None = None) -> pa.Table:
        rows = self.con.execute(
            "SELECT table_name, table_type FROM information_schema.tables WHERE table_name LIKE ?",
            [pattern or "%"],
        ).fetchall()
        about = descriptions()
        tables = _table_names()
        public = sorted(
            ((name, "table" if name in tables else "view") for name, _ in rows if is_public(name)),
            key=lambda nk: (nk[1], nk[0]),
        )
        return pa.table(
            {
                "name": [n for n, _ in public],
                "kind": [k for _, k in public],
                "description": [about.get(n, "") for n, _ in public],
            }
        )

    def describe(self, name: str) -> None:
        """``\\d NAME``: the columns and types of a table or view, in the current mode (psql's ``\\d``)."""
        if not is_public(name) or name not in set(self.tables().column("name").to_pylist()):
            self.error(f"no table or view {name!r} (.tables lists them)")
            return
        table = self.con.sql(f"DESCRIBE {_quoted(name)}").select("column_name", "column_type").to_arrow_table()
        self.say(render(table, self.mode, 10_000))

    def schema(self, pattern: str) -> None:
        """``.schema [PATTERN]``: the statement creating each table and view whose name is LIKE ``PATTERN`` (every
        one without), in ``.tables``' order, as plain SQL whatever the mode (DuckDB's CLI)."""
        names = self.tables(pattern or None).column("name").to_pylist()
        if not names:  # DuckDB's CLI prints nothing here; a misspelt name is better said
            self.error(f"no table or view {pattern!r} (.tables lists them)")
            return
        scratch = duckdb.connect()  # where DuckDB spells each table's CREATE statement (create_table)
        try:
            self.say("\n".join(self.ddl(name, scratch) for name in names))
        finally:
            scratch.close()

    def ddl(self, name: str, scratch: duckdb.DuckDBPyConnection) -> str:
        """The CREATE statement of ``name``. A view of sql/ computed here (a normalized folder): its file as the
        view is created from it, the header comment on its columns kept. DuckDB's own text for it (the
        ``sql`` of ``duckdb_views()``) would be the body re-printed on one line without the comments, and, where
        the view was computed once into a temp table or a Parquet file (``engine.lazy_views``), no view at all.
        A table, or a view an analysis folder reads from analyze's Parquet: ``CREATE TABLE`` with its columns and
        types, what DuckDB's CLI shows for a table (DuckDB's text for those is a view over a ``parquet_scan`` of
        absolute paths). Anything else (a user's ``CREATE TEMP VIEW``) is DuckDB's own text."""
        files = view_files()
        if name in files and self.normalized is not None and is_normalized(self.normalized):
            body = view_body(files[name])
            # a body ending in a comment would comment out a ';' put on its last line
            return f"CREATE VIEW {name} AS\n{body}{chr(10) if '--' in body.splitlines()[-1] else ''};"
        if name in descriptions():
            columns = self.con.sql(f"DESCRIBE {_quoted(name)}").select("column_name", "column_type").fetchall()
            return create_table(scratch, name, columns)
        # fetchall: a result of execute() left unread is an error for the next statement (DuckDB 2.0)
        ((sql,), *_) = self.con.execute(
            "SELECT sql FROM duckdb_views() WHERE view_name = $n AND NOT internal "
            "UNION ALL SELECT sql FROM duckdb_tables() WHERE table_name = $n",
            {"n": name},
        ).fetchall()
        return str(sql)

    def output(self, arg: str) -> None:
        self.close()
        if not arg:
            return
        try:
            if arg.startswith("|"):
                raise OutputError("the shell does not start programs: give a file name")
            target = check_new_file(Path(arg), self.normalized, overwrite=False)
            self.out = open(target, "x")  # noqa: SIM115  (kept open until the next .output or the end)
            self.out_path = target
        except (OutputError, OSError) as e:
            self.error(str(e))

    def close(self) -> None:
        """Back to the terminal; the ``.output`` file is closed (what it still buffered was said by ``say``
        when the disk refused it: closed all the same)."""
        out, self.out, self.out_path = self.out, sys.stdout, None
        if out is not sys.stdout:
            with contextlib.suppress(OSError):
                out.close()


def row_count(text: str) -> int | None:
    """``text`` as a number of rows to show (1 to :data:`MAX_ROWS`, ASCII digits only: ``'²'.isdigit()``); None
    when it is not one."""
    if not (text.isascii() and text.isdigit()):
        return None
    n = int(text)
    return n if 1 <= n <= MAX_ROWS else None


def _aligned(listing: pa.Table) -> str:
    """``.tables`` in table mode: one ``name  kind  description`` line each, as DuckDB's CLI lists names."""
    rows = listing.to_pylist()
    pad = max((len(r["name"]) for r in rows), default=0) + 2
    return "".join(f"{r['name'].ljust(pad)}{r['kind'].ljust(7)}{r['description']}\n" for r in rows)


def create_table(scratch: duckdb.DuckDBPyConnection, name: str, columns: list[tuple[str, str]]) -> str:
    """``CREATE TABLE name(column TYPE, ...);`` spelt by DuckDB itself: an empty table of these columns made in the
    in-memory ``scratch`` connection (then dropped), whose ``duckdb_tables()`` text quotes names and writes types as
    DuckDB's CLI does (``"name" VARCHAR``, ``STRUCT(x INTEGER)[]``), where a hand-written quoting rule would miss
    keywords."""
    listed = ", ".join(f"{_quoted(column)} {kind}" for column, kind in columns)
    scratch.execute(f"CREATE OR REPLACE TABLE {_quoted(name)}({listed})")
    ((sql,),) = scratch.execute("SELECT sql FROM duckdb_tables() WHERE table_name = $n", {"n": name}).fetchall()
    scratch.execute(f"DROP TABLE {_quoted(name)}")
    return str(sql)


def _table_names() -> set[str]:
    from pipeline.catalog import table_descriptions

    return set(table_descriptions())


#: DuckDB types that neither polars (markdown) nor Parquet take from Arrow: a result gives them as DuckDB's own text
#: (what its CLI prints: ``1 day``), in every format.
TEXT_TYPES = ("INTERVAL", "UNION")


def fetch(con: duckdb.DuckDBPyConnection, statement: duckdb.Statement) -> pa.Table | None:
    """One statement's result as an Arrow table; None for one that answers with no rows to print (CREATE, DROP:
    :data:`RESULT_STATEMENTS`), run all the same. A statement that could write is refused (``read_only_query``:
    the sandbox alone allows writing inside the data)."""
    rel = read_only_query(con, statement.query)
    if rel is None or statement.type not in RESULT_STATEMENTS:
        return None  # DuckDB before 2.0 hands back no relation for CREATE; 2.0 a "Count" one, already run
    if text := [n for n, t in zip(rel.columns, rel.types, strict=True) if str(t).split("(")[0] in TEXT_TYPES]:
        rel = rel.select(
            ", ".join(f"{_quoted(n)}::VARCHAR AS {_quoted(n)}" if n in text else _quoted(n) for n in rel.columns)
        )
    return rel.to_arrow_table()


def run_statement(con: duckdb.DuckDBPyConnection, statement: duckdb.Statement) -> pa.Table | None:
    """:func:`fetch` in a thread Ctrl-C interrupts (:func:`run_interruptible`). A name the statement's views did not
    bring (a typo) is tried again with every view there, so that DuckDB's "Did you mean" names the closest of all of
    them (it had offered kernel_tile_patterns for kernel_layer), and a view reached some way the parser does not see
    (a user's macro) is found."""
    try:
        return run_interruptible(con, lambda: fetch(con, statement))
    except duckdb.CatalogException:
        if not hasattr(con, "ensure_views"):  # a connection made with every view: nothing more to bring
            raise
        con.ensure_views(None)
        return run_interruptible(con, lambda: fetch(con, statement))


def history_path() -> Path:
    return Path(os.environ.get(HISTORY_ENV) or DEFAULT_HISTORY).expanduser()


def terminal_reader() -> Callable[[bool], str]:
    """A line reader for the terminal (prompt_toolkit: editing, persistent history). It raises
    KeyboardInterrupt on Ctrl-C and EOFError on Ctrl-D; when stdout is redirected the prompts still go to
    the terminal, never into the results."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.output import create_output

    output = None if sys.stdout.isatty() else create_output(stdout=sys.stderr)
    session: PromptSession[str] = PromptSession(history=FileHistory(str(history_path())), output=output)
    return lambda continuing: session.prompt("· " if continuing else "D ")


def pipe_reader() -> Callable[[bool], str]:
    """Lines from piped input, with no prompts at all."""

    def read(_continuing: bool) -> str:
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    return read


def is_dot_command(text: str) -> bool:
    """Whether ``text`` is a shell command (``.tables``, ``\\d NAME``) rather than SQL."""
    return text.lstrip().startswith((".", "\\"))


def run_dot_commands(
    con: duckdb.DuckDBPyConnection, normalized: Path | None, text: str, mode: str = "table", max_rows: int = 40
) -> bool:
    """The shell commands of ``text``, one a line, as ``tracepipe sql FOLDER ".tables"`` runs them (DuckDB's CLI
    takes ``duckdb FILE ".tables"`` alike); True when one failed. A command that quits ends the rest."""
    shell = Shell(con, normalized)
    shell.mode, shell.max_rows = mode, max_rows
    try:
        for line in filter(str.strip, text.splitlines()):
            if not is_dot_command(line):
                shell.error(f"{line.strip()!r}: one dot command a line, or SQL alone")
                break
            if not shell.dot(line):
                break
    finally:
        shell.close()
    return shell.failed


def repl(
    con: duckdb.DuckDBPyConnection, normalized: Path | None = None, mode: str = "table", max_rows: int = 40
) -> None:
    """The interactive shell; with piped input it reads statements and prints only their results."""
    shell = Shell(con, normalized)
    shell.mode, shell.max_rows = mode, max_rows
    interactive = sys.stdin.isatty()
    if interactive:
        sys.stderr.write("tracepipe sql: DuckDB shell over the normalized data, read-only. .help for commands.\n")
    read = terminal_reader() if interactive else pipe_reader()
    buf = ""
    try:
        while True:
            try:
                line = read(bool(buf))
                if not buf and line.strip().startswith((".", "\\")):
                    if not shell.dot(line):
                        break
                elif buf or line.strip():
                    buf += line + "\n"
                    if sqlite3.complete_statement(buf):
                        statement, buf = buf, ""
                        shell.execute(statement)
            except KeyboardInterrupt:  # Ctrl-C: drop the line being typed (a query was stopped in execute)
                buf = ""
                if not interactive:
                    raise
            except EOFError:
                break
        if buf.strip():  # piped input may end without the last ';'
            shell.execute(buf)
    finally:
        shell.close()
    if shell.failed and not interactive:  # a script that failed says so to its caller (DuckDB's CLI: exit 1)
        sys.exit(EXIT_BAD_INPUT)
