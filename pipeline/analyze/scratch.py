"""A view's rows in a Parquet (or CSV) file, and the view pointed at that file: how a result computed once is
read by the views built on it (``analyze``'s outputs and scratch files, ``tracepipe sql``'s views of big traces).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import duckdb

from pipeline.outputs import INPUTS_KEY, writing

#: Rows per row group of a view's Parquet file. DuckDB's writer holds each thread's row group until it is full
#: (122,880 rows by default): kernel_layers' wide rows made that ~100 MB of analyze's peak RSS on a 220k-kernel
#: trace, 425 -> 320 MB at this size for the same CPU (benchmarks/results/run_memory_44.txt). The files are
#: Parquet format 2 (delta encodings, v2 data pages; pyarrow, polars and DuckDB read them): a sorted id or
#: timestamp column costs a few bits a row, kernel_layers of 220k kernels 3.2 -> 0.3 MB, its write 14% less CPU
#: (benchmarks/results/parquet_v2_44.txt).
ROW_GROUP_ROWS = 16_384


def copy_view(con: duckdb.DuckDBPyConnection, view: str, dest: Path, fmt: str, stamp: str | None = None) -> int:
    """``view`` (a view or table name) into ``dest``, renamed into place only when complete; the rows written.
    ``stamp`` (hex): the Parquet file's :data:`INPUTS_KEY`."""
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    options = (
        f"FORMAT parquet, COMPRESSION zstd, PARQUET_VERSION v2, ROW_GROUP_SIZE {ROW_GROUP_ROWS}"
        if fmt == "parquet"
        else "FORMAT csv, HEADER true"
    )
    if stamp is not None and fmt == "parquet":
        if not stamp.isalnum():
            raise ValueError(f"a stamp is hex digits: {stamp!r}")
        options += f", KV_METADATA {{{INPUTS_KEY}: '{stamp}'}}"
    try:
        with writing(dest):  # a full disk names the view's file: exit 2, not DuckDB's IOException
            (rows,) = con.execute(f"COPY (SELECT * FROM {view}) TO $path ({options})", {"path": str(tmp)}).fetchall()[0]
            os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return rows


def read_back(con: duckdb.DuckDBPyConnection, view: str, parquet: Path) -> None:
    """Point ``view`` at the Parquet file it was just written to, with its own column types (Parquet has no
    HUGEINT), so the views that read it reuse the result instead of computing it again."""
    cols = con.execute(f"DESCRIBE {view}").fetchall()
    select = ", ".join(f'CAST("{name}" AS {dtype}) AS "{name}"' for name, dtype, *_ in cols)
    con.read_parquet(str(parquet)).create_view(f"_rb_{view}", replace=True)  # the path never pasted into SQL
    con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT {select} FROM _rb_{view}")
