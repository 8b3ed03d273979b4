"""PyTorch profiler chrome traces (Kineto JSON, ``trace.json`` / ``trace.json.gz``) -> normalized tables.

Three parts: ``chrome_map`` says what events mean (categories and arg names of every profiler version and
vendor, as data), ``chrome_decode`` turns the JSON into one Arrow table per event group, and this module
maps those groups onto our schema: kernels and copies linked to their launching thread, API calls, ops
with their Python call stacks (``nesting.call_stacks``), ranges, devices, and what the trace says about
the tools that wrote it.  Joins, ids and ordering are DuckDB SQL or Arrow over those arrays, never
per-event dicts or pandas.
"""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import duckdb
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import BadInputError
from pipeline.lean import duckdb_connect, jemalloc_pool
from pipeline.normalize.checks import count_in
from pipeline.normalize.chrome_decode import Collected, decode, versions
from pipeline.normalize.chrome_map import (
    CAPTURE_MARK,
    DEVICE_FIELDS,
    DEVICE_KEYS,
    MEMCPY_KINDS,
    MODULE_FRAME_PREFIXES,
    OTHER_WRITERS,
    RANGES_THAT_ARE_OPS,
    RANGES_WRITTEN_AS_OPS,
    RECORD_WITH_KINETO,
)
from pipeline.normalize.nesting import call_stacks, with_nesting
from pipeline.store import TraceWriter

#: One pattern for every name of ``RANGES_WRITTEN_AS_OPS``, and of ``RANGES_THAT_ARE_OPS``.
_RANGE_NAMES = "|".join(f"(?:{pattern})" for pattern in RANGES_WRITTEN_AS_OPS)
_OP_NAMES = "|".join(f"(?:{pattern})" for pattern in RANGES_THAT_ARE_OPS)

# --- kernel short names ------------------------------------------------------------------------------

_OPEN, _CLOSE = "<([{", ">)]}"


def _top_level(name: str) -> list[tuple[int, str]]:
    """(index, char) of the characters outside any bracket pair."""
    depth, out = 0, []
    for i, ch in enumerate(name):
        if ch in _OPEN:
            if depth == 0:
                out.append((i, ch))
            depth += 1
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append((i, ch))
    return out


@lru_cache(maxsize=65536)
def short_name(name: str) -> str:
    """The bare function name of a demangled kernel name, like nsys's ``shortName``.

    ``void at::native::elementwise_kernel<128, 4, ...>(int, ...)`` -> ``elementwise_kernel``: drop the
    argument list, the template arguments, the namespaces/enclosing classes and the return type, all
    counted at bracket depth 0 so that ``(anonymous namespace)`` or templates inside templates do not
    confuse it.  A name without any of these (``sm80_xmma_...``) is its own short name.
    """
    text = name.replace("(anonymous namespace)", "anonymous_namespace").strip()
    top = _top_level(text)
    # The argument list is the last top-level "(...)"; a name may end in " const" after it.
    cut = len(text)
    opens = [i for i, ch in top if ch == "("]
    if opens:
        cut = opens[-1]
    text = text[:cut].rstrip()
    top = [(i, ch) for i, ch in _top_level(text)]
    opens = [i for i, ch in top if ch == "<"]
    if opens and text.endswith(">"):
        text = text[: opens[-1]].rstrip()
    top = _top_level(text)
    chars = "".join(ch for _, ch in top)
    idx = [i for i, _ in top]
    # Namespaces/classes: keep what follows the last top-level "::"; return type: the last top-level space.
    cut = max(chars.rfind("::") + 2 if "::" in chars else 0, chars.rfind(" ") + 1)
    start = idx[cut] if cut < len(idx) else 0
    return text[start:].strip() or name


def _short_names(names: pa.ChunkedArray) -> pa.Array:
    """short_name for every kernel, computed once per distinct name."""
    encoded = pc.dictionary_encode(names).combine_chunks()
    shorts = pa.array([short_name(n) if n is not None else None for n in encoded.dictionary.to_pylist()])
    return shorts.take(encoded.indices)


