"""Cross-check: HolisticTraceAnalysis (HTA, a reader of PyTorch profiler traces we did not write) on a PyTorch
trace and on `tracepipe export perfetto` of that trace normalized: its kernel breakdown (every row: name, sum,
max, min, mean, stddev) and temporal breakdown must be equal (where HTA's temporal breakdown fails its own
assertion on the original, it must fail on the export too).  The export of the nsys trace of the same model
(another capture, so other numbers) is run through HTA too: an nsys trace becomes one HTA reads.

    python -m venv /tmp/hta && /tmp/hta/bin/pip install "pandas<3" HolisticTraceAnalysis==0.5.0
    python benchmarks/hta_reads_export.py --hta-python /tmp/hta/bin/python sample_traces/h200_resnet18 [...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._measure import provenance  # noqa: E402

HTA_CHILD = """
import json, sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
types, kernels = a.get_gpu_kernel_breakdown(visualize=False)
kernels = kernels.drop(columns=["rank"]).sort_values(["name", "sum (us)"]).round(6)
try:
    temporal = a.get_temporal_breakdown(visualize=False).drop(columns=["rank"]).to_dict("records")
except AssertionError as e:  # HTA 0.5's own check fails on some real traces (the training sample's original)
    temporal = f"HTA failed: AssertionError {e}"
print(json.dumps({"kernels": kernels.to_dict("records"), "temporal": temporal}))
"""


def hta(python: str, trace: Path) -> dict:
    """HTA's breakdowns of one trace file (HTA reads a folder: the file alone in a temporary one)."""
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(trace, Path(d) / trace.name)
        out = subprocess.run([python, "-c", HTA_CHILD, d], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hta-python", required=True)
    ap.add_argument("captures", nargs="+", type=Path, help="folders holding torch_trace.json.gz and nsys.sqlite.gz")
    args = ap.parse_args()
    from pipeline.export.perfetto import export_perfetto
    from pipeline.normalize import normalize_file

    print(provenance())
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for cap in args.captures:
            norm = Path(tmp) / cap.name
            torch = normalize_file(cap / "torch_trace.json.gz", norm).trace_id
            nsys = normalize_file(cap / "nsys.sqlite.gz", norm).trace_id
            exported = {t: export_perfetto(norm, Path(tmp) / f"{t}.json.gz", t).out for t in (torch, nsys)}
            original = hta(args.hta_python, cap / "torch_trace.json.gz")
            again = hta(args.hta_python, exported[torch])
            same = original == again
            failed |= not same
            print(f"\n{cap.name}: HTA on torch_trace.json.gz vs on our export of it: equal = {same}")
            print(f"  kernel breakdown rows: {len(original['kernels'])} vs {len(again['kernels'])}")
            print(f"  temporal breakdown (original): {original['temporal']}")
            print(f"  temporal breakdown (export):   {again['temporal']}")
            from_nsys = hta(args.hta_python, exported[nsys])
            print(f"  HTA on our export of nsys.sqlite.gz (another capture): {from_nsys['temporal']}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
