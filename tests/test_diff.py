"""tracepipe diff on real samples: a run against itself (ratio 1.0 everywhere), against a copy whose conv2
kernels take exactly 3x as long, nsys against the PyTorch trace of the same ResNet-18 capture, a training
pair pass by pass, and two different models. Every number asserted is computed from the raw capture
(sqlite3 + the nested-loop reference of tests/reference.py, json), from layer_shapes by hand, never from
the diff's own output."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from pipeline.analyze import connect, view_files, write_views
from pipeline.normalize import normalize_file
from pipeline.report.browser_check import overflows
from tests.conftest import SAMPLES, gunzip_to
from tests.reference import nsys_path_stats as reference_paths
from tests.test_cli import tp
from tests.test_report import check_png, no_network

RESNET18 = SAMPLES / "h200_resnet18"
SCALE = 3  # conv2's kernels in the scaled copy take exactly this many times as long


def scale_conv2(src: Path, dest: Path) -> Path:
    """A copy whose kernels launched inside a `conv2` range (top-level and step/conv2) take SCALE x as long."""
    shutil.copy(src, dest)
    with sqlite3.connect(dest) as db:
        db.execute(
            f"""UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + {SCALE} * ("end" - start)
                WHERE correlationId IN (
                  SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                  JOIN NVTX_EVENTS n ON n.eventType = 59 AND n.text = 'conv2'
                   AND n.globalTid = r.globalTid AND r.start BETWEEN n.start AND n."end")"""
        )
    return dest


def diff_json(*args: object) -> dict:
    r = tp("diff", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def rows_by_path(j: dict, pass_: str = "all") -> dict[str | None, dict]:
    return {r["path"]: r for r in j["rows"] if r["pass"] == pass_}


def test_a_run_against_itself_is_ratio_one(nsys_out: Path, nsys_sqlite: Path, tmp_path: Path) -> None:
    ref = reference_paths(nsys_sqlite)
    j = diff_json(nsys_out, nsys_out, "--out", tmp_path)
    rows = rows_by_path(j)
    assert set(rows) == set(ref) and len(rows) == 11
    for path, (n, t) in ref.items():
        r = rows[path]
        assert (r["status"], r["kernels_a"], r["kernels_b"], r["gpu_time_a_ns"], r["gpu_time_b_ns"]) == (
            "both", n, n, t, t
        ), path  # fmt: skip
        assert (r["ratio"], r["kernels_ratio"], r["delta_ns"]) == (1.0, 1.0, 0), path
    total = sum(t for _, t in ref.values())
    assert j["totals"]["gpu_time_a_ns"] == j["totals"]["gpu_time_b_ns"] == total and j["totals"]["ratio"] == 1.0
    assert (j["totals"]["only_a"], j["totals"]["only_b"], j["totals"]["passes"]) == (0, 0, {})
    # the files of --format parquet (default) and the PNG
    df = pl.read_parquet(tmp_path / "layer_diff.parquet")
    assert df.height == 11 and set(df["ratio"].to_list()) == {1.0}
    check_png(tmp_path / "layer_diff.png")


def test_scaled_layer_moves_exactly_by_its_factor(nsys_sqlite: Path, tmp_path: Path) -> None:
    """Raw captures as inputs (normalized into a temporary store): B = A with conv2's kernels 3x as long."""
    (tmp_path / "scaled").mkdir()
    b_file = scale_conv2(nsys_sqlite, tmp_path / "scaled" / "nsys.sqlite")
    ref_a, ref_b = reference_paths(nsys_sqlite), reference_paths(b_file)
    moved = {p for p in ref_a if ref_a[p][1] != ref_b[p][1]}
    assert moved == {"conv2", "step/conv2"}  # the copy changed what it should, and only that
    out = tmp_path / "out"
    j = diff_json(nsys_sqlite, b_file, "--out", out, "--format", "csv", "--format", "json", "--html")
    assert (j["a"]["kind"], j["b"]["kind"]) == ("traces", "traces")
    rows = rows_by_path(j)
    assert set(rows) == set(ref_a)
    for path in ref_a:
        (na, ta), (nb, tb) = ref_a[path], ref_b[path]
        r = rows[path]
        assert (r["kernels_a"], r["kernels_b"], r["gpu_time_a_ns"], r["gpu_time_b_ns"]) == (na, nb, ta, tb), path
        assert r["delta_ns"] == tb - ta
        assert Fraction(r["ratio"]).limit_denominator(1000) == (SCALE if path in moved else 1), path
    # moved most: the path with the largest |B - A| by the reference, then the other conv2 path
    by_delta = sorted(ref_a, key=lambda p: -abs(ref_b[p][1] - ref_a[p][1]))
    assert [r["path"] for r in sorted(rows.values(), key=lambda r: r["abs_rank"])][:2] == by_delta[:2]
    assert j["totals"]["ratio"] == pytest.approx(
        sum(t for _, t in ref_b.values()) / sum(t for _, t in ref_a.values()), rel=1e-12
    )
    # the same rows in the CSV and JSON Lines files
    csv = pl.read_csv(out / "layer_diff.csv")
    assert dict(zip(csv["path"].fill_null("-"), csv["gpu_time_b_ns"], strict=True))["conv2"] == ref_b["conv2"][1]
    lines = [json.loads(x) for x in (out / "layer_diff.json").read_text().splitlines()]
    assert {x["path"]: x["gpu_time_a_ns"] for x in lines} == {p: t for p, (_, t) in ref_a.items()}
    # the terminal table: the top movers, the total, at most 40 lines
    r = tp("diff", nsys_sqlite, b_file, "--out", out)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) <= 40
    assert f"×{sum(t for _, t in ref_b.values()) / sum(t for _, t in ref_a.values()):.3f}" in r.stdout
    top = next(line for line in r.stdout.splitlines() if line.strip().startswith(by_delta[0] + " "))
    assert "×3.000" in top and f"{(ref_b[by_delta[0]][1] - ref_a[by_delta[0]][1]) / 1e3:+,.1f}" in top
    # the page: self-contained, every path in it, nothing overflows 1400 px in Chromium
    page = (out / "diff.html").read_text()
    no_network(page)
    assert "step/conv2" in page and "×3.000" in page
    assert overflows(out / "diff.html") == []


