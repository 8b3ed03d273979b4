"""Checks every normalizer's output gets before it is committed: usable-but-odd data becomes counted warnings.

One place for all formats, run with DuckDB over the staged Parquet, so a nsys trace and a chrome trace
with the same defect get the same warning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.layer_hints import NOT_LAYERS, no_layer_lack, no_layer_warning
from pipeline.lean import duckdb_connect
from pipeline.store import TraceWriter

if TYPE_CHECKING:
    import duckdb

#: The check whose count nsys normalize takes while it joins each kernel to its launch: on 10M kernels the
#: anti-join of the staged files took 2.1 CPU-s after everything else was written.
KERNELS_WITHOUT_CALL = "kernels_without_call"
#: Nesting levels a range's path shows in full (sql/nvtx_paths.sql): deeper ranges show the path at this depth,
#: '…' and their own text.
PATH_LEVELS = 64
#: (name, tables needed, SQL returning one count, warning text with {n}). A normalizer that counted the same
#: thing exactly while writing puts it in ``TraceWriter.counted[name]``, and the SQL is not run.
CHECKS: list[tuple[str, tuple[str, ...], str, str]] = [
    (
        "kernels_end_before_start",
        ("kernels",),
        "SELECT count(*) FROM kernels WHERE end_ns < start_ns",
        "{n} kernels end before they start (kept; their durations are negative)",
    ),
    (
        KERNELS_WITHOUT_CALL,
        ("kernels", "api_calls"),
        "SELECT count(*) FROM kernels k WHERE NOT EXISTS (SELECT 1 FROM api_calls a "
        "WHERE a.correlation_id = k.correlation_id AND a.pid IS NOT DISTINCT FROM k.pid)",
        "{n} kernels match no launching API call by correlation id (they count as outside every layer)",
    ),
    (
        "ranges_past_path_levels",
        ("nvtx_ranges",),
        f"SELECT count(*) FROM nvtx_ranges WHERE depth > {PATH_LEVELS}",
        f"{{n}} NVTX ranges nest deeper than {PATH_LEVELS} levels on their thread (pushed and never popped, most "
        f"likely: the capture's end closed them): their paths show the ranges down to depth {PATH_LEVELS}, then "
        "'…', then their own text",
    ),
    (
        "ranges_end_before_start",
        ("nvtx_ranges",),
        "SELECT count(*) FROM nvtx_ranges WHERE end_ns < start_ns",
        "{n} NVTX ranges end before they start",
    ),
]


def count_in(con: duckdb.DuckDBPyConnection, rows: dict[str, int]) -> dict[str, int]:
    """The counts of every check whose tables are non-empty in ``rows``, by the same SQL, over tables ``con``
    holds under their schema names (a normalizer's in-memory tables, before or as they are written): put
    into ``TraceWriter.counted``, they spare ``staged_warnings`` reading the staged files back."""
    return {
        name: con.execute(sql).fetchone()[0]
        for name, tables, sql, _ in CHECKS
        if all(rows.get(t, 0) > 0 for t in tables)
    }


def staged_warnings(writer: TraceWriter) -> list[str]:
    due = [check for check in CHECKS if all(writer.rows.get(t, 0) > 0 for t in check[1])]
    con = None
    if any(name not in writer.counted for name, *_ in due):  # a database (~20 ms) only for what is left
        con = duckdb_connect(rows=max(writer.rows.values(), default=0))
        for table in writer.rows:
            path = writer.staged_file(table)
            con.read_parquet(str(path)).create_view(table)  # the path never pasted into SQL text
    out = []
    for name, _, sql, text in due:
        n = writer.counted[name] if name in writer.counted else con.execute(sql).fetchone()[0]  # type: ignore[union-attr]
        if n:
            out.append(text.format(n=n))
    if con is not None:
        con.close()
    return out


def layer_warnings(writer: TraceWriter, source_format: str) -> list[str]:
    """One warning when the trace has GPU work and no range that could be a layer (every range a step or an
    optimizer step, or none), with the capture that would give it layers (``layer_hints``)."""
    if not any(writer.rows.get(t, 0) for t in ("kernels", "memcpy", "memset")):
        return []
    if writer.rows.get("nvtx_ranges", 0):
        ranges = pq.read_table(writer.staged_file("nvtx_ranges"), columns=["kind", "text"])
        cpu = ranges.filter(pc.not_equal(ranges["kind"], "gpu"))
        if not pc.all(pc.fill_null(pc.match_substring_regex(cpu["text"], NOT_LAYERS), True)).as_py():
            return []
    has_ops, has_stacks = bool(writer.rows.get("ops", 0)), False
    if has_ops:
        stacks = pq.read_table(writer.staged_file("ops"), columns=["call_stack"])["call_stack"]
        has_stacks = stacks.null_count < len(stacks)
    return [no_layer_warning(source_format, no_layer_lack(source_format, has_ops, has_stacks))]
