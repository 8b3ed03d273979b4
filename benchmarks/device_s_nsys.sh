#!/bin/bash
# Device run for s-nsys (#18.3, the normalize half): a 10M-kernel nsys export (8 threads, ~1M NVTX ranges) normalized
# on 2 cores (taskset -c 0,1): the measured whole (wall, CPU, peak RSS of the tree), then once more under
# profile_nsys_normalize.py (CPU and wall of each stage, when the kernels child ends, how long the parent waits
# for it). No analyze (device_i18_views.sh measures normalize + analyze). ~2.5 minutes (generation ~45 s).
#   run(command="bash benchmarks/device_s_nsys.sh", carry=[".whl"], timeout_s=400)
exec > >(tee "$OUT/device_log_s_nsys.txt") 2>&1
date -u; nproc; python3 -V; uptime
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 380 taskset -c 0,1 python3 benchmarks/bench_nsys_10m.py --kernels 10000000 --tmp /tmp --normalize-profile \
    --no-analyze | tee "$OUT/bench_nsys_10m_normalize_h200.txt"
date -u
