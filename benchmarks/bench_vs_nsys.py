"""Benchmark: tracepipe against `nsys stats` on the same nsys .sqlite, with #44's targets checked in one run.

The baseline is what a user would otherwise run for "GPU time per NVTX range and per kernel":

    nsys stats -r nvtx_kern_sum,nvtx_gpu_proj_sum,cuda_gpu_kern_sum -f csv -o DIR/rep trace.sqlite

and ours the one command that gives the same answers (and more: every kernel with its layer path):

    tracepipe run trace.sqlite --out W --view kernel_layers --view layer_summary --view layer_timeline -q

Each round runs, interleaved: nsys stats; ``run`` with those three views; ``run`` with every default view;
``sql W/normalized "SELECT count(*) FROM kernel_layers"`` and ``analyze W/normalized --view kernel_layers`` (the
shell's start-up against the view's own cost). For each: wall time, CPU of the process tree, peak RSS of the
process tree (benchmarks/_measure.py). Then #44's targets, each PASS or short, from the medians:

    three views: wall <= nsys / 3;  CPU <= nsys / 2;  peak RSS <= nsys's
    every view:  wall <= nsys's
    sql count(*) of kernel_layers: wall <= 1.5 x analyze --view kernel_layers

Correctness per kernel name: instances and total time of every kernel name in nsys's cuda_gpu_kern_sum against
ours (normalized kernels).

    python benchmarks/bench_vs_nsys.py --capture DIR --model gpt [--steps 300]   # GPU host: profile, export, run
    python benchmarks/bench_vs_nsys.py --sqlite trace.sqlite --reps 5 [--nsys PATH]
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._measure import Measurement, compile_tree, installed_env, measure, median, provenance  # noqa: E402

REPORTS = "nvtx_kern_sum,nvtx_gpu_proj_sum,cuda_gpu_kern_sum"
VIEWS = ("kernel_layers", "layer_summary", "layer_timeline")
DEFAULT_STEPS = {"resnet18": 750, "gpt": 300}


def find_nsys(given: str | None) -> str:
    from pipeline.normalize.nsys import find_nsys as found

    nsys = given or found()
    if not nsys:
        sys.exit("nsys not found: pass --nsys PATH")
    return nsys


def capture(dest: Path, steps: int, nsys: str, model: str) -> Path:
    """Profile the training loop under nsys (CUDA + NVTX) and export it to sqlite; returns the .sqlite."""
    dest.mkdir(parents=True, exist_ok=True)
    rep = dest / f"train_{model}"
    run = [nsys, "profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite", "true"]
    subprocess.run([*run, "-o", str(rep), sys.executable, str(ROOT / "benchmarks" / "train_nvtx.py"),
                    "--model", model, "--steps", str(steps)], check=True)  # fmt: skip
    sqlite = dest / f"train_{model}.sqlite"
    subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(sqlite),
                    str(rep) + ".nsys-rep"], check=True)  # fmt: skip
    return sqlite


def theirs(nsys: str, sqlite: Path, out: Path) -> Measurement:
    out.mkdir(parents=True, exist_ok=True)
    argv = [nsys, "stats", "-r", REPORTS, "-f", "csv", "--force-overwrite", "true", "-o", str(out / "rep"), str(sqlite)]
    return measure(argv)


def tracepipe(env: dict[str, str], *args: object) -> Measurement:
    # cwd=ROOT: `python -m` puts the working folder first on sys.path, ahead of PYTHONPATH's ROOT
    return measure([sys.executable, "-m", "pipeline.cli", *map(str, args)], env=env, cwd=ROOT)


def ours(sqlite: Path, work: Path, env: dict[str, str], views: tuple[str, ...] = VIEWS) -> Measurement:
    shutil.rmtree(work, ignore_errors=True)
    return tracepipe(env, "run", sqlite.resolve(), "--out", work, *(a for v in views for a in ("--view", v)), "-q")


def check(stats_dir: Path, work: Path) -> list[str]:
    """Per kernel name: nsys's instances and total time against ours."""
    import duckdb

    lines = []
    kern = next(stats_dir.glob("*cuda_gpu_kern_sum*.csv"), None)
    con = duckdb.connect()
    ours_by_name = {
        name: (n, t)
        for name, n, t in con.execute(
            f"SELECT name, count(*), sum(duration_ns) FROM '{work}/normalized/kernels/*/*.parquet' GROUP BY name"
        ).fetchall()
    }
    if kern is None:
        return ["no cuda_gpu_kern_sum CSV to check against"]
    with open(kern, newline="") as f:
        rows = list(csv.DictReader(f))
    theirs_by_name = {r["Name"]: (int(r["Instances"]), int(float(r["Total Time (ns)"]))) for r in rows}
    same = sum(1 for name, v in theirs_by_name.items() if ours_by_name.get(name) == v)
    lines.append(
        f"check cuda_gpu_kern_sum: {same} of {len(theirs_by_name)} kernel names with equal instances and total ns "
        f"(ours has {len(ours_by_name)} names); kernels: nsys {sum(v[0] for v in theirs_by_name.values())}, "
        f"ours {sum(v[0] for v in ours_by_name.values())}"
    )
    for name, v in list(theirs_by_name.items())[:3]:
        lines.append(f"  e.g. {name[:70]!r}: nsys {v}, ours {ours_by_name.get(name)}")
    summary = work / "analysis" / "layer_summary.parquet"
    summ = con.execute(f"SELECT layer, sum(gpu_time_ns) FROM '{summary}' GROUP BY 1 ORDER BY 2 DESC LIMIT 5").fetchall()
    lines.append(f"ours layer_summary top layers (ns, innermost): {summ}")
    return lines


