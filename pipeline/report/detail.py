"""Per-layer detail of a trace's section (issue 20.2/20.3), each block from one view of sql/:

- kernels per layer: duration statistics (median, sample stddev) and how each launch fills the GPU (waves, tail,
  estimated occupancy beside ncu's measured achieved occupancy): ``layer_kernel_summary``
- kernels by name, the numbers of ``nsys stats --report cuda_gpu_kern_sum``: ``kernel_name_summary``
- GPU time by pass (forward / backward / optimizer): ``layer_summary``'s pass columns
- GPU idle and launch-gap time per step (HTA's temporal breakdown): ``step_gpu_idle``
- memory operations per layer: ``layer_memory_ops``
- ncu's measured per-SM spread beside the modelled heatmap: ``layer_sm_spread``

Each function returns HTML (a table, or a note saying why there is none); polars only filters and sorts here.
"""

from __future__ import annotations

import html as _html
import re

import polars as pl

from pipeline.report.data import Views
from pipeline.report.html import Col, block, integer, kpis, note, pct, si, table, us
from pipeline.report.html import name as cut_name

MAX_NAME_ROWS = 10  # kernels by name: the top ones by time (the Parquet has all)
OUTSIDE = "(outside ranges)"


def _f2(x: object) -> str:
    return "" if x is None else f"{float(x):.2f}"


def nbytes(x: object) -> str:
    if x is None:
        return ""
    s = si(x)
    return f"{s}B" if s[-1].isalpha() else f"{s} B"


def capture_of(trace_id: str) -> str:
    """The capture a trace belongs to: its id without the last '.'-part (layer_macs' and the views' rule)."""
    return re.sub(r"\.[^.]*$", "", trace_id)


def _rows(v: Views, section: str, col: str, value: str) -> pl.DataFrame | None:
    df = v.optional.get(section)
    return None if df is None else df.filter(pl.col(col) == value)


KERNEL_TIME_COLS = [
    Col("path", "path"),
    Col("short_name", "kernel", cut_name),
    Col("grid", "grid"),
    Col("block", "block"),
    Col("launches", "launches", integer, True),
    Col("gpu_time_ns", "GPU time µs", us, True),
    Col("share_pct", "share %", pct, True),
    Col("mean_ns", "mean µs", us, True),
    Col("med_ns", "median µs", us, True),
    Col("min_ns", "min µs", us, True),
    Col("max_ns", "max µs", us, True),
    Col("stddev_ns", "stddev µs", us, True),
]

KERNEL_FILL_COLS = [
    Col("path", "path"),
    Col("short_name", "kernel", cut_name),
    Col("grid", "grid"),
    Col("block", "block"),
    Col("regs", "regs/thread", integer, True),
    Col("theoretical_occupancy_pct", "occupancy % (theor., est.)", pct, True),
    Col("est_achieved_occupancy_pct", "achieved % (est.)", pct, True),
    Col("ncu_achieved_occupancy_pct", "achieved % (ncu, measured)", pct, True),
    Col("limiter", "limiter"),
    Col("waves_per_sm", "waves/SM", _f2, True),
    Col("waves", "waves", integer, True),
    Col("tail_fill_pct", "last-wave fill %", pct, True),
]


def kernel_stats(v: Views, trace: str) -> str | None:
    """The two per-layer kernel tables, or None when layer_kernel_summary is not in the folder (the caller
    then draws its older one-table form)."""
    df = _rows(v, "kernel_stats", "trace_id", trace)
    if df is None:
        return None
    df = df.with_columns(pl.col("path").fill_null(OUTSIDE))
    # layers by time, kernels by time within a layer (the view's order; polars keeps it stable)
    order = df.group_by("path").agg(pl.col("gpu_time_ns").sum().alias("_p"))
    df = df.join(order, on="path").sort(["_p", "path", "gpu_time_ns"], descending=[True, False, True]).drop("_p")
    ncu = int(df["ncu_launches"].sum() or 0) if "ncu_launches" in df.columns else 0
    fill_note = (
        "Estimated: occupancy-calculator occupancy from the launch and the device limits (kernel_occupancy); "
        "achieved (est.) caps it by the blocks a launch has per SM; waves = blocks / (SMs × resident blocks per SM), "
        "last-wave fill = the last wave's blocks / (SMs × resident), mean over launches (kernel_waves). "
        + (
            f"Measured: ncu's achieved occupancy (sm__warps_active) of the launch ncu_kernel_match pairs with the "
            f"kernel in this capture's ncu run, mean over the {ncu} launch(es) it matched; blank where none matched."
            if ncu
            else "No ncu run of this capture matched these kernels: the measured column is blank."
        )
    )
    return block(
        "Kernels per layer: time",
        table(df, KERNEL_TIME_COLS, group="path", what="kernels"),
        note(
            "Median and stddev per layer, kernel and launch shape; stddev is the sample standard deviation "
            "(n − 1, as nsys), blank for one launch."
        ),
    ) + block(
        "Kernels per layer: how each fills the GPU",
        table(df, KERNEL_FILL_COLS, group="path", what="kernels"),
        note(fill_note),
    )


