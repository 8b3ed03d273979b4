"""Every case of the bad-input corpus ends in its clear error (nothing written) or its counted warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.errors import BadInputError
from pipeline.normalize import normalize_file
from tests.bad_inputs.corpus import CASES, Case, build

ERRORS = [c for c in CASES if c.error]
WARNINGS = [c for c in CASES if c.warning]


@pytest.mark.parametrize("case", ERRORS, ids=lambda c: c.name)
def test_bad_input_is_a_clear_error_and_writes_nothing(case: Case, tmp_path: Path) -> None:
    path = build(case, tmp_path)
    out = tmp_path / "out"
    with pytest.raises(BadInputError) as info:
        normalize_file(path, out)
    assert case.error in info.value.reason
    assert str(path) in str(info.value)
    assert not list(out.rglob("*.parquet"))
    assert not list((out / ".staging").glob("*"))


@pytest.mark.parametrize("case", WARNINGS, ids=lambda c: c.name)
def test_usable_input_gives_a_counted_warning(case: Case, tmp_path: Path) -> None:
    path = build(case, tmp_path)
    result = normalize_file(path, tmp_path / "out")
    assert any(case.warning in w for w in result.warnings), result.warnings
    meta = pq.read_table(next((tmp_path / "out" / "trace_meta").glob("*/*.parquet"))).to_pylist()[0]
    assert any(case.warning in w for w in json.loads(meta["warnings"]))


def test_cli_prints_one_line_per_bad_file_and_exits_2(tmp_path: Path) -> None:
    for case in ERRORS:
        build(case, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "normalize", str(tmp_path), "--out", str(tmp_path / "out"), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    for case in ERRORS:
        line = next(x for x in r.stderr.splitlines() if case.name in x and "error:" in x)
        assert case.error in line or case.error in r.stderr
