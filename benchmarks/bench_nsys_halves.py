"""Does reading a large export's kernel table in two processes pay? ``tracepipe normalize`` of one nsys export,
the kernels child reading the whole table itself ("one reader") against the first half while a child of its
own reads the second ("two readers", ``nsys.HALVES_MIN_KERNELS``), interleaved; wall, CPU and peak RSS of
each process tree (benchmarks/_measure.py). Run it under ``taskset -c 0,1`` for the 2-core figure.

    taskset -c 0,1 python benchmarks/bench_nsys_halves.py --kernels 10000000 --rounds 2 [--tmp DIR]

The input is ``bench_ranks.generate_rank_sqlite(..., threads=8, ranges=kernels // 10)`` (issue 18.3's shape).
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

#: ``tracepipe normalize`` with the two-reader threshold set; everything else as the CLI runs it.
RUN = (
    "import sys; import pipeline.normalize.nsys as n; n.HALVES_MIN_KERNELS = int(sys.argv.pop(1)); "
    "from pipeline.cli import run; sys.argv[0] = 'tracepipe'; run()"
)
MODES = {"one reader": str(10**15), "two readers": "1"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    args = ap.parse_args()
    print(provenance(), flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory(prefix="bench-nsys-halves-", dir=args.tmp) as t:
        tmp = Path(t)
        path = tmp / "cap" / "nsys.sqlite"
        path.parent.mkdir()
        t0 = time.perf_counter()
        n = generate_rank_sqlite(path, args.kernels, threads=8, ranges=args.kernels // 10)
        print(
            f"input: {n:,} kernels, 8 threads, ~{args.kernels // 10:,} ranges, {path.stat().st_size / 2**20:.0f} MiB, "
            f"generated in {time.perf_counter() - t0:.0f} s; {len(os.sched_getaffinity(0))} cores; "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        got: dict[str, list] = {m: [] for m in MODES}
        for _ in range(args.rounds):
            for mode, threshold in MODES.items():
                out = tmp / "n"
                cmd = [sys.executable, "-c", RUN, threshold, "normalize", str(path), "--out", str(out), "-q"]
                m = measure(cmd, env=env, cwd=ROOT)
                got[mode].append(m)
                print(f"{mode:12s} {m.line()}", flush=True)
                shutil.rmtree(out)
        for mode, ms in got.items():
            wall, cpu = statistics.median(m.wall_s for m in ms), statistics.median(m.cpu_s for m in ms)
            rss = max(m.peak_rss_bytes for m in ms) / 1e6
            print(f"median {mode:12s} wall {wall:7.2f} s  CPU {cpu:7.2f} s  peak RSS (tree, max) {rss:7.0f} MB")
        print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
