"""What DuckDB's Parquet writer options cost on analysis outputs: each file re-written by ``COPY ... TO`` under each
option set, in a seeded random order per round, timed in-process (CPU of every DuckDB thread: time.process_time),
plus the written file's size and the CPU of one full scan of it (the views that read a result back pay that).

    python benchmarks/bench_parquet_write_options.py FILE_OR_DIR ... [--reps 5] [--seed 0] [--threads N]
        [--options "COMPRESSION zstd" "COMPRESSION zstd, WRITE_BLOOM_FILTER false" ...]

The first option set is the baseline of the ratios. Prints one line per file and option set (median CPU-s, wall-s,
MB, scan CPU-s), then the totals over every file with the CPU ratio to the baseline and a 95% bootstrap interval of
the paired per-round ratio of the totals.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._measure import bootstrap_median

DEFAULT_OPTIONS = [
    "COMPRESSION zstd",
    "COMPRESSION zstd, WRITE_BLOOM_FILTER false",
]


def parquet_files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out += sorted(p.glob("*.parquet")) if p.is_dir() else [p]
    return out


def timed(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, str]) -> tuple[float, float]:
    c, w = time.process_time(), time.perf_counter()
    con.execute(sql, params).fetchall()
    return time.process_time() - c, time.perf_counter() - w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--options", nargs="+", default=DEFAULT_OPTIONS)
    args = ap.parse_args()
    files = parquet_files(args.paths)
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    if args.threads:
        con.execute(f"SET threads = {int(args.threads)}")
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="bench-pq-opts-"))
    # cpu[opt][file] -> per-round CPU-s; same for wall, scan; size[opt][file] -> bytes
    cpu = {o: {f: [] for f in files} for o in args.options}
    wall = {o: {f: [] for f in files} for o in args.options}
    scan = {o: {f: [] for f in files} for o in args.options}
    size: dict[str, dict[Path, int]] = {o: {} for o in args.options}
    for _ in range(args.reps):
        for f in files:
            order = list(args.options)
            rng.shuffle(order)
            for opt in order:
                dest = tmp / "out.parquet"
                c, w = timed(
                    con,
                    f"COPY (SELECT * FROM read_parquet($src)) TO $dest (FORMAT parquet, {opt})",
                    {"src": str(f), "dest": str(dest)},
                )
                cpu[opt][f].append(c)
                wall[opt][f].append(w)
                size[opt][f] = dest.stat().st_size
                s, _ = timed(con, "SELECT max(COLUMNS(*)) FROM read_parquet($dest)", {"dest": str(dest)})
                scan[opt][f].append(s)
                dest.unlink()
    base = args.options[0]
    for f in files:
        rows = con.execute("SELECT count(*) FROM read_parquet($f)", {"f": str(f)}).fetchall()[0][0]
        print(f"{f.name} ({rows:,} rows)")
        for opt in args.options:
            med = statistics.median(cpu[opt][f])
            print(
                f"  {opt:60s} write {med:6.2f} CPU-s {statistics.median(wall[opt][f]):6.2f} wall-s "
                f"{size[opt][f] / 1e6:8.1f} MB  scan {statistics.median(scan[opt][f]):5.2f} CPU-s  "
                f"write vs base {med / statistics.median(cpu[base][f]):.2f}"
            )
    print(f"all {len(files)} files, {args.reps} rounds (seed {args.seed}):")
    totals = {o: [sum(cpu[o][f][r] for f in files) for r in range(args.reps)] for o in args.options}
    scans = {o: [sum(scan[o][f][r] for f in files) for r in range(args.reps)] for o in args.options}
    for opt in args.options:
        paired = [a / b for a, b in zip(totals[opt], totals[base], strict=True)]
        lo, hi = bootstrap_median(paired)
        mb = sum(size[opt].values()) / 1e6
        print(
            f"  {opt:60s} write {statistics.median(totals[opt]):7.2f} CPU-s  {mb:8.1f} MB  "
            f"scan {statistics.median(scans[opt]):6.2f} CPU-s  write vs base {statistics.median(paired):.3f} "
            f"[{lo:.3f} .. {hi:.3f}]"
        )
    tmp.rmdir()


if __name__ == "__main__":
    sys.exit(main())
