"""The engine: one DuckDB connection over a normalized folder, with every normalized table and every ``sql/*.sql``
view registered.

Python only wires things up: each normalized table becomes a view over its Parquet files (an empty, correctly
typed view when no trace has it), small Python-made tables (per-architecture limits, ``catalog.PY_TABLES``) are
registered, the macros of ``sql/macros/`` are created, and each file in ``sql/`` defines the view named like
the file, created after the views its ``-- Inputs:`` header names (``pipeline.analyze.views``). DuckDB's memory
limit is sized to the input and its spill folder is private. Writing the views to files is
``pipeline.analyze.write``.
"""

from __future__ import annotations

import functools
import importlib
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa

from pipeline.analyze.scratch import copy_view, read_back
from pipeline.analyze.views import (
    ON_REQUEST,
    computed_once,
    macro_files,
    needed_views,
    view_body,
    view_files,
    view_macros,
    view_order,
)
from pipeline.catalog import PY_TABLES, SQL_DIR
from pipeline.errors import BadInputError, SettingError, parse_size
from pipeline.lean import duckdb_connect, duckdb_threads, size_arrow_pool
from pipeline.outputs import wrong_folder
from pipeline.schema import SCHEMA_VERSION, TABLES, major, select_list
from pipeline.store import committed, committed_files, hold_readers, trace_ids

#: DuckDB's memory limit, unless TRACEPIPE_MEMORY_LIMIT says otherwise, is sized to the input (past it DuckDB spills
#: to disk; see :func:`default_memory_limit`): at least this much,
MEMORY_FLOOR = 1_600_000_000
#: or this many bytes per GPU operation (kernel, memcpy, memset), whichever is more: the largest view's hash join
#: (gpu_op_layers') needs ~1.45 GB for 10M kernels and re-reads ~85 GB of spilled rows below that, ~10x the time
#: (benchmarks/results/analyze_10m_memory_s34.txt); 10M kernels then run in 1.87 GB at 1.6 GB
#: (bench_nsys_10m_s34.txt) where a fixed 3 GB took 2.76 GB.
MEMORY_PER_GPU_OP = 160
#: Most disk DuckDB may spill to (in a private folder under TMPDIR, removed when the connection goes)
#: unless TRACEPIPE_TEMP_LIMIT says otherwise.
DEFAULT_TEMP_LIMIT = "20GB"


@functools.cache
def defers_binding() -> bool:
    """Whether this DuckDB creates a view without binding it (``WITH (DEFER_BINDING)``, DuckDB 2.0)."""
    try:
        duckdb.connect().execute("CREATE VIEW probe WITH (DEFER_BINDING) AS SELECT 1")
    except duckdb.Error:
        return False
    return True


def view_sql(name: str, body: str) -> str:
    """The statement creating (or replacing) view ``name`` over ``body``, bound when a statement first reads it
    where DuckDB allows (:func:`defers_binding`). Binding at creation expands every view the body reads, down to
    the tables: creating the 54 views of a tiny trace took 2.4 s (findings alone 0.66 s), all of it spent again
    by the statement that reads them (benchmarks/results/deferred_views.txt)."""
    return f"CREATE OR REPLACE VIEW {name}{' WITH (DEFER_BINDING)' if defers_binding() else ''} AS\n{body}"


def _empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def register_tables(con: duckdb.DuckDBPyConnection, normalized: Path, traces: set[str] | None = None) -> None:
    """Each table as a view over DuckDB's own Parquet scan of its files (DuckDB then knows each table's
    row count and plans its joins by it; a registered pyarrow dataset looks like one row and gets
    nested-loop ASOF joins, 40x slower on a 220k-kernel trace).

    The files are those of the committed traces (``store.committed_files``): a trace being rewritten is
    read whole as it was, never half old and half new. No path is pasted into SQL text. ``traces``: only
    these trace ids (incremental analyze computes the traces that changed on their own)."""
    hold_readers(normalized)
    traces_now = [c for tid, c in committed(normalized).items() if traces is None or tid in traces]
    for name, schema in TABLES.items():
        if files := [str(c.files[name]) for c in traces_now if name in c.files]:
            scan = con.read_parquet(files, hive_partitioning=False, union_by_name=True)
            scan.create_view(f"_pq_{name}", replace=True)
            have = set(scan.columns)
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT {select_list(name, have)} FROM _pq_{name}")
        else:
            register_arrow(con, f"_empty_{name}", _empty(schema))
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _empty_{name}")
    for name, target in PY_TABLES.items():
        module, func = target.split(":")
        register_arrow(con, f"_py_{name}", getattr(importlib.import_module(module), func)())
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _py_{name}")


