"""Printing query results, and the interactive SQL shell of ``tracepipe sql``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from rich.table import Table

from pipeline import console
from pipeline.analyze import read_only_query


def print_result(table: pa.Table, fmt: str, max_rows: int = 50) -> None:
    if fmt == "csv":
        buf = io.BytesIO()
        pacsv.write_csv(table, buf)
        print(buf.getvalue().decode(), end="")
    elif fmt == "json":
        for row in table.to_pylist():
            print(json.dumps(row, default=str))
    else:
        console.out.print(rich_table(table, max_rows))


def rich_table(table: pa.Table, max_rows: int = 50) -> Table:
    out = Table(show_lines=False)
    for f in table.schema:
        numeric = pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
        out.add_column(f.name, justify="right" if numeric else "left")
    for row in table.slice(0, max_rows).to_pylist():
        out.add_row(*(_cell(v) for v in row.values()))
    if table.num_rows > max_rows:
        out.caption = f"{max_rows} of {table.num_rows} rows (--max-rows to see more)"
    return out


def _cell(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    return str(v)


def write_result(table: pa.Table, output: Path, fmt: str) -> None:
    """Atomically write a result: temp file then rename."""
    tmp = output.with_name(f".{output.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        if fmt == "parquet":
            pq.write_table(table, tmp, compression="zstd")
        elif fmt == "json":
            tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in table.to_pylist()))
        else:
            pacsv.write_csv(table, tmp)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)


def repl(con: duckdb.DuckDBPyConnection) -> None:
    """A minimal DuckDB shell: statements end with ';', `.tables` lists what is registered, `.quit` leaves."""
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history where available)
    console.err.print("tracepipe sql: DuckDB shell, read-only. End statements with ';'. .tables, .quit")
    buf = ""
    while True:
        try:
            line = input("D " if not buf else "· ")
        except EOFError:
            break
        if not buf and line.strip() in (".quit", ".exit", "\\q"):
            break
        if not buf and line.strip() == ".tables":
            line = "SELECT table_name, table_type FROM information_schema.tables ORDER BY 1;"
        buf += line + "\n"
        if not buf.strip().endswith(";"):
            continue
        try:
            result = read_only_query(con, buf)
            if result is not None:
                print_result(result.to_arrow_table(), "table")
        except duckdb.Error as e:
            console.fail(str(e).strip().splitlines()[0])
        buf = ""
