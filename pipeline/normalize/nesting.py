"""The nesting engine of normalize: depth and parent of NVTX-style ranges (every normalizer that has ranges),
and the Python call stack of each chrome-trace op by the same innermost-open rule attribution uses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.lean import duckdb_connect

if TYPE_CHECKING:
    import duckdb

_SQL = resources.files("pipeline.normalize").joinpath("sql/nvtx_nesting.sql").read_text()
_STACKS_SQL = resources.files("pipeline.normalize").joinpath("sql/call_stacks.sql").read_text()


@contextmanager
def _session(
    db: duckdb.DuckDBPyConnection | None, config: dict[str, str] | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection of its own for one computation: a cursor of ``db`` when the caller has a database open
    (a cursor costs nothing; a new database ~20 ms of CPU to open and close), else a new in-memory one.
    Its registered tables and temp tables are its own, and go when it closes."""
    con = db.cursor() if db is not None else duckdb_connect(config)
    try:
        yield con
    finally:
        con.close()


def with_nesting(ranges: pa.Table, db: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """``ranges`` with ``depth`` and ``parent_id`` filled for push/pop ranges (``db``: see ``_session``).

    Start/end ranges may overlap freely, so they get depth 0 and no parent.
    """
    cols = ["range_id", "kind", "pid", "tid", "start_ns", "end_ns"]
    view = ranges.select(cols)
    domain = (
        ranges.column("domain").cast(pa.string())
        if "domain" in ranges.column_names
        else pa.nulls(ranges.num_rows, pa.string())
    )
    with _session(db) as con:
        con.register("ranges", view.append_column("domain", domain))
        nest = con.sql(_SQL).to_arrow_table()
    out = ranges.drop_columns([c for c in ("depth", "parent_id") if c in ranges.column_names])
    joined = out.join(nest, "range_id", join_type="left outer")
    depth = pc.if_else(pc.is_null(joined["depth"]), pa.scalar(0, pa.int32()), joined["depth"].cast(pa.int32()))
    joined = joined.set_column(joined.schema.get_field_index("depth"), "depth", depth)
    return joined.sort_by([("start_ns", "ascending"), ("range_id", "ascending")])


def _thread_keys(frames: pa.Table, ops: pa.Table) -> tuple[pa.Array, pa.Array]:
    """One small int64 per (pid, tid) pair, the same for frames and ops: codes of each column's distinct
    values combined, exact whatever the ids (text ids are large), and one key sorts faster than two."""
    codes = []
    for col in ("pid", "tid"):
        both = pa.chunked_array(frames[col].chunks + ops[col].chunks, frames.schema.field(col).type)
        enc = pc.dictionary_encode(pc.fill_null(both, -1)).combine_chunks()
        codes.append((enc.indices.cast(pa.int64()), len(enc.dictionary)))
    (pids, _), (tids, n_tids) = codes
    key = pc.add(pc.multiply(pids, n_tids), tids)
    return key.slice(0, frames.num_rows), key.slice(frames.num_rows)


def call_stacks(ops: pa.Table, frames: pa.Table, db: duckdb.DuckDBPyConnection | None = None) -> pa.Array:
    """For each op (in ``ops`` order): the python_function ``frames`` open on its thread at its start,
    outermost first, ';'-joined; null where none is (the rule: sql/call_stacks.sql's header).
    ``db``: see ``_session``; without one, a database of one thread (it runs beside normalize_chrome's writes)."""
    frame_thread, op_thread = _thread_keys(frames, ops)
    with _session(db, {"threads": "1"}) as con:
        con.register(
            "frames",
            pa.table(
                {
                    "frame": np.arange(frames.num_rows, dtype=np.int64),
                    "thread": frame_thread,
                    "pid": pc.fill_null(frames["pid"], -1),
                    "start_ns": frames["start_ns"],
                    "end_ns": frames["end_ns"],
                    "python_id": frames["python_id"],
                    "python_parent_id": frames["python_parent_id"],
                }
            ),
        )
        con.register(
            "points",
            pa.table({"op": np.arange(ops.num_rows, dtype=np.int64), "thread": op_thread, "t": ops["start_ns"]}),
        )
        con.execute(_STACKS_SQL)
        per_op = con.sql("SELECT op, stack FROM call_stacks").to_arrow_table()
        stacks = con.sql("SELECT frames FROM stack_frames ORDER BY stack").to_arrow_table()["frames"].combine_chunks()
    names = frames["name"].combine_chunks().take(stacks.values)
    if pa.types.is_dictionary(names.type):
        names = names.dictionary_decode()
    joined = pc.binary_join(pa.ListArray.from_arrays(stacks.offsets, names), ";")
    # Ops without an open frame point one past the stacks, at a null.
    slot = np.full(ops.num_rows, len(joined), dtype=np.int64)
    slot[per_op["op"].to_numpy()] = per_op["stack"].to_numpy()
    return pa.concat_arrays([joined, pa.nulls(1, pa.string())]).take(pa.array(slot))
