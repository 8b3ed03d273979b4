"""Benchmark: `tracepipe export perfetto` against the exporter a user would write by hand.

A synthetic normalized trace (bench_attribution.generate: N kernels launched from 8 threads under ~N/10 nested
NVTX ranges) is exported two ways, each in its own process, measured by _measure.py (wall, CPU of the process
tree, peak RSS of the tree):

* ours:   ``tracepipe export perfetto DIR -o ours.json`` -- kernels with layer path, pass, occupancy and waves in
          their args, API calls, ranges, flow arrows and per-layer counters, streamed from DuckDB;
* theirs: pyarrow reads kernels / api_calls / nvtx_ranges, ``to_pylist``, one dict per event (kernels, calls,
          ranges and flow arrows; no attribution, occupancy or counters: less work than ours), ``json.dump``.

Then both files are read back with json and their kernel events compared one by one (name, stream, start and
duration in ns; theirs writes float microseconds, so its ns are rounded).

    python benchmarks/bench_export_perfetto.py --kernels 1e6
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _measure import measure, provenance, ratios  # noqa: E402


def theirs(normalized: str, out: str) -> None:
    """The hand-written exporter: whole tables to Python lists of dicts, one json.dump."""
    import pyarrow.parquet as pq

    def table(name: str) -> list[dict]:
        files = sorted((Path(normalized) / name).rglob("*.parquet"))  # the one trace's file
        return [row for f in files for row in pq.read_table(f).to_pylist()]

    events: list[dict] = []
    calls = table("api_calls")
    by_corr = {}
    for c in calls:
        ev = {"ph": "X", "cat": "cuda_runtime", "name": c["name"], "pid": c["pid"], "tid": c["tid"]}
        ev |= {"ts": c["start_ns"] / 1000, "dur": c["duration_ns"] / 1000, "args": {"correlation": c["correlation_id"]}}
        events.append(ev)
        by_corr[c["correlation_id"]] = c
    for r in table("nvtx_ranges"):
        ev = {"ph": "X", "cat": "user_annotation", "name": r["text"], "pid": r["pid"], "tid": r["tid"]}
        events.append(ev | {"ts": r["start_ns"] / 1000, "dur": r["duration_ns"] / 1000})
    for k in table("kernels"):
        ts = k["start_ns"] / 1000
        args = {
            "stream": k["stream_id"],
            "correlation": k["correlation_id"],
            "grid": [k["grid_x"], k["grid_y"], k["grid_z"]],
        }
        events.append(
            {"ph": "X", "cat": "kernel", "name": k["name"], "pid": k["device_id"], "tid": k["stream_id"]}
            | {"ts": ts, "dur": k["duration_ns"] / 1000, "args": args}
        )
        if (c := by_corr.get(k["correlation_id"])) is not None:
            flow = {"cat": "ac2g", "name": "ac2g", "id": k["kernel_id"]}
            events.append(flow | {"ph": "s", "pid": c["pid"], "tid": c["tid"], "ts": c["start_ns"] / 1000})
            events.append(flow | {"ph": "f", "bp": "e", "pid": k["device_id"], "tid": k["stream_id"], "ts": ts})
    with open(out, "w") as f:
        json.dump({"traceEvents": events}, f)


def kernels_of(path: Path) -> list[tuple[str, int, int, int]]:
    """(name, stream, start ns, duration ns) of every kernel event, sorted."""
    with open(path) as f:
        events = json.load(f, parse_float=Decimal)["traceEvents"]
    return sorted(
        (e["name"], e["args"]["stream"], round(Decimal(e["ts"]) * 1000), round(Decimal(e["dur"]) * 1000))
        for e in events
        if e.get("cat") == "kernel"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=float, default=1e6)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each side, interleaved")
    ap.add_argument("--theirs", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.theirs:
        theirs(*args.theirs)
        return
    from bench_attribution import generate

    kernels = int(args.kernels)
    print(provenance())
    with tempfile.TemporaryDirectory(prefix="bench-perfetto-") as tmp:
        norm, ours_out, theirs_out = Path(tmp) / "norm", Path(tmp) / "ours.json", Path(tmp) / "theirs.json"
        generate(norm, kernels, kernels // 10)
        ours_runs, theirs_runs = [], []
        for _ in range(args.repeat):
            ours_runs.append(
                measure(
                    [
                        sys.executable,
                        "-m",
                        "pipeline.cli",
                        "export",
                        "perfetto",
                        str(norm),
                        "-o",
                        str(ours_out),
                        "--json",
                    ],
                    cwd=ROOT,
                )
            )
            theirs_runs.append(
                measure([sys.executable, __file__, "--theirs", str(norm / ""), str(theirs_out)], cwd=ROOT)
            )
        counts = json.loads(ours_runs[-1].stdout)["events"]
        print(
            f"{kernels:,} kernels, {kernels // 10:,} ranges asked; ours wrote {sum(counts.values()):,} events {counts}"
        )
        print(f"ours   ({ours_out.stat().st_size / 1e6:,.0f} MB): " + " | ".join(m.line() for m in ours_runs))
        print(f"theirs ({theirs_out.stat().st_size / 1e6:,.0f} MB): " + " | ".join(m.line() for m in theirs_runs))
        print("ours vs theirs: " + ratios(ours_runs, theirs_runs))
        a, b = kernels_of(ours_out), kernels_of(theirs_out)
        print(f"kernel events: ours {len(a):,}, theirs {len(b):,}, equal one by one: {a == b}")
        assert a == b


if __name__ == "__main__":
    main()
