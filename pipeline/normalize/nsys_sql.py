"""SQL over an nsys export (``sqlite_reader.Sqlite``) for its kernels, runtime/driver calls, CUDA graphs, memory
operations and devices, each built from the columns the export has: a column it lacks reads as NULL.

Names are ``StringIds`` ids in new exports and inline text in old ones (:func:`name_sql`); enum values are
labelled from the export's own enum tables, else from ``nsys_map.ENUMS`` (:func:`enum_label_sql`). The NVTX
ranges and marks are read in ``nsys`` itself.
"""

from __future__ import annotations

from pipeline.normalize import nsys_map
from pipeline.normalize.sqlite_reader import Sqlite

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
LAUNCH_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
# globalTid = (pid << 24) | tid, with the vm id above; see the nsys export docs.
PID = "(({col} >> 24) & 16777215)"
TID = "({col} & 16777215)"


def name_sql(db: Sqlite, table: str, alias: str, col: str) -> str:
    """A kernel/API name that is a StringIds id in new exports and inline text in old ones."""
    if col not in db.columns(table):
        return "NULL"
    if "StringIds" not in db.tables:
        return f"CAST({alias}.{col} AS TEXT)"
    return (
        f"CASE WHEN typeof({alias}.{col}) = 'integer' "
        f"THEN (SELECT value FROM StringIds WHERE id = {alias}.{col}) ELSE {alias}.{col} END"
    )


def enum_label_sql(db: Sqlite, enum: str, expr: str) -> str:
    """The label of enum value ``expr``: from the export's own enum table (any of its names), else from
    ``nsys_map.ENUMS``; a value neither knows stays as its number in text."""
    table = db.table(enum)
    if table is not None and "label" in db.columns(table):
        return f"coalesce((SELECT label FROM {table} WHERE id = {expr}), CAST({expr} AS TEXT))"
    values = ", ".join(f"({k}, '{v}')" for k, v in nsys_map.ENUMS[enum].items())
    return f"coalesce((SELECT column2 FROM (VALUES {values}) WHERE column1 = {expr}), CAST({expr} AS TEXT))"


def _launch_tables(db: Sqlite) -> list[str]:
    """The runtime/driver tables that can link kernels to a thread (present, with the columns needed)."""
    return [t for t in LAUNCH_TABLES if t in db.usable and db.has(t, "correlationId")]


def _launches_cte(db: Sqlite, per_process: bool = True) -> str:
    """The launching thread per correlation id, per process (correlation ids restart in each process);
    without ``per_process`` (kernels that do not record their process) per correlation id alone."""
    parts = [f"SELECT correlationId, globalTid FROM {t}" for t in _launch_tables(db)]
    if not parts:
        return "launches AS (SELECT NULL AS correlationId, NULL AS globalTid, NULL AS pid WHERE 0)"
    union = " UNION ALL ".join(parts)
    pid = PID.format(col="globalTid")
    by = f"correlationId, {pid}" if per_process else "correlationId"
    return (
        f"launches AS (SELECT correlationId, {PID.format(col='min(globalTid)')} AS pid, "
        f"min(globalTid) AS globalTid FROM ({union}) GROUP BY {by})"
    )


def kernels_sql(db: Sqlite, stored_order: bool = False) -> str:
    """The kernels, numbered and sorted by (start, correlation id); with ``stored_order`` in the order the
    export stores them and unnumbered (see :func:`_numbered_in_order`)."""
    t, k = KERNEL_TABLE, "k"
    c = lambda name, default="NULL": db.col(t, k, name, default)  # noqa: E731
    has_pid = db.has(t, "globalPid")
    pid = PID.format(col="k.globalPid") if has_pid else "l.pid"  # else: the launching thread's process
    same_process = f"AND l.pid = {pid}" if has_pid else ""
    has_type = db.has(t, "launchType")
    launch_type = enum_label_sql(db, "ENUM_CUDA_KERNEL_LAUNCH_TYPE", "k.launchType") if has_type else "NULL"
    corr = c("correlationId")
    number = "NULL" if stored_order else f"row_number() OVER (ORDER BY k.start, {corr}) - 1"
    order = "k.rowid" if stored_order else f"k.start, {corr}"
    return f"""
    WITH {_launches_cte(db, per_process=has_pid)}
    SELECT {number} AS kernel_id,
           {c("deviceId")} AS device_id, {c("contextId")} AS context_id, {c("streamId")} AS stream_id,
           {c("correlationId")} AS correlation_id,
           k.start AS start_ns, k."end" AS end_ns, k."end" - k.start AS duration_ns,
           coalesce({name_sql(db, t, k, "demangledName")}, {name_sql(db, t, k, "name")}) AS name,
           {name_sql(db, t, k, "shortName")} AS short_name,
           {c("gridX")} AS grid_x, {c("gridY")} AS grid_y, {c("gridZ")} AS grid_z,
           {c("blockX")} AS block_x, {c("blockY")} AS block_y, {c("blockZ")} AS block_z,
           {c("registersPerThread")} AS registers_per_thread,
           {c("staticSharedMemory")} AS static_smem_bytes, {c("dynamicSharedMemory")} AS dynamic_smem_bytes,
           {c("localMemoryPerThread")} AS local_mem_per_thread_bytes,
           {launch_type} AS launch_type,
           {c("graphId", _graph_of(db, t, "k"))} AS graph_id, {c("graphNodeId")} AS graph_node_id,
           {pid} AS pid, {TID.format(col="l.globalTid")} AS tid
    FROM {t} k
    LEFT JOIN launches l ON l.correlationId = {corr} {same_process}
    ORDER BY {order}
    """


