"""`tracepipe run TRACE` with Python's cyclic garbage collector kept on against stopped (``lean.batch_gc``, what
the command does in its own process), interleaved, each run a fresh process.

    python benchmarks/bench_batch_gc.py TRACE [TRACE ...] --reps 8

Each child imports the CLI, then runs ``main(["run", TRACE, ...])`` in-process with ``_OWN_PROCESS`` set as
the side asks (the child's code is otherwise identical), and reports the CPU seconds of its normalize stage
(start to analyze's ``connect``) and of analyze (``time.process_time``: this process and its threads, not
forked decode workers), plus the CPU the collector's passes took (``gc.callbacks``, ``time.thread_time``)
and, stopped, how many objects in reference cycles the run left for the process end (``gc.collect()``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._measure import provenance  # noqa: E402


def child(side: str, trace: str, out: str) -> None:
    import gc
    import time

    passes = {"cpu": 0.0, "n": 0}
    began = {}

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            began["t"] = time.thread_time()
        else:
            passes["cpu"] += time.thread_time() - began["t"]
            passes["n"] += 1

    gc.callbacks.append(on_gc)
    import pipeline.analyze as analyze
    import pipeline.cli as cli
    from pipeline.lean import pyarrow_without_pandas

    pyarrow_without_pandas()
    marks = {}
    connect = analyze.connect

    def timed_connect(*args: object, **kwargs: object) -> object:
        marks["normalized"] = time.process_time()
        return connect(*args, **kwargs)

    analyze.connect = timed_connect
    cli._OWN_PROCESS = side == "stopped"
    t = time.process_time()
    cli.main(["run", trace, "--out", out, "-q"], standalone_mode=False)
    end = time.process_time()
    stages = {"normalize": marks["normalized"] - t, "analyze": end - marks["normalized"]}
    on = gc.isenabled()
    gc.callbacks.remove(on_gc)
    left = gc.collect()  # objects in reference cycles the run left (all of them when the collector was stopped)
    print(json.dumps({**stages, "gc_cpu": passes["cpu"], "gc_passes": passes["n"], "gc_on_at_end": on, "cycles": left}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--child", nargs=3)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    print(provenance(sys.argv))
    import os

    print(f"# load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as d:
        for trace in args.traces:
            runs: dict[str, list[dict]] = {"kept": [], "stopped": []}
            for _ in range(args.reps):
                for side, rs in runs.items():
                    out = Path(d) / side
                    shutil.rmtree(out, ignore_errors=True)
                    cmd = [sys.executable, __file__, "--child", side, str(Path(trace).resolve()), str(out)]
                    rs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
            name = Path(trace).name
            for side, rs in runs.items():
                cols = ("normalize", "analyze", "gc_cpu")
                each = "  ".join(f"{c} " + "/".join(f"{r[c]:.3f}" for r in rs) for c in cols)
                print(f"{name} gc {side:7s}: {each}")
            med = {s: {c: statistics.median(r[c] for r in rs) for c in ("normalize", "analyze", "gc_cpu")}
                   for s, rs in runs.items()}  # fmt: skip
            k, s = med["kept"], med["stopped"]
            print(
                f"{name}: median CPU-s normalize {k['normalize']:.3f} -> {s['normalize']:.3f} "
                f"({s['normalize'] / k['normalize'] - 1:+.0%}), analyze {k['analyze']:.3f} -> {s['analyze']:.3f} "
                f"({s['analyze'] / k['analyze'] - 1:+.0%}); collector passes {k['gc_cpu'] * 1000:.0f} -> "
                f"{s['gc_cpu'] * 1000:.0f} ms; gc on at the end: kept {runs['kept'][0]['gc_on_at_end']}, "
                f"stopped {runs['stopped'][0]['gc_on_at_end']}; objects in cycles left at the end when stopped: "
                f"{max(r['cycles'] for r in runs['stopped'])}",
                flush=True,
            )


if __name__ == "__main__":
    main()