def target(name: str, value: float, limit: float, unit: str, wanted: str) -> str:
    """One target's line: PASS when ``value`` <= ``limit``, else how far short."""
    ok = value <= limit
    verdict = "PASS" if ok else f"short by {value / limit:.2f}x"
    return f"target {name:44s} {value:8.2f} {unit:2s} vs <= {limit:8.2f} {unit:2s} ({wanted}): {verdict}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sqlite", type=Path)
    ap.add_argument("--capture", type=Path, help="profile benchmarks/train_nvtx.py into this folder first")
    ap.add_argument("--model", choices=sorted(DEFAULT_STEPS), default="resnet18", help="what --capture trains")
    ap.add_argument("--steps", type=int, help="training steps captured (default: 750 resnet18, 300 gpt)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--nsys")
    args = ap.parse_args()
    nsys = find_nsys(args.nsys)
    if args.capture:
        sqlite = capture(args.capture, args.steps or DEFAULT_STEPS[args.model], nsys, args.model)
    else:
        sqlite = args.sqlite
    if sqlite is None:
        sys.exit("give --sqlite FILE or --capture DIR")
    print(provenance())
    print(f"# cores allowed: {len(os.sched_getaffinity(0))}; input: {sqlite} ({sqlite.stat().st_size / 2**20:.1f} MiB)")
    print(f"# theirs: nsys stats -r {REPORTS} -f csv;  ours: tracepipe run --view {' --view '.join(VIEWS)}")
    runs: dict[str, list[Measurement]] = {k: [] for k in ("nsys", "three", "all", "sql", "analyze_kl")}
    with tempfile.TemporaryDirectory(prefix="bench-nsys-") as tmp:
        work, every, stats_dir = Path(tmp) / "ours", Path(tmp) / "all", Path(tmp) / "stats"
        # Ours from compiled bytecode as an installed package runs (_measure.installed_env); one unmeasured run of
        # each side first (bytecode written, the input in the page cache for both).
        env = installed_env(Path(tmp) / "pycache")
        compile_tree(env)
        theirs(nsys, sqlite, stats_dir)
        ours(sqlite, work, env, ())
        for rep in range(args.reps):
            runs["nsys"].append(theirs(nsys, sqlite, stats_dir))
            runs["three"].append(ours(sqlite, work, env))
            runs["all"].append(ours(sqlite, every, env, ()))
            query = "SELECT count(*) FROM kernel_layers"
            runs["sql"].append(tracepipe(env, "sql", work / "normalized", query, "--format", "csv"))
            shutil.rmtree(Path(tmp) / "kl", ignore_errors=True)
            kl = ("--view", "kernel_layers", "-q")
            runs["analyze_kl"].append(tracepipe(env, "analyze", work / "normalized", "--out", Path(tmp) / "kl", *kl))
            for name, label in (("nsys", "nsys stats"), ("three", "run, 3 views"), ("all", "run, all views"),
                                ("sql", "sql count(*)"), ("analyze_kl", "analyze kl")):  # fmt: skip
                print(f"rep {rep}  {label:15s} {runs[name][-1].line()}", flush=True)
        for line in check(stats_dir, work):
            print(line)

    def med(name: str, key: str) -> float:
        return median([getattr(m, key) for m in runs[name]])

    t_wall, t_cpu, t_rss = med("nsys", "wall_s"), med("nsys", "cpu_s"), med("nsys", "peak_rss_bytes") / 1e6
    o_wall, o_cpu, o_rss = med("three", "wall_s"), med("three", "cpu_s"), med("three", "peak_rss_bytes") / 1e6
    a_wall, a_cpu, a_rss = med("all", "wall_s"), med("all", "cpu_s"), med("all", "peak_rss_bytes") / 1e6
    print(f"median of {args.reps}: nsys stats         wall {t_wall:6.2f} s  CPU {t_cpu:6.2f} s  peak {t_rss:5.0f} MB")
    print(f"median of {args.reps}: run, 3 views       wall {o_wall:6.2f} s  CPU {o_cpu:6.2f} s  peak {o_rss:5.0f} MB")
    print(f"median of {args.reps}: run, all views     wall {a_wall:6.2f} s  CPU {a_cpu:6.2f} s  peak {a_rss:5.0f} MB")
    s_wall, k_wall = med("sql", "wall_s"), med("analyze_kl", "wall_s")
    print(
        f"median of {args.reps}: sql count(*) kl    wall {s_wall:6.2f} s; analyze --view kernel_layers {k_wall:.2f} s"
    )
    print(
        f"ratios (nsys / ours, 3 views): wall {t_wall / o_wall:.2f}x, CPU {t_cpu / o_cpu:.2f}x, "
        f"peak RSS {t_rss / o_rss:.2f}x; all views wall {t_wall / a_wall:.2f}x; sql / analyze {s_wall / k_wall:.2f}x"
    )
    print(target("3 views, wall (>= 3x nsys stats)", o_wall, t_wall / 3, "s", "nsys / 3"))
    print(target("3 views, CPU (>= 2x less than nsys stats)", o_cpu, t_cpu / 2, "s", "nsys / 2"))
    print(target("3 views, peak RSS of the tree (<= nsys stats)", o_rss, t_rss, "MB", "nsys's"))
    print(target("all views, wall (within nsys stats')", a_wall, t_wall, "s", "nsys's"))
    print(target("sql count(*) of kernel_layers (<= 1.5x analyze)", s_wall, 1.5 * k_wall, "s", "1.5 x analyze"))


if __name__ == "__main__":
    main()
