"""Run the analysis: every normalized table and every ``sql/*.sql`` view in one DuckDB connection.

Python only wires things up: each normalized table becomes a view over its
Parquet glob (an empty, correctly typed view when no trace has it), small
Python-made tables (per-architecture limits) are registered, and each file in
``sql/`` defines the view named like the file. Views may use each other; they
are created in dependency order, read from each file's ``-- Inputs:`` header
(tests/test_sql_headers.py checks every header names exactly what its body reads).
"""

from __future__ import annotations

import graphlib
import importlib
import os
import re
import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from pipeline.errors import BadInputError
from pipeline.schema import SCHEMA_VERSION, TABLES, major, select_list
from pipeline.store import table_glob

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"

#: DuckDB's memory limit unless TRACEPIPE_MEMORY_LIMIT says otherwise; past it DuckDB spills to disk.
DEFAULT_MEMORY_LIMIT = "3GB"

#: view name -> "module:function" returning a pyarrow Table (kept in Python: small lookup tables).
PY_TABLES: dict[str, str] = {}
PY_TABLES["arch_limits"] = "pipeline.analyze.arch:arch_limits_table"
PY_TABLES["kernel_tile_patterns"] = "pipeline.analyze.tiles:tile_patterns_table"
PY_TABLES["device_override"] = "pipeline.analyze.arch:device_override_table"  # replaced by connect(device=...)


def view_files(sql_dir: Path = SQL_DIR) -> dict[str, Path]:
    return {p.stem: p for p in sorted(sql_dir.glob("*.sql"))}


ON_REQUEST = "-- analyze: on request"


def default_views(sql_dir: Path = SQL_DIR) -> list[str]:
    """Views `tracepipe analyze` writes unless told otherwise: all but those whose header says
    ``-- analyze: on request`` (views that expand to one row per kernel and SM, say)."""
    return [name for name, path in view_files(sql_dir).items() if ON_REQUEST not in path.read_text()]


def _empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def register_tables(con: duckdb.DuckDBPyConnection, normalized: Path, read_only: bool = False) -> None:
    """Each table as a view. ``read_only`` scans through pyarrow datasets instead of DuckDB's file
    access, so the connection can then switch file access off entirely (no COPY over the data)."""
    for name, schema in TABLES.items():
        if read_only and any((normalized / name).glob("trace_id=*/*.parquet")):
            con.register(f"_ds_{name}", ds.dataset(normalized / name, format="parquet", schema=schema))
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _ds_{name}")
        elif any((normalized / name).glob("trace_id=*/*.parquet")):
            scan = f"read_parquet('{table_glob(normalized, name)}', hive_partitioning = false, union_by_name = true)"
            have = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT {select_list(name, have)} FROM {scan}")
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


#: The header line naming a view's inputs, and the lines that continue it (indented past "-- ").
_INPUTS_LINE = re.compile(r"^--\s*Inputs?:(.*)$")
_CONTINUATION = re.compile(r"^--\s{2,}(\S.*)$")