def test_nsys_against_the_pytorch_trace_of_one_capture(tmp_path: Path) -> None:
    """Two real traces of the ResNet-18 capture (nsys, PyTorch profiler; separate runs): the same kernels on
    the same 60 paths, GPU times a little apart; the capture folder as input, each trace picked by suffix."""
    a_ref = reference_paths(gunzip_to(RESNET18 / "nsys.sqlite.gz", tmp_path / "nsys.sqlite"))
    with gzip.open(RESNET18 / "torch_trace.json.gz") as f:
        kernels = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    b_total = sum(round(e["dur"] * 1000) for e in kernels)  # the profiler writes µs with ns decimals
    j = diff_json(f"{RESNET18}:nsys", f"{RESNET18}:torch_trace", "--out", tmp_path / "o")
    assert (j["a"]["trace_id"], j["b"]["trace_id"]) == ("h200_resnet18.nsys", "h200_resnet18.torch_trace")
    rows = rows_by_path(j)
    assert set(rows) == set(a_ref) and len(rows) == 60 and {r["status"] for r in rows.values()} == {"both"}
    for path, (n, t) in a_ref.items():
        assert (rows[path]["kernels_a"], rows[path]["kernels_b"], rows[path]["gpu_time_a_ns"]) == (n, n, t), path
    t = j["totals"]
    assert (t["kernels_a"], t["kernels_b"]) == (len(kernels), len(kernels)) == (357, 357)
    assert (t["gpu_time_a_ns"], t["gpu_time_b_ns"]) == (sum(x for _, x in a_ref.values()), b_total)
    # analytic MACs of conv1 by hand: batch 8, 64 x 112 x 112 outputs, 3 x 7 x 7 MACs each; 3 forwards traced
    conv1 = rows["step/model/conv1"]
    assert conv1["calls_a"] == 3 and conv1["macs_a"] == conv1["macs_b"] == 3 * 8 * 64 * 112 * 112 * 3 * 7 * 7
    assert conv1["macs_per_s_a"] == pytest.approx(conv1["macs_a"] / a_ref["step/model/conv1"][1] * 1e9, rel=1e-12)
    assert conv1["macs_per_s_ratio"] == pytest.approx(1 / conv1["ratio"], rel=1e-12)
    assert rows["step/model/bn1"]["macs_a"] is None  # batch norm: not analysed, not 0


