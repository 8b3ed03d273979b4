"""Benchmark: tracepipe on PyTorch chrome traces against HTA (HolisticTraceAnalysis 0.5.0) itself.

Theirs, in HTA's own venv (pandas < 3), one process per run, imports included:
    TraceAnalysis(trace_dir=DIR) + get_gpu_kernel_breakdown() + get_temporal_breakdown()
Ours, two processes per run:
    tracepipe normalize TRACE --out N -q
    tracepipe analyze N --out A --format parquet -q          (every default view)
Interleaved (theirs, ours, ...) `--reps` times per trace; wall, CPU of the process tree and its peak RSS
(benchmarks/_measure.py); ratios over the medians.

    python -m venv /tmp/hta && /tmp/hta/bin/pip install "pandas<3" HolisticTraceAnalysis==0.5.0
    python benchmarks/bench_vs_hta.py --hta-python /tmp/hta/bin/python TRACE.json.gz [...]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._measure import Measurement, measure, median, provenance  # noqa: E402

HTA_CHILD = """
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
k = a.get_gpu_kernel_breakdown(visualize=False)
t = a.get_temporal_breakdown(visualize=False)
print(len(k[0]), len(k[1]), len(t))
"""


def theirs(hta_python: str, trace_dir: Path) -> Measurement:
    return measure([hta_python, "-c", HTA_CHILD, str(trace_dir)])


def ours(trace: Path, work: Path) -> tuple[Measurement, Measurement]:
    shutil.rmtree(work, ignore_errors=True)
    tp = [sys.executable, "-m", "pipeline.cli"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    norm = measure([*tp, "normalize", str(trace), "--out", str(work / "n"), "-q"], env=env)
    ana = measure([*tp, "analyze", str(work / "n"), "--out", str(work / "a"), "--format", "parquet", "-q"], env=env)
    return norm, ana


def json_mb(trace: Path) -> float:
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rb") as f:
        return sum(len(b) for b in iter(lambda: f.read(1 << 24), b"")) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--hta-python", required=True)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    print(provenance())
    for trace in args.traces:
        mb = json_mb(trace)
        with tempfile.TemporaryDirectory(prefix="bench-hta-") as tmp:
            hta_dir = Path(tmp) / "hta"
            hta_dir.mkdir()
            shutil.copy(trace, hta_dir / trace.name)  # HTA reads every trace file of a folder
            t_runs, o_runs = [], []
            for rep in range(args.reps):
                t = theirs(args.hta_python, hta_dir)
                n, a = ours(trace, Path(tmp) / "ours")
                t_runs.append(t)
                o_runs.append((n, a))
                print(f"{trace.name} rep {rep}  HTA: {t.line()}", flush=True)
                print(f"{trace.name} rep {rep}  ours normalize: {n.line()}; analyze: {a.line()}", flush=True)
        t_wall, t_cpu = median([m.wall_s for m in t_runs]), median([m.cpu_s for m in t_runs])
        o_wall = median([n.wall_s + a.wall_s for n, a in o_runs])
        o_cpu = median([n.cpu_s + a.cpu_s for n, a in o_runs])
        rss_t = max(m.peak_rss_bytes for m in t_runs)
        rss_o = max(max(n.peak_rss_bytes, a.peak_rss_bytes) for n, a in o_runs)
        print(
            f"{trace.name} ({mb:.0f} MB JSON): median HTA wall {t_wall:.2f} s CPU {t_cpu:.2f} s "
            f"peak {rss_t / 1e6:.0f} MB"
            f" | ours wall {o_wall:.2f} s CPU {o_cpu:.2f} s peak {rss_o / 1e6:.0f} MB | ratio wall "
            f"{t_wall / o_wall:.2f}x, CPU {t_cpu / o_cpu:.2f}x; ours {mb / o_wall:.0f} MB/s of JSON",
            flush=True,
        )


if __name__ == "__main__":
    main()
