"""Benchmark: normalizing many per-rank nsys captures serially, on the local process pool and on Dask.

Each rank's input is a real-format nsys ``.sqlite``: a copy of the real H200 sample with its steady-state
window (the 33 kernels, their 33 launch calls and the 25 NVTX ranges around them) repeated with SQL until the
file holds ``--kernels`` kernels, so ``normalize`` does its real work (joins, nesting, Parquet). One file is
generated per size and copied to ``rank<r>/nsys.sqlite`` for every rank. For each rank count and executor the
batch runs in a fresh subprocess, and a sampler reads the RSS of that process's whole tree (pool workers,
forkserver, Dask nanny and workers) every 50 ms; each worker also reports its own ``ru_maxrss``.

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
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "h200_smallcnn" / "nsys.sqlite.gz"
sys.path.insert(0, str(ROOT))

MODES = ("serial", "pool", "dask")


def generate_rank_sqlite(dest: Path, kernels: int) -> int:
    """The real sample with its kernel window repeated to ``kernels`` kernels; returns the kernel count."""
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
    corr = db.execute(f"SELECT max(correlationId) + 1 FROM {r}").fetchone()[0]
    copies = max(1, -(-kernels // base))  # ceil

    def repeat(table: str, where: str) -> None:
        cols = [c for (_, c, *_) in db.execute(f"PRAGMA table_info({table})")]
        shifted = {
            "start": f"start + i * {period}",
            "end": f'"end" + i * {period}',
            "correlationId": f"correlationId + i * {corr}",
        }
        select = ", ".join(shifted.get(c, f'"{c}"') for c in cols)
        db.execute(
            f"""INSERT INTO {table} ({", ".join(f'"{c}"' for c in cols)})
                WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {copies - 1})
                SELECT {select} FROM s, (SELECT * FROM {table} WHERE {where}) ORDER BY i"""
        )

    if copies > 1:
        # The templates are read before the insert adds rows (SQLite materialises an INSERT ... SELECT
        # from the same table first), so each table grows to exactly `copies` windows.
        repeat(k, "1")
        repeat(r, launches)
        repeat(n, "eventType = 59")
    db.commit()
    total = db.execute(f"SELECT count(*) FROM {k}").fetchone()[0]
    db.close()
    return total


class TreeSampler:
    """Peak RSS of a process and all its descendants: the largest single process and the largest sum."""

    def __init__(self, pid: int, every_s: float = 0.05) -> None:
        self.root = psutil.Process(pid)
        self.every_s = every_s
        self.peak_total = self.peak_one = 0
        self.cpu: dict[int, float] = {}  # pid -> CPU seconds last seen (short-lived workers lose <= every_s)
        self._machine0 = psutil.cpu_times()
        self._t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                break
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    t = p.cpu_times()
                except psutil.Error:
                    continue
                self.cpu[p.pid] = t.user + t.system
                total += rss
                self.peak_one = max(self.peak_one, rss)
            self.peak_total = max(self.peak_total, total)
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        wall = time.perf_counter() - self._t0
        m0, m1 = self._machine0, psutil.cpu_times()
        busy = lambda t: sum(t) - t.idle - getattr(t, "iowait", 0.0)  # noqa: E731
        self.tree_cpu_s = sum(self.cpu.values())
        # Cores busy with other people's work meanwhile (this is a shared machine): context for the timings.
        self.others_cores = max(0.0, (busy(m1) - busy(m0)) - self.tree_cpu_s) / wall


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


def measure(inputs: Path, out: Path, mode: str, jobs: int) -> dict:
    cmd = [sys.executable, __file__, "--child", str(inputs), str(out), mode, str(jobs)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = TreeSampler(proc.pid)
    stdout, stderr = proc.communicate()
    sampler.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} run failed:\n{stderr[-3000:]}")
    r = json.loads(stdout.strip().splitlines()[-1])
    r.update(
        mode=mode,
        tree_peak_rss=sampler.peak_total,
        one_peak_rss=sampler.peak_one,
        cpu_s=sampler.tree_cpu_s,
        others_cores=sampler.others_cores,
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
    with tempfile.TemporaryDirectory(prefix="bench-ranks-", dir=args.tmp) as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        template = root / "template.sqlite"
        kernels = generate_rank_sqlite(template, int(args.kernels))
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
                m = measure(inputs, root / "out", mode, args.jobs)
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
    print("\ntime per file by mode (s), by rank count:")
    for mode in modes:
        row = {r["ranks"]: r["seconds"] / r["files"] for r in results if r["mode"] == mode}
        print(f"  {mode:<7}" + "  ".join(f"{n}: {row[n]:.2f}" for n in ranks))
    print(
        "worker GB: largest ru_maxrss a worker reported (pool: one process per input); 1 proc GB / tree GB: "
        "sampled peak of the largest process / of the sum over the batch's process tree (shared pages counted "
        "in each process); CPU s: CPU time of the tree; others: cores other users' processes kept busy meanwhile"
    )


if __name__ == "__main__":
    main()
