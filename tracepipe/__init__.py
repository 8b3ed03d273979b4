"""tracepipe's Python API, for notebooks and scripts (the implementation lives in ``pipeline/``).

    >>> import tracepipe
    >>> tp = tracepipe.open("build/normalized")          # a folder `tracepipe normalize` wrote (or analyze's)
    >>> tp.tables()                                      # every table and view, with a line on each
    >>> tp.sql("SELECT path, gpu_time_ns FROM layer_summary ORDER BY 2 DESC LIMIT 5")   # a polars DataFrame
    >>> tp.table("kernel_occupancy", trace_id="h200_smallcnn.nsys")
    >>> tp.con                                           # the read-only DuckDB connection itself

The common questions each have a method (docs/api.md says what each returns):

    >>> tp.trace_ids()                 # timeline traces (nsys, PyTorch) first, then ncu and layer-shape ones
    >>> tp.layers("h200_resnet18.nsys")                  # GPU time per layer path, split by pass
    >>> tp.kernels("layer1")                             # the kernels a layer and its sub-layers run, per path
    >>> tp.findings()                                    # what to fix in which layer, most GPU time at stake first
    >>> tp.steps()                                       # GPU busy, idle and launch gaps per step

Read-only: ``sql`` and ``con`` (its execute, sql, query and cursors) refuse statements that could write, and
``con`` runs in DuckDB's sandbox (no file outside the folder can be read or written, settings locked).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from pipeline import __version__
from pipeline.catalog import descriptions, is_public, table_descriptions
from pipeline.errors import BadInputError

__all__ = ["TRACE_KINDS", "Traces", "__version__", "connect", "describe", "open"]

#: trace_ids(kind=...): the source formats of each kind of trace (trace_meta.source_format)
TRACE_KINDS: dict[str, tuple[str, ...]] = {
    "timeline": ("nsys-sqlite", "nsys-rep", "chrome-trace"),  # kernels on a timeline: every per-layer view
    "ncu": ("ncu-csv",),  # Nsight Compute launches: measured counters
    "shapes": ("layer-shapes",),  # tracepipe capture's module shapes and MACs
}


def connect(folder: str | Path) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection over a normalized folder with every table and every view of sql/, in DuckDB's
    sandbox: no file outside the folder can be read or written, settings are locked; statements that could
    write (COPY, ATTACH, EXPORT, INSERT ...) are refused (``pipeline.analyze.readonly``). The views are created
    as statements name them (creating all ~46 at once binds each body again under the views that read it).
    ``folder`` may be `tracepipe analyze`'s output instead: its views' Parquet by name, as written, in the same
    sandbox (``tracepipe sql`` takes both too)."""
    from pipeline.analyze import connect_folder

    return connect_folder(folder)


def describe() -> dict[str, str]:
    """Every table and view a connection has, with its one-line description (tables first, then views)."""
    return descriptions()


