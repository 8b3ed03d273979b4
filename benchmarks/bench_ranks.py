"""Benchmark: normalizing many per-rank nsys captures serially, on the local process pool and on Dask.

Each rank's input is a real-format nsys ``.sqlite``: a copy of the real H200 sample with its steady-state
window (the 33 kernels, their 33 launch calls and the 25 NVTX ranges around them) repeated with SQL until the
file holds ``--kernels`` kernels, so ``normalize`` does its real work (joins, nesting, Parquet). One file is
generated per size and copied to ``rank<r>/nsys.sqlite`` for every rank. For each rank count and executor the
batch runs in a fresh subprocess measured by ``benchmarks/_measure.py``: wall, CPU of its whole process tree
(pool workers, forkserver, Dask nanny and workers), and the sampled peak RSS of that tree; each worker also
reports its own ``ru_maxrss``.  Every rank's normalized kernels are checked against its input, kernel by
kernel; wall and CPU ratios against the serial run are printed side by side.

    python benchmarks/bench_ranks.py                                   # 8..64 ranks x 1M kernels (the target)
    python benchmarks/bench_ranks.py --ranks 8,16 --kernels 100000     # quick
Generated files go under --tmp (default /tmp) and are removed afterwards.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import psutil
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "h200_smallcnn" / "nsys.sqlite.gz"
sys.path.insert(0, str(ROOT))
from benchmarks._measure import measure, provenance  # noqa: E402

MODES = ("serial", "pool", "dask")


def generate_rank_sqlite(dest: Path, kernels: int, threads: int = 1, ranges: int | None = None) -> int:
    """The real sample with its kernel window repeated to ``kernels`` kernels; returns the kernel count.

    ``threads``: copy ``i`` of the window is launched from thread ``i % threads`` of the process (its launch
    calls and NVTX ranges move there). ``ranges``: about this many NVTX ranges in all (the window's push/pop
    ranges are kept in every n-th copy only; default: in every copy, ~0.76 ranges per kernel)."""
    with gzip.open(SAMPLE, "rb") as f, open(dest, "wb") as g:
        shutil.copyfileobj(f, g)
    db = sqlite3.connect(dest)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    k, r, n = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
    launches = f"correlationId IN (SELECT correlationId FROM {k})"
    base = db.execute(f"SELECT count(*) FROM {k}").fetchone()[0]
    lo, hi = db.execute(
        f"""SELECT min(s), max(e) FROM (
              SELECT start AS s, "end" AS e FROM {k}
              UNION ALL SELECT start, "end" FROM {r} WHERE {launches}
              UNION ALL SELECT start, "end" FROM {n} WHERE eventType = 59)"""
    ).fetchone()
    period = hi - lo + 1000  # one copy of the window after the other, never overlapping
    # Copies start after the last row of the sample (its calls and ranges after the window too), so each table
    # stays stored in start order, as nsys exports store them.
    last = db.execute(
        f"SELECT max(s) FROM (SELECT max(start) AS s FROM {k} UNION ALL SELECT max(start) FROM {r} "
        f"UNION ALL SELECT max(start) FROM {n})"
    ).fetchone()[0]
    tail = max(0, last - hi)
    corr = db.execute(f"SELECT max(correlationId) + 1 FROM {r}").fetchone()[0]
    copies = max(1, -(-kernels // base))  # ceil

    window_ranges = db.execute(f"SELECT count(*) FROM {n} WHERE eventType = 59").fetchone()[0]
    every = max(1, copies * window_ranges // ranges) if ranges else 1

    def repeat(table: str, where: str, copy_where: str = "1") -> None:
        cols = [c for (_, c, *_) in db.execute(f"PRAGMA table_info({table})")]
        shifted = {
            "start": f"start + {tail} + i * {period}",
            "end": f'"end" + {tail} + i * {period}',
            "correlationId": f"correlationId + i * {corr}",
            "globalTid": f"globalTid + i % {threads}",  # the low 24 bits are the thread id
        }
        select = ", ".join(shifted.get(c, f'"{c}"') for c in cols)
        db.execute(
            f"""INSERT INTO {table} ({", ".join(f'"{c}"' for c in cols)})
                WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {copies - 1})
                SELECT {select} FROM s, (SELECT * FROM {table} WHERE {where}) WHERE {copy_where} ORDER BY i"""
        )

    if copies > 1:
        # The templates are read before the insert adds rows (SQLite materialises an INSERT ... SELECT
        # from the same table first), so each table grows to exactly `copies` windows.
        repeat(k, "1")
        repeat(r, launches)
        repeat(n, "eventType = 59", f"i % {every} = 0")
    db.commit()
    total = db.execute(f"SELECT count(*) FROM {k}").fetchone()[0]
    db.close()
    return total


def expected_kernels(template: Path) -> tuple[int, int]:
    """Count and order-free fingerprint (DuckDB's hash, summed) of every kernel of one rank's input, read
    with sqlite3: (correlation id, start ns, end ns).  Each rank's output must give exactly these."""
    rows = sqlite3.connect(template).execute('SELECT correlationId, start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL')
    table = pa.Table.from_pylist([{"c": c, "s": st, "e": e} for c, st, e in rows])
    con = duckdb.connect()
    con.register("expected", table)
    n, h = con.execute("SELECT count(*), sum(hash(c, s, e)::HUGEINT) FROM expected").fetchone()
    return n, int(h)


def check_kernels(out: Path, files: int, expected: tuple[int, int]) -> None:
    """Every rank's normalized kernels equal its input's, kernel by kernel (not only their number)."""
    from pipeline.store import table_glob

    got = (
        duckdb.connect()
        .execute(
            f"SELECT trace_id, count(*), sum(hash(correlation_id, start_ns, end_ns)::HUGEINT) "
            f"FROM read_parquet('{table_glob(out, 'kernels')}') GROUP BY trace_id"
        )
        .fetchall()
    )
    bad = [(t, n, int(h)) for t, n, h in got if (n, int(h)) != expected]
    assert len(got) == files and not bad, f"kernels differ from the input: {bad[:3]} (of {len(got)} traces)"


def child(inputs: str, out: str, mode: str, jobs: int) -> None:
    """Runs in a subprocess: one batch, printed as JSON."""
    from pipeline.cli import expand_inputs
    from pipeline.normalize.batch import normalize_many

    files = expand_inputs((Path(inputs),))
    cluster = None
    setup = 0.0
    kwargs: dict[str, object] = {}
    if mode == "pool":
        kwargs["jobs"] = jobs
    elif mode == "dask":
        from dask.distributed import LocalCluster

        t0 = time.perf_counter()
        cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None)
        setup = time.perf_counter() - t0
        kwargs["scheduler"] = cluster.scheduler_address
    t0 = time.perf_counter()
    outcomes = list(normalize_many(files, Path(out), force=True, **kwargs))  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    if cluster is not None:
        cluster.close()
    errors = [o.error for o in outcomes if o.error]
    assert not errors, errors
    kernels = sum(o.result.rows.get("kernels", 0) for o in outcomes if o.result)
    worker_peak = max(o.peak_rss_bytes for o in outcomes)
    print(
        json.dumps(
            {
                "files": len(outcomes),
                "kernels": kernels,
                "seconds": seconds,
                "setup_s": setup,
                "workers": len({o.worker_pid for o in outcomes}),
                "worker_peak_rss": worker_peak,
            }
        )
    )