#: The Arrow tables registered on each connection (``register_arrow``), so that a cursor of it can register
#: them too: a registered object belongs to its connection, and ``write_views`` computes views on cursors.
_REGISTERED: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, dict[str, pa.Table]] = weakref.WeakKeyDictionary()


def register_arrow(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    """``table`` registered on ``con`` as ``name``, and remembered for :func:`cursor_of`."""
    con.register(name, table)
    _REGISTERED.setdefault(con, {})[name] = table


#: DuckDB's memory limit of each connection :func:`connect` made, in bytes (DuckDB reports it rounded: "1.4 GiB").
_LIMITS: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, int] = weakref.WeakKeyDictionary()


#: DuckDB's optimizer pass that is wrong over tables: from a table's exact row count it gives a LEFT JOIN whose
#: right side is an empty table (read through a CTE) at most 0 rows, and the plan then loses rows. DuckDB 2.0.1:
#: a LIMIT over such a join is dropped; findings lost every slow_backward row of the train sample when its
#: autotuning CTE read an empty table (tests/test_duckdb_optimizer_guard.py has both). Parquet files and Arrow
#: tables give no such bound, so it is off only where views become tables: ``write_views``' in-memory path and
#: the temp tables of :func:`connect` (a lazy connection's under :data:`LAZY_TABLE_OPS`, ``materialize``). There
#: it costs nothing measurable (1 MB trace 0.99x), where over Parquet the 10M-kernel analyze took 2.15x the time.
UNSAFE_OVER_TABLES = "statistics_propagation"


def without_statistics_propagation(con: duckdb.DuckDBPyConnection) -> None:
    """Turns :data:`UNSAFE_OVER_TABLES` off for ``con``'s database (its cursors too), for good: the tables the
    in-memory path creates stay on the connection, and a query over them later would meet the same fault."""
    (off,) = con.execute("SELECT current_setting('disabled_optimizers')").fetchone()
    names = {n.strip() for n in off.split(",") if n.strip()} | {UNSAFE_OVER_TABLES}
    con.execute("SET disabled_optimizers = $names", {"names": ",".join(sorted(names))})


def memory_limit(con: duckdb.DuckDBPyConnection) -> int | None:
    """The memory limit :func:`connect` gave ``con``, in bytes (None: a connection it did not make)."""
    return _LIMITS.get(con)


def set_memory_limit(con: duckdb.DuckDBPyConnection, limit: int, threads: int | None = None) -> None:
    """DuckDB's memory limit, for every connection and cursor of ``con``'s database, now ``limit`` bytes (and its
    threads ``threads``, unless None)."""
    con.execute("SET memory_limit = $limit", {"limit": f"{limit}B"})
    if threads is not None:
        con.execute("SET threads = $n", {"n": threads})


def cursor_of(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A cursor of ``con`` (another connection to its database, for another thread) that sees what ``con``
    sees: the database's tables and views, and the Arrow tables registered on ``con`` (registered again;
    storing them as tables instead cost ~2 ms of CPU each, 12 of them on every connect)."""
    cur = con.cursor()
    for name, table in _REGISTERED.get(con, {}).items():
        cur.register(name, table)
    return cur


def defined_views(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Names of the views (and temp tables) the connection has now."""
    rows = con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal UNION SELECT table_name FROM duckdb_tables()"
    ).fetchall()
    return {name for (name,) in rows}


def create_macros(con: duckdb.DuckDBPyConnection, sql_dir: Path = SQL_DIR, names: set[str] | None = None) -> None:
    """Create (or replace) the macros of ``sql/macros/`` (or only ``names``): before the views that call them,
    as creating a view binds its body, and after the tables a macro reads by name (creating it binds its body)."""
    for name, path in macro_files(sql_dir).items():
        if names is None or name in names:
            con.execute(view_body(path))


