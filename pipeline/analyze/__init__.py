"""Run the analysis: every normalized table and every ``sql/*.sql`` view in one DuckDB connection.

Python only wires things up: each normalized table becomes a view over its
Parquet glob (an empty, correctly typed view when no trace has it), small
Python-made tables (per-architecture limits) are registered, and each file in
``sql/`` defines the view named like the file. Views may use each other; they
are created in dependency order, read from each file's ``-- Inputs:`` header
(tests/test_sql_headers.py checks every header names exactly what its body reads).
"""

from __future__ import annotations

import collections
import concurrent.futures
import graphlib
import importlib
import os
import re
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa

from pipeline.catalog import SQL_DIR
from pipeline.errors import BadInputError, SettingError, parse_size
from pipeline.lean import cores, duckdb_connect
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

#: view name -> "module:function" returning a pyarrow Table (kept in Python: small lookup tables).
PY_TABLES: dict[str, str] = {}
PY_TABLES["arch_limits"] = "pipeline.analyze.arch:arch_limits_table"
PY_TABLES["gpu_names"] = "pipeline.analyze.arch:gpu_names_table"
PY_TABLES["kernel_tile_patterns"] = "pipeline.analyze.tiles:tile_patterns_table"
PY_TABLES["ncu_display_names"] = "pipeline.analyze.ncu_names:display_names_table"
PY_TABLES["finding_thresholds"] = "pipeline.analyze.finding_rules:finding_thresholds_table"
PY_TABLES["finding_kernel_classes"] = "pipeline.analyze.finding_rules:finding_kernel_classes_table"
PY_TABLES["device_override"] = "pipeline.analyze.arch:device_override_table"  # replaced by connect(device=...)


def view_files(sql_dir: Path = SQL_DIR) -> dict[str, Path]:
    return {p.stem: p for p in sorted(sql_dir.glob("*.sql"))}


#: Header lines that change how `analyze` treats a view: written only when asked for by name; computed into its
#: own result even when only one view reads it (see _views_to_write).
ON_REQUEST = "-- analyze: on request"
STAGED = "-- analyze: staged"


def default_views(sql_dir: Path = SQL_DIR) -> list[str]:
    """Views `tracepipe analyze` writes unless told otherwise: all but those whose header says
    ``-- analyze: on request`` (views that expand to one row per kernel and SM, say)."""
    return [name for name, path in view_files(sql_dir).items() if ON_REQUEST not in path.read_text()]


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


def cursor_of(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A cursor of ``con`` (another connection to its database, for another thread) that sees what ``con``
    sees: the database's tables and views, and the Arrow tables registered on ``con`` (registered again;
    storing them as tables instead cost ~2 ms of CPU each, 12 of them on every connect)."""
    cur = con.cursor()
    for name, table in _REGISTERED.get(con, {}).items():
        cur.register(name, table)
    return cur


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


def needed_views(views: list[str], sql_dir: Path = SQL_DIR) -> list[str]:
    """``views`` and every view they read, directly or not, in dependency order."""
    files = view_files(sql_dir)
    need, todo = set(), list(views)
    while todo:
        name = todo.pop()
        if name in files and name not in need:
            need.add(name)
            todo += view_inputs(files[name])
    return [v for v in view_order(sql_dir) if v in need]


def defined_views(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Names of the views (and temp tables) the connection has now."""
    rows = con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal UNION SELECT table_name FROM duckdb_tables()"
    ).fetchall()
    return {name for (name,) in rows}


