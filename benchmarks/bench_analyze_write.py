"""Benchmark: analyze's write loop in memory (each view a table, copied to its file) against through Parquet
(each view written, then read back), per input size: where the in-memory threshold
(``pipeline.analyze.IN_MEMORY_ROWS``) belongs; and in memory one view at a time against several views at once
(``write_views(workers=...)``, the default: one per allowed core).

Each input is normalized once; then, interleaved ``--reps`` times, a fresh child process connects and runs
``write_views`` over every default view in each mode (``memory``: in memory, one view at a time;
``concurrent``: in memory, ``view_workers()`` at once; ``parquet``: through Parquet), and reports the CPU
seconds of the write (``time.process_time``, this process and DuckDB's threads), its wall time and its peak
RSS. Inputs: trace files, and
``nsys:N`` for a synthetic N-kernel nsys export (``bench_ranks.generate_rank_sqlite``: the small-CNN sample's
steady state repeated). Medians and the ratio are printed per input; the outputs of both modes are checked
equal (EXCEPT ALL both ways, every view).

    python benchmarks/bench_analyze_write.py sample_traces/h200_resnet18/torch_trace.json.gz nsys:80000 --reps 5
    python benchmarks/bench_analyze_write.py TRACE --modes memory,concurrent --reps 9
    python benchmarks/bench_analyze_write.py TRACE --modes concurrent --trees TREE_BEFORE TREE_AFTER --reps 9
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._measure import differing_parquet, median, own_peak_rss_bytes, provenance  # noqa: E402


def child(normalized: str, out: str, mode: str) -> None:
    if tree := os.environ.get("BENCH_TREE"):  # --trees: this tree's pipeline, not the benchmark's own
        sys.path.insert(0, tree)
    from pipeline.lean import pyarrow_without_pandas

    pyarrow_without_pandas()
    from pipeline.analyze import connect, default_views, input_rows, write_views

    con = connect(Path(normalized), views=[])
    n = input_rows(con)
    t, w = time.process_time(), time.perf_counter()
    workers = 1 if mode == "memory" else None

    write_views(con, Path(out), default_views(), ("parquet",), in_memory=mode != "parquet", workers=workers)
    cpu, wall = time.process_time() - t, time.perf_counter() - w
    # Its own peak (VmHWM): ru_maxrss would carry the forking parent's RSS across the exec.
    print(json.dumps({"cpu": cpu, "wall": wall, "rss_mb": own_peak_rss_bytes() / 2**20, "input_rows": n}))


def run_child(normalized: Path, out: Path, mode: str) -> dict:
    """``mode`` is a write mode, or ``TREE=mode`` for that source tree's pipeline (``--trees``)."""
    shutil.rmtree(out, ignore_errors=True)
    tree, _, mode = mode.rpartition("=")
    env = {**os.environ, "BENCH_TREE": tree} if tree else None
    cmd = [sys.executable, __file__, "--child", str(normalized), str(out), mode]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)


def prepare(spec: str, tmp: Path) -> tuple[str, Path]:
    from pipeline.normalize import normalize_file

    norm = tmp / f"n{len(list(tmp.glob('n*')))}"
    if spec.startswith("nsys:"):
        from benchmarks.bench_ranks import generate_rank_sqlite

        sqlite = tmp / f"{spec[5:]}.sqlite"
        generate_rank_sqlite(sqlite, int(spec[5:]))
        normalize_file(sqlite, norm)
        return f"synthetic nsys, {int(spec[5:]):,} kernels", norm
    normalize_file(Path(spec), norm)
    return Path(spec).name, norm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("inputs", nargs="*")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--child", nargs=3)
    ap.add_argument("--modes", default="memory,concurrent,parquet", help="comma-separated, the first is the base")
    ap.add_argument("--trees", nargs=2, metavar=("BEFORE", "AFTER"), help="each mode run by both trees' pipeline")
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    print(provenance(sys.argv))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for spec in args.inputs:
            label, norm = prepare(spec, tmp)
            modes = args.modes.split(",")
            if args.trees:
                modes = [f"{tree}={m}" for m in modes for tree in args.trees]
            runs: dict[str, list[dict]] = {m: [] for m in modes}
            for _ in range(args.reps):
                for mode in runs:
                    runs[mode].append(run_child(norm, tmp / f"out{modes.index(mode)}", mode))
            modes = list(runs)
            bad = sorted({v for i in range(1, len(modes)) for v in differing_parquet(tmp / "out0", tmp / f"out{i}")})
            cpu = {m: median([r["cpu"] for r in rs]) for m, rs in runs.items()}
            wall = {m: median([r["wall"] for r in rs]) for m, rs in runs.items()}
            rss = {m: median([r["rss_mb"] for r in rs]) for m, rs in runs.items()}
            each = " ".join(f"{m} " + "/".join(f"{r['cpu']:.3f}" for r in rs) for m, rs in runs.items())
            print(f"{label} ({runs[modes[0]][0]['input_rows']:,} input rows): CPU-s {each}")
            each = " ".join(f"{m} " + "/".join(f"{r['wall']:.3f}" for r in rs) for m, rs in runs.items())
            print(f"{label}: wall-s {each}")
            a, b = modes[0], modes[-1]
            ratio = f" ({b}/{a}: CPU {cpu[b] / cpu[a]:.2f}, wall {wall[b] / wall[a]:.2f})" if len(modes) > 1 else ""
            print(
                f"{label}: median write CPU "
                + ", ".join(f"{m} {cpu[m]:.3f} s" for m in modes)
                + "; wall "
                + ", ".join(f"{m} {wall[m]:.3f} s" for m in modes)
                + ratio
                + "; peak RSS "
                + " vs ".join(f"{rss[m]:.0f}" for m in modes)
                + f" MB; outputs equal: {'yes' if not bad else 'NO: ' + ', '.join(bad)}"
            )


if __name__ == "__main__":
    main()
