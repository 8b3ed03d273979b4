"""The kernels and runtime calls of an nsys export from its raw columns: sqlite only reads rows as stored,
the joins are done here over each Arrow batch.

``nsys_sql.kernels_sql`` / ``nsys_sql.api_calls_sql`` give the same rows from one SQL query each, but sqlite then
runs a ``StringIds`` sub-select per name, a GROUP BY of every launch call and a join per kernel: on 1M
kernels (bench_ranks shape, 8 threads) the query took 3.6 CPU-s against 1.3 for the raw columns
(benchmarks/results/nsys_normalize_profile.txt). Here the names are looked up in ``StringIds`` read once,
enum labels in the enum table read once, and the launching thread in one sorted array of the launch calls.

Only what these functions can read exactly as the SQL would is taken: a column sqlite stores with mixed
types (ADBC then stops with a type mismatch), an enum table with repeated ids, or a correlation id too wide
to pack raises :class:`NotRaw`, and the caller reads the table with the SQL instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.normalize import nsys_map
from pipeline.normalize.checks import KERNELS_WITHOUT_CALL

if TYPE_CHECKING:
    from pipeline.normalize.sqlite_reader import Sqlite

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
LAUNCH_TABLES = (RUNTIME_TABLE, "CUPTI_ACTIVITY_KIND_DRIVER")
_LOW24 = 16777215
#: Columns copied as they are: kernels column <- export column.
KERNEL_COPIED = {
    "device_id": "deviceId",
    "context_id": "contextId",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "grid_x": "gridX",
    "grid_y": "gridY",
    "grid_z": "gridZ",
    "block_x": "blockX",
    "block_y": "blockY",
    "block_z": "blockZ",
    "registers_per_thread": "registersPerThread",
    "static_smem_bytes": "staticSharedMemory",
    "dynamic_smem_bytes": "dynamicSharedMemory",
    "local_mem_per_thread_bytes": "localMemoryPerThread",
    "graph_node_id": "graphNodeId",
}


class NotRaw(Exception):
    """This export's table cannot be read from raw columns exactly as the SQL reads it."""


