"""Per-trace frames for the report, computed with polars from the analysis views (small: per layer or kernel name)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pipeline.report.data import Views

OUTSIDE = "(outside ranges)"
#: a timeline of the whole trace is cut to its last kernels past this many (a plot cannot show more)
MAX_TIMELINE_KERNELS = 3000
#: table rows shown in the HTML (the Parquet/CSV beside it has them all)
MAX_TABLE_ROWS = 200


def _label(col: str) -> pl.Expr:
    return pl.col(col).fill_null(OUTSIDE)


def layers_by_name(v: Views, trace: str) -> pl.DataFrame:
    return (
        v.required["layer_name_summary"]
        .filter(pl.col("trace_id") == trace)
        .with_columns(_label("layer"))
        .sort("gpu_time_ns", descending=True)
    )


def layers_by_path(v: Views, trace: str) -> pl.DataFrame:
    """layer_summary rows, with MACs and achieved MAC/s when layer_macs is there."""
    df = (
        v.required["layer_summary"]
        .filter(pl.col("trace_id") == trace)
        .with_columns(_label("layer"), _label("path"))
        .sort("gpu_time_ns", descending=True)
    )
    macs = v.optional.get("macs")
    if macs is not None:
        # layer_macs is per module and forward; a path row holds `calls` calls of its innermost module.
        # One row per ncu trace of the capture too (raw and details pages): one value per layer here.
        per_call = (
            macs.filter(pl.col("trace_id") == trace)
            .group_by("layer")
            .agg(
                (pl.col("macs") / pl.col("calls_per_forward")).first().alias("_macs_per_call"),
                (pl.col("measured_macs") / pl.col("calls_per_forward")).max().alias("_measured_per_call"),
            )
        )
        df = (
            df.join(per_call, on="layer", how="left")
            .with_columns(
                # 0 is "type not analysed" (bn, relu, pool, containers), not "does no work": shown as "—"
                pl.when(pl.col("_macs_per_call") > 0).then(pl.col("_macs_per_call") * pl.col("calls")).alias("macs"),
                (pl.col("_measured_per_call") * pl.col("calls")).alias("measured_macs"),
            )
            .drop("_macs_per_call", "_measured_per_call")
            # MAC per ns is GMAC/s; x1e9 gives MAC/s
            .with_columns((pl.col("macs") / pl.col("gpu_time_ns") * 1e9).alias("macs_per_s"))
        )
    return df


def kernels(v: Views, trace: str) -> pl.DataFrame:
    """kernel_layers of one trace, with geometry and occupancy joined in when those views exist."""
    k = v.required["kernel_layers"].filter(pl.col("trace_id") == trace).with_columns(_label("layer"), _label("path"))
    if "short_name" not in k.columns:
        k = k.with_columns(pl.col("name").alias("short_name"))
    k = k.with_columns(pl.col("short_name").fill_null(pl.col("name")))
    geo = v.optional.get("geometry")
    if geo is not None:
        k = k.join(geo.filter(pl.col("trace_id") == trace).drop("trace_id"), on="kernel_id", how="left", suffix="_geo")
    elif all(c in k.columns for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")):
        # same definition as kernel_geometry (gridDim and blockDim products) until that view is in the folder
        k = k.with_columns(
            (pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z")).alias("blocks"),
            (pl.col("block_x") * pl.col("block_y") * pl.col("block_z")).alias("threads_per_block"),
        ).with_columns((pl.col("blocks") * pl.col("threads_per_block")).alias("threads"))
    occ = v.optional.get("occupancy")
    if occ is not None:
        occ = occ.filter(pl.col("trace_id") == trace).drop("trace_id")
        k = k.join(occ, on="kernel_id", how="left", suffix="_occ")
    return k


def _fmt_dims(prefix: str) -> pl.Expr:
    return pl.format("{}×{}×{}", pl.col(f"{prefix}_x"), pl.col(f"{prefix}_y"), pl.col(f"{prefix}_z")).alias(prefix)


def kernel_table(k: pl.DataFrame) -> pl.DataFrame:
    """One row per layer path, kernel name and launch shape: what the layer runs and how it fills the GPU."""
    keys = ["path", "short_name"]
    if "grid_x" in k.columns:
        k = k.with_columns(_fmt_dims("grid"), _fmt_dims("block"))
        keys += ["grid", "block"]
    aggs = [
        pl.len().alias("launches"),
        pl.col("duration_ns").sum().alias("gpu_time_ns"),
        pl.col("duration_ns").mean().alias("mean_ns"),
        pl.col("start_ns").min().alias("first_start_ns"),
    ]
    if "threads" in k.columns:
        aggs.append(pl.col("threads").mean().alias("threads"))
    if "registers_per_thread" in k.columns:
        aggs.append(pl.col("registers_per_thread").max().alias("regs"))
    if "occupancy_pct" in k.columns:
        aggs.append(pl.col("occupancy_pct").mean().alias("occupancy_pct"))
    if "limiter" in k.columns:
        aggs.append(pl.col("limiter").drop_nulls().mode().first().alias("limiter"))
    total = k["duration_ns"].sum() or 1
    path_time = k.group_by("path").agg(pl.col("duration_ns").sum().alias("_path_ns"))
    return (
        k.group_by(keys)
        .agg(aggs)
        .with_columns((100.0 * pl.col("gpu_time_ns") / total).alias("share_pct"))
        .join(path_time, on="path")
        # layers by time, kernels by time within a layer: the table reads top-down like the bar chart; equal
        # times by first launch (group_by's order changes from run to run)
        .sort(["_path_ns", "path", "gpu_time_ns", "first_start_ns"], descending=[True, False, True, False])
        .drop("_path_ns", "first_start_ns")
    )


def top_kernels(k: pl.DataFrame, n: int = 10) -> pl.DataFrame:
    total = k["duration_ns"].sum() or 1
    return (
        k.group_by("short_name")
        .agg(pl.len().alias("launches"), pl.col("duration_ns").sum().alias("gpu_time_ns"), pl.col("layer").unique())
        .with_columns(
            (100.0 * pl.col("gpu_time_ns") / total).alias("share_pct"),
            pl.col("layer").list.sort().list.join(", ").alias("layers"),
        )
        .drop("layer")
        .sort("gpu_time_ns", descending=True)
        .head(n)
    )


@dataclass
class SmLoad:
    matrix: pl.DataFrame  # path, then one column per sm_id (value summed over devices)
    summary: pl.DataFrame  # path, sms_used, sm_count, min/mean/max per SM, imbalance (max / mean)
    value_name: str


def sm_load(v: Views, trace: str, order: list[str]) -> SmLoad | None:
    df = v.optional.get("sm_load")
    if df is None:
        return None
    df = df.filter(pl.col("trace_id") == trace).with_columns(_label("path"))
    if df.height == 0:
        return None
    sm_count = int(df["sm_count"].max()) if "sm_count" in df.columns else int(df["sm_id"].max()) + 1
    per = df.group_by("path", "sm_id").agg(pl.col("value").sum())
    loaded = set(per["path"].to_list())  # once: built per candidate it cost 3 s of the demo report
    paths = [p for p in order if p in loaded]
    paths += sorted(loaded - set(paths))
    full = (
        pl.DataFrame({"path": paths})
        .join(pl.DataFrame({"sm_id": list(range(sm_count))}), how="cross")
        .join(per, on=["path", "sm_id"], how="left")
        .with_columns(pl.col("value").fill_null(0).cast(pl.Float64))
    )
    summary = (
        full.group_by("path", maintain_order=True)
        .agg(
            (pl.col("value") > 0).sum().alias("sms_used"),
            pl.col("value").min().alias("min_per_sm"),
            pl.col("value").mean().alias("mean_per_sm"),
            pl.col("value").max().alias("max_per_sm"),
        )
        .with_columns(
            pl.lit(sm_count).alias("sm_count"), (pl.col("max_per_sm") / pl.col("mean_per_sm")).alias("imbalance")
        )
    )
    matrix = full.pivot(on="sm_id", index="path", values="value", sort_columns=False)
    matrix = pl.DataFrame({"path": paths}).join(matrix, on="path", how="left", maintain_order="left")
    return SmLoad(matrix, summary, v.value_name.get("sm_load", "value"))


@dataclass
class Window:
    start_ns: int
    end_ns: int
    title: str
    kernels: pl.DataFrame  # kernels overlapping the window
    ranges: pl.DataFrame  # layer_timeline rows whose GPU span overlaps it


def timeline_window(v: Views, trace: str, k: pl.DataFrame) -> Window:
    """One iteration: the last top-level range instance that has ranges nested in it (``step`` in the small
    CNN); without such a range the whole trace (its last MAX_TIMELINE_KERNELS kernels when longer)."""
    tl = v.required["layer_timeline"].filter(pl.col("trace_id") == trace)
    has_gpu = "gpu_start_ns" in tl.columns and "gpu_end_ns" in tl.columns
    parents = set(tl.filter(pl.col("depth") > 0)["path"].str.split("/").list.first().to_list())
    cand = tl.filter((pl.col("depth") == 0) & pl.col("path").is_in(list(parents)) & (pl.col("kernels") > 0))
    if has_gpu and cand.height:
        row = cand.sort("cpu_start_ns").row(-1, named=True)
        start, end = int(row["gpu_start_ns"]), int(row["gpu_end_ns"])
        nth = cand.filter(pl.col("path") == row["path"]).height
        title = f"last `{row['path']}` range (instance {nth} of {nth}, range_id {row['range_id']})"
    else:
        kk = k.sort("start_ns")
        cut = kk.height > MAX_TIMELINE_KERNELS
        if cut:
            kk = kk.tail(MAX_TIMELINE_KERNELS)
        start, end = int(kk["start_ns"].min()), int(kk["end_ns"].max())
        title = f"last {MAX_TIMELINE_KERNELS} kernels of the trace" if cut else "whole trace (no nested NVTX ranges)"
    ks = k.filter((pl.col("start_ns") < end) & (pl.col("end_ns") > start)).sort("start_ns")
    rs = (
        tl.filter((pl.col("gpu_start_ns") < end) & (pl.col("gpu_end_ns") > start) & (pl.col("kernels") > 0))
        if has_gpu
        else tl.clear()
    )
    return Window(start, end, title, ks, rs)