def _graph_of(db: Sqlite, table: str, alias: str) -> str:
    """The graph of a node: nsys numbers graph nodes ``graphId << 32 | index`` (seen in nsys 2025.3 exports,
    whose CUDA_GRAPH_NODE_EVENTS and CUDA_GRAPH_EVENTS agree: exec graph 2's nodes are 2<<32 + k)."""
    return f"({alias}.graphNodeId >> 32)" if "graphNodeId" in db.columns(table) else "NULL"


def graph_nodes_sql(db: Sqlite) -> str | None:
    """CUDA_GRAPH_NODE_EVENTS: when and on which thread each graph node was made (a stream-captured node inside
    the launch call that made it; an instantiated node points at its original)."""
    t = "CUDA_GRAPH_NODE_EVENTS"
    if t not in db.tables or not {"graphNodeId", "start", "globalTid"} <= db.columns(t):
        return None
    return f"""
    SELECT n.graphNodeId AS graph_node_id, (n.graphNodeId >> 32) AS graph_id,
           {db.col(t, "n", "originalGraphNodeId")} AS original_graph_node_id, n.start AS created_ns,
           {PID.format(col="n.globalTid")} AS pid, {TID.format(col="n.globalTid")} AS tid
    FROM {t} n ORDER BY n.start
    """


def graph_launches_sql(db: Sqlite) -> str | None:
    """CUPTI_ACTIVITY_KIND_GRAPH_TRACE: whole-graph executions (nsys --cuda-graph-trace=graph), no kernels."""
    t = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    if t not in db.tables:
        return None
    c = lambda name: db.col(t, "g", name)  # noqa: E731
    return f"""
    SELECT row_number() OVER (ORDER BY g.start) - 1 AS launch_id, {c("deviceId")} AS device_id,
           {c("contextId")} AS context_id, {c("streamId")} AS stream_id, {c("correlationId")} AS correlation_id,
           g.start AS start_ns, g."end" AS end_ns, g."end" - g.start AS duration_ns,
           {c("graphId")} AS graph_id, {c("graphExecId")} AS graph_exec_id,
           {PID.format(col="g.globalPid") if "globalPid" in db.columns(t) else "NULL"} AS pid
    FROM {t} g ORDER BY g.start
    """


def whole_graph_warning(db: Sqlite) -> list[str]:
    t = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    if t not in db.tables:
        return []
    n, ns = db.arrow(f'SELECT count(*), coalesce(sum("end" - start), 0) FROM {t}').to_pylist()[0].values()
    if not n:
        return []
    return [
        f"{n} CUDA graph launches ({ns} ns of GPU time) were recorded as whole graphs, without their kernels: "
        "they are in table graph_launches but on no layer; re-capture with `nsys profile "
        "--cuda-graph-trace=node` (tracepipe capture nsys does) to see each kernel"
    ]


def api_calls_sql(db: Sqlite, stored_order: bool = False) -> str | None:
    """Runtime and driver calls, numbered and sorted by (start, correlation id); with ``stored_order`` the
    runtime calls as stored, unnumbered (None when a driver table is there too: two tables need a sort)."""
    parts = []
    tables = [t for t in LAUNCH_TABLES if t in db.usable]
    if stored_order and tables != [LAUNCH_TABLES[0]]:
        return None
    for table, kind in zip(LAUNCH_TABLES, ("runtime", "driver"), strict=True):
        if table not in db.usable:
            continue
        c = lambda name, table=table: db.col(table, "r", name)  # noqa: E731
        name = name_sql(db, table, "r", "nameId") if "nameId" in db.columns(table) else name_sql(db, table, "r", "name")
        parts.append(f"""
        SELECT '{kind}' AS kind, {name} AS name, r.start AS start_ns, r."end" AS end_ns,
               r."end" - r.start AS duration_ns, {c("correlationId")} AS correlation_id,
               {c("returnValue")} AS return_value,
               {PID.format(col="r.globalTid")} AS pid, {TID.format(col="r.globalTid")} AS tid
        FROM {table} r""")
    if not parts:
        return None
    if stored_order:
        return f"SELECT NULL AS call_id, * FROM ({parts[0]} ORDER BY r.rowid)"
    return f"""SELECT row_number() OVER (ORDER BY start_ns, correlation_id) - 1 AS call_id, *
               FROM ({" UNION ALL ".join(parts)}) ORDER BY start_ns, correlation_id"""


