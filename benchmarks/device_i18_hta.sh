#!/bin/bash
# Device run for #18.4: HTA 0.5.0 vs `tracepipe run` on the 54 MB HTA trace and the 1 MB H200 resnet18 trace, plus
# the 500 MB generated trace end to end (MB/s of JSON), all under taskset -c 0,1 (benchmarks/bench_vs_hta.py).
# Uses the wheels i18-chrome prepared (carry .dev/i18-chrome: duckdb + msgspec wheels, htawhl/, hta_py). ~5 min.
#   run(command="bash benchmarks/device_i18_hta.sh", carry=[".dev/i18-chrome"], timeout_s=600)   (REPS=3: ~2-3 min)
# Prepared here (~51 MB, under the 64 MiB carry limit): the duckdb and msgspec wheels for cp312 manylinux in
# .dev/i18-chrome/; in .dev/i18-chrome/htawhl/ `pip download --no-deps` (same platform flags) of HolisticTraceAnalysis==0.5.0
# pandas==2.3.3 plotly narwhals networkx pydot pyparsing psutil PyYAML python-dateutil pytz tzdata six packaging (HTA's
# jupyterlab and pytest needs are not imported by its analysis); .dev/i18-chrome/hta_py: PYTHONPATH=/tmp/hta exec python3 "$@".
D=.dev/i18-chrome
exec > >(tee "$OUT/device_log.txt") 2>&1
date -u; nproc; python3 -V; uptime; env | grep -i pythondont || echo "PYTHONDONTWRITEBYTECODE unset"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/duckdb-*.whl $D/msgspec-*.whl
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/hta $D/htawhl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
taskset -c 0,1 python3 benchmarks/bench_vs_hta.py --hta-python $D/hta_py --reps ${REPS:-5} --synthetic 500 \
    sample_traces/h200_resnet18/torch_trace.json.gz sample_traces/external/hta_v100_nccl_df_index_resolver.json.gz \
    2>"$OUT/hta_stderr.txt" | tee "$OUT/bench_vs_hta_h200.txt"
date -u
