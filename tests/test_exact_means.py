"""layer_kernel_summary's means of DOUBLE columns come out bit for bit the same whatever order the launches are
read in and however many threads DuckDB splits them over (the view header's rule: exact DECIMAL sums), and
equal the exact mean (``fractions``) rounded once or twice, never a float sum's drift."""

from __future__ import annotations

import random
from fractions import Fraction

import duckdb
import pyarrow as pa

from pipeline.analyze import SQL_DIR, view_body

MEANS = ["theoretical_occupancy_pct", "est_achieved_occupancy_pct", "waves_per_sm", "tail_fill_pct"]


def _inputs(seed: int, n: int = 20_000) -> dict[str, pa.Table]:
    rng = random.Random(seed)
    ids = list(range(n))
    rng.shuffle(ids)  # the launches in another order each time
    one = lambda v: [v] * n  # noqa: E731
    layers = pa.table({
        "trace_id": one("t"), "kernel_id": ids, "path": [f"m/l{i % 3}" for i in ids],
        "layer": [f"l{i % 3}" for i in ids],
        "short_name": one("gemm"), "name": one("gemm"), "grid_x": one(64), "grid_y": one(1), "grid_z": one(1),
        "block_x": one(128), "block_y": one(1), "block_z": one(1), "duration_ns": [1000 + i % 7 for i in ids],
        "start_ns": [10 * i for i in ids], "registers_per_thread": one(32),
    })  # fmt: skip
    values = {i: [random.Random(i * 4 + j).uniform(0, 100) for j in range(4)] for i in ids}
    occ = pa.table({"trace_id": one("t"), "kernel_id": ids, "theoretical_occupancy_pct": [values[i][0] for i in ids],
                    "limiter": one("warps")})  # fmt: skip
    waves = pa.table({
        "trace_id": one("t"), "kernel_id": ids, "est_achieved_occupancy_pct": [values[i][1] for i in ids],
        "waves_per_sm": [values[i][2] / 7 for i in ids], "waves": one(1),
        "tail_wave_utilization": [values[i][3] / 100 for i in ids],
    })  # fmt: skip
    match = pa.table({"trace_id": pa.array([], pa.string()), "kernel_id": pa.array([], pa.int64()),
                      "ncu_trace_id": pa.array([], pa.string()), "launch_id": pa.array([], pa.int64())})  # fmt: skip
    metrics = pa.table({"trace_id": pa.array([], pa.string()), "launch_id": pa.array([], pa.int64()),
                        "achieved_occupancy_pct": pa.array([], pa.float64()),
                        "theoretical_occupancy_pct": pa.array([], pa.float64())})  # fmt: skip
    return {"kernel_layers": layers, "kernel_occupancy": occ, "kernel_waves": waves,
            "ncu_kernel_match": match, "ncu_kernel_metrics": metrics}  # fmt: skip


def _summary(tables: dict[str, pa.Table], threads: int) -> dict[str, tuple[float, ...]]:
    con = duckdb.connect(config={"threads": str(threads)})
    for name, table in tables.items():
        con.register(name, table)
    body = view_body(SQL_DIR / "layer_kernel_summary.sql")
    rows = con.execute(f"SELECT path, {', '.join(MEANS)} FROM ({body})").fetchall()
    return {path: tuple(rest) for path, *rest in rows}


def test_means_are_the_same_bits_in_any_order_and_thread_split() -> None:
    first = _summary(_inputs(0), threads=1)
    assert len(first) == 3
    for seed, threads in ((1, 4), (2, 2), (3, 8)):
        assert _summary(_inputs(seed), threads) == first, (seed, threads)
    # against the exact mean of the same doubles, rounded: within one part in 10^15
    tables = _inputs(0)
    paths = tables["kernel_layers"]["path"].to_pylist()
    wps = tables["kernel_waves"]["waves_per_sm"].to_pylist()
    for path, got in first.items():
        exact = [Fraction(v) for p, v in zip(paths, wps, strict=True) if p == path]
        mean = sum(exact) / len(exact)
        assert abs(Fraction(got[2]) - mean) <= mean * Fraction(1, 10**15), path
