#!/bin/bash
# Device run for i18-small / s-fixed (#18.4 fixed costs): HTA 0.5.0 vs `tracepipe run` on 2 cores (taskset -c 0,1),
# then analyze's write loop in memory one view at a time vs two at once (s-fixed) vs through Parquet, then
# `tracepipe run` of the round's base tree (72b8c45, carried in .dev/s-fixed/base) vs this tree, interleaved.
# Runs from the repo root on the GPU host; uses the wheels i18-chrome prepared (carry .dev/i18-chrome: duckdb +
# msgspec wheels, htawhl/, hta_py). ~6-7 minutes.
#   run(command="bash benchmarks/device_i18_small.sh", carry=[".dev/i18-chrome", ".dev/s-fixed"], timeout_s=600)
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
if [ -d .dev/s-fixed/base ]; then
  ( taskset -c 0,1 python3 benchmarks/bench_run_before_after.py .dev/s-fixed/base . --repeat 5 \
      sample_traces/h200_resnet18/torch_trace.json.gz sample_traces/external/hta_v100_nccl_df_index_resolver.json.gz \
  ) > "$OUT/bench_run_before_after_h200.txt" 2>&1
  cat "$OUT/bench_run_before_after_h200.txt"
fi
date -u
