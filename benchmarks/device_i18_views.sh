#!/bin/bash
# Device run for i18-views (#18.3): normalize + analyze of a 10M-kernel nsys export (8 threads, ~1M NVTX ranges) on
# 2 cores (taskset -c 0,1), DuckDB held to 1.7 GB (the < 2 GB setting of bench_nsys_10m_s33.txt; at 1.6 GB
# gpu_op_layers falls off its cliff), then CPU-s per analyze view on the same normalized folder.
# Runs from the repo root on the GPU host with the prepared wheels (duckdb, msgspec, adbc). ~6-8 minutes.
#   run(command="bash benchmarks/device_i18_views.sh", carry=[".whl"], timeout_s=600)
exec > >(tee "$OUT/device_log_i18_views.txt") 2>&1
date -u; nproc; python3 -V; uptime
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# TRACEPIPE_MEMORY_LIMIT=3GB bash benchmarks/device_i18_views.sh separates the 1.7 GB limit's spilling from the work
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRACEPIPE_MEMORY_LIMIT=${TRACEPIPE_MEMORY_LIMIT:-1700MB}
timeout 570 taskset -c 0,1 python3 benchmarks/bench_nsys_10m.py --kernels 10000000 --tmp /tmp --profile-views \
    | tee "$OUT/bench_nsys_10m_h200.txt"
date -u