class Traces:
    """A folder opened for reading, as ``tracepipe sql`` reads it: a normalized folder (every table; each view
    computed as a statement reads it) or an analysis folder (`tracepipe analyze`'s views, read as written). ``con``
    is its read-only DuckDB connection; ``normalized`` the normalized folder behind it: the folder itself, for an
    analysis folder the ``normalized/`` beside it holding its traces (as `tracepipe run` and README's ``build/`` lay
    them out), else None."""

    def __init__(self, folder: str | Path) -> None:
        from pipeline.analyze import connect_folder
        from pipeline.store import trace_ids

        self.folder = Path(folder)
        # tracepipe sql's reading, its refusals included: a folder of neither kind, and run's --out folder (which holds
        # both) with the one line naming its analysis/ and normalized/, as sql says it
        self.con = connect_folder(self.folder)
        self.analysis = not trace_ids(self.folder)  # connect_folder's own test of which kind it opened
        self.normalized: Path | None = _source_beside(self.folder, self.con) if self.analysis else self.folder
        self._source: duckdb.DuckDBPyConnection | None = None  # over `normalized`, opened when first needed
        self._findings: pl.DataFrame | None = None

    def sql(self, query: str, params: Any = None) -> pl.DataFrame:
        """The result of a query as a polars DataFrame (``params`` fill ``?`` / ``$name`` placeholders).
        Like ``tracepipe sql``, it refuses statements that could write (COPY, ATTACH, INSERT ...)."""
        from pipeline.analyze import read_only_query

        if params is None:
            rel = read_only_query(self.con, query)
            return rel.pl() if rel is not None else pl.DataFrame()
        return self.con.sql(query, params=params).pl()  # the read-only connection refuses writes

    def table(self, name: str, trace_id: str | None = None) -> pl.DataFrame:
        """A whole table or view (one trace's rows with ``trace_id``) as a polars DataFrame. Over an analysis folder,
        a table or a view analyze did not write comes from the normalized folder beside it (:attr:`normalized`)."""
        if name not in self.names() and not (self.analysis and name in descriptions()):
            raise KeyError(f"no table or view {name!r}; tables(): {', '.join(self.names())}")
        rel = self._con_for(name).table(name)
        return (rel.filter(duckdb.ColumnExpression("trace_id") == trace_id) if trace_id else rel).pl()

    def names(self) -> list[str]:
        """Public table and view names (not the internal ``_ds_*``-style registrations behind them)."""
        rows = self.con.execute("SELECT table_name FROM information_schema.tables ORDER BY table_name").fetchall()
        return [r[0] for r in rows if is_public(r[0])]

    def tables(self) -> pl.DataFrame:
        """name, kind (table / view) and description of every public name."""
        about = descriptions()
        return pl.DataFrame(
            {
                "name": list(about),
                "kind": ["view" if name in _view_names() else "table" for name in about],
                "description": list(about.values()),
            }
        ).filter(pl.col("name").is_in(self.names()))

    def schema(self, name: str) -> pl.DataFrame:
        """column_name, column_type of a table or view."""
        return self.con.sql(f"DESCRIBE {_quote(name)}").pl().select("column_name", "column_type")

    def trace_ids(self, kind: str | None = None) -> list[str]:
        """Trace ids: with ``kind`` None every trace, timeline traces (nsys, PyTorch: kernels on a timeline, what the
        per-layer views are about) first, those with kernels before those without (a CPU-only profile), then ncu and
        layer-shape ones, each group by name; ``kind`` one of :data:`TRACE_KINDS` ('timeline', 'ncu', 'shapes') for
        that kind only."""
        if kind is not None and kind not in TRACE_KINDS:
            raise ValueError(f"kind {kind!r}: one of {', '.join(TRACE_KINDS)} (or None for every trace)")
        rows = self._con_for("trace_meta").execute("SELECT trace_id, source_format FROM trace_meta").fetchall()
        order = {fmt: i for i, formats in enumerate(TRACE_KINDS.values()) for fmt in formats}
        wanted = None if kind is None else set(TRACE_KINDS[kind])
        with_kernels = self._traces_with_kernels()
        picked = [
            (order.get(fmt, len(order)), tid not in with_kernels, tid)
            for tid, fmt in rows
            if wanted is None or fmt in wanted
        ]
        return [tid for *_, tid in sorted(picked)]

    def _traces_with_kernels(self) -> set[str]:
        """The traces with a kernel (none where the folder has no kernels table to read)."""
        try:
            rows = self._con_for("kernels").execute("SELECT DISTINCT trace_id FROM kernels").fetchall()
        except duckdb.Error:  # no kernels table (a folder of ncu or layer-shape traces only)
            return set()
        return {tid for (tid,) in rows}

    def layers(self, trace_id: str | None = None) -> pl.DataFrame:
        """GPU time per layer path, most first: one row per trace and path (``layer_summary``) with trace_id, path,
        layer (innermost range; null = outside every range), calls, kernels, gpu_time_ns, share_pct (of the trace's
        kernel time), forward_gpu_time_ns, backward_gpu_time_ns, optimizer_gpu_time_ns, no_pass_gpu_time_ns (the same
        time by pass; no pass: launched outside every range, neither backward nor optimizer: the four add up to
        gpu_time_ns), memcpy_ns, memset_ns. ``trace_id``: one trace's rows."""
        return self._query(
            "layer_summary",
            "SELECT trace_id, path, layer, calls, kernels, gpu_time_ns, share_pct, forward_gpu_time_ns, "
            "backward_gpu_time_ns, optimizer_gpu_time_ns, no_pass_gpu_time_ns, memcpy_ns, memset_ns FROM layer_summary "
            "WHERE $trace IS NULL OR trace_id = $trace ORDER BY gpu_time_ns DESC, trace_id, path",
            {"trace": trace_id},
        )

    def kernels(self, layer: str, trace_id: str | None = None, subtree: bool = True) -> pl.DataFrame:
        """The kernels one layer runs (``layer_kernel_summary``): ``layer`` is a path (``step/model/layer1``) or a
        layer name (``layer1``). One row per trace, path, kernel and launch shape, most GPU time first: trace_id,
        path, layer, short_name, grid, block, launches, gpu_time_ns, share_pct, mean_ns, med_ns, min_ns, max_ns,
        stddev_ns, threads, regs, theoretical_occupancy_pct, limiter, waves, tail_fill_pct,
        ncu_achieved_occupancy_pct (where the capture ran ncu).

        ``subtree`` (default True): the layer's whole subtree, each kernel on the row of the path that launched it
        (``step/model/layer1/layer1.0/layer1.0.conv1``: nothing is summed into the parent), so the rows say which
        sub-layer runs what. A path matches itself and every path under it; a name matches every path with a level
        of that name and every path under those. True by default because a layer's kernels are the ones launched
        while it runs, its children's included, as nsys's NVTX projection counts a range's time: a container such as
        ``layer1`` launches nothing itself, and only its innermost paths hold kernels. ``subtree=False``: only paths
        where the layer is innermost (the path itself, or every path ending in the name)."""
        # '/' separates the levels of a path; a '/' inside one range's text is written '∕' there (the path_level
        # macro), so a name is compared with a level in that writing. starts_with, not LIKE: '_' and '%' are common
        # in module names and LIKE would read them as wildcards.
        return self._query(
            "layer_kernel_summary",
            "SELECT trace_id, path, layer, short_name, grid, block, launches, gpu_time_ns, share_pct, mean_ns, "
            "med_ns, min_ns, max_ns, stddev_ns, threads, regs, theoretical_occupancy_pct, limiter, waves, "
            "tail_fill_pct, ncu_achieved_occupancy_pct FROM layer_kernel_summary "
            "WHERE (path = $layer OR layer = $layer OR $subtree AND (starts_with(path, $layer || '/') "
            "OR list_contains(string_split(path, '/'), $level))) AND ($trace IS NULL OR trace_id = $trace) "
            "ORDER BY gpu_time_ns DESC, trace_id, path, short_name, grid, block",
            {"layer": layer, "level": layer.replace("/", "\u2215"), "subtree": subtree, "trace": trace_id},
        )

    def findings(self, trace_id: str | None = None, rule: str | None = None) -> pl.DataFrame:
        """What to fix in which layer (the ``findings`` view), most GPU time at stake first: trace_id, priority,
        rule, path, layer, pass, kernel, launches, gpu_time_ns, at_stake_ns, share_pct, measure, value, threshold,
        evidence, fix (docs/findings.md). Computed once per opened folder, every view it reads computed once; an
        analysis folder's findings as analyze wrote them."""
        from pipeline.report.findings import compute

        if self._findings is None:
            holder = self._holder("findings")
            if self.analysis and holder == self.folder:
                self._findings = self.con.table("findings").pl()
            else:  # a view over a whole tree: each input computed once, not inlined into one statement
                self._findings = compute(holder)
        df = self._findings
        if trace_id is not None:
            df = df.filter(pl.col("trace_id") == trace_id)
        if rule is not None:
            df = df.filter(pl.col("rule") == rule)
        return df.sort(["at_stake_ns", "trace_id", "rule"], descending=[True, False, False])

    def steps(self, trace_id: str | None = None) -> pl.DataFrame:
        """GPU busy, idle and launch-gap time per step (``step_gpu_idle``; step 0 = a trace without step ranges):
        trace_id, step, step_name, device_id, wall_ns, busy_ns, idle_ns, idle_pct, launch_gap_ns, host_wait_ns,
        kernels, kernel_ns, memop_ns."""
        return self._query(
            "step_gpu_idle",
            "SELECT trace_id, step, step_name, device_id, wall_ns, busy_ns, idle_ns, idle_pct, launch_gap_ns, "
            "host_wait_ns, kernels, kernel_ns, memop_ns FROM step_gpu_idle "
            "WHERE $trace IS NULL OR trace_id = $trace ORDER BY trace_id, step, device_id",
            {"trace": trace_id},
        )

    def _holder(self, name: str) -> Path:
        """The folder to read table or view ``name`` from: this one where it has it, else the normalized folder
        beside an analysis folder; BadInputError naming the folder to open where neither is there."""
        if not self.analysis or name in self.names():
            return self.folder
        if self.normalized is not None:
            return self.normalized
        table = name in table_descriptions()
        lacks = f"{name} is a table of the normalized folder" if table else f"analyze wrote no {name}.parquet here"
        raise BadInputError(
            self.folder,
            f"an analysis folder: {lacks}, and no normalized/ of its traces sits beside it: tracepipe.open() the "
            "normalized folder `tracepipe analyze` read",
        )

    def _con_for(self, name: str) -> duckdb.DuckDBPyConnection:
        """The read-only connection that holds ``name`` (:meth:`_holder`)."""
        if self._holder(name) == self.folder:
            return self.con
        if self._source is None:
            from pipeline.analyze import connect_folder

            self._source = connect_folder(self._holder(name))
        return self._source

    def _query(self, name: str, query: str, params: dict[str, Any]) -> pl.DataFrame:
        """``query`` over the connection holding view ``name``, the one it reads."""
        return self._con_for(name).sql(query, params=params).pl()

    def close(self) -> None:
        self.con.close()
        if self._source is not None:
            self._source.close()

    def __enter__(self) -> Traces:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.normalized is None:  # no trace_meta to count
            return f"tracepipe.Traces({str(self.folder)!r}: an analysis folder)"
        beside = f", an analysis folder beside {str(self.normalized)!r}" if self.analysis else ""
        return f"tracepipe.Traces({str(self.folder)!r}: {len(self.trace_ids())} traces{beside})"


