"""The normalized schema: the one contract between normalizers and analysis.

Every normalizer writes these tables and nothing else; every SQL view reads them.
Units live in column names (``*_ns`` integer nanoseconds, ``*_bytes``, ``*_hz``...).
Times are on the trace's own clock; ``trace_meta.epoch_offset_ns`` turns them
into UTC epoch nanoseconds.  ``docs/schema.md`` documents each column and
``tests/test_schema.py`` keeps the two in step.
"""

from __future__ import annotations

import pyarrow as pa

#: Minor: columns added (older outputs read with nulls there, and are re-normalized by incremental runs);
#: major: a column changed meaning or type (readers refuse a newer major).
SCHEMA_VERSION = "1.3"

_TRACE = pa.field("trace_id", pa.string(), nullable=False)


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([_TRACE, *(pa.field(n, t) for n, t in fields)])


i32, i64, f64, s = pa.int32(), pa.int64(), pa.float64(), pa.string()

KERNELS = _schema(
    ("kernel_id", i64),
    ("device_id", i32),
    ("context_id", i64),
    ("stream_id", i64),
    ("correlation_id", i64),
    ("external_id", i64),
    ("start_ns", i64),
    ("end_ns", i64),
    ("duration_ns", i64),
    ("name", s),
    ("short_name", s),
    ("grid_x", i32),
    ("grid_y", i32),
    ("grid_z", i32),
    ("block_x", i32),
    ("block_y", i32),
    ("block_z", i32),
    ("registers_per_thread", i32),
    ("static_smem_bytes", i64),
    ("dynamic_smem_bytes", i64),
    ("local_mem_per_thread_bytes", i64),
    ("launch_type", s),
    ("graph_id", i64),
    ("graph_node_id", i64),
    ("pid", i64),
    ("tid", i64),
    ("profiler_blocks_per_sm", f64),
    ("profiler_warps_per_sm", f64),
    ("profiler_est_achieved_occupancy_pct", f64),
)

API_CALLS = _schema(
    ("call_id", i64),
    ("kind", s),
    ("name", s),
    ("start_ns", i64),
    ("end_ns", i64),
    ("duration_ns", i64),
    ("correlation_id", i64),
    ("external_id", i64),
    ("return_value", i64),
    ("pid", i64),
    ("tid", i64),
)

NVTX_RANGES = _schema(
    ("range_id", i64),
    ("kind", s),
    ("source", s),
    ("domain", s),
    ("text", s),
    ("category", i64),
    ("color", i64),
    ("start_ns", i64),
    ("end_ns", i64),
    ("duration_ns", i64),
    ("pid", i64),
    ("tid", i64),
    ("end_tid", i64),
    ("depth", i32),
    ("parent_id", i64),
)

NVTX_MARKS = _schema(
    ("mark_id", i64),
    ("domain", s),
    ("text", s),
    ("ts_ns", i64),
    ("pid", i64),
    ("tid", i64),
)

OPS = _schema(
    ("op_id", i64),
    ("name", s),
    ("start_ns", i64),
    ("end_ns", i64),
    ("duration_ns", i64),
    ("pid", i64),
    ("tid", i64),
    ("external_id", i64),
    ("sequence_number", i64),
    ("fwd_thread_id", i64),
    ("input_dims", s),
    ("input_types", s),
    ("call_stack", s),
)

MEMCPY = _schema(
    ("copy_id", i64),
    ("device_id", i32),
    ("context_id", i64),
    ("stream_id", i64),
    ("correlation_id", i64),
    ("external_id", i64),
    ("start_ns", i64),
    ("end_ns", i64),
    ("duration_ns", i64),
    ("bytes", i64),
    ("kind", s),
    ("src_kind", s),
    ("dst_kind", s),
    ("pid", i64),
    ("graph_node_id", i64),
)

MEMSET = _schema(
    ("set_id", i64),
    ("device_id", i32),
    ("context_id", i64),
    ("stream_id", i64),
    ("correlation_id", i64),
    ("external_id", i64),
    ("start_ns", i64),
    ("end_ns", i64),
    ("duration_ns", i64),
    ("bytes", i64),
    ("value", i64),
    ("mem_kind", s),
    ("pid", i64),
    ("graph_node_id", i64),
)