def create_views(
    con: duckdb.DuckDBPyConnection,
    sql_dir: Path = SQL_DIR,
    materialize: bool = False,
    only: list[str] | None = None,
    keep_existing: bool = False,
) -> list[str]:
    """Create every view of ``sql_dir`` (or only those ``only`` needs) in dependency order; with
    ``materialize`` each is computed once into a temp table, which is what a batch run that reads every
    view wants (views would recompute their inputs). ``keep_existing``: views the connection already has
    stay as they are (``write_views`` points written ones at their Parquet files)."""
    files = view_files(sql_dir)
    order = view_order(sql_dir) if only is None else needed_views(only, sql_dir)
    have = defined_views(con) if keep_existing else set()
    for name in order:
        if name in have:
            continue
        # Views written only on request expand to many rows (kernels x SMs): never computed unasked.
        kind = "TEMP TABLE" if materialize and ON_REQUEST not in files[name].read_text() else "VIEW"
        con.execute(f"CREATE OR REPLACE {kind} {name} AS\n{_body(files[name])}")
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
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every table and view registered.

    ``views``: create only these and the views they read (default: every view).
    ``traces``: register only these trace ids' tables (default: every committed trace).
    ``device``: a name of ``arch.DEVICE_PRESETS`` (``rtx3090``): every traced device is replaced by that part's
    limits, so occupancy, waves and the SM views are a projection (``device_limits.projected_device`` says so).
    ``read_only``: DuckDB's own sandbox: no file outside ``normalized`` can be read or written, no
    extension installed or loaded, no setting changed (the configuration is locked). Inside the folder
    DuckDB's sandbox would still let COPY/ATTACH/EXPORT write, so the connection comes wrapped in a
    :class:`~pipeline.analyze.readonly.ReadOnlyConnection`, whose SQL entry points refuse every statement
    that is not a query (:func:`reading_statements`).
    """
    normalized = Path(normalized)
    if not normalized.is_dir() or not trace_ids(normalized):
        raise BadInputError(normalized, "not a normalized folder (no trace_meta/): run `tracepipe normalize` first")
    normalized = normalized.resolve()  # the sandbox compares resolved paths with the scans' globs
    hold_readers(normalized)  # no writer removes a generation this process reads
    config = duckdb_config()
    con = duckdb_connect(config)
    weakref.finalize(con, shutil.rmtree, config["temp_directory"], True)  # also at interpreter exit
    _check_schema_versions(con, normalized)
    con.execute("SET preserve_insertion_order = false")
    # Each view's bind reads the footers of the files it scans, and views bind the views they read
    # again: cached, creating the views costs 0.24 instead of 0.58 CPU-s on a 200k-kernel trace.
    con.execute("SET parquet_metadata_cache = true")
    register_tables(con, normalized, traces)
    if "memory_limit" not in config:  # DuckDB's own default until here: 80% of the machine's memory
        (duckdb_default,) = con.execute("SELECT current_setting('memory_limit')").fetchone()
        ops = table_rows(con, GPU_OP_TABLES)
        limit = default_memory_limit(ops, parse_size(duckdb_default) or MEMORY_FLOOR)
        con.execute("SET memory_limit = $limit", {"limit": f"{limit}B"})
    if device is not None:
        from pipeline.analyze.arch import DEVICE_PRESETS, device_override_table

        if device not in DEVICE_PRESETS:
            raise BadInputError(Path(device), f"unknown device; one of: {', '.join(sorted(DEVICE_PRESETS))}")
        register_arrow(con, "_py_device_override", device_override_table(device))
        con.execute("CREATE OR REPLACE VIEW device_override AS SELECT * FROM _py_device_override")
    create_views(con, sql_dir, materialize, only=views)
    if read_only:
        con.execute("SET allowed_directories = $dirs", {"dirs": [f"{normalized}{os.sep}"]})
        con.execute("SET allow_persistent_secrets = false")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        from pipeline.analyze.readonly import ReadOnlyConnection

        return ReadOnlyConnection(con)  # type: ignore[return-value]  # quacks like the connection it wraps
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
    """A capped private spill folder (TRACEPIPE_TEMP_LIMIT overrides the cap) and, when TRACEPIPE_MEMORY_LIMIT is
    set, that memory limit (past it DuckDB spills sorts, joins and aggregates); without it :func:`connect` sizes
    the limit to the input (:func:`default_memory_limit`)."""
    config = {"temp_directory": spill_folder()}
    if "TRACEPIPE_MEMORY_LIMIT" in os.environ:
        config["memory_limit"] = f"{size_setting('TRACEPIPE_MEMORY_LIMIT', '')}B"
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


#: Statements ``tracepipe sql`` runs: queries, plans, catalog look-ups and in-memory objects. Everything
#: else (COPY, EXPORT, ATTACH, INSTALL/LOAD, SET, INSERT...) could write inside the normalized folder,
#: which DuckDB's sandbox allows because the scans must read there.
READ_ONLY_STATEMENTS = frozenset(
    {
        duckdb.StatementType.SELECT,
        duckdb.StatementType.EXPLAIN,
        duckdb.StatementType.PRAGMA,
        duckdb.StatementType.CALL,
        duckdb.StatementType.CREATE,
        duckdb.StatementType.DROP,
        duckdb.StatementType.VARIABLE_SET,
    }
)


class ReadOnlyError(duckdb.PermissionException):
    """A statement ``tracepipe sql`` does not run because it could write."""


def reading_statements(query: str | duckdb.Statement) -> list[duckdb.Statement]:
    """The statements of ``query``; ReadOnlyError, before any runs, when one of them could write."""
    statements = [query] if isinstance(query, duckdb.Statement) else duckdb.extract_statements(query)
    for st in statements:
        if st.type not in READ_ONLY_STATEMENTS:
            kind = st.type.name.replace("_", " ")
            raise ReadOnlyError(f"{kind} statements are not allowed: tracepipe's connections are read-only")
    return statements


def read_only_query(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyRelation | None:
    """Run ``query`` (one or more statements) when every statement only reads; the last one's result."""
    result = None
    for st in reading_statements(query):
        result = con.sql(st.query)
    return result


