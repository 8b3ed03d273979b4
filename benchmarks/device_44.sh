#!/bin/bash
# #44 on the GPU host in one device call (~6 min): fill .whl/ here first (bash benchmarks/device_44_wheels.sh), then
#   run(command="bash benchmarks/device_44.sh", carry=[".whl"], timeout_s=600)
# 1. bench_vs_nsys.py: a GPT-2-style training run captured under nsys (~220k kernels, train_nvtx.py --model gpt),
#    then nsys stats against `tracepipe run` (three views, every view), sql against analyze: ratios and targets.
# 2. ab_trees.py on that export: DuckDB's threads and Arrow's pool as sized now (lean.duckdb_threads,
#    size_arrow_pool) against Arrow's pool unsized, all 16 threads (the old default) and 2; every output compared.
# 3. bench_vs_hta.py under taskset -c 0,1 on the 1.1 MB and 54 MB chrome traces: ratios and targets.
# The 10M-kernel export (generated here: ~5 min, then one round on 2 cores, ~2.5 min) is a second call:
#   run(command="bash benchmarks/device_44.sh 10m", carry=[".whl"], timeout_s=600)
# Results land in $OUT (device_44_*.txt); the "commit" lines name the device copy's stale git HEAD: the tree run is
# the caller's working tree.
set -u
exec > >(tee "$OUT/device_44_log.txt") 2>&1
date -u; nproc; python3 -V; uptime
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# HTA's folder is optional: with it the carry passes 64 MiB beside duckdb, and bench_vs_hta runs on any 2 cores
[ -d .whl/hta ] && python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/hta .whl/hta/*.whl
mkdir -p /tmp/libdw && for d in .whl/*.deb; do dpkg -x "$d" /tmp/libdw; done
export LD_LIBRARY_PATH=/tmp/libdw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE  # the host sets it: every run would compile the tree again
printf '#!/bin/sh\nPYTHONPATH=/tmp/hta exec python3 "$@"\n' > /tmp/hta_py && chmod +x /tmp/hta_py
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
python3 -c 'import duckdb, pyarrow, torch, transformers; print("duckdb", duckdb.__version__, "pyarrow", pyarrow.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'

if [ "${1:-}" = "10m" ]; then
    timeout 590 taskset -c 0,1 python3 benchmarks/bench_nsys_10m.py --kernels 10000000 --tmp /tmp \
        | tee "$OUT/device_44_nsys_10m.txt"
    date -u
    exit 0
fi

timeout 330 python3 benchmarks/bench_vs_nsys.py --capture /tmp/cap --model gpt --steps "${STEPS:-300}" --nsys "$NSYS" \
    --reps "${REPS:-5}" | tee "$OUT/device_44_vs_nsys.txt"
SQ=/tmp/cap/train_gpt.sqlite
V="--view kernel_layers --view layer_summary --view layer_timeline"
# arrow_unsized: this tree with Arrow's pool left at one thread per core (lean.size_arrow_pool a no-op)
rm -rf /tmp/arrow_unsized && cp -r . /tmp/arrow_unsized && sed -i 's/^    pa.set_cpu_count(n)$/    pass/' /tmp/arrow_unsized/pipeline/lean.py
grep -c "pa.set_cpu_count" /tmp/arrow_unsized/pipeline/lean.py
timeout 150 python3 benchmarks/ab_trees.py --side default=. --side arrow_unsized=/tmp/arrow_unsized \
    --side threads16=.:TRACEPIPE_THREADS=16 --side threads2=.:TRACEPIPE_THREADS=2 \
    --rounds "${REPS:-5}" -- run "$SQ" --out {out} $V -q \
    | tee "$OUT/device_44_threads.txt"
S=sample_traces/h200_resnet18/torch_trace.json.gz
H=sample_traces/external/hta_v100_nccl_df_index_resolver.json.gz
[ -d .whl/hta ] && timeout 140 taskset -c 0,1 python3 benchmarks/bench_vs_hta.py --hta-python /tmp/hta_py --reps "${REPS:-5}" $S $H \
    2>"$OUT/device_44_hta_stderr.txt" | tee "$OUT/device_44_vs_hta.txt"
date -u
