#!/bin/bash
# Device run (session 34, #18.4): where `tracepipe run` spends its wall time on the GPU host (gVisor), 2 cores:
# stage marks (benchmarks/run_timeline.py) with the chrome decode forked (default) and in process, a cProfile of
# each run, HTA 0.5.0 on the same traces for reference, and what a fork costs there. ~3-4 minutes.
#   run(command="bash benchmarks/device_s34_diag.sh", carry=[".dev/i18-chrome"], timeout_s=600)
D=.dev/i18-chrome
exec > >(tee "$OUT/device_log_s34_diag.txt") 2>&1
date -u; nproc; python3 -V; uptime; git log --oneline -1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/duckdb-*.whl $D/msgspec-*.whl
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/hta $D/htawhl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pycache
unset PYTHONDONTWRITEBYTECODE
python3 -c "import numpy, pyarrow, duckdb, msgspec, click; print('numpy', numpy.__version__, 'pyarrow', pyarrow.__version__, 'duckdb', duckdb.__version__, 'msgspec', msgspec.__version__)"
S=sample_traces/h200_resnet18/torch_trace.json.gz
L=sample_traces/external/hta_v100_nccl_df_index_resolver.json.gz
python3 -m compileall -q pipeline benchmarks >/dev/null
taskset -c 0,1 python3 benchmarks/run_timeline.py -- run $S --out /tmp/w -q 2>/dev/null  # warm caches, bytecode
for rep in 1 2 3; do
  for T in $S $L; do
    for mode in "" --in-process-decode; do
      echo "== $T rep $rep ${mode:-forked-decode}"; rm -rf /tmp/w
      taskset -c 0,1 python3 benchmarks/run_timeline.py $mode -- run $T --out /tmp/w -q
    done
    echo "== $T rep $rep HTA"; /usr/bin/time -f "HTA wall %e s user %U sys %S" taskset -c 0,1 $D/hta_py -c "
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_gpu_kernel_breakdown(visualize=False); a.get_temporal_breakdown(visualize=False)" $(mkdir -p /tmp/h$rep && cp $T /tmp/h$rep/ && echo /tmp/h$rep) 2>&1 | grep -E "^HTA wall"
    rm -rf /tmp/h$rep
  done
done
for T in $S $L; do
  rm -rf /tmp/w; taskset -c 0,1 python3 -m cProfile -o /tmp/p.prof -m pipeline.cli run $T --out /tmp/w -q
  echo "== cProfile $T (wall, main thread)"
  python3 -c "import pstats; s=pstats.Stats('/tmp/p.prof'); s.sort_stats('tottime').print_stats(25)" | tail -32
done
echo "== fork cost (a child that exits at once), parent RSS ~200 MB"
taskset -c 0,1 python3 -c "
import os, time, numpy as np, pyarrow, duckdb
x = np.ones(25_000_000)
t = time.perf_counter()
for _ in range(10):
    pid = os.fork()
    if pid == 0: os._exit(0)
    os.waitpid(pid, 0)
print('fork+exit+wait: %.1f ms each' % ((time.perf_counter() - t) * 100))"
date -u