def memcpy_sql(db: Sqlite) -> str | None:
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if t not in db.usable:
        return None
    c = lambda name: db.col(t, "m", name)  # noqa: E731
    kind = lambda col: enum_label_sql(db, "ENUM_CUDA_MEM_KIND", f"m.{col}") if db.has(t, col) else "NULL"  # noqa: E731
    return f"""
    SELECT row_number() OVER (ORDER BY m.start) - 1 AS copy_id, {c("deviceId")} AS device_id,
           {c("contextId")} AS context_id, {c("streamId")} AS stream_id, {c("correlationId")} AS correlation_id,
           m.start AS start_ns, m."end" AS end_ns, m."end" - m.start AS duration_ns, {c("bytes")} AS bytes,
           {enum_label_sql(db, "ENUM_CUDA_MEMCPY_OPER", "m.copyKind") if db.has(t, "copyKind") else "NULL"} AS kind,
           {kind("srcKind")} AS src_kind, {kind("dstKind")} AS dst_kind, {c("graphNodeId")} AS graph_node_id,
           {PID.format(col="m.globalPid") if db.has(t, "globalPid") else "NULL"} AS pid
    FROM {t} m ORDER BY m.start
    """


def memset_sql(db: Sqlite) -> str | None:
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    if t not in db.usable:
        return None
    c = lambda name: db.col(t, "m", name)  # noqa: E731
    mem_kind = enum_label_sql(db, "ENUM_CUDA_MEM_KIND", "m.memKind") if db.has(t, "memKind") else "NULL"
    return f"""
    SELECT row_number() OVER (ORDER BY m.start) - 1 AS set_id, {c("deviceId")} AS device_id,
           {c("contextId")} AS context_id, {c("streamId")} AS stream_id, {c("correlationId")} AS correlation_id,
           m.start AS start_ns, m."end" AS end_ns, m."end" - m.start AS duration_ns, {c("bytes")} AS bytes,
           {c("value")} AS value, {mem_kind} AS mem_kind, {c("graphNodeId")} AS graph_node_id,
           {PID.format(col="m.globalPid") if db.has(t, "globalPid") else "NULL"} AS pid
    FROM {t} m ORDER BY m.start
    """


def devices_sql(db: Sqlite) -> str | None:
    """One row per GPU, each column from whichever layout's table and column holds it (``nsys_map``)."""
    gpu, cuda = nsys_map.GPU_TABLE, nsys_map.CUDA_GPU_TABLE
    have = {t: db.columns(t) for t in (gpu, cuda) if t in db.tables}
    if not have:
        return None
    alias = {gpu: "g", cuda: "c"}
    select = []
    for column, sources in nsys_map.DEVICE_COLUMNS.items():
        found = [f"{alias[t]}.{c}" for t, c in sources if c in have.get(t, ())]
        if found:
            select.append(f"{found[0] if len(found) == 1 else 'coalesce(' + ', '.join(found) + ')'} AS {column}")
    # The pre-2022 CUDA table has a row per GPU and process: one per GPU, joined on the device ordinal.
    cuda_rows = f"(SELECT * FROM {cuda} GROUP BY deviceId)"
    if gpu in have and cuda in have and "deviceId" in have[cuda]:
        key = next(f"g.{c}" for c in ("cuDevice", "deviceId", "id") if c in have[gpu])
        source = f"{gpu} g LEFT JOIN {cuda_rows} c ON c.deviceId = {key}"
    elif gpu in have:
        source = f"{gpu} g"
    else:
        source = f"{cuda_rows} c"
    inner = f"SELECT {', '.join(select)} FROM {source}"
    names = [s.rsplit(" AS ", 1)[1] for s in select]
    if "device_id" not in names:
        select.insert(0, "NULL AS device_id")
        inner = f"SELECT {', '.join(select)} FROM {source}"
    threads = "max_warps_per_sm * warp_size" if {"max_warps_per_sm", "warp_size"} <= set(names) else "NULL"
    return f"SELECT *, {threads} AS max_threads_per_sm FROM ({inner}) ORDER BY device_id"
