"""Chrome normalize, two source trees, interleaved: what a change costs on bench_chrome's synthetic trace.

    PYTHONPATH=. python benchmarks/bench_chrome_before_after.py TREE_BEFORE TREE_AFTER --mb 500 --repeat 3

Each run is ``TREE/benchmarks/bench_chrome.py --child ours TRACE`` (that tree's normalizer, its own process)
measured from outside by ``benchmarks/_measure.py``: wall, CPU of the whole process tree, peak RSS of the
tree.  Runs alternate before/after so that a slow spell of a shared machine hits both.  Both trees' kernels
must agree kernel by kernel (bench_chrome's digest) and their ``ops`` tables row by row (sha256 of every
row, call_stack included).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._measure import measure, median, provenance
from benchmarks.bench_chrome import generate

OPS_DIGEST = """
import hashlib, sys, tempfile
from pathlib import Path
import duckdb
from pipeline.normalize import normalize_file
with tempfile.TemporaryDirectory() as out:
    normalize_file(Path(sys.argv[1]), Path(out))
    files = f"read_parquet('{out}/ops/*/*.parquet', hive_partitioning = true)"
    rows = duckdb.sql(f"SELECT * EXCLUDE (trace_id) FROM {files} ORDER BY op_id").fetchall()
h = hashlib.sha256()
for r in rows:
    h.update(repr(r).encode())
print(len(rows), h.hexdigest())
"""


def ops_digest(tree: Path, trace: Path) -> str:
    return subprocess.run(
        [sys.executable, "-c", OPS_DIGEST, str(trace)], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--mb", type=float, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trace", type=Path, help="an existing bench_chrome trace instead of generating one")
    args = ap.parse_args()
    print(provenance())
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    with tempfile.TemporaryDirectory(prefix="bench-chrome-ba-") as tmp:
        path = args.trace or Path(tmp) / "trace.json"
        if not args.trace:
            t = time.perf_counter()
            n = generate(path, args.mb)
            print(f"synthetic trace: {path.stat().st_size / 1e6:.0f} MB, {n} events ({time.perf_counter() - t:.1f} s)")
        digests = {name: ops_digest(tree, path) for name, tree in trees.items()}
        print(f"ops rows and sha256 of every row: {digests}")
        assert digests["before"] == digests["after"], "the two trees' ops tables differ"
        runs: dict[str, list] = {name: [] for name in trees}
        for i in range(args.repeat):
            for name, tree in trees.items():
                script = str(tree / "benchmarks" / "bench_chrome.py")
                m = measure([sys.executable, script, "--child", "ours", str(path)])
                child = json.loads(m.stdout.strip().splitlines()[-1])
                runs[name].append((m, child))
                print(f"run {i + 1} {name:6s} {m.line()}  (kernels {child['kernels']}, "
                      f"sha256 {child['kernel_sha256'][:16]})", flush=True)  # fmt: skip
        kernels = {(c["kernels"], c["kernel_sha256"]) for rs in runs.values() for _, c in rs}
        assert len(kernels) == 1, kernels
        med = {
            name: (median([m.wall_s for m, _ in rs]), median([m.cpu_s for m, _ in rs]),
                   max(m.peak_rss_bytes for m, _ in rs))
            for name, rs in runs.items()
        }  # fmt: skip
        b, a = med["before"], med["after"]
        print(
            f"median wall: before {b[0]:.2f} s, after {a[0]:.2f} s ({a[0] / b[0]:.3f}x); median tree CPU: before "
            f"{b[1]:.2f} s, after {a[1]:.2f} s ({a[1] / b[1]:.3f}x, {a[1] - b[1]:+.2f} s); peak RSS (tree): before "
            f"{b[2] / 1e6:.0f} MB, after {a[2] / 1e6:.0f} MB"
        )


if __name__ == "__main__":
    main()
