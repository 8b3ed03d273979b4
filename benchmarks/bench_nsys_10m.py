"""Benchmark (issue 18.3): normalize + analyze of one 10M-kernel nsys export, wall, CPU and peak RSS of each
process tree (benchmarks/_measure.py). The input is ``bench_ranks.generate_rank_sqlite`` (the real H200 sample's
window repeated) at the issue's shape: ``--kernels`` kernels launched from ``--threads`` threads under about
``--ranges`` NVTX ranges. Run it under ``taskset -c 0,1`` for the 2-core figure (the children inherit it).

    taskset -c 0,1 python benchmarks/bench_nsys_10m.py --kernels 10000000 --tmp /tmp
    taskset -c 0,1 python benchmarks/bench_nsys_10m.py --sqlite EXPORT.sqlite --rounds 3   (an export made before)
Set TRACEPIPE_MEMORY_LIMIT to bound DuckDB in analyze (the figure says which limit it ran under).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._measure import measure, provenance  # noqa: E402
from benchmarks.bench_ranks import generate_rank_sqlite  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=10_000_000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--ranges", type=int, default=1_000_000)
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--no-analyze", action="store_true", help="normalize only")
    ap.add_argument("--sqlite", type=Path, help="measure this export (made by an earlier run) instead of a new one")
    ap.add_argument("--rounds", type=int, default=1, help="normalize + analyze this many times, then the medians")
    args = ap.parse_args()
    print(provenance(), flush=True)
    cores = len(os.sched_getaffinity(0))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory(prefix="bench-nsys-10m-", dir=args.tmp) as tmp:
        root = Path(tmp)
        setting = f"{cores} cores; TRACEPIPE_MEMORY_LIMIT={os.environ.get('TRACEPIPE_MEMORY_LIMIT', 'default')}"
        if args.sqlite is not None:
            sqlite = args.sqlite
            made = "made by an earlier run"
        else:
            sqlite = root / "cap" / "nsys.sqlite"
            sqlite.parent.mkdir()
            t0 = time.perf_counter()
            kernels = generate_rank_sqlite(sqlite, args.kernels, threads=args.threads, ranges=args.ranges)
            made = (
                f"{kernels:,} kernels, {args.threads} threads, ~{args.ranges:,} ranges, "
                f"generated in {time.perf_counter() - t0:.0f} s"
            )
        print(f"input: {sqlite} ({sqlite.stat().st_size / 2**20:.0f} MiB sqlite), {made}; {setting}", flush=True)
        tp = [sys.executable, "-m", "pipeline"]
        totals = []
        for _ in range(args.rounds):
            shutil.rmtree(root / "n", ignore_errors=True)
            shutil.rmtree(root / "a", ignore_errors=True)
            n = measure([*tp, "normalize", str(sqlite), "--out", str(root / "n"), "-q"], env=env, cwd=ROOT)
            print(f"normalize  {n.line()}", flush=True)
            if args.no_analyze:
                continue
            a = measure([*tp, "analyze", str(root / "n"), "--out", str(root / "a"), "-q"], env=env, cwd=ROOT)
            print(f"analyze    {a.line()}", flush=True)
            totals.append((n.wall_s + a.wall_s, n.cpu_s + a.cpu_s, max(n.peak_rss_bytes, a.peak_rss_bytes)))
            print(
                f"total      wall {totals[-1][0]:7.2f} s  CPU {totals[-1][1]:7.2f} s  "
                f"peak RSS (tree) {totals[-1][2] / 1e6:7.0f} MB  (target: < 60 s wall, < 2000 MB on 2 cores)",
                flush=True,
            )
        if len(totals) > 1:
            wall, cpu, rss = (statistics.median(t[i] for t in totals) for i in range(3))
            print(f"median of {len(totals)} rounds: wall {wall:7.2f} s  CPU {cpu:7.2f} s  peak RSS {rss / 1e6:7.0f} MB")


if __name__ == "__main__":
    main()
