"""Benchmark: tracepipe normalize + the attribution views against `nsys stats` on the same nsys .sqlite.

The baseline is what a user would otherwise run for "GPU time per NVTX range and per kernel":

    nsys stats -r nvtx_kern_sum,nvtx_gpu_proj_sum,cuda_gpu_kern_sum -f csv -o DIR/rep trace.sqlite

and ours is the two commands that give the same answers (and more: every kernel with its layer path):

    tracepipe normalize trace.sqlite --out N
    tracepipe analyze N --out A --view kernel_layers --view layer_summary --view layer_timeline --format parquet -q

Each side runs as its own processes, interleaved (theirs, ours, theirs, ours...), `--reps` times; for each
run: wall time, CPU time of the process tree, peak RSS of the process tree (benchmarks/_measure.py).
Correctness per kernel name: instances and total time of every kernel name in nsys's cuda_gpu_kern_sum
against ours (normalized kernels), and the total of kernel time attributed to each NVTX range name.

    python benchmarks/bench_vs_nsys.py --capture DIR [--steps 750]  # GPU host: profile train_nvtx.py, export
    python benchmarks/bench_vs_nsys.py --sqlite trace.sqlite --reps 3 [--nsys PATH]
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

from benchmarks._measure import Measurement, measure, median, provenance  # noqa: E402

REPORTS = "nvtx_kern_sum,nvtx_gpu_proj_sum,cuda_gpu_kern_sum"
VIEWS = ("kernel_layers", "layer_summary", "layer_timeline")


def find_nsys(given: str | None) -> str:
    from pipeline.normalize.nsys import find_nsys as found

    nsys = given or found()
    if not nsys:
        sys.exit("nsys not found: pass --nsys PATH")
    return nsys


def capture(dest: Path, steps: int, nsys: str) -> Path:
    """Profile the training loop under nsys (CUDA + NVTX) and export it to sqlite; returns the .sqlite."""
    dest.mkdir(parents=True, exist_ok=True)
    rep = dest / "train"
    run = [nsys, "profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite", "true"]
    subprocess.run([*run, "-o", str(rep), sys.executable, str(ROOT / "benchmarks" / "train_nvtx.py"),
                    "--steps", str(steps)], check=True)  # fmt: skip
    sqlite = dest / "train.sqlite"
    subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(sqlite),
                    str(rep) + ".nsys-rep"], check=True)  # fmt: skip
    return sqlite


def theirs(nsys: str, sqlite: Path, out: Path) -> Measurement:
    out.mkdir(parents=True, exist_ok=True)
    argv = [nsys, "stats", "-r", REPORTS, "-f", "csv", "--force-overwrite", "true", "-o", str(out / "rep"), str(sqlite)]
    return measure(argv)


def ours(sqlite: Path, work: Path) -> tuple[Measurement, Measurement]:
    shutil.rmtree(work, ignore_errors=True)
    tp = [sys.executable, "-m", "pipeline.cli"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # cwd=ROOT: `python -m` puts the working folder first on sys.path, ahead of PYTHONPATH's ROOT
    norm = measure([*tp, "normalize", str(sqlite.resolve()), "--out", str(work / "n"), "-q"], env=env, cwd=ROOT)
    views = [a for v in VIEWS for a in ("--view", v)]
    ana = measure([*tp, "analyze", str(work / "n"), "--out", str(work / "a"), *views, "--format", "parquet", "-q"],
                  env=env, cwd=ROOT)  # fmt: skip
    return norm, ana


def check(stats_dir: Path, work: Path) -> list[str]:
    """Per kernel name: nsys's instances and total time against ours; per NVTX range name: kernel time."""
    import duckdb

    lines = []
    kern = next(stats_dir.glob("*cuda_gpu_kern_sum*.csv"), None)
    con = duckdb.connect()
    ours_by_name = {
        name: (n, t)
        for name, n, t in con.execute(
            f"SELECT name, count(*), sum(duration_ns) FROM '{work}/n/kernels/*/*.parquet' GROUP BY name"
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
    proj = next(stats_dir.glob("*nvtx_kern_sum*.csv"), None)
    if proj is not None:
        with open(proj, newline="") as f:
            head = list(csv.DictReader(f))[:3]
        lines.append(f"nvtx_kern_sum first rows: {head}")
    summ = con.execute(
        f"SELECT layer, sum(gpu_time_ns) FROM '{work}/a/layer_summary.parquet' GROUP BY 1 ORDER BY 2 DESC LIMIT 5"
    ).fetchall()
    lines.append(f"ours layer_summary top layers (ns, innermost): {summ}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sqlite", type=Path)
    ap.add_argument("--capture", type=Path, help="profile benchmarks/train_nvtx.py into this folder first")
    ap.add_argument("--steps", type=int, default=750)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--nsys")
    args = ap.parse_args()
    nsys = find_nsys(args.nsys)
    sqlite = capture(args.capture, args.steps, nsys) if args.capture else args.sqlite
    if sqlite is None:
        sys.exit("give --sqlite FILE or --capture DIR")
    print(provenance())
    print(f"# input: {sqlite} ({sqlite.stat().st_size / 2**20:.1f} MiB)")
    print(f"# theirs: nsys stats -r {REPORTS} -f csv;  ours: normalize + analyze --view {' --view '.join(VIEWS)}")
    runs_t: list[Measurement] = []
    runs_n: list[Measurement] = []
    runs_a: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="bench-nsys-") as tmp:
        work, stats_dir = Path(tmp) / "ours", Path(tmp) / "stats"
        for rep in range(args.reps):
            t = theirs(nsys, sqlite, stats_dir)
            n, a = ours(sqlite, work)
            runs_t.append(t)
            runs_n.append(n)
            runs_a.append(a)
            print(f"rep {rep}  nsys stats: {t.line()}", flush=True)
            print(f"rep {rep}  normalize:  {n.line()}", flush=True)
            print(f"rep {rep}  analyze:    {a.line()}", flush=True)
        for line in check(stats_dir, work):
            print(line)
    ours_wall = [n.wall_s + a.wall_s for n, a in zip(runs_n, runs_a, strict=True)]
    ours_cpu = [n.cpu_s + a.cpu_s for n, a in zip(runs_n, runs_a, strict=True)]
    t_wall, t_cpu = median([m.wall_s for m in runs_t]), median([m.cpu_s for m in runs_t])
    o_wall, o_cpu = median(ours_wall), median(ours_cpu)
    t_rss = max(m.peak_rss_bytes for m in runs_t)
    n_rss, a_rss = max(m.peak_rss_bytes for m in runs_n), max(m.peak_rss_bytes for m in runs_a)
    print(
        f"median of {args.reps}: nsys stats wall {t_wall:.2f} s CPU {t_cpu:.2f} s peak {t_rss / 1e6:.0f} MB | "
        f"tracepipe normalize+analyze wall {o_wall:.2f} s CPU {o_cpu:.2f} s "
        f"(normalize {median([m.wall_s for m in runs_n]):.2f} s, analyze {median([m.wall_s for m in runs_a]):.2f} s), "
        f"peak normalize {n_rss / 1e6:.0f} MB, analyze {a_rss / 1e6:.0f} MB"
    )
    print(f"ratio (nsys / ours): wall {t_wall / o_wall:.2f}x, CPU {t_cpu / o_cpu:.2f}x; analyze peak <= 1 GB: "
          f"{'yes' if a_rss <= 1e9 else 'NO'}")  # fmt: skip


if __name__ == "__main__":
    main()