def _copy(con: duckdb.DuckDBPyConnection, view: str, dest: Path, fmt: str) -> int:
    """``view`` (a view or table name) into ``dest``, renamed into place only when complete; the rows written."""
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    options = "FORMAT parquet, COMPRESSION zstd" if fmt == "parquet" else "FORMAT csv, HEADER true"
    try:
        (rows,) = con.execute(f"COPY (SELECT * FROM {view}) TO $path ({options})", {"path": str(tmp)}).fetchall()[0]
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return rows


def _read_back(con: duckdb.DuckDBPyConnection, view: str, parquet: Path) -> None:
    """Point ``view`` at the Parquet file it was just written to, with its own column types (Parquet has no
    HUGEINT), so the views that read it reuse the result instead of computing it again."""
    cols = con.execute(f"DESCRIBE {view}").fetchall()
    select = ", ".join(f'CAST("{name}" AS {dtype}) AS "{name}"' for name, dtype, *_ in cols)
    con.read_parquet(str(parquet)).create_view(f"_rb_{view}", replace=True)  # the path never pasted into SQL
    con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT {select} FROM _rb_{view}")


def _views_to_write(views: list[str], sql_dir: Path, staged: bool = True) -> list[str]:
    """In dependency order: ``views``, plus each view they need that two or more of the needed views read
    (``nvtx_paths`` under ``kernel_layers``, ``layer_summary``, ``layer_timeline``): computed once rather than
    once per reader; with ``staged`` (inputs too big to analyze in memory), plus each needed view whose header
    says ``-- analyze: staged``: inlined into its reader, its joins and the reader's would hold DuckDB's memory
    at once (``launch_point_layers`` under ``gpu_op_attribution``: 10M kernels spilled 14.9 GB as one statement,
    1 GB as two). In memory the inputs are small and one statement fewer is the cheaper (1 MB trace: 0.05 s)."""
    files = view_files(sql_dir)
    need = needed_views(views, sql_dir)
    readers = collections.Counter(i for v in need for i in set(view_inputs(files[v])) if i in files)
    return [v for v in need if v in views or readers[v] >= 2 or (staged and STAGED in files[v].read_text())]


#: Traces with up to this many GPU operations and ranges (:data:`SIZE_TABLES`, all traces together) are
#: analyzed in memory: each view is computed once into a table of the connection, which the views built on it
#: read and which is copied to its file (2 statements a view instead of 5), and with two or more cores several
#: views are computed at once (:func:`view_workers`). On a 1 MB chrome trace the views' fixed costs are most of
#: analyze: write 0.61 -> 0.36 CPU-s, 54 MB 1.13 -> 0.90 (#18.4). Past ~50k rows a table's insert costs more
#: CPU than a Parquet write and read-back (80k kernels one view at a time: 3.24 vs 2.72 CPU-s,
#: bench_analyze_write.txt), but on 2 cores the concurrent views still finish sooner: the write stage's wall
#: 0.66-0.80x at 52k-141k rows for 1.03-1.24x the CPU and 431-661 MB instead of 200-252 MB; at 211k only 0.91x
#: for 1.35x the CPU and 899 MB (bench_analyze_write_s31.txt). So :func:`in_memory_rows` is this when views run
#: side by side and :data:`IN_MEMORY_ROWS_ONE_AT_A_TIME` when they run one at a time. Bigger inputs go through
#: Parquet, where no result is held in memory (kernel_layers of 10M kernels would not fit).
IN_MEMORY_ROWS = 100_000
IN_MEMORY_ROWS_ONE_AT_A_TIME = 50_000
#: The tables whose rows set the size of the per-kernel and per-range views.
SIZE_TABLES = ("kernels", "memcpy", "memset", "nvtx_ranges", "ncu_kernels")


def in_memory_rows(side_by_side: bool) -> int:
    """Inputs up to this many rows are analyzed in memory (:data:`IN_MEMORY_ROWS`): fewer when views are computed
    one at a time, where the in-memory tables' extra CPU buys no wall time."""
    return IN_MEMORY_ROWS if side_by_side else IN_MEMORY_ROWS_ONE_AT_A_TIME


