"""Where a small input's analyze goes, in memory (each view one CREATE TABLE, then a COPY of the table):
DuckDB's own profile of every view's CREATE TABLE, summed over the views: binding (planner), optimizer,
physical planning, and the operators by type; then each view's CPU-s and its costliest window operators.

    python benchmarks/profile_analyze_small.py NORMALIZED

Profiling adds its own overhead: compare the parts with each other, not with an unprofiled run's total.
"""

from __future__ import annotations

import collections
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import pipeline.analyze as analyze

    con = analyze.connect(Path(sys.argv[1]), views=[])
    files = analyze.view_files()
    profile = Path(tempfile.mkdtemp(prefix="profile-small-")) / "profile.json"
    con.execute("SET enable_profiling = 'json'")
    con.execute("SET profiling_mode = 'detailed'")
    con.execute("SET profiling_output = $p", {"p": str(profile)})
    by_type: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    stages: collections.Counter[str] = collections.Counter()
    per_view: list[tuple[float, str, list[tuple[float, int]]]] = []

    def walk(node: dict, windows: list[tuple[float, int]]) -> None:
        kind = node.get("type") or node.get("name") or "?"
        by_type[kind] += node.get("timing", 0.0)
        count[kind] += 1
        if kind == "WINDOW":
            windows.append((node.get("timing", 0.0), node.get("intermediate_rows", 0)))
        for child in node.get("children", []):
            walk(child, windows)

    for view in analyze.needed_views(analyze.default_views()):
        t = time.process_time()
        con.execute(f"CREATE OR REPLACE TABLE {view} AS {analyze._body(files[view])}")
        cpu = time.process_time() - t
        d = json.loads(profile.read_text())
        stages["binding (planner)"] += d["planner"]["total_time"]
        stages["optimizer"] += d["optimizer"]["total_time"]
        stages["physical planner"] += d["physical_planner"]["total_time"]
        stages["query cpu_time"] += d["query"]["cpu_time"]
        windows: list[tuple[float, int]] = []
        for node in d["operator"]:
            walk(node, windows)
        per_view.append((cpu, view, windows))
    print(f"views: {len(per_view)}, CPU-s of their CREATE TABLEs (profiled): {sum(c for c, _, _ in per_view):.3f}")
    print("DuckDB's profile, summed: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in stages.items()))
    print("operators by type: " + ", ".join(f"{k} {v * 1000:.1f} ms ({count[k]})" for k, v in by_type.most_common(10)))
    for cpu, view, windows in sorted(per_view, reverse=True):
        w = ", ".join(f"{t * 1000:.1f} ms on {n:,} rows" for t, n in sorted(windows, reverse=True)[:2] if t >= 0.001)
        print(f"  {view:24s} {cpu * 1000:6.1f} ms" + (f"   window: {w}" if w else ""))


if __name__ == "__main__":
    main()
