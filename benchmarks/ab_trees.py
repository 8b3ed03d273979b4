"""One ``tracepipe`` command run by several source trees (or settings), interleaved, and their outputs compared.

    python benchmarks/ab_trees.py --side base=/tmp/speed-base --side new=. --rounds 5 -- \\
        run /tmp/sq/big/k220k.sqlite --out {out} --view kernel_layers -q
    python benchmarks/ab_trees.py --side t16=. --side t4=.:TRACEPIPE_THREADS=4 -- run TRACE --out {out} -q

Each side is ``NAME=TREE[:VAR=VALUE,...]``: ``python -m pipeline ARGS`` runs with TREE as its working folder (so
``-m`` imports TREE's ``pipeline``) and those environment variables; ``{out}`` in ARGS is a fresh folder of the
side's own, emptied before each run. Every round runs each side once, in its own random order (seeded); the figures
are ``_measure.measure``'s (wall, CPU and peak RSS of the process tree), medians per side with each one's ratio to
the first side. Every side runs from compiled bytecode, as an installed package does (one private bytecode prefix,
``_measure.installed_env``, filled by one unmeasured run of each side first unless ``--no-warmup``): the GPU host sets
PYTHONDONTWRITEBYTECODE, and there every run had compiled every module again, ~0.4 s of a 2 s run. Then every
Parquet file the last runs wrote under ``{out}`` (normalized tables and views) is compared with the first side's as
a multiset of rows (DuckDB ``EXCEPT ALL`` both ways): a side whose rows differ is reported and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import Measurement, compile_tree, installed_env, measure, provenance

WHEN = "normalized_at_utc"


def _side(spec: str) -> tuple[str, Path, dict[str, str]]:
    name, _, rest = spec.partition("=")
    tree, _, envs = rest.partition(":")
    env = dict(kv.split("=", 1) for kv in envs.split(",") if kv)
    return name, Path(tree).resolve(), env


def _parquet_files(out: Path) -> dict[str, Path]:
    """The Parquet files under ``out`` by a name that does not depend on the run (trace partitions' generation
    folders are left out: the public files under each table's folder are what readers see)."""
    found = {}
    for p in sorted(out.rglob("*.parquet")):
        rel = p.relative_to(out)
        if any(part.startswith((".", "_")) for part in rel.parts):
            continue
        found[str(rel)] = p
    return found


def compare(a: Path, b: Path) -> list[str]:
    """What differs between the Parquet files under ``a`` and under ``b`` (empty: the same rows)."""
    import duckdb

    fa, fb = _parquet_files(a), _parquet_files(b)
    diffs = [f"{k}: only in one side" for k in sorted(set(fa) ^ set(fb))]
    con = duckdb.connect()
    for k in sorted(set(fa) & set(fb)):
        ra, rb = (con.read_parquet(str(f[k])) for f in (fa, fb))
        if ra.columns != rb.columns or ra.types != rb.types:
            diffs.append(f"{k}: columns differ")
            continue
        # when it was normalized differs run to run; every other column must not
        x, y = (f"(SELECT * EXCLUDE ({WHEN}) FROM read_parquet('{f[k]}'))" for f in (fa, fb))
        if WHEN not in ra.columns:
            x, y = (f"read_parquet('{f[k]}')" for f in (fa, fb))
        (n1,) = con.execute(f"SELECT count(*) FROM (FROM {x} EXCEPT ALL FROM {y})").fetchone()
        (n2,) = con.execute(f"SELECT count(*) FROM (FROM {y} EXCEPT ALL FROM {x})").fetchone()
        if n1 or n2:
            diffs.append(f"{k}: {n1} rows only in the first side, {n2} only in the other")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--side", action="append", required=True, help="NAME=TREE[:VAR=VALUE,...]; the first is the base")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compare", action="store_true")
    ap.add_argument(
        "--no-warmup", action="store_true", help="no unmeasured first run (long inputs: round 0 compiles instead)"
    )
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then tracepipe's arguments, {out} for the output")
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    sides = [_side(s) for s in a.side]
    tmp = Path(tempfile.mkdtemp(prefix="ab-trees-"))
    print(provenance())
    described = "; ".join(f"{n}={t} {e or ''}" for n, t, e in sides)
    print(f"# sides: {described}; cores allowed: {len(os.sched_getaffinity(0))}")
    runs: dict[str, list] = {n: [] for n, _, _ in sides}
    installed = installed_env(tmp / "pycache")  # one prefix: bytecode is kept by each source file's own path
    for _, tree, _ in sides:
        compile_tree(installed, tree)

    def one(name: str, tree: Path, env: dict[str, str]) -> Measurement:
        out = tmp / name
        shutil.rmtree(out, ignore_errors=True)
        argv = [sys.executable, "-m", "pipeline", *(x.replace("{out}", str(out)) for x in args)]
        # cwd=tree: `python -m` puts it first on sys.path, ahead of PYTHONPATH (kept: a host's carried packages)
        return measure(argv, env={**installed, **env}, cwd=tree)

    for side in sides if not a.no_warmup else []:  # unmeasured: fills the bytecode prefix with what each imports
        one(*side)
    rng = random.Random(a.seed)
    for r in range(a.rounds):
        order = list(sides)
        rng.shuffle(order)
        for name, tree, env in order:
            m = one(name, tree, env)
            runs[name].append(m)
            print(f"round {r} {name:>10s}: {m.line()}  load {os.getloadavg()[0]:.1f}", flush=True)
    med = statistics.median
    base = sides[0][0]
    bw, bc, br = (med(getattr(m, k) for m in runs[base]) for k in ("wall_s", "cpu_s", "peak_rss_bytes"))
    for name, _, _ in sides:
        w, c, rss = (med(getattr(m, k) for m in runs[name]) for k in ("wall_s", "cpu_s", "peak_rss_bytes"))
        print(
            f"median of {a.rounds} {name:>10s}: wall {w:6.3f} s ({w / bw:5.2f}x)  CPU {c:6.3f} s ({c / bc:5.2f}x)"
            f"  peak RSS {rss / 1e6:5.0f} MB ({rss / br:5.2f}x)"
        )
    status = 0
    if not a.no_compare:
        for name, _, _ in sides[1:]:
            diffs = compare(tmp / base, tmp / name)
            n = len(_parquet_files(tmp / name))
            print(f"outputs {name} vs {base}: " + ("; ".join(diffs) if diffs else f"the same rows in all {n} files"))
            status |= bool(diffs)
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
