"""Does a rewritten view return the same rows? The view computed from sql/VIEW.sql (A) and from OTHER.sql (B) in
each normalized folder given, compared with EXCEPT ALL both ways (a multiset comparison: duplicates count) and by
their column names and types.

    python benchmarks/same_rows.py VIEW OTHER.sql NORMALIZED [NORMALIZED ...] [--written DIR]

Every other view is created from sql/ as analyze creates it. ``--written DIR`` (one NORMALIZED only): the view's
inputs read from their Parquet files in DIR as a big analyze reads them (scratch inputs DIR lacks are computed
once into DIR/.scratch/), for a 10M-kernel input whose whole tree of views would be recomputed twice otherwise.
Prints per folder the rows of each and of each difference; exits 1 when any differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pipeline.analyze as an  # noqa: E402
from benchmarks._measure import rows_only_in  # noqa: E402
from pipeline.analyze import scratch as scratch_io  # noqa: E402


def connect_with_inputs(normalized: Path, written: Path, view: str):  # type: ignore[no-untyped-def]
    """A connection where every view ``view`` reads is its written Parquet file (scratch ones computed once)."""
    con = an.connect(normalized, views=[])
    files = an.view_files()
    scratch = written / ".scratch"
    for v in an.needed_views([view]):
        if v == view:
            break
        con.execute(f"CREATE OR REPLACE VIEW {v} AS {an.view_body(files[v])}")
        path = written / f"{v}.parquet"
        if not path.exists():
            path = scratch / f"{v}.parquet"
            if not path.exists():
                scratch.mkdir(exist_ok=True)
                print(f"computing {v} into {path}", flush=True)
                scratch_io.copy_view(con, v, path, "parquet")
        scratch_io.read_back(con, v, path)
    return con


def differences(con, a_sql: str, b_sql: str) -> tuple[int, int, int, int, bool]:  # type: ignore[no-untyped-def]
    """Rows of A, of B, of A EXCEPT ALL B and of B EXCEPT ALL A, and whether the column names and types agree."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _a AS {a_sql}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE _b AS {b_sql}")
    (a,) = con.execute("SELECT count(*) FROM _a").fetchone()
    (b,) = con.execute("SELECT count(*) FROM _b").fetchone()
    same_types = con.execute("DESCRIBE _a").fetchall() == con.execute("DESCRIBE _b").fetchall()
    return a, b, *rows_only_in(con, "SELECT * FROM _a", "SELECT * FROM _b"), same_types


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("view")
    ap.add_argument("other", type=Path)
    ap.add_argument("normalized", type=Path, nargs="+")
    ap.add_argument("--written", type=Path)
    args = ap.parse_args()
    a_sql, b_sql = an.view_body(an.view_files()[args.view]), an.view_body(args.other)
    differ = False
    for folder in args.normalized:
        con = connect_with_inputs(folder, args.written, args.view) if args.written else an.connect(folder)
        a, b, ab, ba, same_types = differences(con, a_sql, b_sql)
        differ |= bool(ab or ba or a != b or not same_types)
        print(
            f"{folder}: {args.view} A {a:,} rows, B {b:,} rows; A except all B {ab:,}, B except all A {ba:,}"
            + ("" if same_types else "; COLUMN NAMES OR TYPES DIFFER")
        )
        con.close()
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