def input_rows(con: duckdb.DuckDBPyConnection) -> int:
    """Rows of the :data:`SIZE_TABLES` ``con`` reads."""
    return table_rows(con, SIZE_TABLES)


#: The tables of GPU operations (their rows size DuckDB's default memory limit).
GPU_OP_TABLES = ("kernels", "memcpy", "memset")


def table_rows(con: duckdb.DuckDBPyConnection, tables: tuple[str, ...]) -> int:
    """Rows of ``tables`` together, as ``con`` reads them (from the Parquet footers: no data is scanned)."""
    counts = " + ".join(f"(SELECT count(*) FROM {name})" for name in tables)
    return int(con.execute(f"SELECT {counts}").fetchall()[0][0])


#: ``produce(view, dest)`` writes ``view``'s rows to the Parquet file ``dest`` its own way and returns how many,
#: or None to have ``write_views`` compute the view from its SQL (incremental analyze combines per-capture parts).
Produce = Callable[[str, Path], int | None]


def write_views(
    con: duckdb.DuckDBPyConnection,
    out: Path,
    views: list[str],
    formats: tuple[str, ...],
    done: Callable[[str], None] | None = None,
    sql_dir: Path = SQL_DIR,
    in_memory: bool | None = None,
    produce: Produce | None = None,
    workers: int | None = None,
) -> dict[str, int]:
    """Each view as ``out/<view>.parquet`` (and ``.csv``), each file renamed into place only when complete;
    returns the rows of each view. ``done(view)`` is called as each view is written (progress).

    Views are written in dependency order, each computed once: the views built on one
    (``layer_summary`` on ``kernel_layers``) read its result, not its SQL. ``in_memory`` (default: inputs of
    at most :func:`in_memory_rows` rows) keeps each result as a table of ``con``; otherwise each is written
    to Parquet and read back from there, so no result is held in memory. Without ``parquet`` in ``formats``
    (and for a view only needed by others) that file is a hidden, temporary one.

    Views ``con`` lacks are created here, each just before it is first needed: its inputs then already
    read their result, so creating it binds one level of SQL, not the whole tree of views below it (on a
    20-view run that tree made creating the views cost 0.5 CPU-s: ``connect(views=[])`` skips it). Views
    ``con`` already has are copied as they are and read back.

    ``produce``: see :data:`Produce`; a produced file is read back like any other.

    ``workers`` (default :func:`view_workers`): in memory, without ``produce`` and with none of the views
    already defined on ``con``, this many views are computed at once (:func:`_write_in_memory_concurrently`).
    """
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, int] = {}
    scratch: dict[str, Path] = {}
    files = view_files(sql_dir)
    have = defined_views(con)
    order = needed_views(views, sql_dir)
    workers = workers or view_workers()
    side_by_side = produce is None and not have.intersection(order) and workers > 1  # views computed at once
    if in_memory is None:
        in_memory = input_rows(con) <= in_memory_rows(side_by_side)
    to_write = set(_views_to_write(views, sql_dir, staged=not in_memory))
    if in_memory and side_by_side:
        return _write_in_memory_concurrently(con, out, views, formats, order, to_write, files, workers, done)
    try:
        for view in order:
            sql = _body(files[view])
            if view not in to_write:  # read by one view only: stays SQL, inlined there
                if view not in have:
                    con.execute(f"CREATE OR REPLACE VIEW {view} AS\n{sql}")
                continue
            wanted = view in views and "parquet" in formats
            parquet = out / f"{view}.parquet"
            if not wanted:
                parquet = out / f".{view}.scratch-{uuid.uuid4().hex[:8]}.parquet"
            written = produce(view, parquet) if produce is not None else None
            if written is None and in_memory and view not in have:
                con.execute(f"CREATE OR REPLACE TABLE {view} AS\n{sql}")
                if wanted:
                    written = _copy(con, view, parquet, "parquet")
            else:
                if view not in have:
                    con.execute(f"CREATE OR REPLACE VIEW {view} AS\n{sql}")
                if written is None:
                    written = _copy(con, view, parquet, "parquet")
                if not wanted:
                    scratch[view] = parquet
                _read_back(con, view, parquet)
            if view not in views:
                continue
            for fmt in formats:
                if fmt != "parquet":
                    n = _copy(con, view, out / f"{view}.{fmt}", fmt)
                    written = n if written is None else written
            rows[view] = written
            if done is not None:
                done(view)
    finally:
        for view, path in scratch.items():  # back to its SQL: the connection stays usable
            con.execute(f"CREATE OR REPLACE VIEW {view} AS\n{_body(files[view])}")
            path.unlink(missing_ok=True)
    return rows


