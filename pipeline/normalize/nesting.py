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


def with_nesting(ranges: pa.Table) -> pa.Table:
    """``ranges`` with ``depth`` and ``parent_id`` filled for push/pop ranges (:func:`push_pop_nesting`).

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


#: A caller chain stops after this many links: the SQL reference stops after as many links as there are
#: frames, the same for every trace of fewer frames or shallower stacks (Python's own recursion limit is
#: 1,000); only a cycle of links, which no profiler writes, reaches it.
MAX_CHAIN = 4096


def _ints(col: pa.ChunkedArray, fill: int) -> np.ndarray:
    return pc.fill_null(col, fill).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _packed(groups: int, value: np.ndarray, probe: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """(width, pos, probe_pos): ``group * width + pos`` is one int64 per (group, value) for group codes below
    ``groups`` that sorts as the pair does, and ``probe_pos`` the position of the last value <= each probe
    (for searches with side='right'): value - min + 1 when the span fits beside the groups, else ranks among
    the distinct values (0 = below every value)."""
    lo, hi = (int(value.min()), int(value.max())) if len(value) else (0, 0)
    width = hi - lo + 2
    if width * max(groups, 1) < 1 << 62:
        pos = value - lo + 1
        probe_pos = None if probe is None else np.clip(probe - lo + 1, 0, width - 1)
    else:
        distinct = np.unique(value)
        width = len(distinct) + 1
        pos = np.searchsorted(distinct, value) + 1
        probe_pos = None if probe is None else np.searchsorted(distinct, probe, "right")
    return width, pos, probe_pos


def _latest_frames(
    frame_thread: np.ndarray, start: np.ndarray, end: np.ndarray, op_thread: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """Per op, the frame (row) that started last at or before ``t`` on its thread, -1 where none did; of
    frames starting together the deepest: the one that ends first, then the later in the file."""
    groups = int(max(frame_thread.max(initial=0), op_thread.max(initial=0))) + 1
    width, pos, t_pos = _packed(groups, start, t)
    keys = frame_thread * width + pos
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    tie = sorted_keys[1:] == sorted_keys[:-1]
    if tie.any():  # equal starts on a thread (rare): reorder those runs so the deepest comes last
        tied = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])
        rows = order[tied]
        order[tied] = rows[np.lexsort((rows, -end[rows], keys[rows]))]
    at = np.searchsorted(sorted_keys, op_thread * width + t_pos, "right") - 1
    found = (at >= 0) & (sorted_keys[np.maximum(at, 0)] // width == op_thread)
    return np.where(found, order[np.maximum(at, 0)], -1)


def _callers(frames: pa.Table) -> np.ndarray:
    """Each frame's caller (row), -1 where none: the first frame of its process whose ``python_id`` (>= 0)
    is its ``python_parent_id``."""
    pid = pc.dictionary_encode(pc.fill_null(frames["pid"], -1)).combine_chunks().indices
    pid = pid.to_numpy(zero_copy_only=False).astype(np.int64)
    ids, parents = _ints(frames["python_id"], -1), _ints(frames["python_parent_id"], -1)
    has_id = np.flatnonzero(ids >= 0)
    if not len(has_id):
        return np.full(frames.num_rows, -1, np.int64)
    width, pos, parent_pos = _packed(int(pid.max()) + 1, ids[has_id], parents)
    keys = pid[has_id] * width + pos
    distinct, first = np.unique(keys, return_index=True)  # a stable sort: the first frame of each id
    wanted = pid * width + parent_pos
    at = np.minimum(np.searchsorted(distinct, wanted), len(distinct) - 1)
    row = has_id[first[at]]
    # (a parent id that no frame has probes the nearest id below it: equal keys alone do not make a match)
    ok = (parents >= 0) & (distinct[at] == wanted) & (ids[row] == parents)
    return np.where(ok, row, -1)


def call_stacks(ops: pa.Table, frames: pa.Table) -> pa.Array:
    """For each op (in ``ops`` order): the python_function ``frames`` open on its thread at its start,
    outermost first, ';'-joined; null where none is.  The rule is sql/call_stacks.sql's header (that SQL,
    :func:`call_stacks_sql`, is its reference); this is the same rule with numpy sorts and binary searches:
    the ops step 0.14-0.16 -> 0.05-0.10 CPU-s on the 100 MB bench trace, the SQL's cost being most of what
    chrome normalize had grown since the split (benchmarks/results/call_stacks_numpy.txt)."""
    frame_thread, op_thread = (k.to_numpy(zero_copy_only=False) for k in _thread_keys(frames, ops))
    start, end = _ints(frames["start_ns"], 0), _ints(frames["end_ns"], 0)
    t = _ints(ops["start_ns"], 0)
    latest = _latest_frames(frame_thread, start, end, op_thread, t)
    caller = _callers(frames)
    limit = min(frames.num_rows, MAX_CHAIN)
    # (a) the latest frame if still open at t, (b) else its first caller open at t.
    holder, level = np.where((latest >= 0) & (end[latest] > t), latest, -1), np.zeros(len(t), np.int64)
    todo = np.flatnonzero((latest >= 0) & (holder < 0))
    at = latest[todo]
    for step in range(1, limit + 1):
        at = caller[at]
        todo, at = todo[at >= 0], at[at >= 0]
        if not len(todo):
            break
        open_ = end[at] > t[todo]
        holder[todo[open_]], level[todo[open_]] = at[open_], step
        todo, at = todo[~open_], at[~open_]
    return _joined_stacks(frames, caller, holder, level, limit)


def _joined_stacks(frames: pa.Table, caller: np.ndarray, holder: np.ndarray, level: np.ndarray, limit: int) -> pa.Array:
    """Per op: the names of its holder frame and the holder's callers (at most ``limit`` links from the
    op's latest frame, ``level`` of them used to reach the holder), outermost first, ';'-joined."""
    has = np.flatnonzero(holder >= 0)
    stacks, which = np.unique(holder[has] * (limit + 1) + level[has], return_inverse=True)
    node, budget = stacks // (limit + 1), limit - stacks % (limit + 1)
    # Walk each distinct stack up to its top; step k of stack s is its frame k links above the holder.
    steps: list[tuple[np.ndarray, np.ndarray]] = []
    live, at = np.arange(len(stacks)), node
    while len(live):
        steps.append((live, at))
        up = caller[at]
        keep = (up >= 0) & (budget[live] > len(steps) - 1)
        live, at = live[keep], up[keep]
    lengths = np.zeros(len(stacks), np.int64)
    for live, _ in steps:
        lengths[live] += 1
    offsets = np.r_[0, np.cumsum(lengths)]
    flat = np.empty(offsets[-1], np.int64)
    for k, (live, at) in enumerate(steps):  # outermost first: step k sits k places before the stack's end
        flat[offsets[live] + lengths[live] - 1 - k] = at
    names = frames["name"].combine_chunks().take(pa.array(flat))
    if pa.types.is_dictionary(names.type):
        names = names.dictionary_decode()
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), names), ";")
    slot = np.full(len(holder), len(joined), np.int64)  # ops without a stack point one past, at a null
    slot[has] = which.reshape(-1)
    return pa.concat_arrays([joined, pa.nulls(1, pa.string())]).take(pa.array(slot))


def call_stacks_sql(ops: pa.Table, frames: pa.Table, db: duckdb.DuckDBPyConnection | None = None) -> pa.Array:
    """:func:`call_stacks` as sql/call_stacks.sql computes it (the rule written as SQL, kept as its reference:
    tests compare the two). ``db``: see ``_session``; without one, a database of one thread."""
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