DEVICES = _schema(
    ("device_id", i32),
    ("name", s),
    ("compute_major", i32),
    ("compute_minor", i32),
    ("sm_count", i32),
    ("warp_size", i32),
    ("max_threads_per_sm", i32),
    ("max_warps_per_sm", i32),
    ("max_blocks_per_sm", i32),
    ("max_registers_per_sm", i32),
    ("max_registers_per_block", i32),
    ("max_shared_mem_per_sm_bytes", i64),
    ("max_shared_mem_per_block_bytes", i64),
    ("max_shared_mem_per_block_optin_bytes", i64),
    ("max_threads_per_block", i32),
    ("l2_cache_bytes", i64),
    ("clock_hz", i64),
    ("memory_bandwidth_bytes_per_s", i64),
    ("total_memory_bytes", i64),
)

TRACE_META = _schema(
    ("source_path", s),
    ("source_sha256", s),
    ("source_bytes", i64),
    ("source_mtime_ns", i64),
    ("source_format", s),
    ("source_version", s),
    ("schema_version", s),
    ("capture_time_utc", s),
    ("epoch_offset_ns", i64),
    ("host", s),
    ("rank", i32),
    ("local_rank", i32),
    ("device_id", i32),
    ("normalized_at_utc", s),
    ("warnings", s),
)

NCU_KERNELS = _schema(
    ("launch_id", i64),
    ("pid", i64),
    ("process_name", s),
    ("host", s),
    ("name", s),
    ("context_id", i64),
    ("stream_id", i64),
    ("device_id", i32),
    ("compute_capability", s),
    ("grid_x", i32),
    ("grid_y", i32),
    ("grid_z", i32),
    ("block_x", i32),
    ("block_y", i32),
    ("block_z", i32),
    ("nvtx_push_pop", s),
    ("nvtx_start_end", s),
)

NCU_METRICS = _schema(
    ("launch_id", i64),
    ("section", s),
    ("metric", s),
    ("unit", s),
    ("value", f64),
    ("raw_value", s),
    ("raw_unit", s),
    ("rule", s),
    ("rule_type", s),
    ("rule_description", s),
)

#: CUDA graph nodes as they were made (nsys CUDA_GRAPH_NODE_EVENTS): a stream-captured node is made inside the
#: launch call that would have run it, so its time and thread say which layer range it belongs to.
GRAPH_NODES = _schema(
    ("graph_node_id", i64),
    ("graph_id", i64),
    ("original_graph_node_id", i64),
    ("created_ns", i64),
    ("pid", i64),
    ("tid", i64),
)

#: Whole-graph executions recorded without their kernels (nsys --cuda-graph-trace=graph).
GRAPH_LAUNCHES = _schema(
    ("launch_id", i64),
    ("device_id", i32),
    ("context_id", i64),
    ("stream_id", i64),
    ("correlation_id", i64),
    ("start_ns", i64),
    ("end_ns", i64),
    ("duration_ns", i64),
    ("graph_id", i64),
    ("graph_exec_id", i64),
    ("pid", i64),
)

#: Named CPU threads (nsys ``ThreadNames``): autograd's engine runs backward on threads named ``pt_autograd_N``.
THREADS = _schema(
    ("pid", i64),
    ("tid", i64),
    ("name", s),
)

#: One row per module call of one forward pass, from the capture's ``layer_shapes.json``:
#: shapes and analytic MACs beside each range, keyed by the range text (``layer``) and call index.
LAYER_SHAPES = _schema(
    ("capture_id", s),
    ("layer", s),
    ("call_index", i32),
    ("call_seq", i32),
    ("depth", i32),
    ("parent", s),
    ("parent_call_index", i32),
    ("module_type", s),
    ("input_shapes", s),
    ("input_dtypes", s),
    ("output_shapes", s),
    ("output_dtypes", s),
    ("macs", i64),
    ("macs_inclusive", i64),
    ("macs_complete", pa.bool_()),
    ("params", i64),
    ("root_name", s),
)