# --- tables ------------------------------------------------------------------------------------------


def _sql(con: duckdb.DuckDBPyConnection, query: str) -> pa.Table:
    return con.sql(query).to_arrow_table()


def _launches(con: duckdb.DuckDBPyConnection, has_calls: bool) -> str:
    """The launching CPU thread per correlation id (the first call that has it, as in nsys)."""
    if not has_calls:
        return "launches AS (SELECT NULL::BIGINT AS correlation_id, NULL::BIGINT AS pid, NULL::BIGINT AS tid)"
    return (
        "launches AS (SELECT correlation_id, arg_min(pid, start_ns) AS pid, arg_min(tid, start_ns) AS tid "
        "FROM api_calls WHERE correlation_id IS NOT NULL GROUP BY correlation_id)"
    )


def _kernels(con: duckdb.DuckDBPyConnection, kernels: pa.Table, has_calls: bool) -> pa.Table:
    kernels = kernels.append_column("short_name", _short_names(kernels["name"]))
    con.register("k_raw", kernels)
    cols = [c for c in kernels.column_names if c not in ("pid", "tid")]
    return _sql(
        con,
        f"""WITH {_launches(con, has_calls)}
        SELECT row_number() OVER (ORDER BY k.start_ns, k.correlation_id) - 1 AS kernel_id,
               {", ".join(f"k.{c}" for c in cols)}, l.pid, l.tid
        FROM k_raw k LEFT JOIN launches l USING (correlation_id)
        ORDER BY k.start_ns, k.correlation_id""",
    )


def _copies(con: duckdb.DuckDBPyConnection, raw: pa.Table, table: str, has_calls: bool) -> pa.Table:
    """memcpy/memset rows; the kind columns come from Kineto's names ``Memcpy HtoD (Pageable -> Device)``."""
    con.register("c_raw", raw)
    id_col = "copy_id" if table == "memcpy" else "set_id"
    if table == "memcpy":
        kinds = ", ".join(f"('{k}', '{v}')" for k, v in MEMCPY_KINDS.items())
        extra = f"""
               (SELECT label FROM (VALUES {kinds}) m(code, label)
                WHERE code = regexp_extract(c.name, '^Memcpy (\\w+)', 1)) AS kind,
               nullif(regexp_extract(c.name, '\\((.+) -> ', 1), '') AS src_kind,
               nullif(regexp_extract(c.name, ' -> (.+)\\)$', 1), '') AS dst_kind"""
    else:
        extra = "nullif(regexp_extract(c.name, '^Memset \\((.+)\\)$', 1), '') AS mem_kind"
    return _sql(
        con,
        f"""WITH {_launches(con, has_calls)}
        SELECT row_number() OVER (ORDER BY c.start_ns, c.correlation_id) - 1 AS {id_col},
               c.device_id, c.context_id, c.stream_id, c.correlation_id, c.external_id,
               c.start_ns, c.end_ns, c.duration_ns, c.bytes, {extra}, l.pid
        FROM c_raw c LEFT JOIN launches l USING (correlation_id)
        ORDER BY c.start_ns, c.correlation_id""",
    )


def _api_calls(runtime: pa.Table | None, driver: pa.Table | None) -> pa.Table | None:
    parts = [
        t.append_column("kind", pa.repeat(pa.scalar(kind), t.num_rows))
        for t, kind in ((runtime, "runtime"), (driver, "driver"))
        if t is not None
    ]
    if not parts:
        return None
    calls = pa.concat_tables(parts).sort_by([("start_ns", "ascending"), ("correlation_id", "ascending")])
    return calls.append_column("call_id", pa.array(np.arange(calls.num_rows, dtype=np.int64)))


