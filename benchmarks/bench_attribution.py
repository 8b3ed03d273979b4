"""Benchmark: kernel -> NVTX attribution (sql/kernel_layers.sql) at scale, against a naive range join.

Generates a trace of N kernels launched on 8 CPU threads under ~N/10 nested NVTX ranges (step > block >
op, 3 levels), written in the normalized layout, then times in separate processes (so peak RSS is each
run's own):
  * ours:  kernel_layers over all kernels (count of kernels per layer, forcing the whole view);
  * naive: the textbook BETWEEN self-join (innermost = latest enclosing start) on a trace with the same
    ranges and only a slice of the kernels, and our view on that same slice trace.
Prints seconds, kernels/s, peak RSS, and the ratios.

    python benchmarks/bench_attribution.py                 # 10M kernels, 1M ranges (the target run)
    python benchmarks/bench_attribution.py --kernels 1e6   # quicker
Target (issue 5): 10M kernels + 1M ranges in < 30 s and < 4 GB RSS on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

THREADS = 8
PER_STEP = 9  # step + 4 blocks + 4 ops


def generate(out: Path, kernels: int, ranges: int) -> None:
    """Write kernels/api_calls/nvtx_ranges/trace_meta partitions for trace 'bench' with DuckDB."""
    from pipeline.normalize.nesting import with_nesting
    from pipeline.schema import select_list

    steps = max(1, ranges // (THREADS * PER_STEP))
    horizon = steps * 1000
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    part = lambda t: out / t / "trace_id=bench"  # noqa: E731
    for t in ("kernels", "api_calls", "nvtx_ranges", "trace_meta"):
        part(t).mkdir(parents=True, exist_ok=True)

    def copy(table: str, select: str) -> None:
        have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM ({select})").fetchall()}
        cols = select_list(table, have)
        con.execute(f"COPY (SELECT {cols} FROM ({select})) TO '{part(table)}/part-0.parquet' (FORMAT parquet)")

    common = "'bench' AS trace_id"
    copy(
        "api_calls",
        f"""
        SELECT {common}, i AS call_id, 'runtime' AS kind, 'cudaLaunchKernel' AS name,
               (hash(i) % {horizon}) AS start_ns, (hash(i) % {horizon}) + 5 AS end_ns, 5 AS duration_ns,
               i AS correlation_id, NULL AS external_id, 0 AS return_value, 1 AS pid, (i % {THREADS}) AS tid
        FROM range({kernels}) t(i)""",
    )
    copy(
        "kernels",
        f"""
        SELECT {common}, i AS kernel_id, 0 AS device_id, 1 AS context_id, 7 AS stream_id, i AS correlation_id,
               NULL AS external_id, {horizon} + i * 3 AS start_ns, {horizon} + i * 3 + 2 AS end_ns,
               2 AS duration_ns, 'kernel_' || (i % 50) AS name, 'kernel_' || (i % 50) AS short_name,
               1 + i % 1024 AS grid_x, 1 AS grid_y, 1 AS grid_z, 128 AS block_x, 1 AS block_y, 1 AS block_z,
               32 AS registers_per_thread, 0 AS static_smem_bytes, 0 AS dynamic_smem_bytes,
               0 AS local_mem_per_thread_bytes, 'Regular' AS launch_type, NULL AS graph_id, NULL AS graph_node_id,
               1 AS pid, (i % {THREADS}) AS tid, NULL AS profiler_blocks_per_sm, NULL AS profiler_warps_per_sm,
               NULL AS profiler_est_achieved_occupancy_pct
        FROM range({kernels}) t(i)""",
    )
    raw = con.sql(f"""
        WITH s AS (SELECT tid, i FROM range({THREADS}) a(tid), range({steps}) b(i)),
        r AS (
            SELECT tid, i * 1000 AS start_ns, i * 1000 + 900 AS end_ns, 'step' AS text FROM s
            UNION ALL
            SELECT tid, i * 1000 + j * 220 + 10, i * 1000 + j * 220 + 200, 'block' || j FROM s, range(4) c(j)
            UNION ALL
            SELECT tid, i * 1000 + j * 220 + 40, i * 1000 + j * 220 + 120, 'op' || j FROM s, range(4) c(j)
        )
        SELECT row_number() OVER (ORDER BY tid, start_ns) - 1 AS range_id, 'push_pop' AS kind, 'nvtx' AS source,
               NULL::VARCHAR AS domain, text, NULL::BIGINT AS category, NULL::BIGINT AS color,
               start_ns, end_ns, end_ns - start_ns AS duration_ns, 1::BIGINT AS pid, tid::BIGINT AS tid,
               tid::BIGINT AS end_tid, NULL::INTEGER AS depth, NULL::BIGINT AS parent_id
        FROM r""").to_arrow_table()
    nested = with_nesting(raw)
    con.register("nested", nested)
    copy("nvtx_ranges", f"SELECT {common}, * FROM nested")
    copy("trace_meta", f"SELECT {common}, 'bench' AS source_format")


NAIVE = """
SELECT count(*), count(range_id) FROM (
  SELECT k.kernel_id, arg_max(r.range_id, r.start_ns) AS range_id
  FROM kernels k
  JOIN api_calls a ON a.correlation_id = k.correlation_id AND a.pid = k.pid
  LEFT JOIN nvtx_ranges r ON r.pid = a.pid AND r.tid = a.tid AND a.start_ns BETWEEN r.start_ns AND r.end_ns
  GROUP BY k.kernel_id)
