"""Benchmark: `analyze --incremental` after one of many traces changed, against a full `analyze`.

A batch of ``--ranks`` per-rank nsys captures (``bench_ranks.generate_rank_sqlite``: the real H200 sample's window
repeated to ``--kernels`` kernels, launched from ``--threads`` threads) is normalized once. Then, each side as its
own measured process (benchmarks/_measure.py: wall, CPU and peak RSS of the process tree):

1. ``tracepipe analyze N --out full``: the full analyze a user runs today;
2. ``tracepipe analyze N --out inc --incremental``: the first incremental run (no state: full, plus the state);
3. rank 5 is normalized again (``--force``: a new generation of that trace), then
4. ``tracepipe analyze N --out full`` and ``tracepipe analyze N --out inc --incremental``, interleaved ``--repeat``
   times (each re-run preceded by re-normalizing rank 5 again, so every incremental run has one changed trace).

The incremental run must report exactly ``rank5.nsys`` as recomputed, and every view's row count must equal the
full run's (tests/test_incremental_analyze.py checks the values, view by view, on a small batch).

    python benchmarks/bench_incremental.py --ranks 64 --kernels 20000
"""

from __future__ import annotations

import argparse
import json
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

TP = [sys.executable, "-m", "pipeline"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--kernels", type=int, default=20000, help="kernels per rank")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tmp", default="/tmp")
    args = ap.parse_args()
    print(provenance())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="bench-incremental-", dir=args.tmp) as tmp:
        root = Path(tmp)
        template = root / "template.sqlite"
        t0 = time.perf_counter()
        kernels = generate_rank_sqlite(template, args.kernels, threads=args.threads)
        inputs, normalized = root / "in", root / "n"
        for r in range(args.ranks):
            (inputs / f"rank{r}").mkdir(parents=True)
            shutil.copy(template, inputs / f"rank{r}" / "nsys.sqlite")
        m = measure([*TP, "normalize", str(inputs), "--out", str(normalized), "-q", "--jobs", "2"], env=env, cwd=ROOT)
        print(
            f"batch: {args.ranks} traces x {kernels:,} kernels ({args.threads} threads), generated and normalized in "
            f"{time.perf_counter() - t0:.1f} s (normalize: {m.line()})",
            flush=True,
        )
        rank = min(5, args.ranks - 1)
        changed = inputs / f"rank{rank}" / "nsys.sqlite"

        def renormalize() -> None:
            measure([*TP, "normalize", str(changed), "--out", str(normalized), "-q", "--force"], env=env, cwd=ROOT)

        def analyze(out: str, *extra: str) -> tuple[object, dict]:
            argv = [*TP, "analyze", str(normalized), "--out", str(root / out), "--json", *extra]
            m = measure(argv, env=env, cwd=ROOT)
            return m, json.loads(m.stdout)

        m, first = analyze("inc", "--incremental")
        assert len(first["recomputed_traces"]) == args.ranks
        print(f"first incremental run (no state, full):  {m.line()}", flush=True)
        full_runs, inc_runs = [], []
        for i in range(args.repeat):
            renormalize()
            mi, inc = analyze("inc", "--incremental")
            assert inc["recomputed_traces"] == [f"rank{rank}.nsys"], inc["recomputed_traces"]
            mf, full = analyze("full")
            views = [v for v in full if v in inc]
            bad = [v for v in views if full[v] != inc[v]]
            assert not bad, f"row counts differ: {bad}"
            full_runs.append(mf)
            inc_runs.append(mi)
            print(f"  round {i + 1}: full     {mf.line()}", flush=True)
            print(f"  round {i + 1}: 1 of {args.ranks} changed, incremental {mi.line()}", flush=True)
        med = lambda runs, attr: statistics.median(getattr(r, attr) for r in runs)  # noqa: E731
        fw, fc = med(full_runs, "wall_s"), med(full_runs, "cpu_s")
        iw, ic = med(inc_runs, "wall_s"), med(inc_runs, "cpu_s")
        print(
            f"\nmedians of {args.repeat}: full {fw:.2f} s wall / {fc:.2f} CPU-s, incremental {iw:.2f} s / {ic:.2f} "
            f"CPU-s: {fw / iw:.2f}x less wall, {fc / ic:.2f}x less CPU; peak RSS (tree) full "
            f"{max(r.peak_rss_bytes for r in full_runs) / 1e6:.0f} MB, incremental "
            f"{max(r.peak_rss_bytes for r in inc_runs) / 1e6:.0f} MB"
        )
        print(f"every view's row count equal between the two ({len(views)} views); recomputed: rank{rank}.nsys only")


if __name__ == "__main__":
    main()
