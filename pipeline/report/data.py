"""Read an analysis folder (one ``<view>.parquet`` per view) into the frames the report draws.

The four attribution views are required; every other view is optional and may still be missing (it
lands on another branch) or name its columns differently, so each optional section declares the
columns it needs as lists of accepted names and is drawn only when one of each is present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from pipeline.errors import BadInputError, damaged_file
from pipeline.outputs import is_normalized, mixed_inputs, wrong_folder

#: view -> columns the report reads from it; without any of these views there is nothing to report.
REQUIRED: dict[str, tuple[str, ...]] = {
    "kernel_layers": ("trace_id", "kernel_id", "start_ns", "end_ns", "duration_ns", "name", "path", "layer"),
    "layer_summary": ("trace_id", "path", "layer", "calls", "kernels", "gpu_time_ns", "share_pct", "mean_ns"),
    "layer_name_summary": ("trace_id", "layer", "calls", "kernels", "gpu_time_ns", "share_pct"),
    "layer_timeline": ("trace_id", "range_id", "path", "layer", "depth", "cpu_start_ns", "kernels"),
}


@dataclass(frozen=True)
class Optional:
    """An optional view: canonical column -> accepted names (first present wins); ``need`` must all resolve."""

    view: str
    columns: dict[str, tuple[str, ...]]
    need: tuple[str, ...]


OPTIONAL: dict[str, Optional] = {
    "geometry": Optional(
        "kernel_geometry",
        {
            "trace_id": ("trace_id",),
            "kernel_id": ("kernel_id",),
            "blocks": ("blocks",),
            "threads_per_block": ("threads_per_block",),
            "warps_per_block": ("warps_per_block",),
            "threads": ("total_threads", "threads"),
        },
        ("trace_id", "kernel_id", "threads"),
    ),
    "occupancy": Optional(
        "kernel_occupancy",
        {
            "trace_id": ("trace_id",),
            "kernel_id": ("kernel_id",),
            "occupancy_pct": ("theoretical_occupancy_pct", "occupancy_pct", "achieved_occupancy_pct"),
            "limiter": ("limiter",),
            "resident_blocks_per_sm": ("resident_blocks_per_sm",),
        },
        ("trace_id", "kernel_id", "occupancy_pct"),
    ),
    "sm_load": Optional(
        "layer_sm_load",
        {
            "trace_id": ("trace_id",),
            "path": ("path", "layer"),
            "sm_id": ("sm_id",),
            "sm_count": ("sm_count",),
            # thread-resident time shows how long each SM was busy, not just how much it got
            "value": ("thread_ns", "threads", "blocks"),
        },
        ("trace_id", "path", "sm_id", "value"),
    ),
    "macs": Optional(
        "layer_macs",
        {
            "trace_id": ("trace_id",),
            "layer": ("layer",),
            "calls_per_forward": ("calls_per_forward",),
            "macs": ("analytic_macs", "macs"),
            "measured_macs": ("measured_macs",),
        },
        ("trace_id", "layer", "calls_per_forward", "macs"),
    ),
}


def _as_is(view: str, columns: str, need: str) -> Optional:
    """An optional view of this version's sql/, read under its own column names."""
    return Optional(view, {c: (c,) for c in columns.split()}, tuple(need.split()))


# -- per-layer detail (issue 20.2/20.3): kernel statistics, steps, memory operations, measured per-SM spread.
#    Sections absent from an older analysis folder are left out of the page with a note, never an error.
OPTIONAL |= {
    "kernel_stats": _as_is(
        "layer_kernel_summary",
        "trace_id path layer short_name grid block launches gpu_time_ns share_pct mean_ns med_ns min_ns max_ns "
        "stddev_ns threads regs theoretical_occupancy_pct limiter est_achieved_occupancy_pct waves_per_sm waves "
        "tail_fill_pct ncu_launches ncu_achieved_occupancy_pct",
        "trace_id path short_name launches gpu_time_ns med_ns stddev_ns",
    ),
    "kernel_names": _as_is(
        "kernel_name_summary",
        "trace_id name short_name time_pct total_ns instances avg_ns med_ns min_ns max_ns stddev_ns",
        "trace_id name time_pct total_ns instances avg_ns med_ns min_ns max_ns stddev_ns",
    ),
    "steps": _as_is(
        "step_gpu_idle",
        "trace_id step step_name device_id wall_ns ops kernels kernel_ns memop_ns busy_ns idle_ns idle_pct "
        "launch_gap_ns host_wait_ns launch_gaps host_waits",
        "trace_id step step_name wall_ns busy_ns idle_ns launch_gap_ns host_wait_ns",
    ),
    "memory_ops": _as_is(
        "layer_memory_ops",
        "trace_id path layer op_kind copy_kind count bytes duration_ns gb_per_s",
        "trace_id path op_kind count bytes duration_ns",
    ),
    "sm_spread": _as_is(
        "layer_sm_spread",
        "capture_id trace_id layer name launches blocks sm_count ctas_min ctas_avg ctas_max cycles_min cycles_avg "
        "cycles_max block_max_over_avg cycle_max_over_avg model_round_max_over_avg first_launch_id",
        "capture_id trace_id name cycles_max",
    ),
}


