"""The names Nsight Compute's details page gives the metrics ``ncu_kernel_metrics`` reads, in every ncu version.

The raw page names each metric the same way in every version (``gpu__time_duration.sum``); the details page
(ncu's default export) shows display names that changed over the years.  A version's name is one more row here,
never a branch in the view's SQL.
"""

from __future__ import annotations

import pyarrow as pa

#: (raw metric, details section, display name, the ncu versions that wrote it)
DISPLAY_NAMES: list[tuple[str, str, str, str]] = [
    ("gpu__time_duration.sum", "GPU Speed Of Light Throughput", "Duration", "2021 on"),
    ("gpu__time_duration.sum", "GPU Speed Of Light", "Duration", "2019.5-2020.x (rodinia cfd export of 2020)"),
    (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "GPU Speed Of Light Throughput",
        "Compute (SM) Throughput",
        "2023 on",
    ),
    (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "GPU Speed Of Light Throughput",
        "Compute (SM) [%]",
        "2021-2022",
    ),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "GPU Speed Of Light", "SM [%]", "2019.5-2020.x"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "Occupancy", "Achieved Occupancy", "all"),
    ("sm__maximum_warps_per_active_cycle_pct", "Occupancy", "Theoretical Occupancy", "all"),
    ("launch__occupancy_limit_blocks", "Occupancy", "Block Limit SM", "all"),
    ("launch__occupancy_limit_registers", "Occupancy", "Block Limit Registers", "all"),
    ("launch__occupancy_limit_shared_mem", "Occupancy", "Block Limit Shared Mem", "all"),
    ("launch__occupancy_limit_warps", "Occupancy", "Block Limit Warps", "all"),
    ("launch__occupancy_limit_barriers", "Occupancy", "Block Limit Barriers", "2021 on"),
    ("launch__waves_per_multiprocessor", "Launch Statistics", "Waves Per SM", "all"),
    ("launch__registers_per_thread", "Launch Statistics", "Registers Per Thread", "all"),
]

SCHEMA = pa.schema(
    [("metric", pa.string()), ("section", pa.string()), ("display", pa.string()), ("versions", pa.string())]
)


def display_names_table() -> pa.Table:
    """Nsight Compute's details-page display names of raw metrics, per ncu version (pipeline/analyze/ncu_names.py)."""
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, row, strict=True)) for row in DISPLAY_NAMES], schema=SCHEMA)
