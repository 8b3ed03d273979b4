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
    """``ranges`` with ``depth`` and ``parent_id`` filled for push/pop ranges (:func:`push_pop_nesting`; ``db``
    is no longer used: the rule runs in numpy, and callers that pass their database need not change).

    Start/end ranges may overlap freely, so they get depth 0 and no parent.
    """
    cols = ["range_id", "kind", "pid", "tid", "start_ns", "end_ns"]
    view = ranges.select(cols)
    domain = (
        ranges.column("domain").cast(pa.string())
        if "domain" in ranges.column_names
        else pa.nulls(ranges.num_rows, pa.string())
    )
    nest = push_pop_nesting(view, domain)
    out = ranges.drop_columns([c for c in ("depth", "parent_id") if c in ranges.column_names])
    joined = out.join(nest, "range_id", join_type="left outer")
    depth = pc.if_else(pc.is_null(joined["depth"]), pa.scalar(0, pa.int32()), joined["depth"].cast(pa.int32()))
    joined = joined.set_column(joined.schema.get_field_index("depth"), "depth", depth)
    return joined.sort_by([("start_ns", "ascending"), ("range_id", "ascending")])


def nesting_sql(view: pa.Table, domain: pa.Array, db: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """:func:`push_pop_nesting` as sql/nvtx_nesting.sql computes it (the rule written as SQL; tests compare)."""
    with _session(db) as con:
        con.register("ranges", view.append_column("domain", domain))
        return con.sql(_SQL).to_arrow_table()


def _dense(*keys: np.ndarray) -> np.ndarray:
    """One dense int64 code per distinct tuple of ``keys`` (lexicographic order)."""
    codes = np.zeros(len(keys[0]), np.int64)
    for key in keys:
        _, inverse = np.unique(key, return_inverse=True)
        codes = codes * (int(inverse.max(initial=-1)) + 1) + inverse
        _, codes = np.unique(codes, return_inverse=True)
    return codes.astype(np.int64)


def _codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(code of each value, is null): any column type, NULL a code of its own."""
    enc = pc.dictionary_encode(col)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    null = pc.is_null(enc.indices).to_numpy(zero_copy_only=False)
    return pc.fill_null(enc.indices.cast(pa.int64()), -1).to_numpy(zero_copy_only=False), null


def push_pop_nesting(view: pa.Table, domain: pa.Array) -> pa.Table:
    """(range_id, depth, parent_id) of the push/pop ranges of ``view`` (range_id, kind, pid, tid, start_ns,
    end_ns) that do not end before they start: sql/nvtx_nesting.sql's rule and counts, with numpy sorts and
    binary searches: on the 1.08M ranges of the 10M-kernel benchmark trace with_nesting took 3.6-4.3 CPU-s with
    the SQL (DuckDB's windows and ASOF joins), 1.0-1.5 with this (benchmarks/results/nsys_normalize_s_nsys.txt).

    Per (pid, tid, domain), in (start, end desc, range_id) order: depth = ranges ordered before it that have
    not ended by its start (started before it, minus the ones with non-zero length that ended by its start,
    minus the zero-length ones before it); parent = the range one level up with the latest start at or before
    its start (the last such in that order on equal starts). A NULL pid or tid matches nothing in the SQL's
    joins: there no range counts as ended and none is a parent."""
    id_type = view.schema.field("range_id").type
    if not view.num_rows:  # (an empty export types its columns int64, its kind too)
        return pa.table(
            {"range_id": pa.array([], id_type), "depth": pa.array([], pa.int32()), "parent_id": pa.array([], id_type)}
        )
    pid, pid_null = _codes(view["pid"])
    tid, tid_null = _codes(view["tid"])
    dom, _ = _codes(pc.fill_null(domain, ""))
    start = pc.fill_null(view["start_ns"], 0).to_numpy(zero_copy_only=False)  # NULL rows are left out below
    end = pc.fill_null(view["end_ns"], 0).to_numpy(zero_copy_only=False)
    kind = pc.fill_null(pc.equal(view["kind"].cast(pa.string()), "push_pop"), False).to_numpy(zero_copy_only=False)
    valid = pc.fill_null(pc.greater_equal(view["end_ns"], view["start_ns"]), False).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(kind & valid & ~pc.is_null(view["start_ns"]).to_numpy(zero_copy_only=False))
    if not len(rows):
        return pa.table(
            {"range_id": pa.array([], id_type), "depth": pa.array([], pa.int32()), "parent_id": pa.array([], id_type)}
        )
    range_id = view["range_id"].to_numpy(zero_copy_only=False)[rows]
    group = _dense(pid[rows], tid[rows], dom[rows])
    no_match = (pid_null | tid_null)[rows]
    s, e = start[rows].astype(np.int64), end[rows].astype(np.int64)
    order = np.lexsort((range_id, -e, s, group))
    g, s, e, rid, no_match = group[order], s[order], e[order], range_id[order], no_match[order]
    n = len(g)
    at = np.arange(n, dtype=np.int64)
    first = np.maximum.accumulate(np.where(np.r_[True, g[1:] != g[:-1]], at, 0))
    zero = e == s
    zeros_before = np.cumsum(zero) - zero
    zeros_before = zeros_before - zeros_before[first]
    # Times as ranks (starts and ends together), so (group, time) packs into one int64.
    times, inverse = np.unique(np.concatenate([s, e]), return_inverse=True)
    width = len(times) + 1
    s_rank, e_rank = inverse[:n].astype(np.int64), inverse[n:].astype(np.int64)
    ended_keys = np.sort(g[~zero] * width + e_rank[~zero])
    ended = np.searchsorted(ended_keys, g * width + s_rank, "right") - np.searchsorted(ended_keys, g * width, "left")
    depth = at - first - np.where(no_match, 0, ended) - zeros_before
    # Parent: the latest start <= mine among (group, depth - 1); equal starts: the last in order. A (group,
    # depth) pair packs as group * (n + 2) + depth - lowest + 1 (depth - 1 of the lowest depth is slot 0).
    lowest = int(depth.min())
    pair = g * (n + 2) + (depth - lowest + 1)
    pairs = np.unique(pair)
    keys = np.searchsorted(pairs, pair) * width + s_rank
    by_key = np.lexsort((at, keys))
    sorted_keys = keys[by_key]
    want = pair - 1
    level = np.searchsorted(pairs, want)
    has_level = pairs[np.minimum(level, len(pairs) - 1)] == want
    found = np.searchsorted(sorted_keys, level * width + s_rank, "right") - 1
    cand = by_key[np.maximum(found, 0)]
    ok = has_level & (found >= 0) & ~no_match & (keys[cand] // width == level)
    return pa.table(
        {
            "range_id": pa.array(rid, id_type),
            "depth": pa.array(depth.astype(np.int32)),
            "parent_id": pa.array(np.where(ok, rid[cand], 0), mask=~ok).cast(id_type),
        }
    )


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
