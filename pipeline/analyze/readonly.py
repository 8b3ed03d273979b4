"""Which statements only read, and the connection ``connect(read_only=True)`` hands out (``tracepipe.connect``,
``Traces.con``, ``tracepipe sql``) that runs no other.

DuckDB's sandbox keeps reads and writes inside the normalized folder, but the views must read there, so inside
it COPY, ATTACH and EXPORT could still write. This wrapper runs every SQL text it is given through
``reading_statements`` first: a statement that could write is refused before any statement of the text runs.
Everything else (fetching, registering Python objects, ``interrupt``, ``close``...) is the wrapped
connection's own.

What it guards is SQL text. Python code that asks a relation to write a file (``rel.to_parquet(path)``) is a
write the caller wrote out, as ``open(path, "w")`` would be: the sandbox still keeps that inside the folder.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Callable
from typing import Any

import duckdb

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


#: Keywords of a statement that writes or changes the database. A MULTI statement is what DuckDB makes of a PIVOT
#: whose columns it must look up first (an ENUM type of them, then the statement itself): a query, unless one of
#: these words makes the statement around it a write (``COPY (PIVOT ...) TO``, ``CREATE TABLE t AS PIVOT ...``).
WRITING_WORDS = frozenset(
    {"alter", "attach", "checkpoint", "copy", "create", "delete", "detach", "drop", "export", "import", "insert",
     "install", "load", "merge", "set", "update", "vacuum"}
)  # fmt: skip


class ReadOnlyError(duckdb.PermissionException):
    """A statement ``tracepipe sql`` does not run because it could write."""


def reading_statements(query: str | duckdb.Statement) -> list[duckdb.Statement]:
    """The statements of ``query``; ReadOnlyError, before any runs, when one of them could write."""
    statements = [query] if isinstance(query, duckdb.Statement) else duckdb.extract_statements(query)
    for st in statements:
        if st.type not in READ_ONLY_STATEMENTS and not _reads_all_the_same(st):
            kind = st.type.name.replace("_", " ")
            raise ReadOnlyError(f"{kind} statements are not allowed: tracepipe's connections are read-only")
    return statements


def _reads_all_the_same(st: duckdb.Statement) -> bool:
    """A statement whose type says less than its words: a PIVOT query (MULTI: :data:`WRITING_WORDS`), or
    ``SET VARIABLE`` (a SET in DuckDB 2.0's Python API, where a setting's SET is one too): a session variable."""
    words = _keywords(st.query)
    if st.type == duckdb.StatementType.MULTI:
        return {"pivot", "unpivot"} & set(words) != set() and not WRITING_WORDS & set(words)
    return st.type == duckdb.StatementType.SET and words[:2] == ["set", "variable"]


def _keywords(text: str) -> list[str]:
    """The keywords of ``text`` in order, lower case, as DuckDB's tokenizer finds them (not inside strings, quoted
    names or comments)."""
    tokens = duckdb.tokenize(text)
    ends = [start for start, _ in tokens[1:]] + [len(text)]
    return [
        text[start:end].strip().lower()
        for (start, kind), end in zip(tokens, ends, strict=True)
        if kind == duckdb.token_type.keyword
    ]


def named_relations(query: str) -> set[str] | None:
    """The tables and views the statements of ``query`` read by name, lower case and without their schema (a CTE's
    name may be among them), as DuckDB's parser finds them: ``duckdb.get_table_names`` (:func:`_table_names`), or
    where that cannot bind a statement without the catalog (a join ``USING`` a column), the table references of its
    parse tree (``json_serialize_sql``). None where neither says which views a query needs: a statement neither
    takes, or one that may list the catalog (``SHOW TABLES``, ``duckdb_views()``, ``information_schema.tables``);
    one naming none otherwise (``SELECT 6 * 7``) needs none. ``tracepipe sql`` creates only the views a query names
    (and those they read): creating all ~46 binds each body, 2.1 CPU-s on a 220k-kernel trace."""
    names: set[str] = set()
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error:
        return None
    for st in statements:
        found = _table_names(st.query)
        if _CATALOG.search(st.query):  # it may list the catalog, whatever it names (information_schema.tables)
            return None
        names.update(n.rsplit(".", 1)[-1].lower() for n in found)
    return names


#: Words of a statement that may list the catalog (every view), named tables or not.
_CATALOG = re.compile(r"duckdb_|information_schema|pg_catalog|sqlite_master|\bshow\b|\bpragma\b|\bsummarize\b", re.I)


def _table_names(statement: str) -> set[str]:
    """The tables ``statement`` names: ``get_table_names``; for a statement it cannot prepare with parameters
    in it (``CREATE TEMP TABLE t AS SELECT ... WHERE trace_id = $trace``: the Perfetto export's), the same with each
    parameter read as NULL (only the names are wanted); else :func:`_parsed_tables`."""
    with _PARSER_LOCK:
        for text in (statement, _PARAMETER.sub("NULL", statement)):
            try:
                return _parser().get_table_names(text)
            except duckdb.Error:
                continue
    return _parsed_tables(statement)


_PARSER_LOCK = threading.Lock()  # one parse at a time on the connection below


@functools.cache
def _parser() -> duckdb.DuckDBPyConnection:
    """An in-memory connection of this module's own for ``get_table_names``, made once (a new one costs ~25 ms).
    Not DuckDB's default connection (``duckdb.get_table_names``): the caller's own ``duckdb.execute("BEGIN")`` or
    a result left half read there made the first failed try abort its transaction, and every later statement
    failed, so that no view was found and every query created them all."""
    return duckdb.connect(":memory:")


#: A prepared statement's parameter: ``$name``, ``$1`` or ``?``.
_PARAMETER = re.compile(r"\$\w+|\?")


def _parsed_tables(statement: str) -> set[str]:
    """The base tables a SELECT statement's parse tree names (empty where DuckDB cannot serialize it)."""
    con = duckdb.connect()
    try:
        (tree,) = con.execute("SELECT json_serialize_sql($q)", {"q": statement}).fetchone()
    finally:
        con.close()
    found: set[str] = set()
    stack: list[object] = [json.loads(tree)]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
                found.add(node["table_name"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def read_only_query(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyRelation | None:
    """Run ``query`` (one or more statements) when every statement only reads; the last one's result."""
    result = None
    for st in reading_statements(query):
        result = con.sql(st.query)
    return result


#: What creates the views a statement names, and those they read (every view for None): see ``ReadOnlyConnection``.
EnsureViews = Callable[[str | None], None]


class ReadOnlyConnection:
    """A DuckDB connection whose ``execute``, ``executemany``, ``sql``, ``query``, ``from_query`` and
    ``query_appender`` refuse statements that could write; ``cursor()`` and ``duplicate()`` are guarded too.

    ``ensure``: the connection's views are created as statements name them (``engine.lazy_views``), before each
    statement runs and for ``table``/``view`` by name: creating all ~46 at once binds each body again under the
    views that read it (1.3-2.3 CPU-s on one trace, 6.4 on the 30 samples, benchmarks/results/sqlcore_45_2.txt)."""

    __slots__ = ("_con", "_ensure")

    def __init__(self, con: duckdb.DuckDBPyConnection, ensure: EnsureViews | None = None) -> None:
        self._con = con
        self._ensure = ensure

    def ensure_views(self, query: Any) -> None:
        """Create the views ``query`` names and those they read (every view for None or a text the parser cannot
        tell); nothing on a connection made with all its views."""
        if self._ensure is not None:
            text = query.query if isinstance(query, duckdb.Statement) else query
            self._ensure(text if isinstance(text, str) else None)

    def execute(self, query: Any, parameters: object = None) -> ReadOnlyConnection:
        reading_statements(query)
        self.ensure_views(query)
        self._con.execute(query, parameters)
        return self  # DuckDB returns the connection for chaining: the guarded one, so a chain stays guarded

    def executemany(self, query: Any, parameters: object = None) -> ReadOnlyConnection:
        reading_statements(query)
        self.ensure_views(query)
        self._con.executemany(query, parameters)
        return self

    def sql(self, query: Any, *, alias: str = "", params: object = None) -> duckdb.DuckDBPyRelation:
        reading_statements(query)
        self.ensure_views(query)
        return self._con.sql(query, alias=alias, params=params)

    query = from_query = sql

    def table(self, name: str) -> duckdb.DuckDBPyRelation:
        self.ensure_views(f"SELECT * FROM {name}")
        return self._con.table(name)

    view = table

    def query_appender(self, dml: str, columns: dict, **kwargs: Any) -> Any:
        reading_statements(dml)
        return self._con.query_appender(dml, columns, **kwargs)

    def cursor(self) -> ReadOnlyConnection:
        return ReadOnlyConnection(self._con.cursor(), self._ensure)  # views live in the database: one set for all

    duplicate = cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def __enter__(self) -> ReadOnlyConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self._con.close()

    def __repr__(self) -> str:
        return f"<read-only {self._con!r}>"