"""
OURS = "SELECT count(*), count(range_id) FROM kernel_layers"


def child(normalized: str, mode: str) -> None:
    """Runs in a subprocess: one measurement, printed as JSON."""
    from pipeline.analyze import connect

    con = connect(Path(normalized))
    sql = NAIVE if mode == "naive" else OURS
    t0 = time.perf_counter()
    n, attributed = con.execute(sql).fetchone()
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"mode": mode, "kernels": n, "attributed": attributed, "seconds": dt, "rss": rss}))


def measure(normalized: Path, mode: str) -> dict:
    cmd = [sys.executable, __file__, "--child", str(normalized), mode]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=float, default=10e6)
    ap.add_argument("--ranges", type=float, default=None, help="default: kernels / 10")
    ap.add_argument("--slice", type=int, default=100_000, help="kernels in the naive comparison")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1])
        return
    kernels = int(args.kernels)
    ranges = int(args.ranges or kernels // 10)
    with tempfile.TemporaryDirectory(prefix="bench-attr-") as tmp:
        out, sliced = Path(tmp) / "full", Path(tmp) / "slice"
        t0 = time.perf_counter()
        generate(out, kernels, ranges)
        print(
            f"generated {kernels:,} kernels, ~{ranges:,} ranges on {THREADS} threads in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        full = measure(out, "ours")
        # The slice keeps every range and only the first kernels: the naive join's cost is kernels x ranges.
        generate(sliced, args.slice, ranges)
        ours = measure(sliced, "ours")
        naive = measure(sliced, "naive")
    assert ours["attributed"] == naive["attributed"], (ours, naive)
    gb = 1 << 30
    print(f"{'run':<28}{'kernels':>12}{'seconds':>10}{'kernels/s':>14}{'peak RSS GB':>13}")
    for label, r in (("ours, all kernels", full), ("ours, slice", ours), ("naive BETWEEN, slice", naive)):
        print(
            f"{label:<28}{r['kernels']:>12,}{r['seconds']:>10.2f}{r['kernels'] / r['seconds']:>14,.0f}"
            f"{r['rss'] / gb:>13.2f}"
        )
    print(
        f"slice speed-up ours vs naive: {naive['seconds'] / ours['seconds']:.1f}x; "
        f"full run {'meets' if full['seconds'] < 30 and full['rss'] < 4 * gb else 'MISSES'} "
        f"the < 30 s / < 4 GB target"
    )


if __name__ == "__main__":
    main()
