#!/usr/bin/env bash
# Capture the committed sample traces on the GPU host (what made sample_traces/h200_{smallcnn_annotated,resnet18,transformer}).
# usage: bash scripts/capture_samples.sh OUTDIR [DIR_WITH_libdw1_libelf1_debs] [SMALLCNN_MODEL_FILE]
# Each step is guarded (timeout, no `set -e`) so one failing tool still leaves the others' files.
set -x
export PYTHONUNBUFFERED=1
OUT=$(mkdir -p "${1:-capture_out}" && cd "${1:-capture_out}" && pwd)
DEBS=${2:-/work/shared/gpu_host}
SMALL=${3:-sample_traces/h200_smallcnn_annotated/capture_model.py}
LIBROOT=/tmp/tracepipe-libdw
mkdir -p "$LIBROOT"
for f in "$DEBS"/libdw1_*.deb "$DEBS"/libelf1_*.deb; do dpkg -x "$f" "$LIBROOT"; done
LIB=$LIBROOT/usr/lib/x86_64-linux-gnu
ls -l "$LIB" | head
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch, torchvision; print(torch.__version__, torch.version.cuda, torchvision.__version__)'
  which ncu nsys; ncu --version
  ls /opt/nvidia/nsight-compute/*/host/*/ | head -50
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
ncu --query-metrics --csv > "$OUT/ncu_query_metrics.csv" 2>&1 || true
grep -E 'sass_thread_inst_executed_op_[fhd](fma|add|mul)_pred_on|ops_path_tensor|inst_executed_pipe_tensor' \
  "$OUT/ncu_query_metrics.csv" | head -40
TP="python3 -m pipeline.cli capture"
PACK=${PACK:-/tmp/captures.tgz}  # one archive, rewritten after each model so a timeout still leaves the earlier ones
pack() { (cd "$OUT" && tar czf "$PACK.tmp" --exclude='*.ncu-rep' . && mv "$PACK.tmp" "$PACK" && ls -la "$PACK"); }

timeout 150 $TP all -m "$SMALL:make" -i 8,3,64,64 -o "$OUT/h200_smallcnn_annotated" --lib-dir "$LIB" --launch-count 0
pack
timeout 220 $TP all -m torchvision.models:resnet18 -i 8,3,224,224 -o "$OUT/h200_resnet18" --lib-dir "$LIB" --launch-count 120
pack
timeout 200 $TP all -m torch.nn:TransformerEncoderLayer \
  --factory-kwargs '{"d_model": 512, "nhead": 8, "dim_feedforward": 2048, "dropout": 0.0}' \
  -i 128,8,512 -o "$OUT/h200_transformer" --lib-dir "$LIB" --launch-count 60
pack
# The message a host without libdw gets (no --lib-dir); short model, nsys only.
timeout 60 $TP nsys -m "$SMALL:make" -i 8,3,64,64 -o /tmp/nolibdw --iters 1 > "$OUT/nolibdw.log" 2>&1
echo "nolibdw rc=$?" >> "$OUT/nolibdw.log"; ls /tmp/nolibdw >> "$OUT/nolibdw.log"
pack
du -a "$OUT" | sort -n | tail -40
