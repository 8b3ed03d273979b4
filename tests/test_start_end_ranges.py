"""NVTX start/end ranges, marks, ranges left open and ranges a capture stopped inside, on real captures
(sample_traces/h100_nvtx_start_end, h100_nvtx_left_open, h100_nvtx_capture_range): tracepipe's attribution against
nsys's own reports of the same export (its `nsys stats` CSVs, committed beside it), the marks against a plain sqlite3
count, and ncu's Start/Stop_Range column and a range replay against a plain csv reading."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, gunzip_to

SAMPLE = SAMPLES / "h100_nvtx_start_end"
LEFT_OPEN = SAMPLES / "h100_nvtx_left_open"
CAPTURE_RANGE = SAMPLES / "h100_nvtx_capture_range"


def nsys_report(name: str, sample: Path = SAMPLE) -> list[dict[str, str]]:
    """One of the CSVs `nsys stats -f csv` wrote for the export (sample's nsys_stats/)."""
    return list(csv.DictReader(io.StringIO((sample / "nsys_stats" / f"{name}.txt").read_text())))


@pytest.fixture(scope="module")
def normalized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("start_end")
    normalize_file(SAMPLE / "nsys.sqlite.gz", out)
    return out


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gunzip_to(SAMPLE / "nsys.sqlite.gz", tmp_path_factory.mktemp("raw") / "nsys.sqlite")


def theirs(style: str, sample: Path = SAMPLE) -> dict[tuple[str, str], tuple[int, int]]:
    """nvtx_kern_sum's (range, kernel name) -> (kernels, total ns) of one style: every range around the launch."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for r in nsys_report("nvtx_kern_sum", sample):
        if r["Style"] == style:
            key = (r["NVTX Range"].removeprefix(":"), r["Kernel Name"])  # ':' joins the (default, empty) domain
            n, t = out.get(key, (0, 0))
            out[key] = (n + int(r["Kern Inst"]), t + int(r["Total Time (ns)"]))
    return out


def push_pop_kernels(normalized: Path) -> dict[tuple[str, str], tuple[int, int]]:
    """tracepipe's (push/pop range, kernel name) -> (kernels, total ns): each kernel counted for every range of its
    path, as nsys counts a range's kernels inclusively. A kernel whose layer is a start/end range has that range's
    text for a path: those are compared with nsys's StartEnd rows apart."""
    ours: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    rows = connect(normalized).sql(
        "SELECT path, name, duration_ns FROM kernel_layers WHERE path IS NOT NULL AND range_kind = 'push_pop'"
    )
    for path, name, ns in rows.fetchall():
        for level in path.split("/"):
            ours[(level, name)][0] += 1
            ours[(level, name)][1] += ns
    return {k: (n, t) for k, (n, t) in ours.items()}


def test_push_pop_ranges_hold_the_kernels_nsys_projects(normalized: Path) -> None:
    want = theirs("PushPop")
    assert push_pop_kernels(normalized) == want
    # step holds 33 (forward 24, backward's gradient seed 3, optimizer 3, load's 3): 33 + 24 + 3 + 3
    assert sum(n for n, _ in want.values()) == 63


def test_ranges_left_open_at_exit_hold_what_nsys_counts(tmp_path: Path) -> None:
    # `train` (push/pop) and `session` (start/end) are never ended: nsys ends them at the session's last NVTX
    # timestamp in the export, and counts the two steps and the two kernels after them for both.
    raw = gunzip_to(LEFT_OPEN / "nsys.sqlite.gz", tmp_path / "raw.sqlite")
    ends = dict(
        sqlite3.connect(raw).execute(
            'SELECT coalesce(n.text, s.value), n."end" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId '
            "WHERE n.eventType IN (59, 60) AND coalesce(n.text, s.value) IN ('train', 'session')"
        )
    )
    ((last,),) = sqlite3.connect(raw).execute('SELECT max(max(start), max("end")) FROM NVTX_EVENTS').fetchall()
    assert ends == {"train": last, "session": last}
    normalize_file(raw, tmp_path / "n", "left_open.nsys")
    want = theirs("PushPop", LEFT_OPEN)
    assert push_pop_kernels(tmp_path / "n") == want
    assert sum(n for (text, _), (n, _) in want.items() if text == "train") == 14  # 2 steps x 6 kernels, then 2
    # session, a start/end range, is no kernel's layer: the push/pop train holds every kernel it holds
    assert sum(n for n, _ in theirs("StartEnd", LEFT_OPEN).values()) == 14
    con = connect(tmp_path / "n")
    assert con.sql("SELECT count(*) FROM kernel_layers WHERE range_kind = 'start_end'").fetchall() == [(0,)]


def test_ranges_the_capture_stopped_inside_hold_what_nsys_counts(tmp_path: Path) -> None:
    # cudaProfilerStop() inside the third `step` and inside `session`: nsys 2025.3 ends both at the stop (one
    # timestamp, no NULL end); `train`, pushed before cudaProfilerStart(), is in neither the export nor a report.
    raw = gunzip_to(CAPTURE_RANGE / "nsys.sqlite.gz", tmp_path / "raw.sqlite")
    db = sqlite3.connect(raw)
    rows = db.execute(
        'SELECT coalesce(n.text, s.value), n."end" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId '
        "WHERE n.eventType IN (59, 60) ORDER BY n.start"
    ).fetchall()
    assert [text for text, _ in rows] == ["session", "step", "step", "step"]
    assert rows[0][1] == rows[-1][1] is not None
    ((nulls,),) = db.execute('SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND "end" IS NULL')
    assert nulls == 0
    assert {r["Range"] for r in nsys_report("nvtx_sum", CAPTURE_RANGE)} == {":session", ":step"}
    normalize_file(raw, tmp_path / "n", "capture_range.nsys")
    want = theirs("PushPop", CAPTURE_RANGE)
    assert push_pop_kernels(tmp_path / "n") == want
    assert sum(n for n, _ in want.values()) == 18  # 3 steps x 6 kernels
    con = connect(tmp_path / "n")
    # the last step's kernels, launched before the stop, are the stopped step's
    last = con.sql(
        "SELECT count(*) FROM kernel_layers k JOIN nvtx_ranges r USING (trace_id, range_id) "
        "WHERE r.end_ns = (SELECT max(end_ns) FROM nvtx_ranges)"
    ).fetchall()
    assert last == [(6,)]


def test_a_start_end_range_is_the_layer_where_no_push_pop_range_is(normalized: Path) -> None:
    # between_steps (main thread) and worker_job (a second thread) hold their kernels alone: nsys's rows for them
    # are tracepipe's layer rows. load's kernel is launched inside `step` too: the push/pop range is its layer.
    con = connect(normalized)
    want = theirs("StartEnd")
    ours: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for layer, name, ns in con.sql(
        "SELECT layer, name, duration_ns FROM kernel_layers WHERE range_kind = 'start_end'"
    ).fetchall():
        ours[(layer, name)][0] += 1
        ours[(layer, name)][1] += ns
    assert {k: tuple(v) for k, v in ours.items()} == {k: v for k, v in want.items() if k[0] != "load"}
    assert {k[0] for k in want} == {"between_steps", "worker_job", "load"}
    ((load_kernel, (n, ns)),) = [(k[1], v) for k, v in want.items() if k[0] == "load"]
    got = con.sql(
        "SELECT path, count(*), sum(duration_ns) FROM kernel_layers WHERE name = $n GROUP BY ALL",
        params={"n": load_kernel},
    ).fetchall()
    assert got == [("step", n, ns)]


def test_a_start_end_range_ended_on_another_thread_holds_nothing(normalized: Path, raw: Path) -> None:
    # `epoch` spans every step on the main thread and ends on another: nvtx_sum lists it, nvtx_kern_sum does not
    # (nsys reads only start/end ranges without an endGlobalTid); tracepipe gives it no kernel either.
    db = sqlite3.connect(raw)
    ((ended_elsewhere,),) = db.execute(
        "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 60 AND endGlobalTid IS NOT NULL"
    ).fetchall()
    assert ended_elsewhere == 1
    assert ":epoch" in {r["Range"] for r in nsys_report("nvtx_sum")}
    assert "epoch" not in {r["NVTX Range"].removeprefix(":") for r in nsys_report("nvtx_kern_sum")}
    con = connect(normalized)
    assert con.sql("SELECT count(*) FROM nvtx_ranges WHERE text = 'epoch' AND end_tid <> tid").fetchall() == [(1,)]
    assert con.sql("SELECT count(*) FROM kernel_layers WHERE layer = 'epoch'").fetchall() == [(0,)]
    # and every kernel outside every range, nsys's rows without a range, is outside every layer here
    outside = [r for r in nsys_report("nvtx_kern_sum") if not r["NVTX Range"]]
    got = con.sql("SELECT count(*), sum(duration_ns) FROM kernel_layers WHERE path IS NULL").fetchall()
    assert got == [(sum(int(r["Kern Inst"]) for r in outside), sum(int(r["Total Time (ns)"]) for r in outside))]


def test_marks_are_the_exports_marks(normalized: Path, raw: Path) -> None:
    db = sqlite3.connect(raw)
    want = db.execute(
        "SELECT coalesce(n.text, s.value), n.start FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE n.eventType = 34 ORDER BY n.start"
    ).fetchall()
    got = connect(normalized).sql("SELECT text, ts_ns FROM nvtx_marks ORDER BY ts_ns").fetchall()
    assert got == want and [t for t, _ in got] == ["step 0 begins", "step 1 begins", "step 2 begins", "done"]


def test_ncu_start_stop_ranges_per_launch(tmp_path: Path) -> None:
    # ncu lists the start/end ranges open at each launch, of any thread (the autograd thread's kernels show epoch):
    # tracepipe keeps them as written, outermost first, '/'-joined.
    with gzip.open(SAMPLE / "ncu_raw.csv.gz", "rt") as f:
        rows = list(csv.reader(f))
    col = next(i for i, c in enumerate(rows[0]) if "Start/Stop_Range" in c)
    want = Counter("/".join(re.findall(r'"\d+:<default domain>:([^:"]+):', r[col])) or None for r in rows[2:])
    normalize_file(SAMPLE / "ncu_raw.csv.gz", tmp_path)
    got = Counter(
        dict(connect(tmp_path).sql("SELECT nvtx_start_end, count(*) FROM ncu_kernels GROUP BY ALL").fetchall())
    )
    assert got == want and want["epoch/load"] == 1 and want["worker_job"] == 3


def test_ncu_range_replay_of_a_real_capture(tmp_path: Path) -> None:
    # `--replay-mode app-range --nvtx-include step/forward/`: one result per range, Kernel Name `range`, and no Grid
    # Size / Block Size columns at all in ncu 2025.3 (not an old ncu's layout: the warning says range replay alone).
    with gzip.open(SAMPLE / "ncu_app_range_raw.csv.gz", "rt") as f:
        header, _units, *results = list(csv.reader(f))
    assert "Grid Size" not in header and "Block Size" not in header
    stack, opened = (next(i for i, c in enumerate(header) if key in c) for key in ("Push/Pop", "Start/Stop"))
    push_pop = {"/".join(re.findall(r'"<default domain>:([^:"]+):', r[stack])) for r in results}
    start_end = {"/".join(re.findall(r'"\d+:<default domain>:([^:"]+):', r[opened])) for r in results}
    n_metrics = len(header) - header.index("CC") - 1  # every column after CC is a metric
    normalize_file(SAMPLE / "ncu_app_range_raw.csv.gz", tmp_path)
    con = connect(tmp_path)
    got = con.sql("SELECT name, nvtx_push_pop, nvtx_start_end, grid_x, block_x, stream_id FROM ncu_kernels").fetchall()
    assert got == [("range", *push_pop, *start_end, None, None, None)] * len(results)
    assert len(results) == 2 and push_pop == {"step/forward"} and start_end == {"epoch/load"}
    assert con.sql("SELECT count(*) FROM ncu_metrics").fetchall() == [(len(results) * n_metrics,)]
    ((warnings,),) = con.sql("SELECT warnings FROM trace_meta").fetchall()
    assert [w.split(" (")[0] for w in json.loads(warnings)] == ["2 range-replay result(s)"]


def test_a_range_the_capture_stopped_inside_lasts_to_the_last_nvtx_timestamp(tmp_path: Path) -> None:
    # The capture stopped inside `train` and `session` (nsys stores their end as NULL): the real left-open export with
    # both ends cleared. nsys's reports read such a range to the last NVTX timestamp (nvtx_kern_sum:
    # ifnull(end, max(max(start), max(end)) of NVTX_EVENTS)); worked out here in plain sqlite3, train now ends at
    # the second step's pop, so it holds the two steps' 12 kernels and not the 2 launched after them.
    raw = gunzip_to(LEFT_OPEN / "nsys.sqlite.gz", tmp_path / "cut.sqlite")
    db = sqlite3.connect(raw)
    text = "coalesce(n.text, (SELECT value FROM StringIds s WHERE s.id = n.textId))"
    db.execute(f"UPDATE NVTX_EVENTS AS n SET \"end\" = NULL WHERE {text} IN ('train', 'session')")
    db.commit()
    ((start, last),) = db.execute(
        f'SELECT n.start, (SELECT max(max(start), max("end")) FROM NVTX_EVENTS) FROM NVTX_EVENTS n '
        f"WHERE {text} = 'train'"
    ).fetchall()
    ((n, ns),) = db.execute(
        'SELECT count(*), sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k '
        'JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) WHERE r.start >= ? AND r."end" <= ?',
        (start, last),
    ).fetchall()
    assert n == 12
    normalize_file(raw, tmp_path / "n", "cut.nsys")
    con = connect(tmp_path / "n")
    got = con.sql("SELECT count(*), sum(duration_ns) FROM kernel_layers WHERE path LIKE 'train%'").fetchall()
    assert got == [(n, ns)]
    assert con.sql("SELECT text, end_ns FROM nvtx_ranges WHERE text IN ('train', 'session') ORDER BY 1").fetchall() == [
        ("session", last),
        ("train", last),
    ]
    ((warnings,),) = con.sql("SELECT warnings FROM trace_meta").fetchall()
    assert any(w.startswith("2 NVTX range(s) stored without an end: each lasts") for w in json.loads(warnings))
