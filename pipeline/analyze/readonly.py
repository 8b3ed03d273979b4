"""The connection ``connect(read_only=True)`` hands out (``tracepipe.connect``, ``Traces.con``, ``tracepipe sql``).

DuckDB's sandbox keeps reads and writes inside the normalized folder, but the views must read there, so inside
it COPY, ATTACH and EXPORT could still write. This wrapper runs every SQL text it is given through
``reading_statements`` first: a statement that could write is refused before any statement of the text runs.
Everything else (fetching, registering Python objects, ``interrupt``, ``close``...) is the wrapped
connection's own.

What it guards is SQL text. Python code that asks a relation to write a file (``rel.to_parquet(path)``) is a
write the caller wrote out, as ``open(path, "w")`` would be: the sandbox still keeps that inside the folder.
"""

from __future__ import annotations

from typing import Any

import duckdb

from pipeline.analyze import reading_statements


class ReadOnlyConnection:
    """A DuckDB connection whose ``execute``, ``executemany``, ``sql``, ``query``, ``from_query`` and
    ``query_appender`` refuse statements that could write; ``cursor()`` and ``duplicate()`` are guarded too."""

    __slots__ = ("_con",)

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con

    def execute(self, query: Any, parameters: object = None) -> ReadOnlyConnection:
        reading_statements(query)
        self._con.execute(query, parameters)
        return self  # DuckDB returns the connection for chaining: the guarded one, so a chain stays guarded

    def executemany(self, query: Any, parameters: object = None) -> ReadOnlyConnection:
        reading_statements(query)
        self._con.executemany(query, parameters)
        return self

    def sql(self, query: Any, *, alias: str = "", params: object = None) -> duckdb.DuckDBPyRelation:
        reading_statements(query)
        return self._con.sql(query, alias=alias, params=params)

    query = from_query = sql

    def query_appender(self, dml: str, columns: dict, **kwargs: Any) -> Any:
        reading_statements(dml)
        return self._con.query_appender(dml, columns, **kwargs)

    def cursor(self) -> ReadOnlyConnection:
        return ReadOnlyConnection(self._con.cursor())

    duplicate = cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def __enter__(self) -> ReadOnlyConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self._con.close()

    def __repr__(self) -> str:
        return f"<read-only {self._con!r}>"
