"""The report's ranks section on four ranks made from the real small-CNN capture: rank 2's kernels all take
three times as long, rank 3's conv1 kernels five times. Spread and straggler per layer are checked against the
nested-loop reference over each rank's raw sqlite; the page passes the headless-Chromium overflow check; a
folder of one rank, or of traces with no rank, gets no section."""

from __future__ import annotations

import html
import re
import shutil
import sqlite3
import statistics
from pathlib import Path

import pytest

from pipeline.analyze import connect, view_files, write_views
from pipeline.normalize import normalize_file
from pipeline.normalize.batch import normalize_many
from pipeline.report.browser_check import overflows
from pipeline.report.build import build_report
from tests.test_diff import reference_paths
from tests.test_report import check_png, no_network

RANKS = 4


def slow_down(db_path: Path, factor: int, layer: str | None = None) -> None:
    """Kernels launched inside a range named ``layer`` (all kernels when None) take ``factor`` x as long."""
    where = ""
    if layer is not None:
        where = f"""WHERE correlationId IN (
            SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            JOIN NVTX_EVENTS n ON n.eventType = 59 AND n.text = '{layer}'
             AND n.globalTid = r.globalTid AND r.start BETWEEN n.start AND n."end")"""
    with sqlite3.connect(db_path) as db:
        db.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + {factor} * ("end" - start) {where}')


@pytest.fixture(scope="module")
def ranks_run(nsys_sqlite: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """rank0..rank3/nsys.sqlite normalized, analysed and reported; returns the report folder and, per rank,
    the reference (kernels, ns) per path of its raw file."""
    root = tmp_path_factory.mktemp("ranks")
    files = []
    for r in range(RANKS):
        (root / f"rank{r}").mkdir()
        files.append(Path(shutil.copy(nsys_sqlite, root / f"rank{r}" / "nsys.sqlite")))
    slow_down(files[2], 3)
    slow_down(files[3], 5, "conv1")
    norm, analysis, out = root / "n", root / "a", root / "r"
    assert [o.error for o in normalize_many(files, norm)] == [None] * RANKS
    write_views(connect(norm, materialize=True), analysis, list(view_files()), ("parquet",))
    build_report(analysis, out)
    return out, [reference_paths(f) for f in files]


def table_after(page: str, heading: str) -> list[list[str]]:
    """The cells of the first table after the <h3> that starts with ``heading``, as text."""
    m = re.search(rf"<h3>{re.escape(heading)}.*?</h3>(.*?)</table>", page, re.S)
    assert m, heading
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", m.group(1), re.S)
    return [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows[1:]]


def us(ns: float) -> str:
    return f"{ns / 1e3:,.1f}"


def test_ranks_section_straggler_and_spread_from_the_raw_files(ranks_run: tuple[Path, list[dict]]) -> None:
    out, ref = ranks_run
    page = (out / "report.html").read_text()
    no_network(page)
    assert '<section id="ranks">' in page and "Ranks: 4 ranks compared" in page
    paths = set(ref[0])
    assert all(set(r) == paths for r in ref) and {"conv1", "step/conv1", "conv2"} <= paths
    times = {p: [ref[r][p][1] for r in range(RANKS)] for p in paths}
    # stragglers: conv1 paths -> rank 3 (5x), every other path -> rank 2 (3x); excess = slowest - median
    stragglers = {row[0]: row for row in table_after(page, "Straggler rank per layer")}
    assert len(stragglers) == len(paths)
    for p, t in times.items():
        label = "(outside ranges)" if p is None else p
        slowest = max(range(RANKS), key=lambda r: (t[r], -r))
        assert slowest == (3 if p in ("conv1", "step/conv1") else 2), p
        med = statistics.median(t)
        row = stragglers[label]
        assert row[1] == str(slowest) and row[2] == f"rank{slowest}.nsys", row
        assert row[4:8] == [us(t[slowest]), us(med), us(t[slowest] - med), f"{t[slowest] / med:.3f}"], row
    # spread: min / median / max / max-min and the fastest and slowest rank of each path
    spread = {row[0]: row for row in table_after(page, "Spread across ranks per layer")}
    conv1 = times["conv1"]
    assert spread["conv1"][1:4] == ["4", us(min(conv1)), us(statistics.median(conv1))]
    assert spread["conv1"][4] == us(max(conv1)) and spread["conv1"][6] == "2.500"  # 5t over (t + 3t) / 2
    assert spread["conv1"][7:] == [us(max(conv1) - min(conv1)), "0", "3"]
    assert spread["conv2"][6] == "3.000" and spread["conv2"][9] == "2"
    # the headline: rank 2 is the slowest overall (3x everything beats 5x conv1 alone)
    totals = [sum(t for _, t in ref[r].values()) for r in range(RANKS)]
    assert max(range(RANKS), key=lambda r: totals[r]) == 2
    assert f"max {us(totals[2])} µs (rank 2, rank2.nsys" in page
    check_png(out / "ranks.png")
    assert overflows(out / "report.html") == []


def test_no_ranks_section_without_several_known_ranks(nsys_out: Path, nsys_sqlite: Path, tmp_path: Path) -> None:
    """One known rank, or two traces whose rank is unknown (trace_meta.rank NULL): no section."""
    two, one = tmp_path / "two", tmp_path / "one"
    for tid in ("run_a", "run_b"):
        normalize_file(nsys_sqlite, two, tid)
    (tmp_path / "rank0").mkdir()
    normalize_file(shutil.copy(nsys_sqlite, tmp_path / "rank0" / "nsys.sqlite"), one)
    assert connect(one).sql("SELECT rank FROM trace_meta").fetchall() == [(0,)]
    for norm in (nsys_out, two, one):
        analysis, out = tmp_path / f"a_{norm.name}", tmp_path / f"r_{norm.name}"
        write_views(connect(norm, materialize=True), analysis, list(view_files()), ("parquet",))
        build_report(analysis, out)
        page = (out / "report.html").read_text()
        assert '<section id="ranks">' not in page and not (out / "ranks.png").exists(), norm
