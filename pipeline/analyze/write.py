"""Views written to files: ``out/<view>.parquet`` (and ``.csv``), each computed once and renamed into place only
when complete (``tracepipe analyze``, ``tracepipe run``, incremental analyze).

Small inputs are computed in memory, several views at once; big ones go through Parquet one view at a time, each
view's result read back from its file by the views built on it.
"""

from __future__ import annotations

import concurrent.futures
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import duckdb

from pipeline.analyze.engine import (
    cursor_of,
    defined_views,
    memory_limit,
    set_memory_limit,
    table_rows,
    without_statistics_propagation,
)
from pipeline.analyze.scratch import copy_view, read_back
from pipeline.analyze.views import SPILLS, computed_once, needed_views, view_body, view_files, view_inputs
from pipeline.catalog import SQL_DIR
from pipeline.lean import cores, threads_within
from pipeline.outputs import output_folder


def _views_to_write(views: list[str], sql_dir: Path, staged: bool = True) -> list[str]:
    """In dependency order: ``views``, plus each view they need that two or more of the needed views read
    (``nvtx_paths`` under ``kernel_layers``, ``layer_summary``, ``layer_timeline``): computed once rather than
    once per reader, unless its header says ``-- analyze: inline`` (``_gpu_op_calls``: a scan and a filter of
    every GPU operation, cheaper in each of its two readers than written and read back); with ``staged`` (inputs
    too big to analyze in memory), plus each needed view whose header says ``-- analyze: staged``: inlined into
    its reader, its joins and the reader's would hold DuckDB's memory at once (``launch_point_layers`` under
    ``gpu_op_attribution``: 10M kernels spilled 14.9 GB as one statement, 1 GB as two). In memory the inputs are
    small and one statement fewer is the cheaper (1 MB trace: 0.05 s)."""
    once = set(computed_once(views, sql_dir, staged=staged))
    return [v for v in needed_views(views, sql_dir) if v in views or v in once]


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


#: On big inputs (the Parquet path) a view whose header says ``-- analyze: spills`` is computed under this share of
#: DuckDB's memory limit. The limit is sized for the biggest hash join (``engine.MEMORY_PER_GPU_OP``), which below
#: it re-reads its spilled probe rows at ~10x the time; these views' memory goes to sorts, windows and aggregates,
#: which spill in order, and they had held the process's peak: on the 10M-kernel export (11 threads, 2-core VM)
#: findings 2,124 MB, step_gpu_idle 1,988, layer_kernel_summary 1,984, each with DuckDB at its 1.6 GB limit. At
#: this share analyze's peak went 2,197 -> 1,894 MB on the 16-core GPU host at 0.99x its wall (2,138 -> 1,835 MB
#: for 1.06x locally), the same rows (benchmarks/results/spill_share_44.txt).
SPILL_SHARE = 0.75


def in_memory_rows(side_by_side: bool) -> int:
    """Inputs up to this many rows are analyzed in memory (:data:`IN_MEMORY_ROWS`): fewer when views are computed
    one at a time, where the in-memory tables' extra CPU buys no wall time."""
    return IN_MEMORY_ROWS if side_by_side else IN_MEMORY_ROWS_ONE_AT_A_TIME


