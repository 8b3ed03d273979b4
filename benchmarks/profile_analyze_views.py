"""CPU time per view of `tracepipe analyze` (the write loop the CLI runs): each view's COPY to Parquet, timed with
time.process_time (all threads of this process), which is the measure on a shared machine. The loop runs through
Parquet (``in_memory=False``) whatever the input's size, so each COPY computes its view (in memory, a small input's
views are computed by CREATE TABLE and the COPY only writes: benchmarks/profile_analyze_small.py times that).

    python benchmarks/profile_analyze_views.py NORMALIZED [--out DIR] [--threads N] [--explain VIEW ...]
        [--skip VIEW ...]

Prints one line per written view (scratch views that only feed others included) in write order, the total, and
the peak RSS of the process. ``--explain VIEW``: also EXPLAIN ANALYZE that view's query (its inputs read from
their written Parquet files, as in the write loop) and print the plan after the timings. ``--skip VIEW``: leave
default views out of the written set (what analyze would cost if they were written only on request: a view
others read is still computed, into a scratch file when two or more read it).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("normalized", type=Path)
    ap.add_argument("--out", type=Path, help="keep the views here (default: a temporary folder, removed)")
    ap.add_argument("--threads", type=int, help="DuckDB threads (default: DuckDB's, one per core)")
    ap.add_argument("--explain", nargs="*", default=[], help="views to EXPLAIN ANALYZE after writing")
    ap.add_argument("--skip", nargs="*", default=[], help="default views not to write (computed if others read them)")
    args = ap.parse_args()
    c0 = time.process_time()
    import pipeline.analyze as analyze

    print(f"{'import':24s} {time.process_time() - c0:6.2f} CPU-s", flush=True)
    copy = analyze._copy
    times: dict[str, float] = {}

    def timed_copy(con: object, view: str, dest: Path, fmt: str) -> int:
        c = time.process_time()
        w = time.perf_counter()
        rows = copy(con, view, dest, fmt)
        times[view] = time.process_time() - c
        wall = time.perf_counter() - w
        print(f"{view:24s} {times[view]:6.2f} CPU-s {wall:6.2f} s wall  {rows:>10,} rows", flush=True)
        return rows

    analyze._copy = timed_copy  # type: ignore[assignment]
    out = args.out or Path(tempfile.mkdtemp(prefix="profile-analyze-"))
    try:
        c1, w1 = time.process_time(), time.perf_counter()
        con = analyze.connect(args.normalized, views=[])
        if args.threads:
            con.execute(f"SET threads = {int(args.threads)}")
        views = [v for v in analyze.default_views() if v not in args.skip]
        analyze.write_views(con, out, views, ("parquet",), in_memory=False)
        total, wall = time.process_time() - c1, time.perf_counter() - w1
        views_cpu = sum(times.values())
        print(f"{'total (connect + write)':24s} {total:6.2f} CPU-s {wall:6.2f} s wall; views {views_cpu:.2f} CPU-s")
        print(f"peak RSS (this process) {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
        for view in args.explain:
            body = analyze._body(analyze.view_files()[view])
            plan = con.execute(f"EXPLAIN ANALYZE SELECT * FROM ({body})").fetchall()
            print(f"---- EXPLAIN ANALYZE {view}\n{plan[0][1]}")
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
