"""Where one view's time goes, operator by operator: the view's COPY to Parquet under DuckDB's JSON profiler, its
inputs read from Parquet files as `tracepipe analyze` reads them on a big input (views already written in
WRITTEN, e.g. by ``profile_analyze_views.py --out WRITTEN``; scratch inputs it lacks are computed once into
WRITTEN/.scratch/).

    python benchmarks/profile_view_operators.py NORMALIZED WRITTEN VIEW [--top 25] [--sql VARIANT.sql]
    python benchmarks/profile_view_operators.py NORMALIZED WRITTEN VIEW --ab OTHER.sql [--reps 4]

Prints the statement's CPU (time.process_time: every DuckDB thread) and wall, DuckDB's own cpu_time and memory
figures (peak buffer memory, bytes spilled), then the ``--top`` operators by time (thread-summed seconds).
``--sql VARIANT.sql``: profile that file's SQL for the view instead of sql/VIEW.sql. ``--ab OTHER.sql``: instead,
the view's SQL (A) against OTHER.sql's (B), rounds in a seeded random order, with the paired B/A CPU ratio.
TRACEPIPE_MEMORY_LIMIT applies as in analyze.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pipeline.analyze as an  # noqa: E402


def connect_with_inputs(normalized: Path, written: Path, view: str):  # type: ignore[no-untyped-def]
    """A connection where every view ``view`` reads is its written Parquet file (scratch ones computed once)."""
    con = an.connect(normalized, views=[])
    files = an.view_files()
    scratch = written / ".scratch"
    for v in an.needed_views([view]):
        if v == view:
            break
        con.execute(f"CREATE OR REPLACE VIEW {v} AS {an._body(files[v])}")
        path = written / f"{v}.parquet"
        if not path.exists():
            path = scratch / f"{v}.parquet"
            if not path.exists():
                scratch.mkdir(exist_ok=True)
                print(f"computing {v} into {path}", flush=True)
                an._copy(con, v, path, "parquet")
        an._read_back(con, v, path)
    return con


def timed_copy(con, sql: str, dest: Path) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    c, w = time.process_time(), time.perf_counter()
    con.execute("COPY (" + sql + ") TO $dest (FORMAT parquet, COMPRESSION zstd)", {"dest": str(dest)})
    return time.process_time() - c, time.perf_counter() - w


def operators(profile: dict) -> list[tuple[float, int, str, int, dict]]:
    rows: list[tuple[float, int, str, int, dict]] = []

    def walk(node: dict, depth: int) -> None:
        rows.append(
            (
                node.get("timing") or 0.0,
                depth,
                node.get("name"),
                node.get("intermediate_rows") or 0,
                node.get("extra_info") or {},
            )
        )
        for child in node.get("children", []):
            walk(child, depth + 1)

    for op in profile["operator"]:
        walk(op, 0)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("normalized", type=Path)
    ap.add_argument("written", type=Path)
    ap.add_argument("view")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--sql", type=Path, help="profile this SQL file for the view instead of sql/VIEW.sql")
    ap.add_argument("--ab", type=Path, help="SQL file of the same view to compare with (B)")
    ap.add_argument("--reps", type=int, default=4)
    args = ap.parse_args()
    con = connect_with_inputs(args.normalized, args.written, args.view)
    sql = an._body(args.sql or an.view_files()[args.view])
    tmp = Path(tempfile.mkdtemp(prefix="view-ops-"))
    dest = tmp / "out.parquet"
    if args.ab:
        other = an._body(args.ab)
        got: dict[str, list[float]] = {"A": [], "B": []}
        rng = random.Random(0)
        for r in range(args.reps):
            order = ["A", "B"]
            rng.shuffle(order)
            for k in order:
                cpu, wall = timed_copy(con, sql if k == "A" else other, dest)
                got[k].append(cpu)
                print(f"round {r} {k}: {cpu:.2f} CPU-s {wall:.2f} s wall", flush=True)
        paired = [b / a for a, b in zip(got["A"], got["B"], strict=True)]
        print(
            f"{args.view}: median CPU-s A {statistics.median(got['A']):.2f} B {statistics.median(got['B']):.2f}; "
            f"paired B/A median {statistics.median(paired):.3f} (min {min(paired):.3f}, max {max(paired):.3f})"
        )
        return
    prof = tmp / "profile.json"
    con.execute("PRAGMA enable_profiling = 'json'")
    con.execute(f"PRAGMA profiling_output = '{prof}'")
    cpu, wall = timed_copy(con, sql, dest)
    con.execute("PRAGMA disable_profiling")
    profile = json.loads(prof.read_text())
    system = profile["system"]
    print(
        f"{args.view}: {cpu:.2f} CPU-s {wall:.2f} s wall; DuckDB cpu_time {profile['query']['cpu_time']:.2f} s, "
        f"peak buffer memory {system['peak_buffer_memory'] / 1e6:.0f} MB, "
        f"spilled {system['total_bytes_spilled'] / 1e9:.1f} GB"
    )
    keys = ("Join Type", "Conditions", "CTE Name", "Aggregates", "Groups")
    for t, depth, name, card, extra in sorted(operators(profile), key=lambda r: -r[0])[: args.top]:
        info = json.dumps({k: v for k, v in extra.items() if k in keys})[:110]
        print(f"  {t:8.3f} s  d{depth:<3}{name:18s}{card:>12,} rows  {info}")


if __name__ == "__main__":
    main()
