"""`tracepipe run TRACE` (normalize + every default view), two source trees, interleaved.

    python benchmarks/bench_run_before_after.py TREE_BEFORE TREE_AFTER TRACE [TRACE ...] --repeat 6

Each run is ``python -m pipeline.cli run TRACE --out W -q`` with that tree on PYTHONPATH (its own process, a
private PYTHONPYCACHEPREFIX filled by an unmeasured run first, as an installed package has its bytecode),
measured from outside by ``benchmarks/_measure.py``: wall, CPU of the whole process tree, peak RSS. Runs
alternate before/after so that a slow spell of a shared machine hits both. Every analysis file of the two
trees must hold the same rows (EXCEPT ALL both ways) and column types.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._measure import differing_parquet, measure, median, provenance


def run(tree: Path, trace: Path, work: Path, pycache: Path) -> object:
    """One measured ``tracepipe run`` of ``tree``'s code, in ``work``'s parent folder: never in the caller's
    folder, whose own ``pipeline`` (a checkout) ``python -m`` would put ahead of PYTHONPATH's tree."""
    shutil.rmtree(work, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # The tree first, then what the caller had (the GPU host's wheels sit on PYTHONPATH).
    path = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    env.update(PYTHONPATH=path, PYTHONPYCACHEPREFIX=str(pycache))
    argv = [sys.executable, "-m", "pipeline.cli", "run", str(trace.resolve()), "--out", str(work), "-q"]
    return measure(argv, env=env, cwd=work.parent)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=6)
    args = ap.parse_args()
    print(provenance())
    print(f"# cores allowed: {len(os.sched_getaffinity(0))}; load average at start: {os.getloadavg()}")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    with tempfile.TemporaryDirectory(prefix="bench-run-ba-") as name:
        tmp = Path(name)
        for trace in args.traces:
            for side, tree in trees.items():  # unmeasured: fills each tree's bytecode cache
                run(tree, trace.resolve(), tmp / side, tmp / f"pyc_{side}")
            bad = differing_parquet(tmp / "before" / "analysis", tmp / "after" / "analysis")
            print(f"{trace.name}: analysis files equal (rows, EXCEPT ALL both ways, and types): "
                  f"{'yes' if not bad else 'NO: ' + ', '.join(bad)}")  # fmt: skip
            runs: dict[str, list] = {side: [] for side in trees}
            for i in range(args.repeat):
                for side, tree in trees.items():
                    m = run(tree, trace.resolve(), tmp / side, tmp / f"pyc_{side}")
                    runs[side].append(m)
                    print(f"{trace.name} run {i + 1} {side:6s} {m.line()}", flush=True)
            med = {s: (median([m.wall_s for m in rs]), median([m.cpu_s for m in rs])) for s, rs in runs.items()}
            b, a = med["before"], med["after"]
            print(
                f"{trace.name}: median wall before {b[0]:.2f} s, after {a[0]:.2f} s ({a[0] / b[0]:.3f}x); median tree"
                f" CPU before {b[1]:.2f} s, after {a[1]:.2f} s ({a[1] / b[1]:.3f}x, {a[1] - b[1]:+.2f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