def busy_cores() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def run_batch(inputs: Path, out: Path, mode: str, jobs: int, expected: tuple[int, int]) -> dict:
    """One batch in a fresh process, measured by benchmarks/_measure.py (wall, CPU of the whole tree, peak
    RSS of the whole tree), then its output checked kernel by kernel."""
    busy0 = busy_cores()
    m = measure([sys.executable, __file__, "--child", str(inputs), str(out), mode, str(jobs)])
    r = json.loads(m.stdout.strip().splitlines()[-1])
    check_kernels(out, r["files"], expected)
    r.update(
        mode=mode,
        tree_peak_rss=m.peak_rss_bytes,
        one_peak_rss=m.max_single_rss_bytes,
        cpu_s=m.cpu_s,
        # Cores busy with other people's work meanwhile (this is a shared machine): context for the timings.
        others_cores=max(0.0, busy_cores() - busy0 - m.cpu_s) / m.wall_s,
    )
    shutil.rmtree(out, ignore_errors=True)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="8,16,32,64", help="comma-separated rank counts")
    ap.add_argument("--kernels", type=float, default=1e6, help="kernels per rank")
    ap.add_argument("--jobs", type=int, default=2, help="pool workers / Dask workers")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.child[2], int(args.child[3]))
        return
    ranks = sorted(int(x) for x in args.ranks.split(","))
    modes = args.modes.split(",")
    gb = 1 << 30
    print(provenance())
    with tempfile.TemporaryDirectory(prefix="bench-ranks-", dir=args.tmp) as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        template = root / "template.sqlite"
        kernels = generate_rank_sqlite(template, int(args.kernels))
        expected = expected_kernels(template)
        size = template.stat().st_size
        print(
            f"generated one rank: {kernels:,} kernels, {size / 2**20:.0f} MiB sqlite in "
            f"{time.perf_counter() - t0:.1f} s; {args.jobs} workers; machine has {psutil.cpu_count()} cores",
            flush=True,
        )
        print(
            f"{'ranks':>5} {'mode':<7}{'seconds':>9}{'files/s':>9}{'Mkernels/s':>11}{'setup s':>8}"
            f"{'worker GB':>10}{'1 proc GB':>10}{'tree GB':>8}{'CPU s':>8}{'others':>7}",
            flush=True,
        )
        results = []
        for n in ranks:
            inputs = root / f"ranks{n}"
            for r in range(n):
                (inputs / f"rank{r}").mkdir(parents=True)
                shutil.copy(template, inputs / f"rank{r}" / "nsys.sqlite")
            for mode in modes:
                m = run_batch(inputs, root / "out", mode, args.jobs, expected)
                m["ranks"] = n
                results.append(m)
                print(
                    f"{n:>5} {mode:<7}{m['seconds']:>9.1f}{m['files'] / m['seconds']:>9.2f}"
                    f"{m['kernels'] / m['seconds'] / 1e6:>11.2f}{m['setup_s']:>8.1f}"
                    f"{m['worker_peak_rss'] / gb:>10.2f}{m['one_peak_rss'] / gb:>10.2f}{m['tree_peak_rss'] / gb:>8.2f}"
                    f"{m['cpu_s']:>8.1f}{m['others_cores']:>7.2f}",
                    flush=True,
                )
            shutil.rmtree(inputs)
    print(
        "\nagainst serial, per rank count: wall ratio (serial / mode: > 1 faster) and CPU ratio (mode / serial: "
        "> 1 costs more CPU)"
    )
    for n in ranks:
        by = {r["mode"]: r for r in results if r["ranks"] == n}
        if "serial" in by:
            cells = [
                f"{mode} wall {by['serial']['seconds'] / by[mode]['seconds']:.2f}x, "
                f"CPU {by[mode]['cpu_s'] / by['serial']['cpu_s']:.2f}x"
                for mode in modes
                if mode != "serial"
            ]
            print(f"  {n:>3} ranks: " + "; ".join(cells))
    print(f"per-kernel check: every rank's {expected[0]:,} kernels equal its input's (correlation id, start, end)")
    print("\ntime per file by mode (s), by rank count:")
    for mode in modes:
        row = {r["ranks"]: r["seconds"] / r["files"] for r in results if r["mode"] == mode}
        print(f"  {mode:<7}" + "  ".join(f"{n}: {row[n]:.2f}" for n in ranks))
    print(
        "worker GB: largest ru_maxrss a worker reported (pool: one process per input); 1 proc GB: the largest "
        "process's own peak; tree GB: sampled peak of the sum over the batch's process tree (shared pages counted "
        "in each process); CPU s: CPU of the whole tree (wait4); others: cores other users' processes kept busy"
    )


if __name__ == "__main__":
    main()
