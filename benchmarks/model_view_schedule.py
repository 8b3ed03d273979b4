"""A model, not a measurement: how much wall time computing a small input's views two at a time can save.

    python benchmarks/model_view_schedule.py NORMALIZED

Computes every default view one at a time in memory, as ``write_views(workers=1)`` does (CREATE TABLE, COPY),
timing each view's CPU (``time.process_time``); then replays those costs on 2 workers with the scheduling rule
of ``_write_in_memory_concurrently`` (a view starts once its inputs are done, views with more views after them
first) and prints the total, the critical path and the 2-worker schedule's length. It assumes 2 free cores and
no cost to running two statements at once; the measured wall figures are in the files that
``bench_analyze_write.py --modes memory,concurrent`` writes on a quiet machine.
"""

from __future__ import annotations

import heapq
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import pipeline.analyze as analyze

    con = analyze.connect(sys.argv[1], views=[])
    files, views = analyze.view_files(), analyze.default_views()
    order = analyze.needed_views(views)
    to_write = set(analyze._views_to_write(views, analyze.SQL_DIR))
    out = Path(tempfile.mkdtemp(prefix="model-schedule-"))
    cost: dict[str, float] = {}
    for v in order:
        t, sql = time.process_time(), analyze._body(files[v])
        if v not in to_write:
            con.execute(f"CREATE OR REPLACE VIEW {v} AS {sql}")
        else:
            con.execute(f"CREATE OR REPLACE TABLE {v} AS {sql}")
            if v in views:
                analyze._copy(con, v, out / f"{v}.parquet", "parquet")
        cost[v] = time.process_time() - t
    inputs, readers, weight = analyze.view_graph(order, files)
    finish: dict[str, float] = {}
    for v in order:
        finish[v] = cost[v] + max((finish[i] for i in inputs[v]), default=0.0)
    now, free, running = 0.0, 2, []
    waiting = {v: len(inputs[v]) for v in order}
    ready = [v for v in order if not waiting[v]]
    while ready or running:
        ready.sort(key=lambda v: -weight[v])
        while ready and free:
            v = ready.pop(0)
            heapq.heappush(running, (now + cost[v], v))
            free -= 1
        now, v = heapq.heappop(running)
        free += 1
        for r in readers[v]:
            waiting[r] -= 1
            if not waiting[r]:
                ready.append(r)
    last = max(finish, key=finish.__getitem__)
    print(
        f"{len(order)} views: one at a time {sum(cost.values()):.3f} CPU-s; critical path {finish[last]:.3f} s "
        f"(ends at {last}); two at a time (model) {now:.3f} s"
    )


if __name__ == "__main__":
    main()
