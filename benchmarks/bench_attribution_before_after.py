"""Before/after: kernel_layers over the bench_attribution 1e6-kernel trace, two source trees, interleaved.

    python benchmarks/bench_attribution_before_after.py DATA TREE_BEFORE TREE_AFTER
DATA: the normalized trace bench_attribution.generate() writes (1e6 kernels, 1e5 ranges); each tree runs
`SELECT count(*), count(range_id) FROM kernel_layers` in its own process, 3 rounds; prints wall and CPU.
"""

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

data = Path(sys.argv[1])
trees = {"main": sys.argv[2], "i17": sys.argv[3]}
code = (
    "import sys,time; from pathlib import Path; from pipeline.analyze import connect; "
    "con=connect(Path(sys.argv[1])); t=time.perf_counter(); "
    "r=con.execute('SELECT count(*), count(range_id) FROM kernel_layers').fetchall(); "
    "print(r, time.perf_counter()-t)"
)
res = {k: [] for k in trees}
for rnd in range(3):
    for name, tree in trees.items():
        t0 = time.perf_counter()
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(
            [sys.executable, "-c", code, str(data)],
            env={**os.environ, "PYTHONPATH": tree},
            capture_output=True,
            text=True,
            cwd=tree,
        )
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter() - t0
        cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
        res[name].append((wall, cpu, c1.ru_maxrss / 1024, out.stdout.strip(), out.stderr.strip()[-300:]))
        print(rnd, name, round(wall, 2), round(cpu, 2), out.stdout.strip(), out.stderr.strip()[-200:], flush=True)
for name, rows in res.items():
    walls = sorted(r[0] for r in rows)
    cpus = sorted(r[1] for r in rows)
    print(name, "median wall", round(walls[1], 2), "median cpu", round(cpus[1], 2))
print(
    "ratio i17/main wall",
    round(sorted(r[0] for r in res["i17"])[1] / sorted(r[0] for r in res["main"])[1], 3),
    "cpu",
    round(sorted(r[1] for r in res["i17"])[1] / sorted(r[1] for r in res["main"])[1], 3),
)
