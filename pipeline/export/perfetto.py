"""One normalized trace as a Chrome Trace Event Format JSON file, which ui.perfetto.dev and chrome://tracing open.

The events are written the way the PyTorch profiler (Kineto) writes them -- the same categories and argument
names (``pipeline/normalize/chrome_map.py``) -- so the file is also a chrome trace that ``tracepipe normalize``
reads back: its kernels, copies, memsets, API calls, ops and ranges come back with the same names, streams and
start/end nanoseconds.  What only tracepipe knows rides along in ``args`` under keys Kineto does not use (layer
path, pass, occupancy, waves ...), where the viewers show it on click.

Layout (the Trace Event Format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):

- CPU: one process per pid, one track per thread: ``user_annotation`` (NVTX / ``record_function`` ranges),
  ``cpu_op`` (PyTorch ops), ``cuda_runtime`` / ``cuda_driver`` (API calls), ``nvtx_mark`` instants (``ph: i``).
- GPU: one process per device (pid = device id, as Kineto does; moved past the CPU pids should one collide),
  one track per stream (tid = stream id): ``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``gpu_user_annotation``.
- Flow arrows (``ac2g``, as Kineto's) from each launching API call to the GPU operation it launched: one arrow
  per operation, so each kernel replayed from a CUDA graph gets its own arrow from the graph launch.
- Counters (``ph: C``, category ``tracepipe_counter``) on each GPU process: GPU operations running per layer
  (the layer path cut at ``counter_depth`` names) and, in a trace with more than one pass, per pass.

Times: ``ts``/``dur`` are microseconds written from the integer nanoseconds with three decimals, so they are
exact (no float rounding) and read back as the same nanoseconds.  ``displayTimeUnit`` is not set: viewers have
disagreed on whether it scales ``ts`` (google/perfetto#274), while fractional microseconds mean the same to all.

The file is streamed: DuckDB builds each event's JSON text (set work in SQL) and the rows are written batch by
batch, so no event list is ever held in Python; a ``.gz`` name is compressed on the fly.  It is written beside
``out`` and renamed into place, so a failed export never leaves a half file under the requested name.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import duckdb

from pipeline.errors import BadInputError
from pipeline.normalize.chrome_map import MEMCPY_KINDS
from pipeline.outputs import file_to_replace, refuse_inside_normalized, writing, wrong_folder

#: Counters show a layer path cut to the deepest depth that gives at most this many layers (``counter_depth``).
MAX_COUNTER_LAYERS = 16
#: The category of the counter events (``chrome_map.KNOWN_UNUSED`` lists it: a re-import skips it silently).
COUNTER_CATEGORY = "tracepipe_counter"
#: Rows fetched from DuckDB per batch while streaming.
BATCH_ROWS = 50_000
#: Added to device ids to make GPU pids when a device id equals a CPU pid of the trace.
GPU_PID_OFFSET = 1 << 31

# --- SQL that builds JSON text ----------------------------------------------------------------------------


def _us(ns: str) -> str:
    """SQL: the integer nanoseconds ``ns`` as a JSON number of microseconds with three decimals, exact."""
    return (
        f"(CASE WHEN {ns} < 0 THEN '-' ELSE '' END || (abs({ns}) // 1000)::VARCHAR || '.' "
        f"|| lpad((abs({ns}) % 1000)::VARCHAR, 3, '0'))"
    )


def _key(name: str) -> str:
    """SQL string literal holding ``"name":`` (JSON-escaped)."""
    return "'" + (json.dumps(name) + ":").replace("'", "''") + "'"


def _val(expr: str) -> str:
    """SQL: ``expr`` (an integer, text or list) as JSON text, NULL when it is NULL."""
    return f"to_json({expr})"


def _num(expr: str) -> str:
    """SQL: a DOUBLE as a JSON number; NULL when NULL or not finite (JSON has no NaN or Infinity)."""
    return f"(CASE WHEN isfinite({expr}) THEN to_json({expr}) END)"


def _raw_json(expr: str) -> str:
    """SQL: a column that holds JSON text, embedded as JSON (as a string when it does not parse)."""
    return f"(CASE WHEN json_valid({expr}) THEN {expr}::VARCHAR ELSE to_json({expr}) END)"


def _xyz(prefix: str) -> str:
    """SQL: ``[x, y, z]`` of ``<prefix>_x/_y/_z``, NULL unless all three are known (Kineto's grid/block)."""
    x, y, z = (f"{prefix}_{c}" for c in "xyz")
    return f"(CASE WHEN {x} IS NOT NULL AND {y} IS NOT NULL AND {z} IS NOT NULL THEN to_json([{x}, {y}, {z}]) END)"


def _obj(fields: list[tuple[str, str]]) -> str:
    """SQL: a JSON object of ``(key, json_text_expr)``; keys whose value is NULL are left out."""
    parts = ", ".join(f"{_key(k)} || {v}" for k, v in fields)
    return f"('{{' || concat_ws(',', {parts}) || '}}')"


def _event(fields: list[tuple[str, str]], args: list[tuple[str, str]] | None = None) -> str:
    """SQL: one trace event's JSON text; ``fields`` are JSON text expressions, ``args`` its args object."""
    if args is not None:
        fields = [*fields, ("args", _obj(args))]
    return _obj(fields)


def _lit(text: str) -> str:
    """SQL: a JSON string constant."""
    return "'" + json.dumps(text).replace("'", "''") + "'"


def _complete(cat: str, name: str, pid: str, tid: str, start: str, dur: str) -> list[tuple[str, str]]:
    """The fields every complete (``ph: X``) event has."""
    return [
        ("ph", _lit("X")),
        ("cat", cat),
        ("name", f"to_json({name})"),
        ("pid", f"{pid}::VARCHAR"),
        ("tid", f"{tid}::VARCHAR"),
        ("ts", _us(start)),
        ("dur", _us(dur)),
    ]


# --- the events, one query each ---------------------------------------------------------------------------

_GPU_TABLE = "_export_gpu"


def _gpu_table_sql() -> str:
    """Every GPU operation of the trace with its layer, pass, launch and (kernels) occupancy and waves."""
    return f"""
    CREATE OR REPLACE TEMP TABLE {_GPU_TABLE} AS
    SELECT g.op_kind, g.op_row_id, g.device_id, coalesce(g.device_id, -1) + $gpu_base AS gpu_pid,
           coalesce(g.stream_id, -1) AS gpu_tid, g.context_id, g.stream_id, g.correlation_id, g.external_id,
           g.start_ns, g.duration_ns, g.name, g.short_name, g.grid_x, g.grid_y, g.grid_z,
           g.block_x, g.block_y, g.block_z, g.registers_per_thread, g.static_smem_bytes, g.dynamic_smem_bytes,
           g.profiler_blocks_per_sm, g.profiler_warps_per_sm, g.profiler_est_achieved_occupancy_pct,
           g.graph_node_id, g.bytes, g.copy_kind, g.launch_call_id, g.layer, g.path, g."pass", g.op_name,
           m.src_kind, m.dst_kind, s.mem_kind, s.value AS memset_value,
           o.theoretical_occupancy_pct, o.limiter, o.resident_blocks_per_sm,
           w.blocks, w.threads_per_block, w.waves, w.waves_per_sm, w.tail_wave_blocks, w.wave_efficiency,
           w.est_achieved_occupancy_pct
    FROM gpu_op_layers g
    LEFT JOIN memcpy m ON g.op_kind = 'memcpy' AND m.trace_id = g.trace_id AND m.copy_id = g.op_row_id
    LEFT JOIN memset s ON g.op_kind = 'memset' AND s.trace_id = g.trace_id AND s.set_id = g.op_row_id
    LEFT JOIN kernel_occupancy o ON g.op_kind = 'kernel' AND o.trace_id = g.trace_id AND o.kernel_id = g.op_row_id
    LEFT JOIN kernel_waves w ON g.op_kind = 'kernel' AND w.trace_id = g.trace_id AND w.kernel_id = g.op_row_id
    WHERE g.trace_id = $trace"""


#: GPU op kind -> Kineto category; the flow id is ``op_row_id * 3 + code`` (unique per operation).
_GPU_CATEGORY = {"kernel": ("kernel", 0), "memcpy": ("gpu_memcpy", 1), "memset": ("gpu_memset", 2)}


def _kineto_copy_name() -> str:
    """SQL: Kineto's name of a copy / memset (``Memcpy HtoD (Pageable -> Device)``, ``Memset (Device)``),
    which the chrome normalizer parses back into kind, src_kind, dst_kind / mem_kind."""
    codes = ", ".join(f"('{label}', '{code}')" for code, label in MEMCPY_KINDS.items())
    code = f"(SELECT c FROM (VALUES {codes}) t(l, c) WHERE l = copy_kind)"
    return f"""CASE op_kind
        WHEN 'memcpy' THEN 'Memcpy'
            || coalesce(' ' || coalesce({code}, regexp_replace(copy_kind, '\\W', '', 'g')), '')
            || CASE WHEN src_kind IS NOT NULL AND dst_kind IS NOT NULL
                    THEN ' (' || src_kind || ' -> ' || dst_kind || ')' ELSE '' END
        ELSE 'Memset' || coalesce(' (' || mem_kind || ')', '') END"""


def _gpu_events_sql() -> str:
    cat = "CASE op_kind " + " ".join(f"WHEN '{k}' THEN {_lit(c)}" for k, (c, _) in _GPU_CATEGORY.items()) + " END"
    name = f"CASE WHEN op_kind = 'kernel' THEN name ELSE {_kineto_copy_name()} END"
    smem = "static_smem_bytes + coalesce(dynamic_smem_bytes, 0)"
    args = [
        # Kineto's keys first: the chrome normalizer reads these back (chrome_map.COLUMNS).
        ("device", _val("device_id")),
        ("context", _val("context_id")),
        ("stream", _val("stream_id")),
        ("correlation", _val("correlation_id")),
        ("External id", _val("external_id")),
        ("grid", _xyz("grid")),
        ("block", _xyz("block")),
        ("registers per thread", _val("registers_per_thread")),
        ("shared memory", _val(smem)),
        ("blocks per SM", _num("profiler_blocks_per_sm")),
        ("warps per SM", _num("profiler_warps_per_sm")),
        ("est. achieved occupancy %", _num("profiler_est_achieved_occupancy_pct")),
        ("bytes", _val("bytes")),
        # tracepipe's own: the analysis of this operation.
        ("layer", _val("layer")),
        ("layer path", _val("path")),
        ("pass", _val('"pass"')),
        ("op", _val("op_name")),
        ("start ns", _val("start_ns")),
        ("duration ns", _val("duration_ns")),
        ("short name", _val("short_name")),
        ("dynamic shared memory", _val("dynamic_smem_bytes")),
        ("blocks", _val("blocks")),
        ("threads per block", _val("threads_per_block")),
        ("theoretical occupancy % (model)", _num("round(theoretical_occupancy_pct, 2)")),
        ("occupancy limiter (model)", _val("limiter")),
        ("resident blocks per SM (model)", _val("resident_blocks_per_sm")),
        ("est. achieved occupancy % (model)", _num("round(est_achieved_occupancy_pct, 2)")),
        ("waves (model)", _val("waves")),
        ("waves per SM (model)", _num("round(waves_per_sm, 4)")),
        ("tail wave blocks (model)", _val("tail_wave_blocks")),
        ("wave efficiency (model)", _num("round(wave_efficiency, 4)")),
        ("graph node", _val("graph_node_id")),
        ("copy kind", _val("copy_kind")),
        ("memset value", _val("memset_value")),
    ]
    fields = _complete(cat, f"({name})", "gpu_pid", "gpu_tid", "start_ns", "duration_ns")
    return f"SELECT {_event(fields, args)} FROM {_GPU_TABLE}"


def _flows_sql() -> str:
    """Kineto's ``ac2g`` arrows: ``s`` on the launching call's thread at its start, ``f`` bound to the GPU op."""
    code = "CASE g.op_kind " + " ".join(f"WHEN '{k}' THEN {c}" for k, (_, c) in _GPU_CATEGORY.items()) + " END"
    fid = f"(g.op_row_id * 3 + {code})::VARCHAR"
    common = [("cat", _lit("ac2g")), ("name", _lit("ac2g")), ("id", fid)]
    start = _obj(
        [("ph", _lit("s")), *common, ("pid", "c.pid::VARCHAR"), ("tid", "c.tid::VARCHAR"), ("ts", _us("c.start_ns"))]
    )
    end = _obj(
        [
            ("ph", _lit("f")),
            ("bp", _lit("e")),
            *common,
            ("pid", "g.gpu_pid::VARCHAR"),
            ("tid", "g.gpu_tid::VARCHAR"),
            ("ts", _us("g.start_ns")),
        ]
    )
    return f"""SELECT unnest([{start}, {end}])
    FROM {_GPU_TABLE} g JOIN api_calls c ON c.trace_id = $trace AND c.call_id = g.launch_call_id
    WHERE c.pid IS NOT NULL AND c.tid IS NOT NULL"""


def _ranges_sql() -> str:
    """NVTX / record_function ranges: CPU ones as ``user_annotation``, GPU-side ones as ``gpu_user_annotation``."""
    gpu = "r.kind = 'gpu'"
    cat = f"CASE WHEN {gpu} THEN {_lit('gpu_user_annotation')} ELSE {_lit('user_annotation')} END"
    pid = f"CASE WHEN {gpu} THEN coalesce(r.pid, -1) + $gpu_base ELSE r.pid END"
    # Kineto writes no device/stream args on GPU annotations (readers such as HTA take an event with a `stream`
    # arg for a kernel): pid/tid say them, as in Kineto; only a pid moved past the CPU pids needs the device.
    moved = f"{gpu} AND $gpu_base <> 0"
    args = [
        ("device", f"CASE WHEN {moved} THEN {_val('r.pid')} END"),
        ("stream", f"CASE WHEN {moved} THEN {_val('r.tid')} END"),
        ("layer path", _val("p.path")),
        ("depth", _val("r.depth")),
        ("domain", _val("r.domain")),
        ("range kind", _val("r.kind")),
        ("range id", _val("r.range_id")),
        ("end tid", f"CASE WHEN r.end_tid <> r.tid THEN {_val('r.end_tid')} END"),
    ]
    fields = _complete(cat, "r.text", pid, "r.tid", "r.start_ns", "r.duration_ns")
    return f"""SELECT {_event(fields, args)}
    FROM nvtx_ranges r LEFT JOIN nvtx_paths p ON p.trace_id = r.trace_id AND p.range_id = r.range_id
    WHERE r.trace_id = $trace AND r.duration_ns IS NOT NULL AND r.pid IS NOT NULL AND r.tid IS NOT NULL"""


def _ops_sql() -> str:
    args = [
        ("External id", _val("external_id")),
        ("Sequence number", _val("sequence_number")),
        ("Fwd thread id", _val("fwd_thread_id")),
        ("Input Dims", _raw_json("input_dims")),
        ("Input type", _raw_json("input_types")),
        ("call stack", _val("call_stack")),
        ("op id", _val("op_id")),
    ]
    fields = _complete(_lit("cpu_op"), "name", "pid", "tid", "start_ns", "duration_ns")
    return f"""SELECT {_event(fields, args)} FROM ops
    WHERE trace_id = $trace AND duration_ns IS NOT NULL AND pid IS NOT NULL AND tid IS NOT NULL"""


def _api_calls_sql() -> str:
    cat = f"CASE kind WHEN 'driver' THEN {_lit('cuda_driver')} ELSE {_lit('cuda_runtime')} END"
    args = [
        ("correlation", _val("correlation_id")),
        ("External id", _val("external_id")),
        ("return value", _val("return_value")),
    ]
    fields = _complete(cat, "name", "pid", "tid", "start_ns", "duration_ns")
    return f"""SELECT {_event(fields, args)} FROM api_calls
    WHERE trace_id = $trace AND duration_ns IS NOT NULL AND pid IS NOT NULL AND tid IS NOT NULL"""


def _marks_sql() -> str:
    fields = [
        ("ph", _lit("i")),
        ("s", _lit("t")),
        ("cat", _lit("nvtx_mark")),
        ("name", "to_json(coalesce(text, ''))"),
        ("pid", "pid::VARCHAR"),
        ("tid", "tid::VARCHAR"),
        ("ts", _us("ts_ns")),
    ]
    return f"""SELECT {_event(fields, [("domain", _val("domain"))])} FROM nvtx_marks
    WHERE trace_id = $trace AND ts_ns IS NOT NULL AND pid IS NOT NULL AND tid IS NOT NULL"""


def _layer_group(depth: int) -> str:
    """SQL: the layer path cut to its first ``depth`` names."""
    return f"array_to_string(list_slice(string_split(path, '/'), 1, {int(depth)}), '/')"


def _counters_sql(depth: int, with_passes: bool) -> str:
    """Per GPU process: how many GPU operations of each layer (and pass) run at each moment they change.

    A step function: +1 at each operation's start, -1 at its end, summed per timestamp (an end and a start at
    the same ns cancel and write nothing), then a running sum in time order per counter."""
    series = [f"'layer ' || coalesce({_layer_group(depth)}, '(no layer)')"]
    if with_passes:
        series.append("""'pass ' || coalesce("pass", '(none)')""")
    ops = " UNION ALL ".join(
        f"SELECT gpu_pid, {s} AS counter, start_ns, start_ns + duration_ns AS end_ns FROM {_GPU_TABLE}" for s in series
    )
    event = _obj(
        [
            ("ph", _lit("C")),
            ("cat", _lit(COUNTER_CATEGORY)),
            ("name", "to_json(counter)"),
            ("pid", "gpu_pid::VARCHAR"),
            ("ts", _us("ts")),
            ("args", "'{\"GPU ops running\":' || running::VARCHAR || '}'"),
        ]
    )
    return f"""WITH ops AS ({ops}),
    steps AS (SELECT gpu_pid, counter, start_ns AS ts, 1 AS d FROM ops
              UNION ALL SELECT gpu_pid, counter, end_ns, -1 FROM ops),
    per_ts AS (SELECT gpu_pid, counter, ts, sum(d) AS d FROM steps GROUP BY ALL),
    running AS (SELECT *, sum(d) OVER (PARTITION BY gpu_pid, counter ORDER BY ts) AS running FROM per_ts)
    SELECT {event} FROM running WHERE d <> 0"""


def _metadata_sql() -> str:
    """Process and thread names and sort order: CPU processes first, then one process per GPU."""
    cpu_threads = """
        SELECT pid, tid FROM api_calls WHERE trace_id = $trace
        UNION SELECT pid, tid FROM ops WHERE trace_id = $trace
        UNION SELECT pid, tid FROM nvtx_ranges WHERE trace_id = $trace AND kind <> 'gpu'
        UNION SELECT pid, tid FROM nvtx_marks WHERE trace_id = $trace"""
    gpu_threads = f"""
        SELECT device_id, gpu_pid AS pid, gpu_tid AS tid FROM {_GPU_TABLE}
        UNION SELECT pid, coalesce(pid, -1) + $gpu_base, tid
        FROM nvtx_ranges WHERE trace_id = $trace AND kind = 'gpu'"""

    def meta(name: str, pid: str, tid: str, key: str, value: str) -> str:
        return _obj(
            [
                ("ph", _lit("M")),
                ("name", _lit(name)),
                ("pid", f"{pid}::VARCHAR"),
                ("tid", f"{tid}::VARCHAR"),
                ("args", f"'{{\"{key}\":' || {value} || '}}'"),
            ]
        )

    gpu_name = "(SELECT any_value(d.name) FROM devices d WHERE d.trace_id = $trace AND d.device_id = g.device_id)"
    gpu_label = f"to_json('GPU ' || coalesce(device_id::VARCHAR, '?') || coalesce(': ' || {gpu_name}, ''))"
    return f"""
    WITH cpu AS (SELECT * FROM ({cpu_threads}) WHERE pid IS NOT NULL AND tid IS NOT NULL),
         gpu AS (SELECT * FROM ({gpu_threads}) WHERE tid IS NOT NULL)
    SELECT unnest([{meta("process_name", "pid", "0", "name", "to_json('CPU process ' || pid)")},
                   {meta("process_sort_index", "pid", "0", "sort_index", "'0'")}])
        FROM (SELECT DISTINCT pid FROM cpu)
    UNION ALL SELECT {meta("thread_name", "pid", "tid", "name", "to_json('thread ' || tid)")} FROM cpu
    UNION ALL SELECT unnest([
        {meta("process_name", "pid", "0", "name", gpu_label)},
        {meta("process_sort_index", "pid", "0", "sort_index", "(1000 + coalesce(device_id, 0))::VARCHAR")}])
        FROM (SELECT DISTINCT device_id, pid FROM gpu) g
    UNION ALL SELECT unnest([{meta("thread_name", "pid", "tid", "name", "to_json('stream ' || tid)")},
                             {meta("thread_sort_index", "pid", "tid", "sort_index", "tid::VARCHAR")}])
        FROM (SELECT DISTINCT pid, tid FROM gpu)"""


def _header_sql() -> str:
    """Kineto's top-level keys (deviceProperties, baseTimeNanoseconds, distributedInfo) and tracepipe's own."""
    device = _obj(
        [
            ("id", _val("device_id")),
            ("name", _val("name")),
            ("totalGlobalMem", _val("total_memory_bytes")),
            ("computeMajor", _val("compute_major")),
            ("computeMinor", _val("compute_minor")),
            ("maxThreadsPerBlock", _val("max_threads_per_block")),
            ("maxThreadsPerMultiprocessor", _val("max_threads_per_sm")),
            ("regsPerBlock", _val("max_registers_per_block")),
            ("regsPerMultiprocessor", _val("max_registers_per_sm")),
            ("warpSize", _val("warp_size")),
            ("sharedMemPerBlock", _val("max_shared_mem_per_block_bytes")),
            ("sharedMemPerMultiprocessor", _val("max_shared_mem_per_sm_bytes")),
            ("sharedMemPerBlockOptin", _val("max_shared_mem_per_block_optin_bytes")),
            ("numSms", _val("sm_count")),
        ]
    )
    return f"""SELECT
        (SELECT list({device} ORDER BY device_id) FROM devices WHERE trace_id = $trace) AS devices,
        epoch_offset_ns, rank, source_format, source_path
    FROM trace_meta WHERE trace_id = $trace"""


# --- driving it -------------------------------------------------------------------------------------------


@dataclass
class ExportResult:
    """What was written: the file, the trace, how many events of each kind, and the counters' layer depth."""

    out: Path
    trace_id: str
    counter_depth: int
    events: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "out": str(self.out),
            "trace_id": self.trace_id,
            "counter_depth": self.counter_depth,
            "events": self.events,
            "skipped": self.skipped,
        }


