"""Do the views' rows depend on a DuckDB optimizer pass? `tracepipe run` (every default view) of each input, once as
it is and once with the passes off (TRACEPIPE_DISABLED_OPTIMIZERS), every Parquet file compared as a multiset of
rows (ab_trees.compare). A pass that changes a row is a wrong plan of DuckDB's on our SQL: DuckDB 2.0.1's
statistics propagation over empty tables (docs/reliability.md section 9) and common_subplan (duckdb/duckdb#24624).

    python benchmarks/optimizer_passes.py                      # every sample and external trace, both passes
    python benchmarks/optimizer_passes.py --off common_subplan sample_traces/h200_resnet18/

Exit 1 when any input's rows differ. Not a timing: each run goes once, in its own process.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _measure import provenance
from ab_trees import _parquet_files, compare

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = ROOT.parent / "shared" / "external_traces"


def default_inputs() -> list[Path]:
    """Every sample folder with a trace in it, and every external chrome trace and nsys export."""
    traces = ("*.sqlite*", "*.json*", "*.csv*", "*.nsys-rep")  # not nsys_schemas/: table layouts, no trace
    samples = sorted(p for p in (ROOT / "sample_traces").iterdir() if any(g for t in traces for g in p.glob(t)))
    external = sorted((EXTERNAL / "chrome").glob("*.json.gz")) + sorted((EXTERNAL / "nsys").glob("*.sqlite.gz"))
    return samples + external


def run(trace: Path, out: Path, off: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRACEPIPE_DISABLED_OPTIMIZERS"}
    if off:
        env["TRACEPIPE_DISABLED_OPTIMIZERS"] = off
    argv = [sys.executable, "-m", "pipeline", "run", str(trace), "--out", str(out), "-q"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:  # normalize's warnings go to stderr: shown only when the run fails
        sys.exit(f"{trace}: exit {done.returncode}\n{done.stderr}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", type=Path, help="traces or folders (default: every sample and external trace)")
    ap.add_argument("--off", default="statistics_propagation,common_subplan", help="the passes to turn off")
    args = ap.parse_args()
    print(provenance(), flush=True)
    print(f"# passes off on the second side: {args.off}", flush=True)
    differ = 0
    for trace in args.inputs or default_inputs():
        with tempfile.TemporaryDirectory(prefix="tracepipe-passes-") as tmp:
            on, off = Path(tmp) / "on", Path(tmp) / "off"
            run(trace, on, None)
            run(trace, off, args.off)
            diffs = compare(on, off)
            files = len(_parquet_files(on))
        differ += bool(diffs)
        print(f"{trace.name}: {'; '.join(diffs) if diffs else f'the same rows in all {files} files'}", flush=True)
    print(f"{differ} input(s) whose rows depend on the passes")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
