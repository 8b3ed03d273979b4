"""Every case of the bad-input corpus ends in its clear error (nothing written) or its counted warning."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.errors import BadInputError
from pipeline.normalize import normalize_file
from pipeline.schema import TABLES
from pipeline.store import committed_files
from tests.bad_inputs.corpus import CASES, SMALLCNN, Case, build, packed

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
    assert not list((out / ".tracepipe" / "traces").glob("*/*"))  # the aborted generation is gone


@pytest.mark.parametrize("case", WARNINGS, ids=lambda c: c.name)
def test_usable_input_gives_a_counted_warning(case: Case, tmp_path: Path) -> None:
    path = build(case, tmp_path)
    result = normalize_file(path, tmp_path / "out")
    assert any(case.warning in w for w in result.warnings), result.warnings
    meta = pq.read_table(next((tmp_path / "out" / "trace_meta").glob("*/*.parquet"))).to_pylist()[0]
    assert any(case.warning in w for w in json.loads(meta["warnings"]))


def test_cli_prints_no_summary_when_nothing_was_normalized(tmp_path: Path) -> None:
    # One bad file and nothing else: its error line, and no empty "normalized into" table on stdout.
    case = next(c for c in ERRORS if c.name == "chrome_legacy_autograd_profiler.json")
    path = build(case, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "normalize", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert (r.returncode, r.stdout) == (2, "")
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"error: {path}: ") and line.endswith("profile with torch.profiler (PyTorch >= 1.8) instead")


def test_archives_in_a_folder_are_listed_with_what_to_do(tmp_path: Path) -> None:
    # A folder of traces shipped as archives: before, passed over in silence (a folder of them only: "no trace files
    # ... give a file or a folder holding ... traces"). Each archive is now listed as skipped, with its fix.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    folder = tmp_path / "job"
    folder.mkdir()
    for name, kind in (("rank0.tar.gz", "tar.gz"), ("rank1.json.xz", "xz")):
        packed(kind)(folder / name)

    def normalize() -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "pipeline.cli", "normalize", str(folder), "--out", str(tmp_path / "out")]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)

    r = normalize()
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"{folder / 'rank0.tar.gz'} is a tar archive: unpack it and pass what it holds (and 1 more)" in r.stderr
    shutil.copy(SMALLCNN / "torch_trace.json.gz", folder / "rank2.json.gz")  # with a trace beside them: it is read
    r = normalize()
    assert r.returncode == 0, r.stderr
    assert (
        f"skipped {folder / 'rank1.json.xz'}: xz-compressed: decompress it (xz -d) and pass what it holds" in r.stdout
    )


@pytest.mark.parametrize(
    ("name", "said"),
    [("tpu.xplane.pb", "a TensorFlow/JAX profiler XPlane"), ("trace.pftrace", "a Perfetto trace (protobuf)")],
)
def test_protobuf_traces_of_other_profilers_are_named(tmp_path: Path, name: str, said: str) -> None:
    # They carry no signature of their own: told by name. The first bytes of openxla/xprof's TPU XPlane sample.
    path = tmp_path / name
    path.write_bytes(b"\x0a\xef\xbf\xbd\xef\xbf\xbd\x06\x08\x02\x12\x0a/device:TPU:0")
    with pytest.raises(BadInputError, match=f"unrecognised format: it is {re.escape(said)}"):
        normalize_file(path, tmp_path / "out")


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


def _tables(out: Path, skip: tuple[str, ...] = ("trace_meta",)) -> dict[str, list]:
    return {t: pq.read_table(f).to_pylist() for t in TABLES if t not in skip for f in committed_files(out, t)}


def test_events_out_of_order_give_the_same_tables(tmp_path: Path) -> None:
    """Chrome traces are not sorted by time (Kineto appends per buffer): order in the file must not matter."""
    import gzip

    from tests.conftest import SMALLCNN

    trace = json.loads(gzip.decompress((SMALLCNN / "torch_trace.json.gz").read_bytes()))
    forward, backward = tmp_path / "a" / "t.json", tmp_path / "b" / "t.json"
    forward.parent.mkdir()
    backward.parent.mkdir()
    forward.write_text(json.dumps(trace))
    trace["traceEvents"].reverse()
    backward.write_text(json.dumps(trace))
    normalize_file(forward, tmp_path / "o1", trace_id="t")
    normalize_file(backward, tmp_path / "o2", trace_id="t")
    assert _tables(tmp_path / "o1") == _tables(tmp_path / "o2")


def test_extra_ncu_column_is_kept_as_a_metric(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "ncu_extra_column.csv")
    normalize_file(build(case, tmp_path), tmp_path / "out")
    rows = _tables(tmp_path / "out")["ncu_metrics"]
    extra = [r for r in rows if r["metric"] == "extra__metric"]
    assert len(extra) == 33 and {r["value"] for r in extra} == {7.0}


def test_duplicate_keys_resolve_like_json_loads(tmp_path: Path) -> None:
    """JSON leaves duplicate keys undefined; we take the last, as Python's json and Chrome's trace viewer do."""
    import gzip

    from tests.conftest import SMALLCNN, q

    raw = gzip.decompress((SMALLCNN / "torch_trace.json.gz").read_bytes()).decode()
    path = tmp_path / "dup.json"
    path.write_text(raw.replace('"dur": 7.136', '"dur": 7.136, "dur": 9.0', 1))
    normalize_file(path, tmp_path / "out")
    first = next(e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel")
    got = q(tmp_path / "out", "SELECT duration_ns FROM kernels WHERE correlation_id = 12")
    assert got == [(round(first["dur"] * 1000),)] == [(9000,)]