def _ops(ops: pa.Table, py: pa.Table | None) -> pa.Table:
    ops = ops.sort_by([("start_ns", "ascending"), ("end_ns", "descending"), ("external_id", "ascending")])
    ops = ops.append_column("op_id", pa.array(np.arange(ops.num_rows, dtype=np.int64)))
    if py is not None and py.num_rows:
        ops = ops.append_column("call_stack", call_stacks(ops, py))
    return ops


def _starts_with_any(values: pa.Array, prefixes: tuple[str, ...]) -> pa.Array:
    hits = [pc.starts_with(values, prefix) for prefix in prefixes]
    return hits[0] if len(hits) == 1 else pc.or_(hits[0], _starts_with_any(values, prefixes[1:]))


def _module_frames(frames: pa.Table | None) -> pa.Table | None:
    """The Python frames of ``nn.Module`` calls (``MODULE_FRAME_PREFIXES``), named ``<Class>_<n>`` without the
    prefix; None when the trace has none (recorded without ``with_stack``).  Names are tested once per distinct
    name: ``python_function`` names stay dictionary-encoded (one dictionary), and most frames are no module."""
    if frames is None or not frames.num_rows:
        return None
    chunks = frames["name"].chunks
    if pa.types.is_dictionary(frames.schema.field("name").type):
        mask = pa.chunked_array(
            [_starts_with_any(c.dictionary, MODULE_FRAME_PREFIXES).take(c.indices) for c in chunks], pa.bool_()
        )
    else:
        mask = pa.chunked_array([_starts_with_any(c, MODULE_FRAME_PREFIXES) for c in chunks], pa.bool_())
    if not pc.any(mask).as_py():
        return None
    modules = frames.filter(mask)
    text = pc.cast(modules["name"], pa.string())
    for prefix in MODULE_FRAME_PREFIXES:
        text = pc.replace_substring_regex(text, f"^{re.escape(prefix)}", "")
    return modules.select(["pid", "tid", "start_ns", "end_ns", "duration_ns"]).append_column("name", text)


def _ranges_as_ops(user: pa.Table | None, ops: pa.Table | None) -> tuple[pa.Table | None, pa.Table | None]:
    """``user`` (the ``user_annotation`` ranges) without the markers of ``RANGES_THAT_ARE_OPS``, and ``ops`` with
    them (as ops with no sequence number)."""
    if user is None:
        return user, ops
    is_op = pc.match_substring_regex(user["name"], _OP_NAMES)
    if not pc.any(is_op).as_py():
        return user, ops
    moved = user.filter(is_op).select(["name", "pid", "tid", "start_ns", "duration_ns", "end_ns"])
    moved = moved.append_column("external_id", pa.nulls(moved.num_rows, pa.int64()))
    rest = user.filter(pc.invert(is_op))
    ops = moved if ops is None else pa.concat_tables([ops, moved], promote_options="default")
    return (rest if rest.num_rows else None), ops


def _ranges(user: pa.Table | None, gpu: pa.Table | None, frames: pa.Table | None = None) -> pa.Table | None:
    parts = []
    for table, source in ((user, "user_annotation"), (frames, "nn.Module")):
        if table is None:
            continue
        n = table.num_rows
        parts.append(
            table.select(["name", "pid", "tid", "start_ns", "end_ns", "duration_ns"])
            .append_column("kind", pa.repeat(pa.scalar("push_pop"), n))
            .append_column("source", pa.repeat(pa.scalar(source), n))
            .append_column("end_tid", table["tid"])
        )
    if gpu is not None:
        # GPU-side copies of record_function ranges live on a device/stream, not a CPU thread: pid/tid hold
        # device and stream (as the trace itself does), and they do not nest by thread.
        n = gpu.num_rows
        parts.append(
            gpu.select(["name", "start_ns", "end_ns", "duration_ns"])
            .append_column("pid", pc.coalesce(gpu["device_id"], gpu["pid"]))
            .append_column("tid", pc.coalesce(gpu["stream_id"], gpu["tid"]))
            .append_column("kind", pa.repeat(pa.scalar("gpu"), n))
            .append_column("source", pa.repeat(pa.scalar("gpu_user_annotation"), n))
            .append_column("end_tid", pc.coalesce(gpu["stream_id"], gpu["tid"]))
        )
    if not parts:
        return None
    ranges = pa.concat_tables(parts, promote_options="default").rename_columns(
        ["text" if c == "name" else c for c in parts[0].column_names]
    )
    # A stable sort: ranges with the same start and end keep file order, the first one the outer (docs/schema.md).
    ranges = ranges.sort_by([("start_ns", "ascending"), ("end_ns", "descending")])
    ranges = ranges.append_column("range_id", pa.array(np.arange(ranges.num_rows, dtype=np.int64)))
    return with_nesting(ranges)


