"""How much of each trace's GPU time lands on a layer, by pass, with two checkouts of tracepipe side by side.

The figures behind issue #41's and #43's notes: for each input trace, each tree runs `tracepipe run INPUT
--view gpu_op_layers` in its own process and this script sums, from the written `gpu_op_layers.parquet` (a view
every tree since the first has), the GPU time (kernels, memcpy, memset) whose layer is a range that is no step
(`ProfilerStep#N`, `step...`) or that sits in an optimizer step: the same rule as `layer_coverage`, computed
here outside it so that a tree without that view is measured alike.

    python benchmarks/layer_coverage.py --tree /tmp/wt-before --tree . sample_traces/h100_llama_stack/eager.json.gz ...

Per trace and tree: GPU operations, GPU time with a layer (% of all), backward time with a layer (% of
backward: '-' where no operation is backward), the optimizer pass's share (% of all), how many layers hold work
beside the optimizer, and the one with the most GPU time: these two tell a module from a range that only looks
like a layer (a PyTorch function range, an Inductor call).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._measure import provenance  # noqa: E402

STEP = r"^(ProfilerStep#\d+|step([#_ ]?\d+)?)$"
SHARES = f"""
    WITH ops AS (
        SELECT duration_ns, pass, layer,
               coalesce(pass = 'optimizer' OR (range_id IS NOT NULL AND NOT regexp_matches(layer, '{STEP}')), false)
                   AS layered
        FROM read_parquet(?)
    )
    SELECT count(*) AS ops,
           100.0 * coalesce(sum(duration_ns) FILTER (layered), 0) / nullif(sum(duration_ns), 0) AS layered_pct,
           100.0 * coalesce(sum(duration_ns) FILTER (layered AND pass = 'backward'), 0)
               / nullif(sum(duration_ns) FILTER (pass = 'backward'), 0) AS backward_layered_pct,
           100.0 * coalesce(sum(duration_ns) FILTER (pass = 'optimizer'), 0) / nullif(sum(duration_ns), 0)
               AS optimizer_pct,
           count(DISTINCT layer) FILTER (layered AND pass IS DISTINCT FROM 'optimizer') AS layers,
           arg_max(layer, layer_ns) FILTER (layered AND pass IS DISTINCT FROM 'optimizer') AS top_layer
    FROM (SELECT *, sum(duration_ns) OVER (PARTITION BY layer) AS layer_ns FROM ops)
"""


def shares(tree: Path, trace: Path, work: Path) -> tuple | str:
    """The four figures of one trace under one tree, or the first line of its error."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, "-m", "pipeline.cli", "run", str(trace.resolve()), "--out", str(work), "-q",
            "--view", "gpu_op_layers"]  # fmt: skip
    # cwd=tree: `python -m` puts the working folder first on sys.path, ahead of any installed copy
    done = subprocess.run(argv, env=env, cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:80]
    written = work / "analysis" / "gpu_op_layers.parquet"
    return duckdb.execute(SHARES, [str(written)]).fetchone()


def fmt(value: float | None) -> str:
    return "   -  " if value is None else f"{value:5.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", type=Path, required=True, help="a tracepipe checkout (repeatable)")
    ap.add_argument("traces", nargs="+", type=Path)
    args = ap.parse_args()
    print(provenance(sys.argv))
    with tempfile.TemporaryDirectory() as tmp:
        for t, trace in enumerate(args.traces):
            print(f"{trace}")
            for i, tree in enumerate(args.tree):
                # a folder per trace and tree: `run` adds to what an --out folder already holds
                got = shares(tree.resolve(), trace, Path(tmp) / f"{t}_{i}")
                label = f"  {tree}"[:40].ljust(40)
                if isinstance(got, str):
                    print(f"{label} error: {got}")
                    continue
                ops, layered, backward, optimizer, layers, top = got
                figures = f"layer {fmt(layered)}  backward {fmt(backward)}  optimizer {fmt(optimizer)}"
                print(f"{label} {ops:>7,} ops  {figures}  {layers:>4} layers, top: {str(top)[:34]}")


if __name__ == "__main__":
    main()
