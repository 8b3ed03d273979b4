"""One golden table per macro of sql/macros/ (tests/golden.py): the relations handed to it written inline, the
call, and the table it must give, worked out by hand in the comments.  The views that call a macro have golden
tables of their own; these pin the macro's rule on its own, the cases its callers meet rarely included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import expect, kernel, launch, write


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace of no rows: the interval macros read only what they are handed."""
    return write(tmp_path_factory.mktemp("empty"), "empty.nsys")


def test_interval_at_finds_the_interval_holding_each_point(empty: Path) -> None:
    # Lane (1, 1): [0, 10) a, [10, 30) b, [50, 1000) c: disjoint, half-open (closed = false), one bucket each on
    # average: width (1000 - 0) // (1 x 3) = 333, so c, a long one, is listed in buckets 0 (50 // 333) to 2
    # (999 // 333).  t = 10 is b's, not a's (a ends before 10); 30 and 40 lie in the gap; 999 in c's last bucket;
    # 1000 is past c; -5 before every interval.  Lane (1, 2) has its own [0, 100) d: the point (1, 2, 5) is d's,
    # never a's.  Lane (2, NULL) is a lane too (IS NOT DISTINCT FROM): [0, 5) e holds (2, NULL, 3); the point
    # (3, 1, 3) has no interval in its lane.
    expect(
        empty,
        """
        WITH spans AS (SELECT * FROM (VALUES ('t', 1, 1, 0, 10, 'a'), ('t', 1, 1, 10, 30, 'b'),
                                              ('t', 1, 1, 50, 1000, 'c'), ('t', 1, 2, 0, 100, 'd'),
                                              ('t', 2, NULL, 0, 5, 'e'))
                       s(trace_id, lane, sublane, lo, hi, name)),
        points AS (SELECT * FROM (VALUES ('t', 1, 1, -5), ('t', 1, 1, 0), ('t', 1, 1, 10), ('t', 1, 1, 30),
                                         ('t', 1, 1, 40), ('t', 1, 1, 999), ('t', 1, 1, 1000), ('t', 1, 2, 5),
                                         ('t', 2, NULL, 3), ('t', 3, 1, 3))
                   p(trace_id, lane, sublane, t))
        SELECT lane, sublane, t, lo, hi, name FROM interval_at(points, spans, 1, false)
        ORDER BY lane, sublane, t
        """,
        """
        lane | sublane | t    | lo   | hi   | name
        1    | 1       | -5   | NULL | NULL | NULL
        1    | 1       | 0    | 0    | 10   | a
        1    | 1       | 10   | 10   | 30   | b
        1    | 1       | 30   | NULL | NULL | NULL
        1    | 1       | 40   | NULL | NULL | NULL
        1    | 1       | 999  | 50   | 1000 | c
        1    | 1       | 1000 | NULL | NULL | NULL
        1    | 2       | 5    | 0    | 100  | d
        2    | NULL    | 3    | 0    | 5    | e
        3    | 1       | 3    | NULL | NULL | NULL
        """,
    )


def test_interval_at_closed_intervals_hold_their_end_across_bigint(empty: Path) -> None:
    # Closed intervals [lo, hi] (closed = true): [-4e18, -4e18 + 500] and [1000, BIGINT's last value]: the lane
    # spans more than BIGINT holds, so the width is computed wider: (2^63 - 1 + 4e18) // (4 x 2) buckets.  The
    # first interval holds its end instant -4e18 + 500; the second holds 10^17 (in a bucket far past its first)
    # and its last instant 2^63 - 1.  Instant 999 lies between them.
    big = 2**63 - 1
    expect(
        empty,
        f"""
        WITH spans AS (SELECT * FROM (VALUES ('t', 7, NULL::BIGINT, -4000000000000000000, -3999999999999999500, 'x'),
                                              ('t', 7, NULL::BIGINT, 1000, {big}, 'y'))
                       s(trace_id, lane, sublane, lo, hi, name)),
        points AS (SELECT * FROM (VALUES ('t', 7, NULL::BIGINT, -3999999999999999500), ('t', 7, NULL::BIGINT, 999),
                                         ('t', 7, NULL::BIGINT, 100000000000000000), ('t', 7, NULL::BIGINT, {big}))
                   p(trace_id, lane, sublane, t))
        SELECT t, name FROM interval_at(points, spans, 4, true) ORDER BY t
        """,
        f"""
        t                    | name
        -3999999999999999500 | x
        999                  | NULL
        100000000000000000   | y
        {big}  | y
        """,
    )


def test_outermost_intervals_drops_those_inside_an_earlier_one(empty: Path) -> None:
    # Lane (1, 1), touching = false: a [0, 100] holds b [10, 20] (dropped) and c [20, 100] (ends with a:
    # dropped).  d [100, 150] only touches a's end: kept.  e [140, 200] overlaps d without being inside it:
    # kept.  f [300, 400] and g [300, 350] start together: the longer first, so g is inside f (dropped).
    # Lane (1, 2): h [10, 20] nests in nothing of its own lane (a is another lane's): kept.  Equal intervals i
    # [500, 600] (tie 2) and j [500, 600] (tie 1) of lane (1, 1): j comes first by tie, i is inside it.
    intervals = """
        WITH iv AS (SELECT * FROM (VALUES ('t', 1, 1, 0, 100, 0, 'a'), ('t', 1, 1, 10, 20, 0, 'b'),
                                          ('t', 1, 1, 20, 100, 0, 'c'), ('t', 1, 1, 100, 150, 0, 'd'),
                                          ('t', 1, 1, 140, 200, 0, 'e'), ('t', 1, 1, 300, 400, 0, 'f'),
                                          ('t', 1, 1, 300, 350, 0, 'g'), ('t', 1, 2, 10, 20, 0, 'h'),
                                          ('t', 1, 1, 500, 600, 2, 'i'), ('t', 1, 1, 500, 600, 1, 'j'))
                    v(trace_id, lane, sublane, start_ns, end_ns, tie, name))
    """
    expect(
        empty,
        intervals + "SELECT string_agg(name, ' ' ORDER BY name) AS kept FROM outermost_intervals(iv, false)",
        """
        kept
        a d e f h j
        """,
    )
    # touching = true: an interval starting at or before an earlier one's end is inside it: d (starts at a's end)
    # and e (starts inside d) go too.
    expect(
        empty,
        intervals + "SELECT string_agg(name, ' ' ORDER BY name) AS kept FROM outermost_intervals(iv, true)",
        """
        kept
        a f h j
        """,
    )


