"""benchmarks/_measure.py counts the whole process tree: a forked worker's CPU and memory are in the totals."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks._measure import measure, provenance

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


def test_a_failing_side_raises() -> None:
    with pytest.raises(subprocess.CalledProcessError):
        measure([sys.executable, "-c", "raise SystemExit(3)"])


def test_provenance_names_command_and_commit() -> None:
    text = provenance(["python", "benchmarks/x.py", "--n", "3"])
    assert "# command: python benchmarks/x.py --n 3" in text
    assert "# commit:  " in text
