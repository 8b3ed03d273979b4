"""Chrome normalize of one trace by several source trees, interleaved: CPU and wall of each tree's own bench child.

    python benchmarks/bench_chrome_trees.py TRACE --repeat 7 base=/path/to/tree pre=/path head=.

Each run is ``cd TREE && PYTHONPATH=TREE python TREE/benchmarks/bench_chrome.py --child ours TRACE`` (that tree's
normalize_file in a fresh process; its timed section is import + normalize, its CPU the process plus the
decode workers it reaped), one unmeasured warm-up run per tree first, then rounds in tree order so that a
slow spell of a shared machine hits every tree.  Prints each run with the 1-minute load average, then
medians and each tree's ratio to the first.  Trees that report a kernel digest must agree on it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._measure import provenance


def child(tree: Path, trace: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "bench_chrome.py"), "--child", "ours", str(trace)],
        cwd=tree, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("trees", nargs="+", help="NAME=PATH, the first is the reference")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.trees)}
    print(provenance())
    names = ", ".join(f"{n}={p}" for n, p in trees.items())
    print(f"trace: {args.trace} ({args.trace.stat().st_size / 1e6:.0f} MB); trees: {names}")
    for tree in trees.values():
        child(tree, args.trace)  # warm-up: page cache, bytecode
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for i in range(args.repeat):
        for name, tree in trees.items():
            r = child(tree, args.trace)
            runs[name].append(r)
            load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
            print(f"run {i + 1} {name:8s} cpu {r['cpu']:6.3f} s  wall {r['secs']:6.3f} s  load {load}", flush=True)
    digests = {r["kernel_sha256"] for rs in runs.values() for r in rs if "kernel_sha256" in r}
    assert len(digests) <= 1, f"the trees' kernels differ: {digests}"
    first = next(iter(trees))
    ref_cpu, ref_wall = median(r["cpu"] for r in runs[first]), median(r["secs"] for r in runs[first])
    for name, rs in runs.items():
        cpu, wall = median(r["cpu"] for r in rs), median(r["secs"] for r in rs)
        print(
            f"median {name:8s} cpu {cpu:.3f} s ({cpu / ref_cpu - 1:+.1%} vs {first})  "
            f"wall {wall:.3f} s ({wall / ref_wall - 1:+.1%})"
        )
    if digests:
        print(f"kernels identical in every run that reports them (sha256 {next(iter(digests))[:16]})")


if __name__ == "__main__":
    main()
