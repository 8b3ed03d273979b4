"""``tracepipe run``: normalize + analyze in one process, the same outputs as the two commands."""

from __future__ import annotations

import gc
import gzip
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq

from tests.conftest import SMALLCNN

ROOT = Path(__file__).resolve().parents[1]
TRACE = SMALLCNN / "torch_trace.json.gz"


def tp(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "pipeline.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


def _rows(path: Path) -> list[dict]:
    table = pq.read_table(path)
    return sorted(table.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def test_run_equals_normalize_then_analyze(tmp_path: Path) -> None:
    r = tp("run", TRACE, "--out", tmp_path / "one", "-q")
    assert r.returncode == 0, r.stderr
    assert tp("normalize", TRACE, "--out", tmp_path / "n", "-q").returncode == 0
    assert tp("analyze", tmp_path / "n", "--out", tmp_path / "a", "-q").returncode == 0
    views = sorted(p.name for p in (tmp_path / "a").glob("*.parquet"))
    assert views == sorted(p.name for p in (tmp_path / "one" / "analysis").glob("*.parquet"))
    assert len(views) > 10
    for name in views:
        assert _rows(tmp_path / "one" / "analysis" / name) == _rows(tmp_path / "a" / name), name
    # Every kernel of the raw file, counted by plain json.
    events = json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]
    kernels = sum(1 for e in events if e.get("cat") == "kernel" and e.get("ph") == "X")
    assert pq.read_table(tmp_path / "one" / "analysis" / "kernel_layers.parquet").num_rows == kernels == 8


def test_run_writes_only_the_views_asked_for(tmp_path: Path) -> None:
    r = tp("run", TRACE, "--out", tmp_path, "-q", "--view", "kernel_name_summary", "--view", "kernel_sm_load")
    assert r.returncode == 0, r.stderr
    written = sorted(p.name for p in (tmp_path / "analysis").glob("*.parquet"))
    assert written == ["kernel_name_summary.parquet", "kernel_sm_load.parquet"]
    assert (tmp_path / "normalized" / "kernels").is_dir()  # the normalized tables are whole
    # Its GPU time equals the kernels' durations summed straight from the raw file.
    events = json.loads(gzip.decompress(TRACE.read_bytes()), parse_float=Decimal)["traceEvents"]
    total_ns = sum(int(e["dur"] * 1000) for e in events if e.get("cat") == "kernel" and e.get("ph") == "X")
    summary = pq.read_table(tmp_path / "analysis" / "kernel_name_summary.parquet").to_pylist()
    assert sum(row["total_ns"] for row in summary) == total_ns > 0
    bad = tp("run", TRACE, "--out", tmp_path / "x", "-q", "--view", "no_such_view")
    assert bad.returncode == 2 and "no_such_view" in bad.stderr


def test_run_passes_jobs_to_normalize_and_csv_device_to_analyze(tmp_path: Path, monkeypatch) -> None:
    from click.testing import CliRunner

    import pipeline.normalize.batch as batch
    from pipeline.cli import main

    jobs_seen: list[int] = []
    real = batch.normalize_many

    def recording(*args: object, **kwargs: object) -> object:
        jobs_seen.append(kwargs["jobs"])
        return real(*args, **kwargs)

    monkeypatch.setattr(batch, "normalize_many", recording)
    other = SMALLCNN.parent / "h200_resnet18" / "torch_trace.json.gz"
    argv = ["run", str(TRACE), str(other), "--out", str(tmp_path), "-q", "-j", "2", "--csv", "--device", "rtx3090"]
    argv += ["--view", "device_limits"]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 0, r.output
    assert jobs_seen == [2]
    limits = pq.read_table(tmp_path / "analysis" / "device_limits.parquet").to_pylist()
    # Both traces, each projected onto the RTX 3090 of the seed request: 82 SMs of sm_86, 1536 threads and 16
    # blocks per SM (NVIDIA's compute-capability table).
    assert len(limits) == 2 and len({row["trace_id"] for row in limits}) == 2
    for row in limits:
        assert row["projected_device"] == "rtx3090"
        assert (row["sm_count"], row["compute_capability"]) == (82, "8.6")
        assert (row["max_threads_per_sm"], row["max_blocks_per_sm"]) == (1536, 16)
    csv_lines = (tmp_path / "analysis" / "device_limits.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + len(limits)


def test_run_stops_at_a_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text('{"traceEvents": [')
    r = tp("run", bad, "--out", tmp_path / "one", "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert not (tmp_path / "one" / "analysis").exists()


# Printed by an atexit function: a batch command's process ends inside cli.run (lean.exit_without_teardown),
# after the atexit functions.
_PROBE = """
import atexit, gc, sys
from pipeline import cli
atexit.register(lambda: print("pandas" in sys.modules, "rich" in sys.modules, gc.isenabled(), flush=True))
sys.argv = ["tracepipe", *sys.argv[1:]]
cli.run()
"""


def test_a_cli_process_never_imports_pandas(tmp_path: Path) -> None:
    # pyarrow imports pandas on its first conversion (0.35 CPU-s a process); normalize and analyze use none.
    import importlib.util

    assert importlib.util.find_spec("pandas") is not None  # installed here, so the test can fail
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", _PROBE, "run", str(TRACE), "--out", str(tmp_path / "one"), "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    assert r.stdout.split()[-3] == "False"


def test_a_quiet_run_never_imports_rich(tmp_path: Path) -> None:
    # rich (progress bars, tables) costs ~17 ms of a process's start, ~0.04 s on the GPU host; -q shows neither.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", _PROBE, "run", str(TRACE), "--out", str(tmp_path / "one"), "-q"]
    assert subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout.split()[-2] == "False"
    bad = [sys.executable, "-c", _PROBE, "run", str(tmp_path / "missing.json"), "--out", str(tmp_path / "two")]
    r = subprocess.run(bad, capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "error:" in r.stderr and r.stdout.split()[-2] == "True"  # the console, on demand


def test_batch_commands_leave_reference_cycles_to_the_process_end(tmp_path: Path) -> None:
    """normalize, analyze and run stop the cyclic garbage collector in their own process (its passes were 12%
    of a small trace's normalize); the shell keeps it, and so does a process that calls main itself."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def gc_on_after(*args: object) -> str:
        cmd = [sys.executable, "-c", _PROBE, *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout.split()[-1]

    assert gc_on_after("run", TRACE, "--out", tmp_path / "one", "-q") == "False"
    assert gc_on_after("normalize", TRACE, "--out", tmp_path / "n", "-q") == "False"
    assert gc_on_after("sql", tmp_path / "n", "SELECT count(*) FROM kernels") == "True"
    assert gc_on_after("--version") == "True"
    from click.testing import CliRunner

    from pipeline.cli import main

    assert CliRunner().invoke(main, ["analyze", str(tmp_path / "n"), "--out", str(tmp_path / "a"), "-q"]).exit_code == 0
    assert gc.isenabled()
