#!/usr/bin/env bash
# The GPU run behind sample_traces/h100_user_train_script, h100_compiled_train and h100_compiled_reduce_overhead:
# a user's own HF Llama training script (sample_traces/h100_user_train_script/train.py) captured in script mode,
# eager and under torch.compile, by nsys (emit_nvtx around the script) and the PyTorch profiler.
# Run from the repo root on the GPU host, with the nvtx wheel in .whl/ and Debian's libdw1/libelf1 debs in $DEBS.
set -x
export PYTHONUNBUFFERED=1
DEBS=${DEBS:-.debs}
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/nvtx-*.whl
export PYTHONPATH=/tmp/site:$(pwd)
mkdir -p /tmp/dw; for f in $DEBS/*.deb; do dpkg -x "$f" /tmp/dw; done
LIB=/tmp/dw/usr/lib/x86_64-linux-gnu
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
export PATH=$(dirname $NSYS):$PATH
T=$(pwd)/sample_traces/h100_user_train_script/train.py
TP="python3 -m pipeline.capture.cli"  # the capture alone: the GPU host lacks duckdb
C=/tmp/cap; mkdir -p $C
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c 'import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)'; nsys --version; } > $C/env.txt 2>&1
pack() { (cd $C && for f in */torch_trace.json; do [ -f "$f" ] && gzip -9 "$f"; done; tar czf $OUT/caps.tgz --exclude='*.nsys-rep' --exclude='*.qdstrm' .); ls -la $OUT; }
if [ -z "$COMPILED_ONLY" ]; then
timeout 150 $TP nsys -o $C/h100_user_train_script --lib-dir $LIB -- python3 $T --steps 3 2>&1 | tail -8
timeout 100 $TP torch -o $C/h100_user_train_script -- python3 $T --steps 3 2>&1 | tail -4
pack
fi
if [ -z "$REDUCE_OVERHEAD_ONLY" ]; then
timeout 200 $TP nsys -o $C/h100_compiled_train --lib-dir $LIB -- python3 $T --steps 3 --compile default 2>&1 | tail -8
timeout 150 $TP torch -o $C/h100_compiled_train -- python3 $T --steps 3 --compile default 2>&1 | tail -4
pack
fi
[ -n "$NO_REDUCE_OVERHEAD" ] && exit 0
timeout 150 $TP torch -o $C/h100_compiled_reduce_overhead -- python3 $T --steps 4 --compile reduce-overhead 2>&1 | tail -4
pack
timeout 170 $TP nsys -o $C/h100_compiled_reduce_overhead --lib-dir $LIB -- python3 $T --steps 4 --compile reduce-overhead 2>&1 | tail -8
pack
du -a $C | sort -n | tail -20
