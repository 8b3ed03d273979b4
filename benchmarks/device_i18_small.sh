#!/bin/bash
# Device run for i18-small (#18.4 fixed costs): HTA 0.5.0 vs `tracepipe run` on 2 cores (taskset -c 0,1), then
# analyze's write loop in memory vs through Parquet. Runs from the repo root on the GPU host; uses the wheels
# i18-chrome prepared (carry .dev/i18-chrome: duckdb + msgspec wheels, htawhl/, hta_py). ~5 minutes.
#   run(command="bash benchmarks/device_i18_small.sh", carry=[".dev/i18-chrome"], timeout_s=600)
D=.dev/i18-chrome
exec > >(tee "$OUT/device_log.txt") 2>&1
set -x
date -u; nproc; python3 -V; uptime; git log --oneline -1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/duckdb-*.whl $D/msgspec-*.whl
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/hta $D/htawhl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -c "import numpy, pyarrow, duckdb, msgspec; print('numpy', numpy.__version__, 'pyarrow', pyarrow.__version__, 'duckdb', duckdb.__version__, 'msgspec', msgspec.__version__)"
set +x
( taskset -c 0,1 python3 benchmarks/bench_vs_hta.py --hta-python $D/hta_py --reps 5 \
    sample_traces/h200_resnet18/torch_trace.json.gz sample_traces/external/hta_v100_nccl_df_index_resolver.json.gz \
    2>"$OUT/hta_stderr.txt" ) > "$OUT/bench_vs_hta_i18_small_h200.txt"
cat "$OUT/bench_vs_hta_i18_small_h200.txt"
( taskset -c 0,1 python3 benchmarks/bench_analyze_write.py --reps 5 \
    sample_traces/h200_resnet18/torch_trace.json.gz sample_traces/external/hta_v100_nccl_df_index_resolver.json.gz \
    nsys:20000 nsys:80000 ) > "$OUT/bench_analyze_write_h200.txt"
cat "$OUT/bench_analyze_write_h200.txt"
date -u