def open(folder: str | Path) -> Traces:
    """Open a folder for reading, as ``tracepipe sql`` does: a normalized folder (what `tracepipe normalize` wrote)
    or an analysis folder (`tracepipe analyze`'s --out). The folder `tracepipe run` wrote holds both and is refused
    with a line naming its ``analysis/`` and ``normalized/``, as ``tracepipe sql`` refuses it."""
    return Traces(folder)


def _source_beside(analysis: Path, con: duckdb.DuckDBPyConnection) -> Path | None:
    """The normalized folder an analysis folder was computed from, where it sits beside it as ``normalized/`` (the
    layout of `tracepipe run` and of README's build/; analyze records no source): None when there is none, or when
    it lacks a trace the analysis names (in ``layer_coverage``, one row per trace with GPU work), as after the
    normalized folder was made again from other traces."""
    from pipeline.store import trace_ids

    beside = analysis.resolve().parent / "normalized"
    held = set(trace_ids(beside))
    if not held:
        return None
    written = {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "layer_coverage" not in written:  # analyze --view without it: nothing to check the folder against
        return beside
    named = {tid for (tid,) in con.execute("SELECT DISTINCT trace_id FROM layer_coverage").fetchall()}
    return beside if named <= held else None


def _view_names() -> set[str]:
    from pipeline.catalog import view_descriptions

    return set(view_descriptions())


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
