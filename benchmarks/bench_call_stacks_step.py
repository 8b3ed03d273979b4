"""The ops + call-stacks step of chrome normalize alone, in a fresh process: CPU (user, sys) and page faults.

    python benchmarks/bench_call_stacks_step.py TREE TRACE

Decodes TRACE (a bench_chrome synthetic trace) with TREE's decoder, then times TREE's ``chrome._ops`` (ops
sorted, numbered, and given their call stacks): run it for two trees, alternating, to compare two versions
of the step without the rest of normalize's noise.  Where ``_ops`` takes the trace's DuckDB connection (it
runs on a cursor of the one normalize_chrome opens for every step), that connection is opened before the
timed section, as normalize opens it once per trace; older trees open their own inside the step.
"""

from __future__ import annotations

import inspect
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, sys.argv[1])
from pipeline.normalize import chrome, chrome_decode

_, got = chrome_decode.decode(Path(sys.argv[2]))
frames, ops = got.table("python_function"), got.table("cpu_op")
args = (ops, frames)
if len(inspect.signature(chrome._ops).parameters) == 3:
    from pipeline.lean import duckdb_connect

    args += (duckdb_connect({"threads": "1"}),)
before, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
chrome._ops(*args)
after = resource.getrusage(resource.RUSAGE_SELF)
print(
    f"{Path(sys.argv[1]).name} _ops wall {time.perf_counter() - t:.2f} user {after.ru_utime - before.ru_utime:.2f} "
    f"sys {after.ru_stime - before.ru_stime:.2f} minflt {after.ru_minflt - before.ru_minflt}"
)
