#!/bin/bash
# Device run (session 34, #18.3): normalize + analyze of a freshly generated 10M-kernel nsys export (8 threads,
# ~1M NVTX ranges) on 2 cores (taskset -c 0,1), 3 rounds with DuckDB held to TRACEPIPE_MEMORY_LIMIT (default
# here 1700MB, the < 2 GB setting of bench_nsys_10m_s33.txt), medians; PROFILE_VIEWS=1: then CPU-s per analyze
# view on the last normalized folder (profile_analyze_views.py). ~5-8 minutes.
#   run(command="bash benchmarks/device_s34_10m.sh", carry=[".whl"], timeout_s=600)
exec > >(tee "$OUT/device_log_s34_10m.txt") 2>&1
date -u; nproc; python3 -V; uptime; git log --oneline -1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pycache TRACEPIPE_MEMORY_LIMIT=${TRACEPIPE_MEMORY_LIMIT:-1700MB}
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q pipeline benchmarks >/dev/null
timeout 580 taskset -c 0,1 python3 benchmarks/bench_nsys_10m.py --kernels 10000000 --tmp /tmp --rounds ${ROUNDS:-3} ${PROFILE_VIEWS:+--profile-views} \
    | tee "$OUT/bench_nsys_10m_h200.txt"
date -u