def pick_trace(normalized: Path, trace_id: str | None) -> str:
    """The trace to export: ``trace_id`` when the folder has it, else the folder's only trace."""
    from pipeline.store import trace_ids

    if said := wrong_folder(Path(normalized), "normalized"):  # no such folder, a file, run's parent folder
        raise BadInputError(normalized, said)
    have = trace_ids(normalized)
    if not have:
        raise BadInputError(normalized, "not a normalized folder (no trace_meta/): run `tracepipe normalize` first")
    if trace_id is None:
        if len(have) > 1:
            listed = ", ".join(have[:8]) + (f" ... ({len(have)} traces)" if len(have) > 8 else "")
            raise BadInputError(normalized, f"holds {len(have)} traces: choose one with --trace-id ({listed})")
        return have[0]
    if trace_id not in have:
        listed = ", ".join(have[:8]) + (" ..." if len(have) > 8 else "")
        raise BadInputError(normalized, f"no trace {trace_id!r} in this folder; --trace-id one of: {listed}")
    return trace_id


def auto_counter_depth(con: duckdb.DuckDBPyConnection, limit: int = MAX_COUNTER_LAYERS) -> int:
    """The deepest layer-path depth at which the trace has at most ``limit`` distinct layers (1 at least)."""
    rows = con.execute(
        f"""WITH p AS (SELECT DISTINCT string_split(path, '/') AS names FROM {_GPU_TABLE} WHERE path IS NOT NULL)
        SELECT d, count(DISTINCT list_slice(names, 1, d)) FROM p, range(1, 1 + (SELECT max(len(names)) FROM p)) r(d)
        GROUP BY d ORDER BY d"""
    ).fetchall()
    fits = [d for d, n in rows if n <= limit]
    return max(fits) if fits else 1


