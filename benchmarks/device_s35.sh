#!/bin/bash
# Device run, session 35: (1) `tracepipe run` of session 34's end (03b23ea, in .dev/s35/before: `git archive 03b23ea
# pipeline sql pyproject.toml`) against this tree on the 1 MB and 54 MB chrome traces (bench_run_before_after.py:
# quiet runs without rich, batch commands without the interpreter's teardown); (2) #18.4 against HTA 0.5.0
# (bench_vs_hta.py, as device_i18_hta.sh); (3) stage marks of one 1 MB run (run_timeline.py). All under taskset -c 0,1.
#   run(command="bash benchmarks/device_s35.sh", carry=[".dev/i18-chrome", ".dev/s35"], timeout_s=600)   (~4 min)
D=.dev/i18-chrome
exec > >(tee "$OUT/device_log.txt") 2>&1
date -u; nproc; python3 -V; uptime; git log --oneline -1 2>/dev/null || true
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/duckdb-*.whl $D/msgspec-*.whl
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/hta $D/htawhl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
S=sample_traces/h200_resnet18/torch_trace.json.gz
H=sample_traces/external/hta_v100_nccl_df_index_resolver.json.gz
taskset -c 0,1 python3 benchmarks/bench_run_before_after.py .dev/s35/before . $S $H --repeat ${PAIRS:-8} \
    | tee "$OUT/run_before_after_h200.txt"
taskset -c 0,1 python3 benchmarks/bench_vs_hta.py --hta-python $D/hta_py --reps ${REPS:-3} --synthetic 500 $S $H \
    2>"$OUT/hta_stderr.txt" | tee "$OUT/bench_vs_hta_h200.txt"
# The host sets PYTHONDONTWRITEBYTECODE: without unsetting it every timeline run compiles the tree again (the
# first call of this script did not, and its timeline was discarded).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pyc_timeline
for i in 1 2 3; do
    rm -rf /tmp/tl; echo "== $S timeline rep $i"; taskset -c 0,1 python3 benchmarks/run_timeline.py -- run $S --out /tmp/tl -q
done 2>&1 | tee "$OUT/run_timeline_h200.txt"
date -u
