"""`tracepipe analyze --incremental`: after one capture of a folder is re-normalized, only its traces are
recomputed, and every output equals a full analyze from scratch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb

from pipeline.analyze import default_views
from pipeline.analyze.incremental import ACROSS_CAPTURES, across_views
from tests.conftest import SAMPLES, SMALLCNN
from tests.test_cli import tp

DECODER = SAMPLES / "h200_train_decoder"


def _analyze(normalized: Path, out: Path, *extra: str) -> dict:
    r = tp("analyze", normalized, "--out", out, "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _canonical(con: duckdb.DuckDBPyConnection, path: Path) -> list[tuple]:
    """A view file's rows in a fixed order, doubles to 9 significant digits (sums may add in another order)."""
    rel = con.read_parquet(str(path))
    cols = []
    for name, dtype in zip(rel.columns, rel.types, strict=True):
        q = f'"{name}"'
        if str(dtype) in ("DOUBLE", "FLOAT"):
            digits = f"8 - CAST(floor(log10(abs({q}))) AS INTEGER)"
            q = f"CASE WHEN {q} = 0 OR NOT isfinite({q}) THEN {q} ELSE round({q}, {digits}) END"
        cols.append(f"{q} AS c{len(cols)}")
    rows = rel.project(", ".join(cols)).fetchall()
    return sorted(rows, key=repr)


def test_one_changed_capture_is_all_that_is_recomputed_and_results_equal_a_full_run(tmp_path: Path) -> None:
    inputs, normalized, inc, full = (tmp_path / d for d in ("in", "n", "inc", "full"))
    for cap in ("cap0", "cap1"):
        (inputs / cap).mkdir(parents=True)
        shutil.copy(SMALLCNN / "nsys.sqlite.gz", inputs / cap / "nsys.sqlite.gz")
    (inputs / "cap2").mkdir()  # a capture of three traces: timeline, ncu and the module shapes
    for name in ("nsys.sqlite.gz", "ncu_raw.csv.gz", "layer_shapes.json"):
        shutil.copy(DECODER / name, inputs / "cap2" / name)
    assert tp("normalize", inputs, "--out", normalized, "-q").returncode == 0

    first = _analyze(normalized, inc, "--incremental")
    traces = first["traces"]
    assert traces == 5 and len(first["recomputed_traces"]) == traces  # no earlier state: everything
    assert _analyze(normalized, inc, "--incremental")["recomputed_traces"] == []  # nothing changed

    shutil.copy(DECODER / "nsys.sqlite.gz", inputs / "cap1" / "nsys.sqlite.gz")  # cap1 is now another program
    assert tp("normalize", inputs / "cap1" / "nsys.sqlite.gz", "--out", normalized, "-q", "--force").returncode == 0
    again = _analyze(normalized, inc, "--incremental")
    assert again["recomputed_traces"] == ["cap1.nsys"]
    assert again["traces"] == traces

    scratch = _analyze(normalized, full)
    views = default_views()
    con = duckdb.connect()
    for view in views:
        assert again[view] == scratch[view], view
        assert _canonical(con, inc / f"{view}.parquet") == _canonical(con, full / f"{view}.parquet"), view
    # the change is visible where it must be: cap1's kernels are the decoder's now, in a per-capture view
    # and in the cross-rank view recomputed from it
    assert again["kernel_layers"] == first["kernel_layers"] - 33 + _kernels(DECODER)
    assert set(ACROSS_CAPTURES) <= across_views() and "layer_rank_spread" in views


def _kernels(capture: Path) -> int:
    import gzip
    import sqlite3
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
        f.write(gzip.decompress((capture / "nsys.sqlite.gz").read_bytes()))
        f.flush()
        return sqlite3.connect(f.name).execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]


def test_a_plain_analyze_or_other_options_make_the_next_incremental_run_full(tmp_path: Path) -> None:
    normalized, out = tmp_path / "n", tmp_path / "a"
    (tmp_path / "in" / "cap0").mkdir(parents=True)
    shutil.copy(SMALLCNN / "nsys.sqlite.gz", tmp_path / "in" / "cap0" / "nsys.sqlite.gz")
    assert tp("normalize", tmp_path / "in", "--out", normalized, "-q").returncode == 0
    assert _analyze(normalized, out, "--incremental")["recomputed_traces"] == ["cap0.nsys"]
    # --device projects every view: rows computed without it must not be kept
    assert _analyze(normalized, out, "--incremental", "--device", "rtx3090")["recomputed_traces"] == ["cap0.nsys"]
    assert _analyze(normalized, out, "--incremental", "--device", "rtx3090")["recomputed_traces"] == []
    _analyze(normalized, out, "--device", "rtx3090")  # a plain run: the state goes
    assert _analyze(normalized, out, "--incremental", "--device", "rtx3090")["recomputed_traces"] == ["cap0.nsys"]
