"""benchmarks/_measure.py counts the whole process tree: a forked worker's CPU and memory are in the totals."""

from __future__ import annotations

import json
import subprocess
import sys

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
# ru_maxrss across the exec, which must not become the child's peak. With GROW the harness touches 20 MB more just
# before the fork (where measure opens its output file): its RSS at the fork then passes any peak it had read before.
_BIG_HARNESS = """
import json, sys, tempfile
from benchmarks._measure import measure
held = bytearray(400 * 2**20)
for i in range(0, len(held), 4096):
    held[i] = 1
if GROW:
    _file, grown = tempfile.TemporaryFile, []
    def _growing(*args, **kwargs):
        more = bytearray(20 * 2**20)
        for i in range(0, len(more), 4096):
            more[i] = 1
        grown.append(more)
        return _file(*args, **kwargs)
    tempfile.TemporaryFile = _growing
child = "import time\\nb = bytearray(60 * 2**20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\ntime.sleep(0.3)"
m = measure([sys.executable, "-c", child])
print(json.dumps([m.peak_rss_bytes, m.max_single_rss_bytes]))
"""


@pytest.mark.parametrize("grow", [False, True])
def test_a_big_harness_does_not_lend_its_memory_to_the_child(grow: bool) -> None:
    harness = f"GROW = {grow}\n{_BIG_HARNESS}"
    out = subprocess.run([sys.executable, "-c", harness], capture_output=True, text=True, check=True, cwd=ROOT)
    peak, single = json.loads(out.stdout)
    assert 60 * 2**20 <= single <= peak < 300 * 2**20


def test_a_failing_side_raises() -> None:
    with pytest.raises(subprocess.CalledProcessError):
        measure([sys.executable, "-c", "raise SystemExit(3)"])


def test_provenance_names_command_and_commit() -> None:
    text = provenance(["python", "benchmarks/x.py", "--n", "3"])
    assert "# command: python benchmarks/x.py --n 3" in text
    assert "# commit:  " in text