@dataclass
class Views:
    folder: Path
    required: dict[str, pl.DataFrame]
    #: section -> frame with canonical column names (plus ``value_name`` for sm_load)
    optional: dict[str, pl.DataFrame] = field(default_factory=dict)
    #: section -> why it is not drawn, e.g. "not available (view layer_macs missing)"
    unavailable: dict[str, str] = field(default_factory=dict)
    #: section -> the source column chosen for its ``value`` (sm_load: thread_ns, threads or blocks)
    value_name: dict[str, str] = field(default_factory=dict)

    @property
    def trace_ids(self) -> list[str]:
        return sorted(self.required["kernel_layers"]["trace_id"].unique().to_list())


def read_view_file(path: Path, columns: list[str] | None = None) -> pl.DataFrame:
    """A view's Parquet file as a frame; one not readable (cut short, overwritten) is bad input naming it."""
    try:
        return pl.read_parquet(path, columns=columns)
    except Exception as e:  # polars raises several types for a truncated or foreign file
        raise damaged_file(path, f"{type(e).__name__}: {str(e).splitlines()[0]}") from e


def load(folder: Path) -> Views:
    """Every view the report uses; BadInputError names the folder or file that is not an analysis output."""
    if said := wrong_folder(folder, "analysis"):
        raise BadInputError(folder, said)
    files = {name: folder / f"{name}.parquet" for name in REQUIRED}
    missing = [n for n, p in files.items() if not p.is_file()]
    if len(missing) == len(files):
        # a normalized folder: analyze it into a folder of its own (never into the normalized data)
        source = folder if is_normalized(folder) else Path("NORMALIZED")
        raise BadInputError(
            folder,
            "no analysis Parquet here (expected " + ", ".join(f"{n}.parquet" for n in REQUIRED) + "; "
            f"run `tracepipe analyze {source} --out ANALYSIS` first and give ANALYSIS)",
        )
    if missing:
        raise BadInputError(files[missing[0]], "missing (re-run `tracepipe analyze`)")
    required = {}
    for name, path in files.items():
        df = read_view_file(path)
        lacking = [c for c in REQUIRED[name] if c not in df.columns]
        if lacking:
            raise BadInputError(path, f"lacks column(s) {', '.join(lacking)}")
        required[name] = df
    if said := mixed_inputs(folder):
        raise BadInputError(folder, said)
    if required["kernel_layers"].height == 0:
        raise BadInputError(files["kernel_layers"], "has no kernels: nothing to report")
    views = Views(folder, required)
    for section, spec in OPTIONAL.items():
        path = folder / f"{spec.view}.parquet"
        if not path.is_file():
            views.unavailable[section] = f"not available (view {spec.view} missing)"
            continue
        df = read_view_file(path)
        chosen = {canon: next((c for c in names if c in df.columns), None) for canon, names in spec.columns.items()}
        lacking = [canon for canon in spec.need if chosen[canon] is None]
        if lacking:
            wanted = " or ".join(spec.columns[lacking[0]])
            views.unavailable[section] = f"not available (view {spec.view} has no column {wanted})"
            continue
        views.optional[section] = df.select([pl.col(src).alias(canon) for canon, src in chosen.items() if src])
        if "value" in chosen:
            views.value_name[section] = chosen["value"]
    return views
