"""tracepipe's Python API, for notebooks and scripts (the implementation lives in ``pipeline/``).

    >>> import tracepipe
    >>> tp = tracepipe.open("build/normalized")          # a folder `tracepipe normalize` wrote
    >>> tp.tables()                                      # every table and view, with a line on each
    >>> tp.sql("SELECT path, gpu_time_ns FROM layer_summary ORDER BY 2 DESC LIMIT 5")   # a polars DataFrame
    >>> tp.table("kernel_occupancy", trace_id="h200_smallcnn.nsys")
    >>> tp.con                                           # the read-only DuckDB connection itself

Read-only: ``sql`` and ``con`` (its execute, sql, query and cursors) refuse statements that could write, and
``con`` runs in DuckDB's sandbox (no file outside the folder can be read or written, settings locked).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from pipeline import __version__
from pipeline.catalog import descriptions, is_public

__all__ = ["Traces", "__version__", "connect", "describe", "open"]


def connect(folder: str | Path) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection over a normalized folder with every table and every view of sql/, in DuckDB's
    sandbox: no file outside the folder can be read or written, settings are locked; statements that could
    write (COPY, ATTACH, EXPORT, INSERT ...) are refused (``pipeline.analyze.readonly``)."""
    from pipeline.analyze import connect as _connect

    return _connect(Path(folder), read_only=True)


def describe() -> dict[str, str]:
    """Every table and view a connection has, with its one-line description (tables first, then views)."""
    return descriptions()


class Traces:
    """A normalized folder opened for reading; ``con`` is its read-only DuckDB connection."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.con = connect(self.folder)

    def sql(self, query: str, params: Any = None) -> pl.DataFrame:
        """The result of a query as a polars DataFrame (``params`` fill ``?`` / ``$name`` placeholders).
        Like ``tracepipe sql``, it refuses statements that could write (COPY, ATTACH, INSERT ...)."""
        from pipeline.analyze import read_only_query

        if params is None:
            rel = read_only_query(self.con, query)
            return rel.pl() if rel is not None else pl.DataFrame()
        return self.con.sql(query, params=params).pl()  # the read-only connection refuses writes

    def table(self, name: str, trace_id: str | None = None) -> pl.DataFrame:
        """A whole table or view (one trace's rows with ``trace_id``) as a polars DataFrame."""
        if name not in self.names():
            raise KeyError(f"no table or view {name!r}; tables(): {', '.join(self.names())}")
        rel = self.con.table(name)
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

    def trace_ids(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT trace_id FROM trace_meta ORDER BY 1").fetchall()]

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Traces:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"tracepipe.Traces({str(self.folder)!r}: {len(self.trace_ids())} traces)"


def open(folder: str | Path) -> Traces:
    """Open a normalized folder (what `tracepipe normalize` wrote) for reading."""
    return Traces(folder)


def _view_names() -> set[str]:
    from pipeline.catalog import view_descriptions

    return set(view_descriptions())


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
