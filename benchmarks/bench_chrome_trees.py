"""Chrome normalize of one trace by several source trees, interleaved, each measured by the same harness.

    python benchmarks/bench_chrome_trees.py TRACE --repeat 7 base=/path/to/tree pre=/path head=.
    python benchmarks/bench_chrome_trees.py --pool OUTPUT1 OUTPUT2 ...   # rounds of earlier runs, as one sample

Each run is a fresh ``python benchmarks/bench_chrome_trees.py --child TREE TRACE`` of *this* file, whatever the
tree: the child puts TREE first on ``sys.path`` and times import of ``pipeline.normalize`` + ``normalize_file``
into a temporary folder.  Wall and CPU are of that section only (CPU: this process's plus the decode workers it
reaped, each as the difference of ``getrusage`` across the section), so the harness's own imports and the
interpreter's start count for no tree.  (Until 2026-12-04 each tree ran its *own* bench_chrome.py child, whose CPU
was the whole process's: the head's child imported ``benchmarks._measure`` (psutil, platform: ~0.06 CPU-s) at
module level and the base's did not, so the head was charged ~3% of the 100 MB trace's CPU for its harness.)
Then the kernels written (correlation id, start ns, duration ns) are hashed outside the timed section; every
tree must give the same ones.

Every process runs with bytecode written and read under one private ``PYTHONPYCACHEPREFIX`` (and
PYTHONDONTWRITEBYTECODE unset), every tree's ``pipeline`` is byte-compiled there first (``compileall``), then one
unmeasured warm-up run per tree writes the bytecode of every other module it imports, then rounds, each in its own
random order (seeded: ``--seed``), so that neither a slow spell of a shared machine nor a place in the round
favours one tree. (Until 2026-12-04 the order was reversed every other round, so each tree kept its places: with
three trees the second always ran in the middle; on the GPU host two copies of one tree then differed by 6.5% in
wall, 95% interval -10.1% .. -2.3%.) Prints each run with the 1-minute load average, then per tree: medians and
their ratio to the first tree, the median of the per-round paired ratios (tree / first, same round) and a 95%
bootstrap interval of that median (10,000 resamples of the rounds, fixed seed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
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


def summary(runs: dict[str, list[dict]]) -> None:
    """Medians per tree against the first, and per-round paired ratios (runs[name][i]: round i of that tree)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the parent's, not a child's tree
    from benchmarks._measure import bootstrap_median

    first = next(iter(runs))
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


def run_sections(text: str) -> list[tuple[list[str], list[tuple[str, dict]]]]:
    """Each run of this script in ``text`` (an output, or several concatenated): its tree names in order (from its
    "trees:" line) and its rounds as (tree name, {"cpu", "secs"})."""
    out: list[tuple[list[str], list[tuple[str, dict]]]] = []
    for line in text.splitlines():
        if m := re.search(r"trees: (.*)$", line):
            out.append(([name.split("=", 1)[0] for name in m.group(1).split(", ")], []))
        elif (m := re.match(r"run (\d+) (\S+)\s+cpu\s+([\d.]+) s\s+wall\s+([\d.]+) s", line)) and out:
            out[-1][1].append((m.group(2), {"cpu": float(m.group(3)), "secs": float(m.group(4))}))
    return out


def pool(files: list[str]) -> None:
    """``summary`` over the rounds of several earlier outputs of this script, as one sample: the runs with the first
    run's trees (the first of them is the reference); a run of other trees (a results file may concatenate
    several) is left out and named."""
    sections = [(f, names, rounds) for f in files for names, rounds in run_sections(Path(f).read_text())]
    if not sections:
        raise SystemExit(f"no run of this script in {', '.join(files)}")
    reference = sections[0][1]
    runs: dict[str, list[dict]] = {name: [] for name in reference}
    for f, names, rounds in sections:
        if names != reference:
            print(f"left out: a run of {f} with trees {', '.join(names)} (pooled: {', '.join(reference)})")
            continue
        for name, r in rounds:
            runs[name].append(r)
    print(f"pooled rounds of: {', '.join(files)}")
    summary(runs)


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._measure import provenance

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("trees", nargs="+", help="NAME=PATH, the first is the reference")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="of the rounds' orders")
    args = ap.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.trees)}
    print(provenance())
    names = ", ".join(f"{n}={p}" for n, p in trees.items())
    print(f"trace: {args.trace} ({args.trace.stat().st_size / 1e6:.0f} MB); trees: {names}")
    # Bytecode for every module, as a pip install leaves it: where PYTHONDONTWRITEBYTECODE is set (this project's
    # CI, dev boxes and GPU host) a tree without bytecode, or with sources newer than it, compiles its modules in
    # every run, and so does any package installed without it: on the GPU host the torch venv's filelock 3.32.5
    # (21 modules, imported by head only, for #15's writer locks) has no __pycache__, ~100 ms of each head run
    # there (benchmarks/results/bench_chrome_trees_h200_s30.txt).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="bench-chrome-trees-pyc-")
    print(f"bytecode: {os.environ['PYTHONPYCACHEPREFIX']}")
    for tree in trees.values():
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(tree / "pipeline")], check=True, capture_output=True
        )
        child(tree, args.trace)  # warm-up: page cache
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    shuffle = random.Random(args.seed)
    for i in range(args.repeat):
        order = shuffle.sample(list(trees.items()), len(trees))
        for name, tree in order:
            r = child(tree, args.trace)
            runs[name].append(r)
            load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
            print(f"run {i + 1} {name:8s} cpu {r['cpu']:6.3f} s  wall {r['secs']:6.3f} s  load {load}", flush=True)
    digests = {r["kernel_sha256"] for rs in runs.values() for r in rs}
    assert len(digests) == 1, f"the trees' kernels differ: {digests}"
    summary(runs)
    kernels = next(iter(runs.values()))[0]["kernels"]
    print(f"kernels identical in every run: {kernels:,} (sha256 {next(iter(digests))[:16]})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(*sys.argv[2:4])
    elif sys.argv[1:2] == ["--pool"]:
        pool(sys.argv[2:])
    else:
        main()
