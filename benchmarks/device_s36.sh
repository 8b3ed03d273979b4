#!/bin/bash
# Device run, session 36: more real PyTorch-profiler traces of 50-100 MB for #18.4, profiled the way HTA's users
# profile (benchmarks/train_profiled.py: torch.profiler around whole training steps, no per-module ranges), of other
# shapes than session 35's resnet50: a 12-layer GPT-style LM with memory events (as HTA's own NCCL trace has them),
# the same with input shapes, ViT-B/16 and MobileNetV3 training; then HTA 0.5.0 against `tracepipe run` on them
# (bench_vs_hta.py, taskset -c 0,1, 3 interleaved reps).
#   run(command="bash benchmarks/device_s36.sh", carry=[".dev/i18-chrome"], timeout_s=600)
# (The tree plus .dev/i18-chrome is ~61.5 MiB of the 64 MiB a call may carry: nothing else fits.)
D=.dev/i18-chrome
exec > >(tee "$OUT/device_log.txt") 2>&1
date -u; nproc; uptime; python3 -c 'import torch, torchvision; print(torch.__version__, torchvision.__version__)'
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/duckdb-*.whl $D/msgspec-*.whl
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/hta $D/htawhl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
cap() { timeout 150 python3 benchmarks/train_profiled.py --target-mb ${MB:-75} "$@" 2>&1 | grep -v USDT | tail -3; }
cap --model gpt --memory -o "$OUT/gpt_mem.json.gz"
cap --model gpt --memory --shapes -o "$OUT/gpt_mem_shapes.json.gz"
cap --model vit_b_16 --batch 16 -o "$OUT/vit_b16.json.gz"
cap --model mobilenet_v3_large --batch 32 --memory -o "$OUT/mnv3_mem.json.gz"
ls -la "$OUT"
taskset -c 0,1 python3 benchmarks/bench_vs_hta.py --hta-python $D/hta_py --reps ${REPS:-3} "$OUT"/*.json.gz \
    2>"$OUT/hta_stderr.txt" | tee "$OUT/bench_vs_hta_s36_h200.txt"
date -u
