"""Run the analysis: every normalized table and every ``sql/*.sql`` view in one DuckDB connection.

This is the package's face; the work is in its modules, each importing only those below it:

* ``views``: the view files of ``sql/`` and the graph their ``-- Inputs:`` headers draw (no DuckDB);
* ``engine``: :func:`connect`, the connection with every table registered and every view created;
* ``write``: :func:`write_views`, views written to Parquet/CSV files (``tracepipe analyze``);
* ``readonly``: the statements a read-only connection runs (``tracepipe sql``, ``tracepipe.open``);
* ``graph``: the view graph drawn (``tracepipe views``); ``incremental``, ``shell``: commands' helpers.
"""

from __future__ import annotations

from pipeline.analyze.engine import (
    DEFAULT_TEMP_LIMIT,
    GPU_OP_TABLES,
    MEMORY_FLOOR,
    MEMORY_PER_GPU_OP,
    analysis_files,
    analysis_warnings,
    connect,
    connect_analysis,
    connect_folder,
    create_macros,
    create_views,
    cursor_of,
    default_memory_limit,
    defined_views,
    duckdb_config,
    lazy_views,
    register_arrow,
    register_tables,
    size_setting,
    spill_folder,
    table_rows,
)
from pipeline.analyze.readonly import (
    READ_ONLY_STATEMENTS,
    ReadOnlyError,
    named_relations,
    read_only_query,
    reading_statements,
)
from pipeline.analyze.views import (
    ON_REQUEST,
    SPILLS,
    STAGED,
    Column,
    default_views,
    macro_files,
    needed_views,
    view_body,
    view_columns,
    view_files,
    view_inputs,
    view_macros,
    view_order,
)
from pipeline.analyze.write import (
    IN_MEMORY_ROWS,
    IN_MEMORY_ROWS_ONE_AT_A_TIME,
    SIZE_TABLES,
    Produce,
    _views_to_write,
    in_memory_rows,
    input_rows,
    per_view_threads,
    view_graph,
    view_workers,
    write_views,
)
from pipeline.catalog import PY_TABLES, SQL_DIR

__all__ = [
    "DEFAULT_TEMP_LIMIT",
    "GPU_OP_TABLES",
    "IN_MEMORY_ROWS",
    "IN_MEMORY_ROWS_ONE_AT_A_TIME",
    "MEMORY_FLOOR",
    "MEMORY_PER_GPU_OP",
    "ON_REQUEST",
    "PY_TABLES",
    "READ_ONLY_STATEMENTS",
    "SIZE_TABLES",
    "SPILLS",
    "SQL_DIR",
    "STAGED",
    "Column",
    "Produce",
    "ReadOnlyError",
    "_views_to_write",
    "analysis_files",
    "analysis_warnings",
    "connect",
    "connect_analysis",
    "connect_folder",
    "create_macros",
    "create_views",
    "cursor_of",
    "default_memory_limit",
    "default_views",
    "defined_views",
    "duckdb_config",
    "in_memory_rows",
    "input_rows",
    "lazy_views",
    "macro_files",
    "named_relations",
    "needed_views",
    "per_view_threads",
    "read_only_query",
    "reading_statements",
    "register_arrow",
    "register_tables",
    "size_setting",
    "spill_folder",
    "table_rows",
    "view_body",
    "view_columns",
    "view_files",
    "view_graph",
    "view_inputs",
    "view_macros",
    "view_order",
    "view_workers",
    "write_views",
]
