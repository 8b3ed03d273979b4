#!/bin/bash
# Device run (session 34, #18.4): HTA 0.5.0 vs `tracepipe run` on the 1.1 MB H200 resnet18 trace and the 54 MB HTA
# trace, plus the 500 MB generated trace end to end (MB/s of JSON), under taskset -c 0,1 (benchmarks/bench_vs_hta.py,
# 3 reps, interleaved). Uses .dev/i18-chrome (duckdb + msgspec wheels, htawhl/ with HTA 0.5.0 and pandas 2.3.3, hta_py:
# python3 with PYTHONPATH=/tmp/hta). ~2-3 minutes.
#   run(command="bash benchmarks/device_s34_hta.sh", carry=[".dev/i18-chrome"], timeout_s=300)
D=.dev/i18-chrome
exec > >(tee "$OUT/device_log_s34_hta.txt") 2>&1
date -u; nproc; python3 -V; uptime
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/duckdb-*.whl $D/msgspec-*.whl
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/hta $D/htawhl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
taskset -c 0,1 python3 benchmarks/bench_vs_hta.py --hta-python $D/hta_py --reps 3 --synthetic 500 \
    sample_traces/h200_resnet18/torch_trace.json.gz sample_traces/external/hta_v100_nccl_df_index_resolver.json.gz \
    2>"$OUT/hta_stderr.txt" | tee "$OUT/bench_vs_hta_h200.txt"
date -u
