"""`tracepipe findings`, the findings atop `run`'s and `report`'s terminal summaries, and terminal widths: the top
findings fit one screen, every format carries every finding, piped tables print whole, COLUMNS is honoured."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import ROOT, SAMPLES

RESNET = SAMPLES / "h200_resnet18" / "nsys.sqlite.gz"


def tp(*args: object, **env: str) -> subprocess.CompletedProcess:
    """The CLI in a process of its own, stdout piped; COLUMNS and LINES only where a test sets them."""
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env={**base, "PYTHONPATH": str(ROOT), **env},
        check=False,
    )


@pytest.fixture(scope="module")
def run_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("run")
    r = tp("run", RESNET, "--out", out)
    assert r.returncode == 0, r.stderr
    return out, r.stdout


def test_run_ends_with_the_top_findings(run_out: tuple[Path, str]) -> None:
    out, stdout = run_out
    found = pl.read_parquet(out / "analysis" / "findings.parquet")
    top = found.sort("at_stake_ns", descending=True).row(0, named=True)
    tail = stdout[stdout.index("Top findings") :]
    assert f"Top findings of {found.height}" in tail and f"tracepipe findings {out / 'analysis'}" in tail
    assert top["fix"] in tail and top["evidence"] in tail  # piped: whole lines, never cut
    assert len(tail.splitlines()) <= 17


def test_findings_formats_carry_every_finding(run_out: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = run_out
    analysis = out / "analysis"
    found = pl.read_parquet(analysis / "findings.parquet")
    r = tp("findings", analysis, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert r.returncode == 0 and len(rows) == found.height
    assert [int(x["at_stake_ns"]) for x in rows] == sorted(found["at_stake_ns"].to_list(), reverse=True)
    r = tp("findings", analysis, "--format", "json", "--rule", "layout_conversion")
    objs = [json.loads(line) for line in r.stdout.splitlines()]
    assert objs and {o["rule"] for o in objs} == {"layout_conversion"}
    assert len(objs) == found.filter(pl.col("rule") == "layout_conversion").height
    assert isinstance(objs[0]["at_stake_ns"], int) and objs[0]["fix"].startswith("channels_last")
    r = tp("findings", analysis, "--format", "markdown")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2 + found.height and "| channels_last:" in r.stdout
    r = tp("findings", analysis, "--format", "markdown", "--rule", "straggler_rank")  # one trace: no straggler
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2
    for name in ("f.csv", "f.json", "f.md", "f.parquet"):
        r = tp("findings", analysis, "-o", tmp_path / name)
        assert r.returncode == 0 and (tmp_path / name).stat().st_size > 0, r.stderr
    assert pl.read_parquet(tmp_path / "f.parquet").equals(
        found.sort("at_stake_ns", "trace_id", "rule", "path", "kernel", descending=[True, False, False, False, False])
    )
    assert "| rule |" in (tmp_path / "f.md").read_text()
    r = tp("findings", analysis, "-o", tmp_path / "f.txt")
    assert r.returncode == 2 and "extension" in r.stderr


def test_findings_table_fits_one_screen_and_lists_all_with_all(run_out: tuple[Path, str]) -> None:
    analysis = run_out[0] / "analysis"
    n = pl.read_parquet(analysis / "findings.parquet").height
    r = tp("findings", analysis, COLUMNS="80", LINES="24")
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert lines[-1].startswith("… ") and "--all" in lines[-1]
    r = tp("findings", analysis, "--all", COLUMNS="80")
    assert all(f"{i:>3}. " in r.stdout for i in range(1, n + 1)) and "more:" not in r.stdout


def test_findings_of_a_normalized_folder_equal_the_analysis_ones(run_out: tuple[Path, str]) -> None:
    out, _ = run_out
    a = tp("findings", out / "analysis", "--format", "csv").stdout
    b = tp("findings", out / "normalized", "--format", "csv").stdout
    assert a == b and a.count("\n") > 2


def test_findings_help_has_examples_and_a_bad_folder_is_named(tmp_path: Path) -> None:
    r = tp("findings", "--help")
    assert r.returncode == 0 and "Examples:" in r.stdout and "--format" in r.stdout and "-o" in r.stdout
    assert "findings" in tp("--help").stdout
    r = tp("findings", tmp_path)
    assert r.returncode == 2 and str(tmp_path) in r.stderr and "Traceback" not in r.stderr


def test_report_summary_opens_with_findings_and_prints_whole_when_piped(
    run_out: tuple[Path, str], tmp_path: Path
) -> None:
    out, _ = run_out
    r = tp("report", out / "analysis", "--out", tmp_path / "r")  # piped, no COLUMNS: natural width
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Top findings of")
    assert "…" not in r.stdout.split("trace(s): top layer")[1]  # no cell cut: `kerne…`, `GPU …` before
    kl = pl.read_parquet(out / "analysis" / "kernel_layers.parquet")
    top = kl.group_by("short_name").agg(pl.col("duration_ns").sum()).sort("duration_ns", descending=True)
    assert f"{100 * top['duration_ns'][0] / kl['duration_ns'].sum():4.1f}% {top['short_name'][0]}" in r.stdout
    assert len(r.stdout.splitlines()) <= 40
    r = tp("report", out / "analysis", "--out", tmp_path / "r2", COLUMNS="80")  # COLUMNS honoured, cells wrap
    lines = [line for line in r.stdout.splitlines() if not line.startswith("wrote ")]  # a path is not wrapped
    assert r.returncode == 0 and all(len(line) <= 80 for line in lines)
    assert "kerne…" not in r.stdout and "GPU …" not in r.stdout


def test_a_misspelt_rule_or_an_unknown_trace_is_refused_not_an_empty_answer(run_out: tuple[Path, str]) -> None:
    # `findings --rule launchbound` and `--trace-id nope` printed "No findings: no rule found GPU time worth a look".
    from pipeline.store import trace_ids

    out, _ = run_out
    # the capture's layer shapes beside the export are read with it, a trace of their own that findings never lists
    assert sorted(trace_ids(out / "normalized")) == ["h200_resnet18.layer_shapes", "h200_resnet18.nsys"]
    trace = "h200_resnet18.nsys"
    r = tp("findings", out / "analysis", "--rule", "launchbound")
    assert r.returncode == 2 and "no rule 'launchbound' (did you mean launch_bound?): --rule is one of" in r.stderr
    r = tp("findings", out / "analysis", "--trace-id", "nope")
    assert r.returncode == 2 and f"no trace 'nope' here: --trace-id is one of {trace}" in r.stderr, r.stderr
    r = tp("findings", out / "analysis", "--trace-id", trace, "--rule", "straggler_rank")  # known, none found
    assert r.returncode == 0 and r.stdout.startswith("No findings"), r.stdout


def test_a_cpu_only_profile_says_there_was_no_gpu_work_not_that_the_rules_found_none(tmp_path: Path) -> None:
    # The CPU-only compiled sample ended `run` with "no rule found GPU time worth a look": it has no GPU time.
    from pipeline.report.findings import NO_FINDINGS, NO_GPU_WORK

    r = tp("run", SAMPLES / "cpu_compiled_train" / "torch_trace.json.gz", "--out", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith(NO_GPU_WORK) and NO_FINDINGS not in r.stdout
    assert tp("findings", tmp_path / "o" / "analysis").stdout == NO_GPU_WORK
