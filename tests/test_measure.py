"""benchmarks/_measure.py counts the whole process tree: a forked worker's CPU and memory are in the totals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._measure import ROOT, measure, provenance

# The parent forks a worker that touches 300 MB and burns CPU, reports its own CPU (rusage), and exits; the
# parent waits for it and prints the worker's report.  The parent itself stays small and idle.
_TREE = """
import json, os, resource, sys, time
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    block = bytearray(300 * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    x = 0
    for i in range(3_000_000):
        x += i * i
    time.sleep(0.3)  # hold the memory long enough for several samples
    u = resource.getrusage(resource.RUSAGE_SELF)
    os.write(w, json.dumps({"cpu": u.ru_utime + u.ru_stime}).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
print(os.read(r, 1000).decode())
"""


def test_counts_a_forked_workers_cpu_and_memory() -> None:
    m = measure([sys.executable, "-c", _TREE])
    worker = json.loads(m.stdout)
    assert m.cpu_s >= worker["cpu"]  # the worker's CPU reached the totals through wait4
    assert m.peak_rss_bytes >= 300 * 2**20
    assert m.max_single_rss_bytes >= 300 * 2**20


# A harness holding 400 MB measures a child that holds 60 MB: Linux carries the harness's RSS into the child's
# ru_maxrss across the exec, which must not become the child's peak.
_BIG_HARNESS = """
import json, sys
from benchmarks._measure import measure
held = bytearray(400 * 2**20)
for i in range(0, len(held), 4096):
    held[i] = 1
child = "import time\\nb = bytearray(60 * 2**20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\ntime.sleep(0.3)"
m = measure([sys.executable, "-c", child])
print(json.dumps([m.peak_rss_bytes, m.max_single_rss_bytes]))
"""


def test_a_big_harness_does_not_lend_its_memory_to_the_child() -> None:
    out = subprocess.run([sys.executable, "-c", _BIG_HARNESS], capture_output=True, text=True, check=True, cwd=ROOT)
    peak, single = json.loads(out.stdout)
    assert 60 * 2**20 <= single <= peak < 300 * 2**20


def test_a_failing_side_raises() -> None:
    with pytest.raises(subprocess.CalledProcessError):
        measure([sys.executable, "-c", "raise SystemExit(3)"])


def test_provenance_names_command_and_commit() -> None:
    text = provenance(["python", "benchmarks/x.py", "--n", "3"])
    assert "# command: python benchmarks/x.py --n 3" in text
    assert "# commit:  " in text


def test_before_after_runs_each_trees_own_code_whatever_the_callers_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench_run_before_after measures the tree it is given even when called from inside another checkout
    (``python -m`` puts the working folder ahead of PYTHONPATH: both sides once ran the caller's code)."""
    from benchmarks import bench_run_before_after as bench

    for name in ("before", "after"):  # a stand-in `tracepipe run` that writes which tree it is
        pkg = tmp_path / name / "pipeline"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "cli.py").write_text(
            "import pathlib, sys\n"
            "out = pathlib.Path(sys.argv[sys.argv.index('--out') + 1]) / 'analysis'\n"
            "out.mkdir(parents=True)\n"
            f"(out / 'tree.txt').write_text({name!r})\n"
        )
    work = tmp_path / "runs"
    work.mkdir()
    monkeypatch.chdir(tmp_path / "after")  # the caller sits in the other tree, as in a checkout
    bench.run(tmp_path / "before", tmp_path / "trace.json", work / "before", work / "pyc")
    assert (work / "before" / "analysis" / "tree.txt").read_text() == "before"


def test_differing_parquet_names_files_with_other_rows_types_or_names(tmp_path: Path) -> None:
    import duckdb

    from benchmarks._measure import differing_parquet

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    con = duckdb.connect()
    for folder, dup, typ in ((a, 1, "BIGINT"), (b, 2, "INTEGER")):
        con.execute(f"COPY (SELECT 1 AS x UNION ALL SELECT {dup}) TO '{folder / 'rows.parquet'}'")
        con.execute(f"COPY (SELECT CAST(1 AS {typ}) AS x) TO '{folder / 'types.parquet'}'")
        con.execute(f"COPY (SELECT 7 AS x) TO '{folder / 'same.parquet'}'")
    assert differing_parquet(a, b) == ["rows.parquet", "types.parquet"]  # a bag: {1, 1} is not {1, 2}
    (b / "types.parquet").rename(b / "other.parquet")
    assert differing_parquet(a, b) == ["(different file lists)"]
