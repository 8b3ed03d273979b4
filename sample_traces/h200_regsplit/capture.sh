#!/bin/bash
# What made this folder, on the GPU host from the repo root (the run carried regsplit, built as README.md says,
# in D=.dev/i22-truth; with no binary there it is built with the host's nvcc).
set -x
D=${D:-sample_traces/h200_regsplit}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
nvidia-smi -L > $OUT/gpu.txt 2>&1
$NCU --version > $OUT/ncu_version.txt 2>&1
chmod +x $D/regsplit
if ! $D/regsplit > $OUT/run.log 2>&1; then
  NVCC=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
  $NVCC -O3 -gencode arch=compute_90,code=sm_90 -Xptxas -v -o /tmp/regsplit $D/regsplit.cu >> $OUT/run.log 2>&1
  cp /tmp/regsplit $D/regsplit
  $D/regsplit >> $OUT/run.log 2>&1
fi
$NCU --clock-control none --section LaunchStats --section Occupancy -o /tmp/rs $D/regsplit > $OUT/ncu.log 2>&1
$NCU -i /tmp/rs.ncu-rep --csv --page raw > $OUT/regsplit_raw.csv 2>>$OUT/ncu.log
$NCU -i /tmp/rs.ncu-rep --csv --page details > $OUT/regsplit_details.csv 2>>$OUT/ncu.log
ls -la $OUT
