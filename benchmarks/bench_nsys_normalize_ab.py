"""Whole ``tracepipe normalize`` of one nsys export by two source trees, interleaved round by round: wall, CPU and
peak RSS of each process tree (benchmarks/_measure.py), with the medians; then every output table of the two
trees compared (EXCEPT ALL both ways, row counts and column types), so a speed-up that changes a row is caught.

    python benchmarks/bench_nsys_normalize_ab.py --before /path/to/old/tree --after . --sqlite s1m.sqlite --rounds 4

A tree is a checkout (``git archive <commit> | tar -x -C DIR``); each run imports tracepipe from its tree only.
On a shared machine CPU, not wall, is the comparable figure: the load average is printed at start and end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._measure import Measurement, measure, provenance, rows_only_in  # noqa: E402


def run(tree: Path, src: Path, out: Path) -> Measurement:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "pipeline", "normalize", str(src), "--out", str(out), "-q", "--trace-id", "t"]
    m = measure(cmd, env=env, cwd=tree)
    if m.returncode != 0:
        sys.exit(f"{tree}: normalize exited {m.returncode}")
    return m


def differences(a: Path, b: Path) -> list[str]:
    """Tables whose rows (as multisets) or column types differ between the outputs ``a`` and ``b``."""
    import duckdb

    con = duckdb.connect()
    bad = []
    names = sorted({p.name for p in [*a.iterdir(), *b.iterdir()] if not p.name.startswith(".")})
    for t in names:
        fa, fb = sorted(a.glob(f"{t}/*/*.parquet")), sorted(b.glob(f"{t}/*/*.parquet"))
        if not fa or not fb:
            bad.append(f"{t}: only one side has it")
            continue
        ex = "EXCLUDE (normalized_at_utc, source_mtime_ns, source_path)" if t == "trace_meta" else ""
        ra = f"(SELECT * {ex} FROM read_parquet({[str(f) for f in fa]!r}, hive_partitioning = false))"
        rb = f"(SELECT * {ex} FROM read_parquet({[str(f) for f in fb]!r}, hive_partitioning = false))"
        n = [con.sql(f"SELECT count(*) FROM {r}").fetchall()[0][0] for r in (ra, rb)]
        d = list(rows_only_in(con, f"SELECT * FROM {ra}", f"SELECT * FROM {rb}"))
        types = [con.sql(f"DESCRIBE {r}").fetchall() for r in (ra, rb)]
        same = n[0] == n[1] and d == [0, 0] and types[0] == types[1]
        print(f"  {'same' if same else 'DIFFERENT'} {t:16s} {n[0]:>11,} rows", flush=True)
        if not same:
            bad.append(f"{t}: rows {n}, only-before {d[0]}, only-after {d[1]}")
    con.close()
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=ROOT)
    ap.add_argument("--sqlite", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    args = ap.parse_args()
    print(provenance(), flush=True)
    src = args.sqlite.resolve()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    got: dict[str, list[Measurement]] = {k: [] for k in trees}
    print(f"load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-nsys-ab-", dir=args.tmp) as t:
        outs = {k: Path(t) / k for k in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                shutil.rmtree(outs[name], ignore_errors=True)
                m = run(tree, src, outs[name])
                got[name].append(m)
                print(f"{name:7s} {m.line()}  load {os.getloadavg()[0]:.1f}", flush=True)
        for name, ms in got.items():
            wall, cpu = statistics.median(m.wall_s for m in ms), statistics.median(m.cpu_s for m in ms)
            rss = max(m.peak_rss_bytes for m in ms) / 1e6
            print(f"median {name:7s} wall {wall:6.2f} s  CPU {cpu:6.2f} s  peak RSS max {rss:5.0f} MB", flush=True)
        b, a = (statistics.median(m.cpu_s for m in got[k]) for k in ("before", "after"))
        print(f"CPU after/before {a / b:.3f} ({a / b - 1:+.1%})")
        print(f"load average at end {os.getloadavg()[0]:.1f}")
        print("outputs of the last round, table by table:")
        bad = differences(outs["before"], outs["after"])
        print("every table identical" if not bad else "DIFFERENT: " + "; ".join(bad))


if __name__ == "__main__":
    main()