def view_workers() -> int:
    """Views ``write_views`` computes at once in memory: one per core this process may use, at most 4.

    A small input's views cost mostly binding, planning and starting each statement (10-40 ms a view on a
    1 MB trace), which DuckDB does on the calling thread alone; two views at once keep both cores busy."""
    return min(cores(), 4)


def per_view_threads(workers: int) -> int:
    """DuckDB threads for each of ``workers`` views computed at once: the cores this process may use, shared."""
    return max(1, cores() // workers)


def view_graph(
    order: list[str], files: dict[str, Path]
) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, int]]:
    """For the views of ``order`` (a dependency order): the views each reads and the views reading each,
    among them; and each one's weight, 1 + its readers' weights: views with more views after them start
    first (the chain under gpu_op_layers is the critical path)."""
    inputs = {v: [i for i in view_inputs(files[v]) if i in order] for v in order}
    readers: dict[str, list[str]] = {v: [] for v in order}
    for v, ins in inputs.items():
        for i in ins:
            readers[i].append(v)
    weight: dict[str, int] = {}
    for v in reversed(order):
        weight[v] = 1 + sum(weight[r] for r in readers[v])
    return inputs, readers, weight


def _write_in_memory_concurrently(
    con: duckdb.DuckDBPyConnection,
    out: Path,
    views: list[str],
    formats: tuple[str, ...],
    order: list[str],
    to_write: set[str],
    files: dict[str, Path],
    workers: int,
    done: Callable[[str], None] | None,
) -> dict[str, int]:
    """``write_views`` in memory with ``workers`` views computed at once, each on a cursor of ``con`` (another
    connection to the same database: it sees the tables and views of the database, and :func:`cursor_of`
    registers on it the Arrow tables ``con`` has). A view starts once every view
    it reads is a committed table (or view) of the database; the statements each view runs are the ones the
    one-at-a-time loop runs, so every file and row count is the same. The first failure stops new views
    from starting and is raised once the running ones end."""
    inputs, readers, weight = view_graph(order, files)
    local = threading.local()
    cursors: list[duckdb.DuckDBPyConnection] = []
    lock = threading.Lock()

    def cursor() -> duckdb.DuckDBPyConnection:
        if not hasattr(local, "con"):
            local.con = cursor_of(con)
            with lock:
                cursors.append(local.con)
        return local.con

    def compute(view: str) -> int | None:
        cur, sql = cursor(), _body(files[view])
        if view not in to_write:  # read by one view only: stays SQL, inlined there
            cur.execute(f"CREATE OR REPLACE VIEW {view} AS\n{sql}")
            return None
        cur.execute(f"CREATE OR REPLACE TABLE {view} AS\n{sql}")
        if view not in views:
            return None
        written = _copy(cur, view, out / f"{view}.parquet", "parquet") if "parquet" in formats else None
        for fmt in formats:
            if fmt != "parquet":
                n = _copy(cur, view, out / f"{view}.{fmt}", fmt)
                written = n if written is None else written
        return written

    rows: dict[str, int] = {}
    waiting = {v: len(ins) for v, ins in inputs.items()}
    ready = [v for v in order if not waiting[v]]
    running: dict[concurrent.futures.Future, str] = {}
    failure: BaseException | None = None
    # The allowed cores shared among the views running side by side (one DuckDB thread each on 2 cores): a pool of
    # one thread per core under each view only takes turns (2 cores: write stage 0.87-0.94x the wall, 0.89-0.94x
    # the CPU from a 1 MB chrome trace to 50k nsys kernels, bench_analyze_write_s31.txt). The setting is the
    # database's: restored when the views are written.
    (threads,) = con.execute("SELECT current_setting('threads')").fetchone()
    con.execute("SET threads = $n", {"n": per_view_threads(workers)})
    try:
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="tracepipe-view") as pool:
            while ready or running:
                ready.sort(key=lambda v: -weight[v])
                while ready and failure is None and len(running) < workers:
                    view = ready.pop(0)
                    running[pool.submit(compute, view)] = view
                if not running:
                    break
                finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in finished:
                    view = running.pop(future)
                    if (error := future.exception()) is not None:
                        failure = failure or error
                        continue
                    if view in views:
                        rows[view] = future.result()
                        if done is not None:
                            done(view)
                    for r in readers[view]:
                        waiting[r] -= 1
                        if not waiting[r]:
                            ready.append(r)
    finally:
        for c in cursors:
            c.close()
        con.execute("SET threads = $n", {"n": threads})
    if failure is not None:
        raise failure
    return {v: rows[v] for v in order if v in rows}
