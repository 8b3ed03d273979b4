#!/bin/bash
# Device run, session 35: real PyTorch-profiler chrome traces of 50-100 MB (#18.4 names that range; the one real trace
# of it we had was HTA's 54 MB one): resnet50 training steps (forward, loss, backward, AdamW) on the H200 with one
# record_function range per module (`tracepipe capture torch --train`), 15 and 30 measured steps; then HTA 0.5.0
# against `tracepipe run` on them (bench_vs_hta.py, taskset -c 0,1). The traces come back in $OUT for local runs.
#   run(command="bash benchmarks/device_s35_capture.sh", carry=[".dev/i18-chrome", ".dev/s35"], timeout_s=600)
# .dev/s35 holds the nvtx wheel (whl/, `pip download nvtx` for cp312 manylinux). With it the carry is ~65 MiB, over
# the 64 MiB limit: the session-35 call left htawhl/networkx-*.whl out (HTA then used the host image's networkx).
D=.dev/i18-chrome
exec > >(tee "$OUT/device_log.txt") 2>&1
date -u; python3 -c 'import torch, torchvision; print(torch.__version__, torchvision.__version__)'
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/duckdb-*.whl $D/msgspec-*.whl .dev/s35/whl/nvtx-*.whl
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/hta $D/htawhl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for n in ${STEPS:-15 30}; do
    timeout 240 python3 -m pipeline.cli capture torch --train -m torchvision.models:resnet50 -i 32,3,224,224 \
        --warmup 3 --iters $n -o /tmp/cap/r50_train_$n 2>&1 | tail -5
    cp /tmp/cap/r50_train_$n/torch_trace.json.gz "$OUT/r50_train_$n.json.gz"
    ls -la /tmp/cap/r50_train_$n; python3 -c "import gzip,sys; print(sys.argv[1], len(gzip.open(sys.argv[1]).read())/1e6, 'MB JSON')" "$OUT/r50_train_$n.json.gz"
done
taskset -c 0,1 python3 benchmarks/bench_vs_hta.py --hta-python $D/hta_py --reps ${REPS:-3} "$OUT"/r50_train_*.json.gz \
    2>"$OUT/hta_stderr.txt" | tee "$OUT/bench_vs_hta_r50_h200.txt"
date -u