def test_training_pair_compares_pass_by_pass(tmp_path: Path) -> None:
    """nsys vs PyTorch trace of the training sample: rows per pass; the optimizer's kernels counted raw."""
    raw = sqlite3.connect(gunzip_to(SAMPLES / "h200_train_decoder" / "nsys.sqlite.gz", tmp_path / "t.sqlite"))
    opt_kernels, opt_ns, all_ns = raw.execute(
        """SELECT count(*) FILTER (WHERE o), sum(d) FILTER (WHERE o), sum(d) FROM (
             SELECT k."end" - k.start AS d, EXISTS (
               SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN NVTX_EVENTS n
                 ON n.eventType = 59 AND n.globalTid = r.globalTid
                AND coalesce(n.text, (SELECT value FROM StringIds WHERE id = n.textId)) = 'optimizer'
                AND r.start BETWEEN n.start AND n."end"
               WHERE r.correlationId = k.correlationId) AS o
             FROM CUPTI_ACTIVITY_KIND_KERNEL k)"""
    ).fetchone()
    j = diff_json(f"{SAMPLES / 'h200_train_decoder'}:nsys", f"{SAMPLES / 'h200_train_decoder'}:torch_trace",
                  "--out", tmp_path / "o")  # fmt: skip
    passes = {r["pass"] for r in j["rows"]}
    assert passes == {"all", "forward", "backward", "optimizer"}
    opt = [r for r in j["rows"] if r["pass"] == "optimizer"]
    assert sum(r["kernels_a"] for r in opt) == opt_kernels > 0
    assert j["totals"]["passes"]["optimizer"][0] == opt_ns and j["totals"]["gpu_time_a_ns"] == all_ns
    # a pass row never holds more than its path's 'all' row; MACs only on forward rows of a training trace
    all_rows = rows_by_path(j)
    for r in j["rows"]:
        if r["pass"] != "all":
            assert r["gpu_time_a_ns"] <= all_rows[r["path"]]["gpu_time_a_ns"]
        assert r["macs_a"] is None or r["pass"] == "forward"
    assert any(r["macs_a"] for r in j["rows"] if r["pass"] == "forward")
    r = tp("diff", f"{SAMPLES / 'h200_train_decoder'}:nsys", f"{SAMPLES / 'h200_train_decoder'}:torch_trace",
           "--out", tmp_path / "o")  # fmt: skip
    assert "by pass: backward" in r.stdout and len(r.stdout.splitlines()) <= 40


def test_two_models_list_paths_only_on_one_side_and_fit_40_lines(
    nsys_out: Path, nsys_sqlite: Path, tmp_path: Path
) -> None:
    """ResNet-18 against the small CNN: most paths are on one side only; the terminal still fits 40 lines."""
    a_ref = reference_paths(gunzip_to(RESNET18 / "nsys.sqlite.gz", tmp_path / "r.sqlite"))
    b_ref = reference_paths(nsys_sqlite)
    r = tp("diff", f"{RESNET18}:nsys", nsys_out, "--out", tmp_path / "o", "--html")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) <= 40, len(lines)
    only_a, only_b = len(set(a_ref) - set(b_ref)), len(set(b_ref) - set(a_ref))
    assert only_a > 50 and only_b > 5
    assert f"only in A ({only_a})" in r.stdout and f"only in B ({only_b})" in r.stdout
    top = next(line for line in lines if "step/model/conv1 " in line)  # ResNet's largest layer: only in A
    assert "only in A" in top and f"{-a_ref['step/model/conv1'][1] / 1e3:+,.1f}" in top
    rows = pl.read_parquet(tmp_path / "o" / "layer_diff.parquet").filter(pl.col("pass") == "all")
    one_sided = rows.filter(pl.col("status") != "both")
    assert one_sided.height == only_a + only_b and one_sided["ratio"].null_count() == one_sided.height
    assert overflows(tmp_path / "o" / "diff.html") == []


def test_bad_inputs_exit_2_with_one_line(nsys_out: Path, tmp_path: Path) -> None:
    cases = {
        "missing": ((tmp_path / "nope", nsys_out), "nope: no such file or folder"),
        "ncu only": ((SAMPLES / "h200_resnet50_bf16", nsys_out), "no layers"),
        "several": ((RESNET18, nsys_out), "holds 2 traces with layers (h200_resnet18.nsys, h200_resnet18.torch_trace)"),
        "unknown trace": ((f"{nsys_out}:nope", nsys_out), "no trace 'nope' with layers"),
        "empty folder": ((tmp_path / "empty", nsys_out), "no trace files here"),
    }
    (tmp_path / "empty").mkdir()
    for name, ((a, b), msg) in cases.items():
        r = tp("diff", a, b, "--out", tmp_path / "o")
        assert r.returncode == 2, (name, r.stderr)
        assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, name
    assert not (tmp_path / "o").exists()  # bad input: nothing written


def test_help_has_examples() -> None:
    r = tp("diff", "--help")
    assert r.returncode == 0 and "Examples:" in r.stdout and "FOLDER:TRACE_ID" in r.stdout
    assert re.search(r"tracepipe diff \S+ \S+", r.stdout)