def test_step_folded_folds_only_a_whole_leading_step_segment(empty: Path) -> None:
    # The three step ranges, as a path's first segment (a) or the whole text (b, c, d: a layer that is the step
    # itself) fold to `*`; the rest of the path stays.  Not folded: a step segment that is not the first (e), one
    # whose number runs into other text (f: `step_3x`), another prefix (g: `mystep#3`, h: `Step#3`, the case
    # matters), a step without a number (i), and NULL (j).  Only the first segment of a path whose later segments
    # are steps too (k).
    expect(
        empty,
        """
        SELECT k, step_folded(t) AS folded
        FROM (VALUES ('a', 'ProfilerStep#12/model/fc'), ('b', 'ProfilerStep#7'), ('c', 'step#0'), ('d', 'step_31'),
                     ('e', 'model/step_3'), ('f', 'step_3x/fc'), ('g', 'mystep#3/fc'), ('h', 'Step#3/fc'),
                     ('i', 'step_/fc'), ('j', NULL), ('k', 'step_2/step_3/fc')) v(k, t)
        ORDER BY k
        """,
        """
        k | folded
        a | ProfilerStep#*/model/fc
        b | ProfilerStep#*
        c | step#*
        d | step_*
        e | model/step_3
        f | step_3x/fc
        g | mystep#3/fc
        h | Step#3/fc
        i | step_/fc
        j | NULL
        k | step_*/step_3/fc
        """,
    )


#: The texts of the step_folded golden test above.
STEP_TEXTS = [
    "ProfilerStep#12/model/fc",
    "ProfilerStep#7",
    "step#0",
    "step_31",
    "model/step_3",
    "step_3x/fc",
    "mystep#3/fc",
    "Step#3/fc",
    "step_/fc",
    None,
    "step_2/step_3/fc",
]


def test_the_report_folds_step_paths_as_the_macro_does() -> None:
    # report/build.py folds layer_summary's paths in polars with the pattern it reads from the macro's file: on the
    # golden texts above polars' fold equals DuckDB's step_folded, text for text.
    import duckdb
    import polars as pl

    from pipeline.analyze.engine import create_macros
    from pipeline.report.build import step_prefix

    con = duckdb.connect()
    create_macros(con, names={"step_folded"})
    sql = [con.execute("SELECT step_folded($t)", {"t": t}).fetchone()[0] for t in STEP_TEXTS]
    assert sql[0] == "ProfilerStep#*/model/fc" and sql[5] == "step_3x/fc"  # the macro folds (see the golden test)
    assert pl.Series(STEP_TEXTS, dtype=pl.String).str.replace(step_prefix(), "${1}*${2}").to_list() == sql


def test_gpu_ops_projects_each_kind_into_the_columns_of_kernels(tmp_path: Path) -> None:
    # One kernel, one 3000-byte host-to-device copy, one memset of 4000 bytes: each with its own id as op_row_id,
    # the copy and the memset named as nsys names them, the copy's direction as copy_kind; a kernel-only column
    # (grid_x) is NULL on the others.  Asking for one kind gives that kind alone.
    write(
        tmp_path,
        "ops.nsys",
        api_calls=[launch(1, 10), launch(2, 20), launch(3, 30)],
        kernels=[kernel(1, start_ns=100, duration_ns=5, grid_x=4)],
        memcpy=[{"correlation_id": 2, "start_ns": 200, "duration_ns": 7, "bytes": 3000, "kind": "HtoD"}],
        memset=[{"correlation_id": 3, "start_ns": 300, "duration_ns": 9, "bytes": 4000}],
    )
    expect(
        tmp_path,
        "SELECT op_kind, op_row_id, correlation_id, start_ns, end_ns, name, grid_x, bytes, copy_kind "
        "FROM gpu_ops() ORDER BY start_ns",
        """
        op_kind | op_row_id | correlation_id | start_ns | end_ns | name                | grid_x | bytes | copy_kind
        kernel  | 0         | 1              | 100      | 105    | k0                  | 4      | NULL  | NULL
        memcpy  | 0         | 2              | 200      | 207    | [CUDA memcpy HtoD]  | NULL   | 3000  | HtoD
        memset  | 0         | 3              | 300      | 309    | [CUDA memset]       | NULL   | 4000  | NULL
        """,
    )
    expect(
        tmp_path,
        "SELECT op_kind, count(*) AS n FROM gpu_ops(kinds := ['memcpy', 'memset']) GROUP BY op_kind ORDER BY op_kind",
        """
        op_kind | n
        memcpy  | 1
        memset  | 1
        """,
    )