def view_inputs(path: Path) -> list[str]:
    """The tables and views a view file's ``-- Inputs:`` header names, in order: comma-separated names,
    each optionally followed by a remark in parentheses (``kernels (GPU clock), devices``)."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if m := _INPUTS_LINE.match(line):
            text = [m.group(1)]
            for more in lines[i + 1 :]:
                cont = _CONTINUATION.match(more)
                if not cont:
                    break
                text.append(cont.group(1))
            joined = " ".join(text)
            while "(" in joined:  # innermost remark first, so nested parentheses go too
                joined = re.sub(r"\([^()]*\)", "", joined)
            names = [n.strip().rstrip(".") for n in joined.split(",")]
            bad = [n for n in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
            if bad:
                raise ValueError(f"{path}: '-- Inputs:' must list names separated by commas, not {bad}")
            return names
    raise ValueError(f"{path}: no '-- Inputs:' header")


def view_order(sql_dir: Path = SQL_DIR) -> list[str]:
    """The views of ``sql_dir`` in an order where each comes after the views its header lists
    (ties by name, so the order is stable); a cycle is an error naming the views in it."""
    files = view_files(sql_dir)
    graph = {name: [i for i in view_inputs(path) if i in files] for name, path in files.items()}
    sorter = graphlib.TopologicalSorter(graph)
    try:
        sorter.prepare()
    except graphlib.CycleError as e:
        raise RuntimeError(f"views whose '-- Inputs:' headers form a cycle: {e.args[1]}") from e
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        order.extend(ready)
        sorter.done(*ready)
    return order


def create_views(con: duckdb.DuckDBPyConnection, sql_dir: Path = SQL_DIR, materialize: bool = False) -> list[str]:
    """Create every view of ``sql_dir`` in dependency order; with ``materialize`` each is computed once
    into a temp table, which is what a batch run that reads every view wants (views would recompute
    their inputs)."""
    kind = "TEMP TABLE" if materialize else "VIEW"
    files = view_files(sql_dir)
    order = view_order(sql_dir)
    for name in order:
        con.execute(f"CREATE OR REPLACE {kind} {name} AS\n{_body(files[name])}")
    return order


def _check_schema_versions(normalized: Path) -> None:
    """Data written by a newer major schema may mean something else in a column: refuse, don't guess."""
    meta = ds.dataset(normalized / "trace_meta", format="parquet")  # no hive discovery: trace_id is in the files
    versions = meta.to_table(columns=["schema_version"]).column(0).to_pylist()
    newer = sorted({v for v in versions if v is not None and major(v) > major(SCHEMA_VERSION)})
    if newer:
        raise BadInputError(
            normalized,
            f"normalized with schema {', '.join(newer)}; this tracepipe reads {SCHEMA_VERSION} and "
            "older minors: upgrade tracepipe or re-normalize the traces",
        )


def connect(
    normalized: Path,
    sql_dir: Path = SQL_DIR,
    materialize: bool = False,
    read_only: bool = False,
    device: str | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every table and view registered.

    ``device``: a name of ``arch.DEVICE_PRESETS`` (``rtx3090``): every traced device is replaced by that part's
    limits, so occupancy, waves and the SM views are a projection (``device_limits.projected_device`` says so).

    ``read_only``: queries can read the views but cannot reach any file (no COPY TO over the normalized
    data, no reading elsewhere); the setting is locked so a query cannot switch it back.
    """
    if not normalized.is_dir() or not (normalized / "trace_meta").is_dir():
        raise BadInputError(normalized, "not a normalized folder (no trace_meta/): run `tracepipe normalize` first")
    _check_schema_versions(normalized)
    con = duckdb.connect(":memory:")
    # Bounded memory: DuckDB spills sorts, joins and aggregates to disk past this limit.
    con.execute(f"SET memory_limit = '{os.environ.get('TRACEPIPE_MEMORY_LIMIT', DEFAULT_MEMORY_LIMIT)}'")
    con.execute("SET preserve_insertion_order = false")
    register_tables(con, normalized, read_only)
    if device is not None:
        from pipeline.analyze.arch import DEVICE_PRESETS, device_override_table

        if device not in DEVICE_PRESETS:
            raise BadInputError(Path(device), f"unknown device; one of: {', '.join(sorted(DEVICE_PRESETS))}")
        con.register("_py_device_override", device_override_table(device))
        con.execute("CREATE OR REPLACE VIEW device_override AS SELECT * FROM _py_device_override")
    create_views(con, sql_dir, materialize)
    if read_only:
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return con


def write_views(con: duckdb.DuckDBPyConnection, out: Path, views: list[str], formats: tuple[str, ...]) -> list[Path]:
    """Each view as ``out/<view>.parquet`` (and ``.csv``), each file renamed into place only when complete."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for view in views:
        for fmt in formats:
            dest = out / f"{view}.{fmt}"
            tmp = out / f".{view}.{fmt}.tmp-{uuid.uuid4().hex[:8]}"
            options = "FORMAT parquet, COMPRESSION zstd" if fmt == "parquet" else "FORMAT csv, HEADER true"
            try:
                con.execute(f"COPY (SELECT * FROM {view}) TO '{tmp}' ({options})")
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)
            written.append(dest)
    return written