def input_rows(con: duckdb.DuckDBPyConnection) -> int:
    """Rows of the :data:`SIZE_TABLES` ``con`` reads."""
    return table_rows(con, SIZE_TABLES)


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
    also: tuple[str, ...] = (),
    inspect: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    stamp: str | None = None,
) -> dict[str, int]:
    """Each view as ``out/<view>.parquet`` (and ``.csv``), each file renamed into place only when complete;
    returns the rows of each view. ``done(view)`` is called as each view is written (progress).

    ``also``: views computed with ``views``, staged as they are, but written to no file of ``out``. ``inspect(con)``
    runs once every view is computed, before the temporary files go: what it reads of those views is their
    computed result (``analyze`` prints analysis_warnings this way: over views that were never computed, the
    view's SQL would plan every view under it as one statement, which ran out of memory on the 42 sample traces).

    ``stamp``: each Parquet file of ``views`` carries it (``outputs.inputs_stamp``: what the views were computed over).

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
    output_folder(out)  # never inside normalized data
    rows: dict[str, int] = {}
    scratch: dict[str, Path] = {}
    files = view_files(sql_dir)
    have = defined_views(con)
    computed = [*views, *(v for v in also if v not in views)]
    order = needed_views(computed, sql_dir)
    workers = workers or view_workers()
    side_by_side = produce is None and not have.intersection(order) and workers > 1  # views computed at once
    if in_memory is None:
        in_memory = input_rows(con) <= in_memory_rows(side_by_side)
    to_write = set(_views_to_write(computed, sql_dir, staged=not in_memory))
    if in_memory:
        without_statistics_propagation(con)
    if in_memory and side_by_side:
        rows = _write_in_memory_concurrently(con, out, views, formats, order, to_write, files, workers, done, stamp)
        if inspect is not None:  # every view a table of the database
            inspect(con)
        return rows
    limits = _Limits(con)
    try:
        for view in order:
            sql = view_body(files[view])
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
                    written = copy_view(con, view, parquet, "parquet", stamp)
            else:
                if view not in have:
                    con.execute(f"CREATE OR REPLACE VIEW {view} AS\n{sql}")
                if written is None:
                    limits.set(SPILLS in sql)
                    written = copy_view(con, view, parquet, "parquet", stamp if wanted else None)
                if not wanted:
                    scratch[view] = parquet
                read_back(con, view, parquet)
            if view not in views:
                continue
            for fmt in formats:
                if fmt != "parquet":
                    n = copy_view(con, view, out / f"{view}.{fmt}", fmt)
                    written = n if written is None else written
            rows[view] = written
            if done is not None:
                done(view)
        if inspect is not None:  # before the scratch files go
            inspect(con)
    finally:
        limits.set(spills=False)
        for view, path in scratch.items():  # back to its SQL: the connection stays usable
            con.execute(f"CREATE OR REPLACE VIEW {view} AS\n{view_body(files[view])}")
            path.unlink(missing_ok=True)
    return rows


class _Limits:
    """DuckDB's memory limit and threads for each view computed through Parquet: the connection's own, or for a view
    that spills :data:`SPILL_SHARE` of its limit and as many threads as that leaves their share
    (``lean.threads_within``). A connection ``engine.connect`` did not make keeps its settings. Set only when they
    change: a SET flushes DuckDB's allocator, whose pages the next statement would fault in again
    (benchmarks/results/device_44_release_memory_h100.txt)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con, self.full = con, memory_limit(con)
        self.threads = self.threads_now = int(con.execute("SELECT current_setting('threads')").fetchone()[0])
        self.spilling = False

    def set(self, spills: bool) -> None:
        if self.full is None or spills == self.spilling:
            return
        limit = int(self.full * SPILL_SHARE) if spills else self.full
        threads = threads_within(limit, self.threads) if spills else self.threads
        set_memory_limit(self.con, limit, threads if threads != self.threads_now else None)
        self.spilling, self.threads_now = spills, threads


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
    stamp: str | None = None,
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
        cur, sql = cursor(), view_body(files[view])
        if view not in to_write:  # read by one view only: stays SQL, inlined there
            cur.execute(f"CREATE OR REPLACE VIEW {view} AS\n{sql}")
            return None
        cur.execute(f"CREATE OR REPLACE TABLE {view} AS\n{sql}")
        if view not in views:
            return None
        written = copy_view(cur, view, out / f"{view}.parquet", "parquet", stamp) if "parquet" in formats else None
        for fmt in formats:
            if fmt != "parquet":
                n = copy_view(cur, view, out / f"{view}.{fmt}", fmt)
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
