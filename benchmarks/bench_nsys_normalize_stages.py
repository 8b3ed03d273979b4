"""nsys normalize stage by stage, the one-query SQL reads against the raw-column reads (``nsys_raw``), interleaved;
then the whole ``tracepipe normalize`` process tree (wall, CPU, peak RSS) of the code as it is.

    python benchmarks/bench_nsys_normalize_stages.py [--sqlite FILE] [--kernels 1000000] [--rounds 5]

Without ``--sqlite`` the input is ``bench_ranks.generate_rank_sqlite(..., threads=8, ranges=kernels // 10)``
(issue 18.3's shape scaled down). A stage's figure is the CPU time (``time.process_time``) of this process
writing that one table to Parquet, sqlite read included: on a shared machine CPU, not wall, is the measure.
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
from pipeline.normalize import nsys  # noqa: E402
from pipeline.store import TraceWriter  # noqa: E402


def stage(path: Path, table: str, raw: bool, tmp: Path) -> float:
    """CPU seconds to write ``table`` of ``path`` with the raw reads on or off."""
    nsys.RAW_READS = raw
    writer = TraceWriter(tmp / f"out-{time.time_ns()}", "bench")
    try:
        c = time.process_time()
        if table == "kernels":
            nsys.write_kernels_in(path, path, writer)
        else:
            db = nsys.Sqlite(path, path)
            nsys._usable_tables(db)
            stored = nsys.api_calls_sql(db, True)
            readers = [lambda: nsys.nsys_raw.api_call_batches(db)] if raw and stored is not None else []
            readers += nsys._stored_sql(db, stored)
            nsys._write_in_order(writer, "api_calls", "call_id", db, readers, nsys.api_calls_sql(db))
            db.close()
        return time.process_time() - c
    finally:
        writer.abort()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sqlite", type=Path)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    args = ap.parse_args()
    print(provenance(), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-nsys-stages-", dir=args.tmp) as t:
        tmp = Path(t)
        path = args.sqlite
        if path is None:
            path = tmp / "cap" / "nsys.sqlite"
            path.parent.mkdir()
            n = generate_rank_sqlite(path, args.kernels, threads=8, ranges=args.kernels // 10)
            print(f"input: {n:,} kernels, 8 threads, ~{args.kernels // 10:,} ranges (bench_ranks)", flush=True)
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
        got: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for table in ("kernels", "api_calls"):
                for mode in ("sql", "raw"):
                    got.setdefault((table, mode), []).append(stage(path, table, mode == "raw", tmp))
        for table in ("kernels", "api_calls"):
            sql, raw = (statistics.median(got[table, m]) for m in ("sql", "raw"))
            each = "  ".join(f"{m}: " + " ".join(f"{x:.2f}" for x in got[table, m]) for m in ("sql", "raw"))
            print(f"{table:10s} CPU-s median  one-query SQL {sql:5.2f}  raw columns {raw:5.2f}  ({raw / sql - 1:+.0%})")
            print(f"           rounds  {each}")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for _ in range(2):
            out = tmp / "n"
            m = measure([sys.executable, "-m", "pipeline", "normalize", str(path), "--out", str(out), "-q"], env=env)
            print(f"tracepipe normalize (whole, this code)  {m.line()}", flush=True)
            shutil.rmtree(out)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
