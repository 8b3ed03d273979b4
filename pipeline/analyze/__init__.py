"""Run the analysis: every normalized table and every ``sql/*.sql`` view in one DuckDB connection.

Python only wires things up: each normalized table becomes a view over its
Parquet glob (an empty, correctly typed view when no trace has it), small
Python-made tables (per-architecture limits) are registered, and each file in
``sql/`` defines the view named like the file. Views may use each other; they
are created in dependency order by retrying those whose inputs do not exist yet.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import tempfile
import uuid
import weakref
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from pipeline.errors import BadInputError, SettingError, parse_size
from pipeline.schema import SCHEMA_VERSION, TABLES, major, select_list
from pipeline.store import committed_files, hold_readers

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"

#: DuckDB's memory limit unless TRACEPIPE_MEMORY_LIMIT says otherwise; past it DuckDB spills to disk.
DEFAULT_MEMORY_LIMIT = "3GB"
#: Most disk DuckDB may spill to (in a private folder under TMPDIR, removed when the connection goes)
#: unless TRACEPIPE_TEMP_LIMIT says otherwise.
DEFAULT_TEMP_LIMIT = "20GB"

#: view name -> "module:function" returning a pyarrow Table (kept in Python: small lookup tables).
PY_TABLES: dict[str, str] = {}
PY_TABLES["arch_limits"] = "pipeline.analyze.arch:arch_limits_table"


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
    """Each table as a view over the files of its committed traces (``store.committed_files``: a trace
    being rewritten is read whole as it was, never half old and half new). ``read_only`` scans through
    pyarrow datasets instead of DuckDB's file access, so the connection can then switch file access off
    entirely (no COPY over the data). No path is pasted into SQL text."""
    hold_readers(normalized)
    for name, schema in TABLES.items():
        files = [str(f) for f in committed_files(normalized, name)]
        if read_only and files:
            con.register(f"_ds_{name}", ds.dataset(files, format="parquet", schema=schema))
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _ds_{name}")
        elif files:
            scan = con.read_parquet(files, hive_partitioning=False, union_by_name=True)
            scan.create_view(f"_pq_{name}", replace=True)
            have = set(scan.columns)
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT {select_list(name, have)} FROM _pq_{name}")
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


def create_views(con: duckdb.DuckDBPyConnection, sql_dir: Path = SQL_DIR, materialize: bool = False) -> list[str]:
    """Create every view of ``sql_dir``; with ``materialize`` each is computed once into a temp table,
    which is what a batch run that reads every view wants (views would recompute their inputs)."""
    kind = "TEMP TABLE" if materialize else "VIEW"
    pending = view_files(sql_dir)
    created: list[str] = []
    while pending:
        errors: dict[str, str] = {}
        progressed = False
        for name, path in list(pending.items()):
            try:
                con.execute(f"CREATE OR REPLACE {kind} {name} AS\n{_body(path)}")
            except duckdb.CatalogException as e:
                errors[name] = str(e)
                continue
            created.append(name)
            del pending[name]
            progressed = True
        if not progressed:
            missing = {n: re.sub(r"\s+", " ", e)[:200] for n, e in errors.items()}
            raise RuntimeError(f"views that cannot be created: {missing}")
    return created


def _check_schema_versions(normalized: Path) -> None:
    """Data written by a newer major schema may mean something else in a column: refuse, don't guess."""
    files = [str(f) for f in committed_files(normalized, "trace_meta")]
    meta = ds.dataset(files, format="parquet")
    versions = meta.to_table(columns=["schema_version"]).column(0).to_pylist() if files else []
    newer = sorted({v for v in versions if v is not None and major(v) > major(SCHEMA_VERSION)})
    if newer:
        raise BadInputError(
            normalized,
            f"normalized with schema {', '.join(newer)}; this tracepipe reads {SCHEMA_VERSION} and "
            "older minors: upgrade tracepipe or re-normalize the traces",
        )


def connect(
    normalized: Path, sql_dir: Path = SQL_DIR, materialize: bool = False, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every table and view registered.

    ``read_only``: queries can read the views but cannot reach any file (no COPY TO over the normalized
    data, no reading elsewhere); the setting is locked so a query cannot switch it back.
    """
    if not normalized.is_dir() or not (normalized / "trace_meta").is_dir():
        raise BadInputError(normalized, "not a normalized folder (no trace_meta/): run `tracepipe normalize` first")
    hold_readers(normalized)
    _check_schema_versions(normalized)
    config = duckdb_config()
    con = duckdb.connect(":memory:", config=config)
    weakref.finalize(con, shutil.rmtree, config["temp_directory"], True)  # also at interpreter exit
    con.execute("SET preserve_insertion_order = false")
    register_tables(con, normalized, read_only)
    create_views(con, sql_dir, materialize)
    if read_only:
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return con


def size_setting(env: str, default: str) -> int:
    """Bytes of a size setting from the environment, validated (never pasted into SQL)."""
    raw = os.environ.get(env, default)
    n = parse_size(raw)
    if n is None or n <= 0:
        raise SettingError(f"{env}={raw!r}: expected a positive size such as 3GB, 512MiB or 1500000000")
    return n


_SPILL_PREFIX = "tracepipe-duckdb-"


def spill_folder() -> str:
    """A new private folder for DuckDB's spill files under TMPDIR (never the working directory); folders
    left by processes that no longer run (killed before they could remove theirs) are removed first."""
    root = Path(tempfile.gettempdir())
    for old in root.glob(f"{_SPILL_PREFIX}*"):
        pid = old.name[len(_SPILL_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def duckdb_config() -> dict[str, str]:
    """Memory limit (past it DuckDB spills sorts, joins and aggregates) and a capped private spill folder;
    TRACEPIPE_MEMORY_LIMIT and TRACEPIPE_TEMP_LIMIT override the defaults."""
    memory = size_setting("TRACEPIPE_MEMORY_LIMIT", DEFAULT_MEMORY_LIMIT)
    spill = size_setting("TRACEPIPE_TEMP_LIMIT", DEFAULT_TEMP_LIMIT)
    return {
        "memory_limit": f"{memory}B",
        "temp_directory": spill_folder(),
        "max_temp_directory_size": f"{spill}B",
    }


def write_views(con: duckdb.DuckDBPyConnection, out: Path, views: list[str], formats: tuple[str, ...]) -> list[Path]:
    """Each view as ``out/<view>.parquet`` (and ``.csv``), each file renamed into place only when complete."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for view in views:
        for fmt in formats:
            dest = out / f"{view}.{fmt}"
            tmp = out / f".{view}.{fmt}.tmp-{uuid.uuid4().hex[:8]}"
            options = "FORMAT parquet, COMPRESSION zstd" if fmt == "parquet" else "FORMAT csv, HEADER true"
            try:  # the path as a parameter, never pasted into the SQL text
                con.execute(f"COPY (SELECT * FROM {view}) TO $path ({options})", {"path": str(tmp)})
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)
            written.append(dest)
    return written