NAME_COLS = [
    Col("time_pct", "Time %", pct, True),
    Col("total_ns", "Total µs", us, True),
    Col("instances", "Instances", integer, True),
    Col("avg_ns", "Avg µs", us, True),
    Col("med_ns", "Med µs", us, True),
    Col("min_ns", "Min µs", us, True),
    Col("max_ns", "Max µs", us, True),
    Col("stddev_ns", "StdDev µs", us, True),
    Col("short_name", "Name", lambda x: cut_name(x, 70)),
]


def kernel_names(v: Views, trace: str) -> str:
    df = _rows(v, "kernel_names", "trace_id", trace)
    if df is None:
        return block("Kernels by name", missing=v.unavailable.get("kernel_names", "not available"))
    if "short_name" not in df.columns:
        df = df.with_columns(pl.col("name").alias("short_name"))
    df = df.sort(["total_ns", "name"], descending=[True, False])
    return block(
        "Kernels by name (as nsys cuda_gpu_kern_sum)",
        table(df, NAME_COLS, max_rows=MAX_NAME_ROWS),
        note(
            "One row per demangled name, as `nsys stats --report cuda_gpu_kern_sum` groups (the Name column shows "
            "the short name; the cell's tooltip the full one). Med: median (mean of the middle two for an even "
            "count); StdDev: sample standard deviation (n − 1), blank for one instance."
        ),
    )


def pass_split(by_path: pl.DataFrame) -> tuple[bool, str]:
    """(training?, HTML): GPU time per pass over the whole trace; inference traces get one line instead."""
    cols = ["forward_gpu_time_ns", "backward_gpu_time_ns", "optimizer_gpu_time_ns"]
    if not all(c in by_path.columns for c in cols):
        return False, ""
    fwd, bwd, opt = (int(by_path[c].sum() or 0) for c in cols)
    total = int(by_path["gpu_time_ns"].sum() or 0)
    if bwd == 0 and opt == 0:
        return False, note(
            "Every kernel launched inside a layer range ran in the forward pass (no backward or optimizer kernels)."
        )
    # no pass: launched outside every range, neither backward nor optimizer (older folders: the rest of the time)
    none = int(by_path["no_pass_gpu_time_ns"].sum() or 0) if "no_pass_gpu_time_ns" in by_path.columns else None
    parts = [("forward", fwd), ("backward", bwd), ("optimizer", opt),
             ("outside every range, no pass", total - fwd - bwd - opt if none is None else none)]  # fmt: skip
    return True, block(
        "GPU time by pass",
        kpis((f"{name} ({100 * n / max(total, 1):.1f}%)", f"{n / 1e3:,.1f} µs") for name, n in parts),
        note(
            "Per layer in the table below: backward kernels count for the forward layer with the same autograd "
            "sequence number, optimizer kernels for the optimizer range (sql/launch_point_layers.sql)."
        ),
    )


STEP_COLS = [
    Col("step", "step", integer, True),
    Col("step_name", "range"),
    Col("device_id", "device", integer, True),
    Col("wall_ns", "wall µs", us, True),
    Col("busy_ns", "GPU busy µs", us, True),
    Col("idle_ns", "GPU idle µs", us, True),
    Col("idle_pct", "idle %", pct, True),
    Col("launch_gap_ns", "launch gaps µs", us, True),
    Col("launch_gaps", "launch gaps", integer, True),
    Col("host_wait_ns", "host wait µs", us, True),
    Col("host_waits", "host waits", integer, True),
    Col("kernels", "kernels", integer, True),
    Col("kernel_ns", "kernel µs", us, True),
    Col("memop_ns", "memcpy/set µs", us, True),
]