def create_views(
    con: duckdb.DuckDBPyConnection,
    sql_dir: Path = SQL_DIR,
    materialize: bool = False,
    only: list[str] | None = None,
    keep_existing: bool = False,
    once_as_tables: bool = False,
    scratch: Path | None = None,
) -> list[str]:
    """Create every view of ``sql_dir`` (or only those ``only`` needs) in dependency order; with
    ``materialize`` each is computed once into a temp table, which is what a batch run that reads every
    view wants (views would recompute their inputs). ``keep_existing``: views the connection already has
    stay as they are (``write_views`` points written ones at their Parquet files), and so do the views only they
    read. ``once_as_tables`` (with ``only``): the views two or more of the needed ones read and the staged ones
    (``views.computed_once``) are computed once into temp tables, the others stay views; with ``scratch``, every
    view the ``only`` ones read is computed once into a Parquet file in that folder, which the views then read: a
    big trace's results would fill DuckDB's memory as tables, and its views inlined into one statement hold their
    joins' memory together (:data:`LAZY_TABLE_OPS`). The macros the views call are created first."""
    files = view_files(sql_dir)
    have = defined_views(con) if keep_existing else set()
    order = [
        v
        for v in (view_order(sql_dir) if only is None else needed_views(only, sql_dir, existing=have))
        if v not in have
    ]
    tables: set[str] = set()
    if once_as_tables and only is not None:
        once = (v for v in order if v not in only) if scratch is not None else computed_once(only, sql_dir, have)
        tables = set(once)
    create_macros(con, sql_dir, {m for name in order for m in view_macros(files[name])})
    for name in order:
        # Views written only on request expand to many rows (kernels x SMs): never computed unasked.
        # (a shared one is computed by the statement anyway: once into a table rather than in each reader)
        as_table = (materialize and ON_REQUEST not in files[name].read_text()) or (name in tables and scratch is None)
        body = view_body(files[name])
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS\n{body}" if as_table else view_sql(name, body))
        if name in tables and scratch is not None:
            parquet = scratch / f"{name}.parquet"
            copy_view(con, name, parquet, "parquet")
            read_back(con, name, parquet)
    return order


def _check_schema_versions(con: duckdb.DuckDBPyConnection, normalized: Path) -> None:
    """Data written by a newer major schema may mean something else in a column: refuse, don't guess."""
    files = [str(f) for f in committed_files(normalized, "trace_meta")]
    # DuckDB's own scan (pyarrow.dataset would import pandas: 0.35 CPU-s per process); no hive discovery.
    scan = con.read_parquet(files, hive_partitioning=False, union_by_name=True) if files else None
    versions = [v for (v,) in scan.select("schema_version").distinct().fetchall()] if scan is not None else []
    newer = sorted({v for v in versions if v is not None and major(v) > major(SCHEMA_VERSION)})
    if newer:
        raise BadInputError(
            normalized,
            f"normalized with schema {', '.join(newer)}; this tracepipe reads {SCHEMA_VERSION} and "
            "older minors: upgrade tracepipe or re-normalize the traces",
        )