def _gpu_base(con: duckdb.DuckDBPyConnection, trace_id: str) -> int:
    """0 (GPU pid = device id, as Kineto) unless a device id equals a CPU pid of the trace."""
    clash = con.execute(
        """SELECT count(*) FROM (
            SELECT DISTINCT device_id AS id FROM kernels WHERE trace_id = $trace
            UNION SELECT device_id FROM memcpy WHERE trace_id = $trace
            UNION SELECT device_id FROM memset WHERE trace_id = $trace
            UNION SELECT pid FROM nvtx_ranges WHERE trace_id = $trace AND kind = 'gpu') d
        WHERE id IN (SELECT pid FROM api_calls WHERE trace_id = $trace
                     UNION SELECT pid FROM ops WHERE trace_id = $trace
                     UNION SELECT pid FROM nvtx_ranges WHERE trace_id = $trace AND kind <> 'gpu')""",
        {"trace": trace_id},
    ).fetchall()[0]
    return GPU_PID_OFFSET if clash and clash[0] else 0


def _rows(con: duckdb.DuckDBPyConnection, query: str, params: dict[str, object]) -> Iterator[list[str]]:
    """The single text column of ``query``, in batches (DuckDB streams the result; NULL rows dropped)."""
    reader = con.sql(query, params=params).to_arrow_reader(BATCH_ROWS)
    for batch in reader:
        yield [v for v in batch.column(0).to_pylist() if v is not None]