#: One row per launch of each graph Inductor compiled, from the capture's ``compiled_kernels.json``: the modules the
#: launch computes.  A trace names the graph by its FX graph cache key (``## Call CompiledFxGraph <key> ##``).
COMPILED_KERNELS = _schema(
    ("capture_id", s),
    ("graph_key", s),
    ("compile_id", s),
    ("graph", s),
    ("launch_index", i32),
    ("launch_kind", s),
    ("launch_name", s),
    ("occurrence", i32),
    ("handle", s),
    ("module", s),
    ("module_chain", s),
    ("modules", s),
    ("nodes", i32),
    ("original_aten", s),
    ("root_name", s),
)

#: Every table a normalizer may write, by name.  A trace writes the tables its
#: source has; analysis treats an absent table as empty.
TABLES: dict[str, pa.Schema] = {
    "kernels": KERNELS,
    "api_calls": API_CALLS,
    "nvtx_ranges": NVTX_RANGES,
    "nvtx_marks": NVTX_MARKS,
    "ops": OPS,
    "memcpy": MEMCPY,
    "memset": MEMSET,
    "devices": DEVICES,
    "trace_meta": TRACE_META,
    "ncu_kernels": NCU_KERNELS,
    "ncu_metrics": NCU_METRICS,
    "layer_shapes": LAYER_SHAPES,
    "graph_nodes": GRAPH_NODES,
    "graph_launches": GRAPH_LAUNCHES,
    "threads": THREADS,
    "compiled_kernels": COMPILED_KERNELS,
}

#: One line per table for ``--help``, the shell's ``.tables`` and the Python API; the same words head each
#: table's section of docs/schema.md (tests/test_schema.py keeps them equal).
DESCRIPTIONS: dict[str, str] = {
    "kernels": "one row per GPU kernel execution",
    "api_calls": "CUDA runtime and driver API calls",
    "nvtx_ranges": "NVTX push/pop and start/end ranges, and PyTorch `record_function` ranges",
    "nvtx_marks": "instantaneous NVTX marks",
    "ops": "PyTorch CPU operators (chrome trace `cpu_op`; nsys: `emit_nvtx` op ranges)",
    "memcpy": "GPU copies",
    "memset": "GPU memsets",
    "devices": "GPU properties and per-SM limits (as the trace recorded them)",
    "trace_meta": "one row per trace: where it came from",
    "ncu_kernels": "one row per kernel launch profiled by Nsight Compute",
    "ncu_metrics": "every metric of every launch, long format, in base units",
    "layer_shapes": "one row per module call of one forward pass (`layer_shapes.json` of `tracepipe capture`)",
    "graph_nodes": "CUDA graph nodes as nsys saw them made (`CUDA_GRAPH_NODE_EVENTS`)",
    "graph_launches": "whole-graph executions recorded without their kernels (`CUPTI_ACTIVITY_KIND_GRAPH_TRACE`)",
    "threads": "named CPU threads (nsys `ThreadNames`)",
    "compiled_kernels": "per launch of a torch.compile'd graph, the modules it computes (`compiled_kernels.json`)",
}


def conform(table: pa.Table, name: str, trace_id: str) -> pa.Table:
    """Return ``table`` with exactly the columns of schema ``name``, in order.

    Columns a source lacks become nulls; ``trace_id`` is filled in; extra
    columns are an error because they mean a normalizer and the contract
    disagree.
    """
    schema = TABLES[name]
    extra = set(table.column_names) - set(schema.names)
    if extra:
        raise ValueError(f"table {name!r} has columns outside the schema: {sorted(extra)}")
    columns = []
    for field in schema:
        if field.name == "trace_id":
            columns.append(pa.repeat(pa.scalar(trace_id, pa.string()), table.num_rows))
        elif field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


_DUCKDB_TYPES = {"int32": "INTEGER", "int64": "BIGINT", "double": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN"}


def select_list(name: str, have: set[str]) -> str:
    """A DuckDB SELECT list giving table ``name`` exactly its schema's columns and types: columns the
    data lacks (an older minor version, a generator that skips some) come out as typed NULLs."""
    return ", ".join(
        f"CAST({f.name if f.name in have else 'NULL'} AS {_DUCKDB_TYPES[str(f.type)]}) AS {f.name}"
        for f in TABLES[name]
    )


def major(version: str) -> int:
    return int(str(version).split(".", 1)[0])