def _device_row(d: msgspec.Struct) -> dict[str, object]:
    """One ``devices`` row: each column from the first of its keys (``DEVICE_FIELDS``) the object has."""
    row = {
        column: next((v for v in (getattr(d, key) for key in keys) if v is not None), None)
        for column, keys in DEVICE_FIELDS.items()
    }
    threads, warp = row["max_threads_per_sm"], row["warp_size"]
    row["max_warps_per_sm"] = threads // warp if threads is not None and warp else None
    # max_blocks_per_sm: the trace does not record it; left null rather than guessed.
    return row


def _devices(trace: msgspec.Struct) -> pa.Table | None:
    found = next((devices for devices in (getattr(trace, key) for key in DEVICE_KEYS) if devices), None)
    return None if found is None else pa.Table.from_pylist([_device_row(d) for d in found])


def _labels_as_ranges(ops: pa.Table | None, user: pa.Table | None) -> tuple[pa.Table | None, pa.Table | None]:
    """``ops`` without the ranges PyTorch 1.8-1.10 wrote as ops (``RANGES_WRITTEN_AS_OPS``), and ``user`` (the
    ``user_annotation`` ranges) with them."""
    if ops is None:
        return ops, user
    is_range = pc.match_substring_regex(ops["name"], _RANGE_NAMES)
    if not pc.any(is_range).as_py():
        return ops, user
    moved = ops.filter(is_range).select(["name", "pid", "tid", "start_ns", "duration_ns", "end_ns"])
    rest = ops.filter(pc.invert(is_range))
    return rest if rest.num_rows else None, moved if user is None else pa.concat_tables([user, moved])


def _meta(trace: msgspec.Struct) -> dict[str, object]:
    """source_version names the trace schema and every tool version the trace records (CUDA or ROCm)."""
    parts = [f"chrome trace schema {trace.schemaVersion}" if trace.schemaVersion is not None else "chrome trace"]
    parts += [f"{label} {value}" for label, value in versions(trace).items()]
    meta: dict[str, object] = {
        "source_format": "chrome-trace",
        "source_version": "; ".join(parts),
        "epoch_offset_ns": trace.baseTimeNanoseconds,
    }
    if trace.distributedInfo is not None and trace.distributedInfo.rank is not None:
        meta["rank"] = trace.distributedInfo.rank
    return meta


#: At most this many names in a warning's or an error's counts (the rest summed): a trace of one-off event names
#: (a real one had 1,442) would make a 2 KB line.
COUNTS_SHOWN = 10


def _counts(counter: dict[str, int]) -> str:
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{name} {n}" for name, n in ranked[:COUNTS_SHOWN])
    rest = ranked[COUNTS_SHOWN:]
    return shown + (f" and {len(rest)} more ({sum(n for _, n in rest)} events)" if rest else "")


