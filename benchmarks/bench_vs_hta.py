"""Benchmark: tracepipe on PyTorch chrome traces against HTA (HolisticTraceAnalysis 0.5.0) itself.

Theirs, in HTA's own venv (pandas < 3), one process per run, imports included:
    TraceAnalysis(trace_dir=DIR) + get_gpu_kernel_breakdown() + get_temporal_breakdown()
Ours, end to end (normalize + every default view written as Parquet), imports included:
    tracepipe run TRACE --out W -q                            (one process: the figure compared)
    tracepipe normalize TRACE ... ; tracepipe analyze ...     (two processes, also shown)
Interleaved (theirs, ours, ...) `--reps` times per trace; wall, CPU of the process tree and its peak RSS
(benchmarks/_measure.py); ratios over the medians.  Our modules run from compiled bytecode, as an installed
package does (a private PYTHONPYCACHEPREFIX, filled by an unmeasured run first), like HTA's installed venv.
`--view-set NAME=V1,V2` (repeatable) also runs `tracepipe run --view V1 --view V2` in each rep: what ours costs
when asked only some views, e.g. ``hta=kernel_name_summary,step_gpu_idle`` (the two breakdowns HTA computes).
`--synthetic MB` adds a trace made by bench_chrome.generate, run by ours only (MB/s of JSON end to end).
Run the whole script under `taskset -c 0,1` for a 2-core figure: both sides use the cores they are given.

    python -m venv /tmp/hta && /tmp/hta/bin/pip install "pandas<3" HolisticTraceAnalysis==0.5.0
    python benchmarks/bench_vs_hta.py --hta-python /tmp/hta/bin/python TRACE.json.gz [...] [--synthetic 500]

Each trace ends with #44's targets, PASS or short, from the medians of ``tracepipe run`` (every default view):
a trace of at most 5 MB of JSON (the 1.1 MB ResNet-18 sample) <= 0.25 s end to end and >= 2x HTA's wall; a bigger
one (HTA's own 54 MB trace) >= 4x HTA's wall. Without ``--hta-python`` only ours runs (and the absolute target).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._measure import Measurement, compile_tree, installed_env, measure, median, provenance  # noqa: E402

HTA_CHILD = """
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
k = a.get_gpu_kernel_breakdown(visualize=False)
t = a.get_temporal_breakdown(visualize=False)
print(len(k[0]), len(k[1]), len(t))
"""
HTA_VERSIONS = (
    "import importlib.metadata as m; print('HTA', m.version('HolisticTraceAnalysis'), 'pandas', m.version('pandas'))"
)


def theirs(hta_python: str, trace_dir: Path) -> Measurement:
    return measure([hta_python, "-c", HTA_CHILD, str(trace_dir)])


def ours_one(trace: Path, work: Path, env: dict[str, str], views: tuple[str, ...] = ()) -> Measurement:
    shutil.rmtree(work, ignore_errors=True)
    # cwd=ROOT: `python -m` puts the working folder first on sys.path, ahead of PYTHONPATH's ROOT
    argv = [sys.executable, "-m", "pipeline.cli", "run", str(trace.resolve()), "--out", str(work), "-q"]
    return measure([*argv, *(a for v in views for a in ("--view", v))], env=env, cwd=ROOT)


def ours_two(trace: Path, work: Path, env: dict[str, str]) -> tuple[Measurement, Measurement]:
    shutil.rmtree(work, ignore_errors=True)
    tp = [sys.executable, "-m", "pipeline.cli"]
    norm = measure([*tp, "normalize", str(trace.resolve()), "--out", str(work / "n"), "-q"], env=env, cwd=ROOT)
    argv = [*tp, "analyze", str(work / "n"), "--out", str(work / "a"), "--format", "parquet", "-q"]
    ana = measure(argv, env=env, cwd=ROOT)
    return norm, ana


def json_mb(trace: Path) -> float:
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rb") as f:
        return sum(len(b) for b in iter(lambda: f.read(1 << 24), b"")) / 1e6


def compare(trace: Path, args: argparse.Namespace, tmp: Path, env: dict[str, str]) -> None:
    mb = json_mb(trace)
    hta_dir = tmp / "hta"
    shutil.rmtree(hta_dir, ignore_errors=True)
    hta_dir.mkdir()
    shutil.copy(trace, hta_dir / trace.name)  # HTA reads every trace file of a folder
    t_runs, one_runs, two_runs = [], [], []
    set_runs: dict[str, list[Measurement]] = {name: [] for name in args.view_sets}
    for rep in range(args.reps):
        t = theirs(args.hta_python, hta_dir) if args.hta_python else None
        one = ours_one(trace, tmp / "ours1", env)
        n, a = ours_two(trace, tmp / "ours2", env)
        if t is not None:
            t_runs.append(t)
            print(f"{trace.name} rep {rep}  HTA: {t.line()}", flush=True)
        one_runs.append(one)
        two_runs.append((n, a))
        print(f"{trace.name} rep {rep}  ours run: {one.line()}", flush=True)
        print(f"{trace.name} rep {rep}  ours normalize: {n.line()}; analyze: {a.line()}", flush=True)
        for name, views in args.view_sets.items():
            m = ours_one(trace, tmp / "ours_views", env, views)
            set_runs[name].append(m)
            print(f"{trace.name} rep {rep}  ours run --view {','.join(views)} ({name}): {m.line()}", flush=True)
    o_wall, o_cpu = median([m.wall_s for m in one_runs]), median([m.cpu_s for m in one_runs])
    w_wall = median([n.wall_s + a.wall_s for n, a in two_runs])
    w_cpu = median([n.cpu_s + a.cpu_s for n, a in two_runs])
    rss_o = max(m.peak_rss_bytes for m in one_runs)
    ours_line = (
        f"ours (run) wall {o_wall:.2f} s CPU {o_cpu:.2f} s peak {rss_o / 1e6:.0f} MB, {mb / o_wall:.0f} MB/s of JSON"
        f" | two commands wall {w_wall:.2f} s CPU {w_cpu:.2f} s"
    )
    small = mb <= SMALL_MB
    if small:
        print(
            f"{trace.name}: target run <= {SMALL_WALL_S} s end to end: {o_wall:.2f} s: {verdict(o_wall, SMALL_WALL_S)}"
        )
    if not t_runs:
        print(f"{trace.name} ({mb:.1f} MB JSON): median {ours_line} (no HTA run)", flush=True)
        return
    t_wall, t_cpu = median([m.wall_s for m in t_runs]), median([m.cpu_s for m in t_runs])
    rss_t = max(m.peak_rss_bytes for m in t_runs)
    print(
        f"{trace.name} ({mb:.1f} MB JSON): median HTA wall {t_wall:.2f} s CPU {t_cpu:.2f} s peak {rss_t / 1e6:.0f} MB"
        f" | {ours_line} | ratio (HTA / ours) wall {t_wall / o_wall:.2f}x, CPU {t_cpu / o_cpu:.2f}x,"
        f" peak RSS {rss_t / rss_o:.2f}x | two commands' ratio wall {t_wall / w_wall:.2f}x, CPU {t_cpu / w_cpu:.2f}x",
        flush=True,
    )
    want = SMALL_RATIO if small else BIG_RATIO
    print(f"{trace.name}: target >= {want:.0f}x HTA's wall: {t_wall / o_wall:.2f}x: {verdict(want * o_wall, t_wall)}")
    for name, runs in set_runs.items():
        s_wall, s_cpu = median([m.wall_s for m in runs]), median([m.cpu_s for m in runs])
        print(
            f"{trace.name}: median ours run --view {','.join(args.view_sets[name])} ({name}) wall {s_wall:.2f} s"
            f" CPU {s_cpu:.2f} s | ratio to HTA wall {t_wall / s_wall:.2f}x, CPU {t_cpu / s_cpu:.2f}x",
            flush=True,
        )


#: #44's targets: a trace of at most SMALL_MB of JSON runs end to end in SMALL_WALL_S and SMALL_RATIO x HTA's
#: wall; a bigger one BIG_RATIO x.
SMALL_MB, SMALL_WALL_S, SMALL_RATIO, BIG_RATIO = 5.0, 0.25, 2.0, 4.0


def verdict(value: float, limit: float) -> str:
    """PASS when ``value`` <= ``limit``, else how far short."""
    return "PASS" if value <= limit else f"short by {value / limit:.2f}x"


def view_set(text: str) -> tuple[str, tuple[str, ...]]:
    name, _, views = text.partition("=")
    if not name or not views:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=VIEW,VIEW")
    return name, tuple(views.split(","))


def synthetic(mb_target: float, args: argparse.Namespace, tmp: Path, env: dict[str, str]) -> None:
    from benchmarks.bench_chrome import generate

    trace = tmp / f"synthetic_{mb_target:.0f}.json"
    events = generate(trace, mb_target)
    mb = trace.stat().st_size / 1e6
    runs = []
    for rep in range(args.reps):
        m = ours_one(trace, tmp / "ours1", env)
        runs.append(m)
        print(f"{trace.name} rep {rep}  ours run: {m.line()}  {mb / m.wall_s:.0f} MB/s", flush=True)
    wall, cpu = median([m.wall_s for m in runs]), median([m.cpu_s for m in runs])
    rss = max(m.peak_rss_bytes for m in runs)
    print(
        f"{trace.name} ({mb:.0f} MB JSON, {events:,} events, bench_chrome.generate): median ours (run)"
        f" wall {wall:.2f} s CPU {cpu:.2f} s peak {rss / 1e6:.0f} MB ({rss / 1e6 / mb:.2f}x the file)"
        f" -> {mb / wall:.0f} MB/s of JSON"
        f" end to end on {len(os.sched_getaffinity(0))} cores",
        flush=True,
    )
    trace.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--hta-python", help="HTA's venv python (without it only ours runs)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--synthetic", type=float, action="append", default=[], metavar="MB")
    ap.add_argument("--view-set", type=view_set, action="append", default=[], metavar="NAME=VIEW,VIEW")
    args = ap.parse_args()
    args.view_sets = dict(args.view_set)
    print(provenance())
    print(f"# cores allowed: {len(os.sched_getaffinity(0))}")
    if args.hta_python:
        versions = subprocess.run([args.hta_python, "-c", HTA_VERSIONS], capture_output=True, text=True, check=True)
        print(f"# theirs: {versions.stdout.strip()}")
    with tempfile.TemporaryDirectory(prefix="bench-hta-") as name:
        tmp = Path(name)
        env = installed_env(tmp / "pycache")
        # Compiled once before any run, as pip does at install time: the prefix holds every module's bytecode
        # (stdlib and site-packages too), so one unmeasured run on the smallest sample fills it.
        compile_tree(env)
        ours_one(ROOT / "sample_traces" / "h200_smallcnn" / "torch_trace.json.gz", tmp / "warm", env)
        for trace in args.traces:
            compare(trace, args, tmp, env)
        for mb in args.synthetic:
            synthetic(mb, args, tmp, env)


if __name__ == "__main__":
    main()
