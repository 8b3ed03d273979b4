"""Chrome normalize of one trace by several source trees, interleaved, each measured by the same harness.

    python benchmarks/bench_chrome_trees.py TRACE --repeat 7 base=/path/to/tree pre=/path head=.

Each run is a fresh ``python benchmarks/bench_chrome_trees.py --child TREE TRACE`` of *this* file, whatever the
tree: the child puts TREE first on ``sys.path`` and times import of ``pipeline.normalize`` + ``normalize_file``
into a temporary folder.  Wall and CPU are of that section only (CPU: this process's plus the decode workers it
reaped, each as the difference of ``getrusage`` across the section), so the harness's own imports and the
interpreter's start count for no tree.  (Until 2026-12-04 each tree ran its *own* bench_chrome.py child, whose CPU
was the whole process's: the head's child imported ``benchmarks._measure`` (psutil, platform: ~0.06 CPU-s) at
module level and the base's did not, so the head was charged ~3% of the 100 MB trace's CPU for its harness.)
Then the kernels written (correlation id, start ns, duration ns) are hashed outside the timed section; every
tree must give the same ones.

Every tree's ``pipeline`` is byte-compiled first (``compileall``), then one unmeasured warm-up run per
tree, then rounds, the order reversed every other round (A B, B A, ...) so
that neither a slow spell of a shared machine nor a drift within a round favours one tree.  Prints each run with
the 1-minute load average, then per tree: medians and their ratio to the first tree, the median of the
per-round paired ratios (tree / first, same round) and a 95% bootstrap interval of that median (10,000
resamples of the rounds, fixed seed).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path
from statistics import median


def _child(tree: str, trace: str) -> None:
    import importlib.util
    import resource
    import tempfile
    import time

    sys.path.insert(0, tree)

    def cpu() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    out = tempfile.TemporaryDirectory(prefix="bench-chrome-trees-")
    c0, t0 = cpu(), time.perf_counter()
    from pipeline.normalize import normalize_file

    res = normalize_file(Path(trace), Path(out.name))
    secs, used = time.perf_counter() - t0, cpu() - c0
    import pyarrow.dataset as pads

    import pipeline

    assert Path(pipeline.__file__).resolve().is_relative_to(Path(tree).resolve()), pipeline.__file__
    table = pads.dataset(Path(out.name) / "kernels", format="parquet").to_table(
        columns=["correlation_id", "start_ns", "duration_ns"]
    )
    out.cleanup()
    # bench_chrome's per-kernel digest, loaded from beside this file (``benchmarks`` on sys.path is the tree's)
    spec = importlib.util.spec_from_file_location("_bench_chrome", Path(__file__).with_name("bench_chrome.py"))
    bench_chrome = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_chrome)
    columns = (table.column(c).to_pylist() for c in table.column_names)
    digest = bench_chrome._kernel_digest(list(zip(*columns, strict=True)))
    print(json.dumps({"secs": secs, "cpu": used, "rows": sum(res.rows.values()), **digest}))


def child(tree: Path, trace: Path) -> dict:
    """One run; the child puts ``tree`` ahead of PYTHONPATH (which may hold the site of duckdb and msgspec)."""
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(tree), str(trace)], cwd=tree, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"the child for {tree} failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bootstrap_median(values: list[float], resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the median of ``values`` resampled with replacement."""
    rng = random.Random(seed)
    meds = sorted(median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._measure import provenance

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
        # Bytecode written for every tree first: where PYTHONDONTWRITEBYTECODE is set (this project's CI and dev
        # boxes) a tree without it, or with sources newer than it, would compile its modules in every run.
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(tree / "pipeline")], check=True, capture_output=True
        )
        child(tree, args.trace)  # warm-up: page cache
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for i in range(args.repeat):
        order = list(trees.items()) if i % 2 == 0 else list(trees.items())[::-1]
        for name, tree in order:
            r = child(tree, args.trace)
            runs[name].append(r)
            load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
            print(f"run {i + 1} {name:8s} cpu {r['cpu']:6.3f} s  wall {r['secs']:6.3f} s  load {load}", flush=True)
    digests = {r["kernel_sha256"] for rs in runs.values() for r in rs}
    assert len(digests) == 1, f"the trees' kernels differ: {digests}"
    first = next(iter(trees))
    ref_cpu, ref_wall = median(r["cpu"] for r in runs[first]), median(r["secs"] for r in runs[first])
    for name, rs in runs.items():
        cpu, wall = median(r["cpu"] for r in rs), median(r["secs"] for r in rs)
        print(
            f"median {name:8s} cpu {cpu:.3f} s ({cpu / ref_cpu - 1:+.1%} vs {first})  "
            f"wall {wall:.3f} s ({wall / ref_wall - 1:+.1%})"
        )
    for name, rs in list(runs.items())[1:]:
        for key, label in (("cpu", "cpu"), ("secs", "wall")):
            ratios = [r[key] / b[key] for r, b in zip(rs, runs[first], strict=True)]
            lo, hi = bootstrap_median(ratios)
            print(
                f"paired {name:8s} {label:4s} median of {len(ratios)} ratios {median(ratios) - 1:+.1%} vs {first} "
                f"(95% bootstrap interval {lo - 1:+.1%} .. {hi - 1:+.1%})"
            )
    kernels = next(iter(runs.values()))[0]["kernels"]
    print(f"kernels identical in every run: {kernels:,} (sha256 {next(iter(digests))[:16]})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(*sys.argv[2:4])
    else:
        main()
