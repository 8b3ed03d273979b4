"""Run the analysis: every normalized table and every ``sql/*.sql`` view in one DuckDB connection.

Python only wires things up: each normalized table becomes a view over its
Parquet glob (an empty, correctly typed view when no trace has it), small
Python-made tables (per-architecture limits) are registered, and each file in
``sql/`` defines the view named like the file. Views may use each other; they
are created in dependency order by retrying those whose inputs do not exist yet.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import duckdb
import pyarrow as pa

from pipeline.schema import TABLES
from pipeline.store import table_glob

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"

#: view name -> "module:function" returning a pyarrow Table (kept in Python: small lookup tables).
PY_TABLES: dict[str, str] = {}
PY_TABLES["arch_limits"] = "pipeline.analyze.arch:arch_limits_table"


def view_files(sql_dir: Path = SQL_DIR) -> dict[str, Path]:
    return {p.stem: p for p in sorted(sql_dir.glob("*.sql"))}


def _empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def register_tables(con: duckdb.DuckDBPyConnection, normalized: Path) -> None:
    for name, schema in TABLES.items():
        if any((normalized / name).glob("trace_id=*/*.parquet")):
            con.execute(
                f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet('{table_glob(normalized, name)}', "
                "hive_partitioning = false, union_by_name = true)"
            )
        else:
            con.register(f"_empty_{name}", _empty(schema))
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _empty_{name}")
    for name, target in PY_TABLES.items():
        module, func = target.split(":")
        table = getattr(importlib.import_module(module), func)()
        con.register(f"_py_{name}", table)
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _py_{name}")


def _body(path: Path) -> str:
    """The SELECT of a view file (its header comment and any trailing ';' removed)."""
    return path.read_text().strip().rstrip(";")


def create_views(con: duckdb.DuckDBPyConnection, sql_dir: Path = SQL_DIR) -> list[str]:
    pending = view_files(sql_dir)
    created: list[str] = []
    while pending:
        errors: dict[str, str] = {}
        for name, path in list(pending.items()):
            try:
                con.execute(f"CREATE OR REPLACE VIEW {name} AS\n{_body(path)}")
            except duckdb.CatalogException as e:
                errors[name] = str(e)
                continue
            created.append(name)
            del pending[name]
        if errors and len(errors) == len(pending):
            missing = {n: re.sub(r"\s+", " ", e)[:200] for n, e in errors.items()}
            raise RuntimeError(f"views that cannot be created: {missing}")
    return created


def connect(normalized: Path, sql_dir: Path = SQL_DIR, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every table and view registered."""
    con = duckdb.connect(database)
    register_tables(con, normalized)
    create_views(con, sql_dir)
    return con