class Lookup:
    """Values by integer id (``StringIds``, an enum table): ids of a batch become values in one ``take``."""

    def __init__(self, ids: pa.Array, values: pa.Array) -> None:
        keep = pc.is_valid(ids)
        ids, values = ids.filter(keep), values.filter(keep)
        self.ids = ids.to_numpy(zero_copy_only=False).astype(np.int64)
        if len(np.unique(self.ids)) != len(self.ids):
            raise NotRaw("repeated ids")  # sqlite's sub-select would take any one of them
        self.values = values
        lo = int(self.ids.min()) if len(self.ids) else 0
        hi = int(self.ids.max()) if len(self.ids) else -1
        # Dense ids (StringIds numbers 0..n-1): a position table; else a sorted search.
        if lo >= 0 and hi < 4 * len(self.ids) + 65536:
            self.slots = np.full(hi + 2, -1, dtype=np.int64)
            self.slots[self.ids] = np.arange(len(self.ids), dtype=np.int64)
        else:
            self.slots = None
            self.order = np.argsort(self.ids, kind="stable")
            self.sorted = self.ids[self.order]

    def take(self, col: pa.Array) -> pa.Array:
        """The value of each id in ``col``; null for a null or unknown id."""
        ids = pc.fill_null(col, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        if self.slots is not None:
            pos = self.slots[np.clip(ids, -1, len(self.slots) - 1)]
        else:
            at = np.searchsorted(self.sorted, ids).clip(0, max(len(self.sorted) - 1, 0))
            pos = np.where(self.sorted[at] == ids, self.order[at], -1) if len(self.sorted) else ids * 0 - 1
        found = pos >= 0
        return self.values.take(pa.array(np.where(found, pos, 0), mask=~found))


def _raw(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, with a read error (a column of mixed storage types) raised as :class:`NotRaw`."""
    try:
        yield from batches
    except (OSError, pa.ArrowException) as e:
        raise NotRaw(str(e)) from e


def _reader(db: Sqlite, sql: str) -> Iterator[pa.RecordBatch]:
    """Batches of ``sql``; errors as :func:`_raw`'s."""
    return _raw(db.batches(sql))


def _select(columns: list[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


def _text(col: pa.Array, strings: Lookup | None) -> pa.Array:
    """A name column as ``nsys_sql.name_sql`` reads it: a ``StringIds`` id looked up, inline text as it is."""
    if pa.types.is_integer(col.type):
        return strings.take(col) if strings is not None else col.cast(pa.string())
    if pa.types.is_null(col.type):
        return pa.nulls(len(col), pa.string())
    if pa.types.is_string(col.type) and strings is None:
        return col  # inline text (pre-2022); ADBC gives any number in it as sqlite's CAST AS TEXT does
    # Text beside StringIds: ADBC types a column from its batch's first rows, so ids in a batch that also
    # holds text come back as text, and which were ids (to look up) can no longer be told.
    raise NotRaw(f"name column of type {col.type}")


def _strings(db: Sqlite) -> Lookup | None:
    if "StringIds" not in db.tables:
        return None
    t = db.arrow("SELECT id, value FROM StringIds")
    if not pa.types.is_integer(t.column(0).type):
        raise NotRaw("StringIds ids are not integers")
    return Lookup(t.column(0).combine_chunks(), t.column(1).combine_chunks().cast(pa.string()))


def _enum(db: Sqlite, enum: str) -> Lookup:
    """The labels of ``enum``: the export's own table when it has one (as ``nsys_sql.enum_label_sql``), else ours."""
    table = db.table(enum)
    if table is not None and "label" in db.columns(table):
        t = db.arrow(f"SELECT id, label FROM {table}")
        if not pa.types.is_integer(t.column(0).type):
            raise NotRaw(f"{table} ids are not integers")
        return Lookup(t.column(0).combine_chunks(), t.column(1).combine_chunks().cast(pa.string()))
    known = nsys_map.ENUMS[enum]
    return Lookup(pa.array(list(known), pa.int64()), pa.array(list(known.values()), pa.string()))


def _label(col: pa.Array, labels: Lookup) -> pa.Array:
    """``coalesce(label, CAST(value AS TEXT))``."""
    if not pa.types.is_integer(col.type) and not pa.types.is_null(col.type):
        raise NotRaw(f"enum column of type {col.type}")
    return pc.coalesce(labels.take(col), col.cast(pa.string()))


def _pid(global_id: pa.Array) -> pa.Array:
    return pc.bit_wise_and(pc.shift_right(global_id, 24), _LOW24)


def _tid(global_id: pa.Array) -> pa.Array:
    return pc.bit_wise_and(global_id, _LOW24)


def _int(col: pa.Array) -> pa.Array:
    if pa.types.is_null(col.type):
        return col.cast(pa.int64())
    if not pa.types.is_integer(col.type):
        raise NotRaw(f"column of type {col.type}")
    return col


class Launches:
    """The launching call of each correlation id, as ``nsys_sql._launches_cte`` finds it: per (correlation id,
    process) -- or per correlation id alone when the kernels do not record their process -- the smallest
    ``globalTid`` of the runtime and driver calls with that id. Kept as sorted packed keys
    ``correlationId << 24 | pid`` for a binary search per kernel."""

    def __init__(self, db: Sqlite, per_process: bool) -> None:
        self.per_process = per_process
        #: No call has a correlation id without a thread: then a kernel this finds no launch for is exactly
        #: one that no ``api_calls`` row matches on (correlation id, pid) (the staged check; a call without
        #: a thread has a NULL pid, which that check lets match a kernel whose pid is NULL).
        self.every_call_has_thread = True
        keys, tids = [], []
        for table in LAUNCH_TABLES:
            if table not in db.usable or not db.has(table, "correlationId"):
                continue
            for batch in _reader(db, f"SELECT correlationId, globalTid FROM {table}"):
                corr, gtid = _int(batch.column(0)), _int(batch.column(1))
                # A row without a correlation id matches no kernel; one without a thread adds nothing: in
                # sqlite its (id, NULL) group never equals a kernel's process and min() skips its NULL.
                keep = pc.and_(pc.is_valid(corr), pc.is_valid(gtid))
                if gtid.null_count and pc.any(pc.and_(pc.is_valid(corr), pc.is_null(gtid))).as_py():
                    self.every_call_has_thread = False
                c = corr.filter(keep).to_numpy(zero_copy_only=False).astype(np.int64)
                g = gtid.filter(keep).to_numpy(zero_copy_only=False).astype(np.int64)
                if len(c) and (c.min() < 0 or c.max() >= 1 << 39):
                    raise NotRaw("correlation ids too wide to pack with a process id")
                keys.append((c << 24) | ((g >> 24) & _LOW24) if per_process else c << 24)
                tids.append(g)
        key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        del keys
        tid = np.concatenate(tids) if tids else np.zeros(0, np.int64)
        del tids
        # Launch calls are stored by start, so with one process the keys usually arrive sorted: no sort, and
        # no copies (10M calls: 160 MB of keys and threads, an argsort would add 80 MB and copy both).
        if len(key) > 1 and not (key[1:] >= key[:-1]).all():
            order = np.argsort(key, kind="stable")
            key, tid = key[order], tid[order]
            del order
        repeated = key[1:] == key[:-1]
        if repeated.any():  # one correlation id seen twice (runtime and driver, say): its smallest thread
            first = np.flatnonzero(np.r_[True, ~repeated])
            key, tid = key[first], np.minimum.reduceat(tid, first)
        self.keys, self.tids = key, tid

    def find(self, corr: pa.Array, pid: pa.Array | None) -> tuple[pa.Array, pa.Array]:
        """(globalTid, pid of that globalTid) of each kernel's launch; null where none matches."""
        c = pc.fill_null(_int(corr), -1).to_numpy(zero_copy_only=False).astype(np.int64)
        valid = (c >= 0) & (c < 1 << 39)
        key = np.where(valid, c, 0) << 24
        if self.per_process:
            p = pc.fill_null(_int(pid), -1).to_numpy(zero_copy_only=False).astype(np.int64)
            valid &= p >= 0
            key |= np.where(p >= 0, p, 0)
        if len(self.keys):
            at = np.searchsorted(self.keys, key).clip(0, len(self.keys) - 1)
            found = valid & (self.keys[at] == key)
            g = self.tids[at]
        else:
            found, g = np.zeros(len(c), bool), np.zeros(len(c), np.int64)
        gtid = pa.array(np.where(found, g, 0), mask=~found)
        return gtid, _pid(gtid)


def kernel_batches(db: Sqlite, counted: dict[str, int] | None = None, readers: int = 1) -> Iterator[pa.RecordBatch]:
    """The kernels as ``nsys_sql.kernels_sql(db, stored_order=True)`` gives them (``kernel_id`` null), read as
    stored (by ``readers`` threads); :class:`NotRaw` where this export needs the SQL. Once every batch is read,
    ``counted`` gets the kernels no launching call matches (``checks.KERNELS_WITHOUT_CALL``) where that count
    is exact."""
    cols = db.columns(KERNEL_TABLE)
    strings = _strings(db)
    has_pid = "globalPid" in cols
    launches = Launches(db, per_process=has_pid)
    labels = _enum(db, "ENUM_CUDA_KERNEL_LAUNCH_TYPE") if "launchType" in cols else None
    wanted = ["start", "end", "globalPid", "demangledName", "name", "shortName", "launchType", "graphId"]
    wanted += list(KERNEL_COPIED.values())
    read = [c for c in dict.fromkeys(wanted) if c in cols]
    unlaunched = 0
    for batch in _raw(db.chunked_batches(KERNEL_TABLE, _select(read), readers)):
        n = batch.num_rows
        raw = dict(zip(read, batch.columns, strict=True))
        start, end = _int(raw["start"]), _int(raw["end"])
        out: dict[str, pa.Array] = {"kernel_id": pa.nulls(n, pa.int64())}
        for name, col in KERNEL_COPIED.items():
            out[name] = _int(raw[col]) if col in raw else pa.nulls(n, pa.int64())
        out["start_ns"], out["end_ns"], out["duration_ns"] = start, end, pc.subtract(end, start)
        names = [_text(raw[c], strings) for c in ("demangledName", "name") if c in raw]
        out["name"] = pc.coalesce(*names) if names else pa.nulls(n, pa.string())
        out["short_name"] = _text(raw["shortName"], strings) if "shortName" in raw else pa.nulls(n, pa.string())
        out["launch_type"] = _label(raw["launchType"], labels) if labels is not None else pa.nulls(n, pa.string())
        if "graphId" in raw:
            out["graph_id"] = _int(raw["graphId"])
        elif "graphNodeId" in raw:
            out["graph_id"] = pc.shift_right(_int(raw["graphNodeId"]), 32)
        else:
            out["graph_id"] = pa.nulls(n, pa.int64())
        kernel_pid = _pid(_int(raw["globalPid"])) if has_pid else None
        gtid, launch_pid = launches.find(out["correlation_id"], kernel_pid)
        out["pid"] = kernel_pid if has_pid else launch_pid
        out["tid"] = _tid(gtid)
        unlaunched += gtid.null_count
        yield pa.RecordBatch.from_pydict(out)
    if counted is not None and launches.every_call_has_thread:
        counted[KERNELS_WITHOUT_CALL] = unlaunched


def api_call_batches(db: Sqlite) -> Iterator[pa.RecordBatch]:
    """The runtime calls as ``nsys_sql.api_calls_sql(db, stored_order=True)`` gives them (``call_id`` null)."""
    t = RUNTIME_TABLE
    cols = db.columns(t)
    strings = _strings(db)
    name_col = "nameId" if "nameId" in cols else "name" if "name" in cols else None
    read = [c for c in ("start", "end", "correlationId", "returnValue", "globalTid", name_col) if c in cols]
    sql = f"SELECT {_select(read)} FROM {t} ORDER BY rowid"
    for batch in _reader(db, sql):
        n = batch.num_rows
        raw = dict(zip(read, batch.columns, strict=True))
        start, end, gtid = _int(raw["start"]), _int(raw["end"]), _int(raw["globalTid"])
        yield pa.RecordBatch.from_pydict(
            {
                "call_id": pa.nulls(n, pa.int64()),
                "kind": pa.repeat(pa.scalar("runtime", pa.string()), n),
                "name": _text(raw[name_col], strings) if name_col else pa.nulls(n, pa.string()),
                "start_ns": start,
                "end_ns": end,
                "duration_ns": pc.subtract(end, start),
                "correlation_id": _int(raw["correlationId"]) if "correlationId" in raw else pa.nulls(n, pa.int64()),
                "return_value": _int(raw["returnValue"]) if "returnValue" in raw else pa.nulls(n, pa.int64()),
                "pid": _pid(gtid),
                "tid": _tid(gtid),
            }
        )