def _header(con: duckdb.DuckDBPyConnection, trace_id: str) -> str:
    devices, epoch, rank, source_format, source_path = con.execute(_header_sql(), {"trace": trace_id}).fetchall()[0]
    from pipeline import __version__

    head: dict[str, object] = {"schemaVersion": 1}
    if epoch is not None:
        head["baseTimeNanoseconds"] = epoch
    if rank is not None:
        head["distributedInfo"] = {"rank": rank}
    head["traceName"] = trace_id
    head["tracepipe"] = {
        "exported_by": f"tracepipe {__version__} export perfetto",
        "trace_id": trace_id,
        "source_format": source_format,
        "source_path": source_path,
        "time": "ts/dur are the trace's own clock in microseconds (3 decimals = exact ns); "
        "add baseTimeNanoseconds to ns for UTC epoch",
    }
    text = json.dumps(head)[:-1]
    if devices:
        text += ', "deviceProperties": [' + ", ".join(devices) + "]"
    return text + ', "traceEvents": [\n'


@contextmanager
def _open(path: Path, compress: bool) -> Iterator[IO[bytes]]:
    """``path`` for writing, through gzip when ``compress`` (mtime 0: one trace always exports to the same bytes)."""
    with open(path, "wb") as raw:
        if not compress:
            yield raw
            return
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as z:
            yield z