def steps(v: Views, trace: str) -> str:
    df = _rows(v, "steps", "trace_id", trace)
    head = "GPU idle and launch gaps per step"
    if df is None:
        return block(head, missing=v.unavailable.get("steps", "not available"))
    if df.height == 0:
        return block(head, missing="not available (no GPU operations in this trace)")
    whole = df["step"].max() == 0
    return block(
        head,
        table(df.sort("step", "device_id"), STEP_COLS, what="steps"),
        note(
            ("No step range (ProfilerStep#N or step) in this trace: one row for the whole trace. " if whole else "")
            + "Wall: from the step range's CPU start to the later of its end and its last GPU operation's end. "
            "Busy: union of every kernel, memcpy and memset on the device in that window; idle = wall − busy. "
            "A gap before an operation that was already launched when the GPU went idle is a launch gap (HTA's "
            "kernel wait: launch overhead, what CUDA graphs remove); every other gap, the first and last included, "
            "is host wait (the CPU had not launched the work yet). Rule: sql/step_gpu_idle.sql."
        ),
    )


MEMOP_COLS = [
    Col("path", "path"),
    Col("op_kind", "operation"),
    Col("copy_kind", "direction"),
    Col("count", "count", integer, True),
    Col("bytes", "bytes", nbytes, True),
    Col("duration_ns", "GPU time µs", us, True),
    Col("gb_per_s", "GB/s", _f2, True),
]


def memory_ops(v: Views, trace: str) -> str:
    df = _rows(v, "memory_ops", "trace_id", trace)
    head = "Memory operations per layer"
    if df is None:
        return block(head, missing=v.unavailable.get("memory_ops", "not available"))
    if df.height == 0:
        return block(head, note("No memcpy or memset in this trace."))
    df = df.with_columns(pl.col("path").fill_null(OUTSIDE)).sort(["duration_ns", "path"], descending=[True, False])
    return block(
        head,
        table(df, MEMOP_COLS, what="rows"),
        note(
            "memcpy per direction and memset, attributed like kernels (the range enclosing the launching call); "
            "GB/s = bytes / GPU time."
        ),
    )


SPREAD_COLS = [
    Col("layer", "layer"),
    Col("name", "kernel", cut_name),
    Col("launches", "launches", integer, True),
    Col("blocks", "blocks", integer, True),
    Col("ctas_min", "min blocks/SM", integer, True),
    Col("ctas_avg", "mean blocks/SM", _f2, True),
    Col("ctas_max", "max blocks/SM", integer, True),
    Col("cycles_min", "min active cycles/SM", si, True),
    Col("cycles_avg", "mean active cycles/SM", si, True),
    Col("cycles_max", "max active cycles/SM", si, True),
    Col("cycle_max_over_avg", "cycles max/mean (measured)", _f2, True),
    Col("model_round_max_over_avg", "max/mean (model)", _f2, True),
]


def _spread_tables(df: pl.DataFrame) -> str:
    parts = []
    for ncu_trace in sorted(df["trace_id"].unique().to_list()):
        rows = df.filter(pl.col("trace_id") == ncu_trace).sort("first_launch_id")
        parts.append(f"<p><b>{_html.escape(ncu_trace)}</b></p>" + table(rows, SPREAD_COLS, what="kernels"))
    return "".join(parts)


SPREAD_NOTE = (
    "Measured by ncu, per SM: blocks each SM ran (sm__ctas_launched) and cycles it had a block resident "
    "(sm__cycles_active), min / mean / max over the SMs (ncu's .min/.avg/.max; over several launches of a row: the "
    "least min, the mean of means, the largest max). max/mean 1.00 = every SM equally busy; the model column is "
    "what round-robin dispatch of equal blocks predicts. Blocks per SM need `tracepipe capture ncu --sm-counters`."
)


def sm_spread(v: Views, trace: str) -> str:
    """The measured spread of the ncu traces of ``trace``'s capture, beside the modelled heatmap."""
    df = _rows(v, "sm_spread", "capture_id", capture_of(trace))
    if df is None or df.height == 0:
        return note("Measured per-SM spread: no ncu run with per-SM counters in this trace's capture.")
    return block("Measured per-SM spread (ncu)", _spread_tables(df), note(SPREAD_NOTE))


def ncu_only_section(v: Views) -> tuple[str, str, str] | None:
    """(anchor, heading, body) for ncu captures that have no timeline trace (so no section of their own)."""
    df = v.optional.get("sm_spread")
    if df is None:
        return None
    with_timeline = {capture_of(t) for t in v.trace_ids}
    df = df.filter(~pl.col("capture_id").is_in(list(with_timeline)))
    if df.height == 0:
        return None
    return (
        "ncu-sm-spread",
        "Measured per-SM spread of ncu-only captures",
        note("ncu captures without an nsys or PyTorch trace beside them: their measured per-SM spread per kernel.")
        + _spread_tables(df)
        + note(SPREAD_NOTE),
    )