def _decode_warnings(got: Collected) -> list[str]:
    """What the decode left out or changed, each said once with counts (never dropped silently)."""
    out = [f"skipped {n} {group} events without ts or dur" for group, n in sorted(got.skipped.items()) if n]
    if got.unmodelled:
        out.append(f"events of categories not modelled, ignored: {_counts(got.unmodelled)}")
    if got.not_complete:
        out.append(f"events not complete (ph other than X), ignored: {_counts(got.not_complete)}")
    if got.labels:
        named = ", ".join(f"{label!r} = {i}" for i, label in sorted(got.labels.items(), key=lambda kv: kv[1]))
        out.append(f"thread/process ids given as text kept as stable numbers: {named}")
    return out


def _no_kernels_warning(tables: dict[str, pa.Table | None], unmodelled: dict[str, int], skipped: int) -> str:
    """Why a trace may have no kernel events: those it has were skipped, its GPU work is copies only, its device is
    one not modelled (MTIA writes categories of its own), its profiler recorded the CUDA/HIP calls but not the GPU's
    activity (a CUPTI range-profiler session; real traces of scripts that asked for CUDA activity, and any profile
    without it), or it profiled the CPU only."""
    calls = sum(t.num_rows for g in ("cuda_runtime", "cuda_driver") if (t := tables.get(g)) is not None)
    copies = {g: t.num_rows for g in ("gpu_memcpy", "gpu_memset") if (t := tables.get(g)) is not None and t.num_rows}
    if skipped:
        why = f"its {skipped} kernel events lack ts or dur, said above"
    elif copies:  # GPU activity was recorded: the work is copies (real traces of peer-to-peer copies)
        what = " and ".join(f"{n} {g.removeprefix('gpu_')}" for g, n in copies.items())
        why = f"its GPU work is {what} only, attributed like kernels; no kernel to place on the SMs"
    elif unmodelled:
        why = "its device events are of the categories not modelled, said above"
    elif calls:
        # PyTorch's profiler writes the CUDA/HIP calls with ProfilerActivity.CPU alone (kineto_shim's kCpuTypes hold
        # CUDA_RUNTIME and CUDA_DRIVER), so the calls do not say CUDA was on; real traces of scripts that asked for
        # it have them without GPU work too: both causes are named.
        why = (
            f"it has {calls} CUDA/HIP API calls but no GPU activity: record with ProfilerActivity.CUDA (with "
            "ProfilerActivity.CPU alone the profiler writes the calls, not the GPU work); where it was on, its GPU "
            "records were lost or never made (a CUPTI range-profiler session makes none)"
        )
    else:
        why = "CPU-only profile, or CUDA activity not recorded"
    return f"no GPU kernel events in the trace ({why})"


def _without_duplicates(table: pa.Table, db: duckdb.DuckDBPyConnection) -> tuple[pa.Table, int]:
    """``table`` without events that appear more than once with every field equal (first kept), and how
    many were dropped.  A cheap check first: when a hash of the integer fields has no repeat, no two rows
    can be equal; only a table with repeats there pays for the exact comparison of every column."""
    digest = np.zeros(table.num_rows, np.uint64)
    for field in table.schema:
        if pa.types.is_integer(field.type):
            values = pc.fill_null(table[field.name], -1).to_numpy().astype(np.uint64)
            digest = (digest * np.uint64(0x100000001B3)) ^ values
    if len(pc.unique(pa.array(digest))) == table.num_rows:
        return table, 0
    with db.cursor() as con:
        con.register("t", table.append_column("_row", pa.array(np.arange(table.num_rows, dtype=np.int64))))
        cols = ", ".join(f'"{c}"' for c in table.column_names)
        kept = con.sql(
            f"SELECT {cols} FROM t QUALIFY row_number() OVER (PARTITION BY {cols} ORDER BY _row) = 1 ORDER BY _row"
        ).to_arrow_table()
    return kept.cast(table.schema), table.num_rows - kept.num_rows