def export_perfetto(
    normalized: Path, out: Path | None = None, trace_id: str | None = None, counter_depth: int | None = None
) -> ExportResult:
    """Write one trace of ``normalized`` as Trace Event Format JSON to ``out`` (``.gz``: compressed)."""
    from pipeline.analyze import connect

    trace_id = pick_trace(normalized, trace_id)
    out = file_to_replace(Path(out) if out is not None else Path(f"{trace_id}.perfetto.json.gz"))
    if out.is_dir():
        raise BadInputError(out, "is a folder: give a file name ending in .json or .json.gz")
    if not out.absolute().parent.is_dir():
        raise BadInputError(out, "its folder does not exist: create it, or write elsewhere (-o)")
    refuse_inside_normalized(out)  # a JSON named like a public part would replace a table's Parquet
    con = connect(normalized, read_only=True, lazy=True)  # the views two of its views read computed once
    try:
        _require_timeline(con, normalized, trace_id)
        params: dict[str, object] = {"trace": trace_id, "gpu_base": _gpu_base(con, trace_id)}
        con.execute(_gpu_table_sql(), params)
        depth = counter_depth if counter_depth is not None else auto_counter_depth(con)
        passes = con.execute(f'SELECT count(DISTINCT "pass") FROM {_GPU_TABLE}').fetchall()[0][0]
        queries = {
            "metadata": _metadata_sql(),
            "gpu_ops": _gpu_events_sql(),
            "ranges": _ranges_sql(),
            "ops": _ops_sql(),
            "api_calls": _api_calls_sql(),
            "marks": _marks_sql(),
            "flows": _flows_sql(),
            "counters": _counters_sql(depth, with_passes=passes > 1),
        }
        result = ExportResult(out=out, trace_id=trace_id, counter_depth=depth)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        try:
            with writing(out):  # a full disk names the file it was writing: exit 2, one line
                with _open(tmp, out.name.endswith(".gz")) as f:
                    f.write(_header(con, trace_id).encode())
                    first = True
                    for kind, query in queries.items():
                        n = 0
                        for rows in _rows(con, query, {k: v for k, v in params.items() if f"${k}" in query}):
                            if rows:
                                f.write((("" if first else ",\n") + ",\n".join(rows)).encode())
                                first, n = False, n + len(rows)
                        result.events[kind] = n
                    f.write(b"\n]}\n")
                os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
        result.skipped = _skipped(con, trace_id)
    finally:
        con.close()
    return result


