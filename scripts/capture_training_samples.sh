#!/usr/bin/env bash
# The one GPU run of issue 17: every capture of sample_traces/h200_train_decoder (+ graph replay), then pack.
set -x
export PYTHONUNBUFFERED=1
# Run from a folder holding tree/ (a copy of this repo), the nvtx wheel and the libdw1/libelf1 debs.
D=${D:-$(pwd)/.dev/i17-training}
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/nvtx-*.whl
export PYTHONPATH=/tmp/site:$D/tree
mkdir -p /tmp/dw; for f in $D/*.deb; do dpkg -x $f /tmp/dw; done
LIB=/tmp/dw/usr/lib/x86_64-linux-gnu
cd $D/tree
M=$D/tree/sample_traces/h200_train_decoder/capture_model.py
C=/tmp/cap; mkdir -p $C
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
export PATH=$(dirname $NSYS):$PATH
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'; nsys --version; ncu --version; } > $C/env.txt 2>&1
cat $C/env.txt
TP="python3 -m pipeline.cli capture"
TRAIN="-m $M:make --loss $M:loss -i 4,64:int512 --dtype bfloat16 --lib-dir $LIB"
pack() { (cd $C && tar czf $OUT/captures.tgz --exclude='*.ncu-rep' --exclude='*.nsys-rep' --exclude='*.qdstrm' . ) ; ls -la $OUT; }
# 1. training step: nsys (emit_nvtx), PyTorch profiler, ncu (first 80 kernels of one step)
timeout 200 $TP all --train $TRAIN --warmup 3 --iters 2 --launch-count 80 -o $C/h200_train_decoder 2>&1 | tail -40
pack
# 2. CUDA graph of the forward, replayed: per node, and whole-graph records
timeout 70 $TP nsys --graph $TRAIN --warmup 3 --iters 2 -o $C/h200_graph_replay 2>&1 | tail -15
timeout 70 $TP nsys --graph --cuda-graph-trace graph $TRAIN --warmup 3 --iters 2 -o $C/h200_graph_whole 2>&1 | tail -15
pack
# 3. the alternative: module backward hooks instead of emit_nvtx
timeout 70 $TP nsys --train --backward-ranges hooks $TRAIN --warmup 3 --iters 2 -o $C/h200_train_hooks 2>&1 | tail -15
pack
# 4. cost of each way, no profiler attached: 5 warm-up + 40 timed steps each, twice interleaved
for rep in 1 2; do for br in none emit_nvtx hooks; do
  timeout 60 python3 -m pipeline.capture.runner --mode time --train --backward-ranges $br --model $M:make --loss $M:loss \
    --input-shape 4,64:int512 --dtype bfloat16 --warmup 5 --iters 40 --out $C/timing/$br.$rep 2>&1 | tail -2
done; done
pack
# (the run also dumped each sqlite schema with a throwaway script; graph tables are described in docs/schema.md)
du -a $C | sort -n | tail -30
pack