def _write_tables(
    con: duckdb.DuckDBPyConnection, tables: dict[str, pa.Table | None], writer: TraceWriter, ops: Future | None
) -> None:
    calls = _api_calls(tables["cuda_runtime"], tables["cuda_driver"])
    if calls is not None:
        con.register("api_calls", calls)
        writer.write("api_calls", calls)
    if tables["kernel"] is not None:
        kernels = _kernels(con, tables["kernel"], calls is not None)
        con.register("kernels", kernels)  # for the output checks (count_in below)
        writer.write("kernels", kernels)
    for cat, table in (("gpu_memcpy", "memcpy"), ("gpu_memset", "memset")):
        if tables[cat] is not None:
            writer.write(table, _copies(con, tables[cat], table, calls is not None))
    if ops is not None:
        writer.write("ops", ops.result())


def normalize_chrome(path: Path, writer: TraceWriter) -> dict[str, object]:
    with jemalloc_pool():
        return _normalize_chrome(Path(path), writer)


def _normalize_chrome(path: Path, writer: TraceWriter) -> dict[str, object]:
    trace, got = decode(path, sha256=True)
    if got.events == 0:
        raise BadInputError(path, "traceEvents is empty: the profiler recorded no events")

    tables = {group: got.table(group) for group in got.parts}
    tables["cpu_op"], tables["user_annotation"] = _labels_as_ranges(tables["cpu_op"], tables["user_annotation"])
    tables["user_annotation"], tables["cpu_op"] = _ranges_as_ops(tables["user_annotation"], tables["cpu_op"])
    if all(tables[g] is None for g in ("kernel", "cpu_op", "cuda_runtime", "cuda_driver", "user_annotation")):
        writer_of = next((OTHER_WRITERS[c] for c in got.unmodelled if c in OTHER_WRITERS), None)
        raise BadInputError(
            path,
            f"no profiler activity in traceEvents ({got.events} events, none a kernel, cpu_op or CUDA API call"
            + (f"; categories: {_counts(got.unmodelled)}" if got.unmodelled else "")
            + "): "
            + (f"written by {writer_of}" if writer_of else RECORD_WITH_KINETO),
        )
    warnings = _decode_warnings(got)
    # One database for every query of this trace (a database costs ~20 ms of CPU to open and close), one
    # thread (the ops thread and this one already use two cores).
    con = duckdb_connect({"threads": "1"})
    try:
        dropped = {}
        for group, table in tables.items():
            if table is not None and group != "python_function":
                tables[group], dropped[group] = _without_duplicates(table, con)
        if any(dropped.values()):
            warnings.append(f"exact duplicate events counted once: {_counts({g: n for g, n in dropped.items() if n})}")
        if tables["kernel"] is None:
            warnings.append(_no_kernels_warning(tables, got.unmodelled, got.skipped.get("kernel", 0)))
        # Ops and their call stacks (a sort and numpy/Arrow passes, which release the GIL) are built in a
        # thread while this one does the other tables and their Parquet writes: on 2 cores they overlap.
        with ThreadPoolExecutor(1, thread_name_prefix="chrome-ops") as pool:
            ops = None
            if tables["cpu_op"] is not None:
                ops = pool.submit(_ops, tables["cpu_op"], tables["python_function"])
            _write_tables(con, tables, writer, ops)
        # A trace of tracepipe capture names its layers by qualified name: module frames would repeat each level.
        frames = None if getattr(trace, CAPTURE_MARK) else _module_frames(tables["python_function"])
        ranges = _ranges(tables["user_annotation"], tables["gpu_user_annotation"], frames)
        if ranges is not None:
            con.register("nvtx_ranges", ranges)
        # normalize's output checks, counted here over the tables in memory (the same SQL): no database
        # opened again to read the staged files back (checks.staged_warnings).
        written = {**writer.rows, "nvtx_ranges": 0 if ranges is None else ranges.num_rows}
        writer.counted.update(count_in(con, written))
    finally:
        con.close()
    if ranges is not None:
        writer.write("nvtx_ranges", ranges)
    devices = _devices(trace)
    if devices is not None:
        writer.write("devices", devices)
    return {**_meta(trace), "warnings": warnings, "source_sha256": got.sha256}