def _require_timeline(con: duckdb.DuckDBPyConnection, normalized: Path, trace_id: str) -> None:
    """An ncu CSV or layer_shapes.json trace has no timeline: say so rather than write an empty file."""
    tables = ("kernels", "memcpy", "memset", "api_calls", "nvtx_ranges", "ops")
    events = " + ".join(f"(SELECT count(*) FROM {t} WHERE trace_id = $trace)" for t in tables)
    (n, source_format), *_ = con.execute(
        f"SELECT {events}, (SELECT any_value(source_format) FROM trace_meta WHERE trace_id = $trace)",
        {"trace": trace_id},
    ).fetchall()
    if not n:
        raise BadInputError(
            normalized,
            f"trace {trace_id!r} ({source_format}) has no timeline (no kernels, API calls, ranges or ops): "
            "export an nsys or PyTorch profiler trace",
        )


def _skipped(con: duckdb.DuckDBPyConnection, trace_id: str) -> list[str]:
    """Rows the file leaves out because the format has no place for them (said, never dropped silently)."""
    counts = con.execute(
        """SELECT
            (SELECT count(*) FROM nvtx_ranges WHERE trace_id = $trace AND duration_ns IS NULL),
            (SELECT count(*) FROM ops WHERE trace_id = $trace AND duration_ns IS NULL),
            (SELECT count(*) FROM api_calls WHERE trace_id = $trace AND (pid IS NULL OR tid IS NULL))""",
        {"trace": trace_id},
    ).fetchall()[0]
    labels = ("NVTX ranges without an end", "ops without an end", "API calls without a thread")
    return [f"{n} {label}" for n, label in zip(counts, labels, strict=True) if n]