def connect(
    normalized: str | Path,
    sql_dir: Path = SQL_DIR,
    materialize: bool = False,
    read_only: bool = False,
    views: list[str] | None = None,
    device: str | None = None,
    traces: set[str] | None = None,
    lazy: bool = False,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every table and view registered.

    ``views``: create only these and the views they read (default: every view). ``lazy`` (with ``read_only``):
    none at first; each statement's are created as it comes (:func:`lazy_views`).
    ``traces``: register only these trace ids' tables (default: every committed trace).
    ``device``: a name of ``arch.DEVICE_PRESETS`` (``rtx3090``): every traced device is replaced by that part's
    limits, so occupancy, waves and the SM views are a projection (``device_limits.projected_device`` says so).
    ``read_only``: DuckDB's own sandbox: no file outside ``normalized`` can be read or written, no
    extension installed or loaded, no setting changed (the configuration is locked). Inside the folder
    DuckDB's sandbox would still let COPY/ATTACH/EXPORT write, so the connection comes wrapped in a
    :class:`~pipeline.analyze.readonly.ReadOnlyConnection`, whose SQL entry points refuse every statement
    that is not a query (:func:`~pipeline.analyze.readonly.reading_statements`).
    """
    normalized = Path(normalized)
    if not normalized.is_dir() or not trace_ids(normalized):
        raise BadInputError(normalized, "not a normalized folder (no trace_meta/): run `tracepipe normalize` first")
    normalized = normalized.resolve()  # the sandbox compares resolved paths with the scans' globs
    hold_readers(normalized)  # no writer removes a generation this process reads
    config, con = _private_connection()
    _check_schema_versions(con, normalized)
    con.execute("SET preserve_insertion_order = false")
    # Each view's bind reads the footers of the files it scans, and views bind the views they read
    # again: cached, creating the views costs 0.24 instead of 0.58 CPU-s on a 200k-kernel trace.
    con.execute("SET parquet_metadata_cache = true")
    register_tables(con, normalized, traces)
    ops = table_rows(con, GPU_OP_TABLES)
    if "memory_limit" in config:
        limit = parse_size(config["memory_limit"])
    else:  # DuckDB's own default until here: 80% of the machine's memory
        (duckdb_default,) = con.execute("SELECT current_setting('memory_limit')").fetchone()
        limit = default_memory_limit(ops, parse_size(duckdb_default) or MEMORY_FLOOR)
        set_memory_limit(con, limit)
    if limit is not None:
        _LIMITS[con] = limit
    # No more threads than the biggest tables have row groups to scan, nor than the memory limit has room for
    # (lean.duckdb_threads)
    rows = max(ops, table_rows(con, ("api_calls",)))
    con.execute("SET threads = $n", {"n": duckdb_threads(rows, limit)})
    size_arrow_pool(rows)  # the Parquet reads and writes around DuckDB: as many threads
    if device is not None:
        from pipeline.analyze.arch import DEVICE_PRESETS, device_override_table

        if device not in DEVICE_PRESETS:
            raise BadInputError(Path(device), f"unknown device; one of: {', '.join(sorted(DEVICE_PRESETS))}")
        register_arrow(con, "_py_device_override", device_override_table(device))
        con.execute("CREATE OR REPLACE VIEW device_override AS SELECT * FROM _py_device_override")
    create_macros(con, sql_dir)  # every macro, for the views created now and those write_views creates later
    scratch = _lazy_scratch(config, ops) if lazy and read_only else None
    if materialize or (lazy and read_only and scratch is None):  # views as temp tables, before the lock below
        without_statistics_propagation(con)
    create_views(con, sql_dir, materialize, only=[] if lazy and read_only else views)
    if read_only:
        dirs = [f"{normalized}{os.sep}", *([f"{scratch}{os.sep}"] if scratch is not None else [])]
        _sandbox(con, dirs)
        from pipeline.analyze.readonly import ReadOnlyConnection

        ensure = lazy_views(con, sql_dir, scratch) if lazy else None
        return ReadOnlyConnection(con, ensure)  # type: ignore[return-value]  # quacks like the connection it wraps
    return con


def _private_connection() -> tuple[dict[str, str], duckdb.DuckDBPyConnection]:
    """:func:`duckdb_config` and a connection made with it, its private spill folder removed when it goes (also at
    interpreter exit)."""
    config = duckdb_config()
    con = duckdb_connect(config)
    weakref.finalize(con, shutil.rmtree, config["temp_directory"], True)
    return config, con


def _sandbox(con: duckdb.DuckDBPyConnection, dirs: list[str]) -> None:
    """DuckDB's own sandbox on ``con``: no file outside ``dirs`` read or written, no extension or secret, the
    configuration locked."""
    con.execute("SET allowed_directories = $dirs", {"dirs": dirs})
    con.execute("SET allow_persistent_secrets = false")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def connect_folder(folder: str | Path, device: str | None = None) -> duckdb.DuckDBPyConnection:
    """The read-only connection ``tracepipe sql`` and ``tracepipe.connect`` open: over a normalized folder, every
    table and the views created as statements name them (:func:`connect`); over an analysis folder, its views as
    written (:func:`connect_analysis`), where ``device`` is refused: the projection is made as views are computed."""
    folder = Path(folder)
    if trace_ids(folder):
        return connect(folder, read_only=True, device=device, lazy=True)
    if device is not None and analysis_files(folder):
        raise BadInputError(folder, "an analysis folder holds views as computed: --device needs the normalized folder")
    return connect_analysis(folder)


def analysis_files(folder: Path, sql_dir: Path = SQL_DIR) -> dict[str, Path]:
    """The views ``tracepipe analyze`` wrote into ``folder`` (``<view>.parquet`` for a view of ``sql_dir``), by name;
    empty for any other folder."""
    names = set(view_files(sql_dir))
    return {p.stem: p for p in sorted(folder.glob("*.parquet")) if p.stem in names} if folder.is_dir() else {}


def connect_analysis(folder: str | Path, sql_dir: Path = SQL_DIR) -> duckdb.DuckDBPyConnection:
    """A read-only connection over the Parquet that ``tracepipe analyze`` wrote into ``folder``: each view by its
    name, as written (nothing is computed again; views analyze did not write are absent). The same sandbox as
    :func:`connect`'s ``read_only``: nothing outside ``folder`` is read, and no statement writes."""
    folder = Path(folder)
    files = analysis_files(folder, sql_dir)
    if not files:
        raise BadInputError(
            folder,
            wrong_folder(folder, "either")
            or "neither a normalized folder (no trace_meta/) nor an analysis folder (no view's Parquet): give "
            "tracepipe normalize's or tracepipe analyze's --out folder",
        )
    _, con = _private_connection()
    for name, path in files.items():
        con.read_parquet(str(path.resolve())).create_view(name, replace=True)  # the path never pasted into SQL
    _sandbox(con, [f"{folder.resolve()}{os.sep}"])
    from pipeline.analyze.readonly import ReadOnlyConnection

    return ReadOnlyConnection(con)  # type: ignore[return-value]  # quacks like the connection it wraps


#: Up to this many GPU operations a lazy connection computes the views of a statement that are computed once
#: (``views.computed_once``) into temp tables; past it every view the statement's views read goes into a Parquet
#: file in its spill folder, which the views then read, as ``analyze`` does past its in-memory size. On the
#: 10M-kernel export, as temp tables `SELECT count(*) FROM findings` filled the 20 GB spill cap and
#: `SELECT kernel_id, layer FROM kernel_layers LIMIT 3` ran out of memory (the temp tables held DuckDB's memory,
#: the views inlined into the statement held their joins' together); as files 83.7 s and 26.8 s (analyze --view
#: findings: 167 s). Tables stay the faster where they fit: on the GPT export repeated to 2.3M kernels `count(*)`
#: of kernel_layers 3.6 s as tables, 5.5 s as files; 1.0 against 1.4 s on the 231k-kernel export
#: (benchmarks/results/sql_lazy_files_44.txt).
LAZY_TABLE_OPS = 2_000_000


def _lazy_scratch(config: dict[str, str], ops: int) -> Path | None:
    """Where a lazy connection over ``ops`` GPU operations writes the views it computes once (None: temp tables,
    :data:`LAZY_TABLE_OPS`): a folder in its private spill folder, removed with it."""
    if ops <= LAZY_TABLE_OPS:
        return None
    scratch = Path(config["temp_directory"]) / "views"
    scratch.mkdir()
    return scratch


def lazy_views(
    con: duckdb.DuckDBPyConnection, sql_dir: Path = SQL_DIR, scratch: Path | None = None
) -> Callable[[str | None], None]:
    """What creates, on ``con``, the views a statement names and those they read (every view for None, or for a
    statement whose views the parser cannot tell: ``readonly.named_relations``); views already there stay.

    The views that two or more of the statement's views read, and the staged ones (``views.computed_once``), are
    computed once into temp tables, or with ``scratch`` every view they read into a Parquet file there
    (:data:`LAZY_TABLE_OPS`), as ``analyze`` computes its views once: as nested views DuckDB plans each again
    wherever it is read, all in one plan, whose joins then hold memory together. On the 231k-kernel GPT export
    `SELECT count(*) FROM findings` so ran out of memory after 17 s (2.2 s as tables); `step_gpu_idle` 5.5 -> 1.8
    s, `kernel_layers` 1.3 -> 1.1 s (benchmarks/results/sql_shared_views_44.txt); on the 10M-kernel export even a
    `LIMIT 3` of kernel_layers did (benchmarks/results/sql_10m_views_44.txt)."""
    from pipeline.analyze.readonly import named_relations

    names = set(view_files(sql_dir))

    def ensure(statement: str | None) -> None:
        named = None if statement is None else named_relations(statement)
        only = None if named is None else sorted(named & names)
        if only != []:
            create_views(con, sql_dir, only=only, keep_existing=True, once_as_tables=True, scratch=scratch)

    return ensure


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


def optimizer_setting(env: str) -> str:
    """DuckDB optimizer passes to turn off, from the environment (comma-separated names of ``duckdb_optimizers()``),
    validated: an unknown name is a setting error, not DuckDB's exception at connect. Unset: nothing is asked of
    DuckDB (every connection reads this)."""
    names = [n.strip() for n in os.environ.get(env, "").split(",") if n.strip()]
    if not names:
        return ""
    with duckdb.connect() as probe:  # not DuckDB's default connection, which the caller's own state may hold
        known = {name for (name,) in probe.execute("SELECT name FROM duckdb_optimizers()").fetchall()}
    if unknown := sorted(set(names) - known):
        raise SettingError(
            f"{env}: no such DuckDB optimizer pass {', '.join(unknown)}; `SELECT name FROM "
            "duckdb_optimizers()` lists them"
        )
    return ",".join(names)


def duckdb_config() -> dict[str, str]:
    """A capped private spill folder (TRACEPIPE_TEMP_LIMIT overrides the cap) and, when TRACEPIPE_MEMORY_LIMIT is
    set, that memory limit (past it DuckDB spills sorts, joins and aggregates); without it :func:`connect` sizes
    the limit to the input (:func:`default_memory_limit`). TRACEPIPE_DISABLED_OPTIMIZERS turns DuckDB optimizer
    passes off, as DuckDB's ``disabled_optimizers`` does: a way round a wrong plan of DuckDB's, and how
    ``benchmarks/optimizer_passes.py`` checks that the views' rows do not depend on a pass."""
    config = {"temp_directory": spill_folder()}
    if "TRACEPIPE_MEMORY_LIMIT" in os.environ:
        config["memory_limit"] = f"{size_setting('TRACEPIPE_MEMORY_LIMIT', '')}B"
    if off := optimizer_setting("TRACEPIPE_DISABLED_OPTIMIZERS"):
        config["disabled_optimizers"] = off
    config["max_temp_directory_size"] = f"{size_setting('TRACEPIPE_TEMP_LIMIT', DEFAULT_TEMP_LIMIT)}B"
    return config


def default_memory_limit(gpu_ops: int, duckdb_default: int) -> int:
    """DuckDB's memory limit for an input of ``gpu_ops`` GPU operations: :data:`MEMORY_FLOOR` or
    :data:`MEMORY_PER_GPU_OP` bytes per operation, whichever is more (bounded: 10M kernels in < 2 GB of RSS, and
    bigger traces kept off the spill cliff of the largest join), but never above DuckDB's own default
    (``duckdb_default``: 80% of the machine's memory)."""
    return min(max(MEMORY_FLOOR, MEMORY_PER_GPU_OP * gpu_ops), duckdb_default)


def analysis_warnings(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One line per row of the view ``analysis_warnings``: values the views could not use (and left NULL)."""
    rows = con.execute(
        "SELECT trace_id, message, example_kernel_id FROM analysis_warnings ORDER BY trace_id, view, device_id, message"
    ).fetchall()
    return [f"{t}: {m}" + (f" (e.g. kernel_id {k})" if k is not None else "") for t, m, k in rows]


#: The tables of GPU operations (their rows size DuckDB's default memory limit).
GPU_OP_TABLES = ("kernels", "memcpy", "memset")


def table_rows(con: duckdb.DuckDBPyConnection, tables: tuple[str, ...]) -> int:
    """Rows of ``tables`` together, as ``con`` reads them (from the Parquet footers: no data is scanned)."""
    counts = " + ".join(f"(SELECT count(*) FROM {name})" for name in tables)
    return int(con.execute(f"SELECT {counts}").fetchall()[0][0])