def test_report_diff_section(nsys_out: Path, nsys_sqlite: Path, tmp_path: Path) -> None:
    """`tracepipe report ANALYSIS --diff A B`: the comparison as a section of report.html, with its PNG."""
    analysis = tmp_path / "analysis"
    write_views(connect(nsys_out, materialize=True), analysis, list(view_files()), ("parquet",))
    scaled = tmp_path / "s"
    scaled.mkdir()
    b = scale_conv2(nsys_sqlite, scaled / "nsys.sqlite")
    ref_a, ref_b = reference_paths(nsys_sqlite), reference_paths(b)
    r = tp("report", analysis, "--out", tmp_path / "r", "--diff", analysis, b, "--quiet")
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r" / "report.html").read_text()
    assert '<section id="diff">' in page and '<a href="#diff">' in page
    delta = (ref_b["step/conv2"][1] - ref_a["step/conv2"][1]) / 1e3
    assert f"{delta:+,.1f}" in page
    check_png(tmp_path / "r" / "layer_diff.png")
    assert '<section id="ranks">' not in page  # one rank: no ranks section


@pytest.mark.parametrize("name", ["layer_diff_side", "layer_diff"])
def test_compare_view_headers_list_what_they_read(name: str) -> None:
    from pipeline.analyze import view_body, view_inputs
    from pipeline.report.diff import COMPARE_DIR
    from tests.test_sql_headers import tables_read

    path = COMPARE_DIR / f"{name}.sql"
    assert set(view_inputs(path)) == tables_read(view_body(path)) and path.read_text().startswith(f"-- {name}: ")


def test_a_normalized_side_computes_the_views_two_of_its_views_read_once(
    nsys_out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A side read from normalized data runs its query on a lazy connection: the views two or more of its views read
    are temp tables, not nested views planned again wherever read (the two H100 samples' diff: 11.8 -> 3.2 s,
    1,291 -> 403 MiB; benchmarks/results/lazy_diff_export_44.txt)."""
    from pipeline.analyze.views import shared_views
    from pipeline.report import diff

    seen: list[set[str]] = []
    rows = diff._side_rows

    def side_rows(con: Any, source: Path, trace: str | None) -> Any:  # con: the lazy ReadOnlyConnection
        out = rows(con, source, trace)
        seen.append(
            {t for (t,) in con._con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
        )
        return out

    monkeypatch.setattr(diff, "_side_rows", side_rows)
    side = diff.open_side(str(nsys_out), tmp_path)
    assert side.rows.num_rows == 11
    (temp,) = seen
    assert {"nvtx_paths", "gpu_op_launches", "launch_point_layers"} <= temp
    assert set(shared_views(["layer_summary", "layer_macs"])) <= temp


def test_runs_that_recorded_other_steps_compare_layer_by_layer(tmp_path: Path) -> None:
    # The DDP sample's rank 0 against the same file with its steps numbered 11-13 (as another schedule records):
    # "layer paths: 1 on both, 30 only in A, 30 only in B". A layer's steps are one row: ProfilerStep#*/model/head
    # holds the three steps' head, as layer_summary has them one per step.
    src = SAMPLES / "h100_ddp_2rank" / "rank0.json.gz"
    trace = json.loads(gzip.decompress(src.read_bytes()))
    renamed = 0
    for e in trace["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"], renamed = f"ProfilerStep#{int(e['name'].split('#')[1]) + 10}", renamed + 1
    assert renamed >= 3
    later = tmp_path / "later.json"
    later.write_text(json.dumps(trace))
    r = tp("diff", src, later, "--out", tmp_path / "d")
    assert r.returncode == 0, r.stderr
    assert re.search(r"layer paths: \d+ on both, 0 only in A, 0 only in B", r.stdout), r.stdout
    d = pl.read_parquet(tmp_path / "d" / "layer_diff.parquet").filter(pl.col("pass") == "all")
    assert not d["path"].drop_nulls().str.contains(r"ProfilerStep#\d").any()
    head = d.filter(pl.col("path") == "ProfilerStep#*/model/head")
    normalize_file(src, tmp_path / "n")
    per_step = (
        connect(tmp_path / "n")
        .sql(
            "SELECT count(*), sum(gpu_time_ns) FROM layer_summary "
            "WHERE regexp_matches(path, '^ProfilerStep#\\d+/model/head$')"
        )
        .fetchall()
    )
    assert per_step[0][0] == 3 and head["gpu_time_a_ns"].to_list() == head["gpu_time_b_ns"].to_list() == [
        per_step[0][1]
    ]
