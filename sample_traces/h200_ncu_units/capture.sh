#!/bin/bash
# How the files of this folder were captured (NVIDIA H200, ncu 2025.3.1, torch 2.11+cu130), from the repo root.
# Each report is captured once and exported twice (auto units and --print-units base), so the two CSVs hold
# the same measurement and differ only in unit scaling: the unit-conversion test compares them.
set -e
cd sample_traces/h200_ncu_units
M=gpu__time_duration.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum
M=$M,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum,smsp__sass_thread_inst_executed_op_hfma_pred_on.sum
M=$M,smsp__sass_thread_inst_executed_op_dfma_pred_on.sum,sm__inst_executed_pipe_tensor.sum
T=sm__ops_path_tensor_src_fp16.sum,sm__ops_path_tensor_src_bf16_dst_fp32.sum,sm__ops_path_tensor_src_tf32_dst_fp32.sum
T=$T,sm__ops_path_tensor_src_fp8.sum,sm__ops_path_tensor_src_int8.sum,sm__ops_path_tensor_src_fp64.sum
S="--section SpeedOfLight --section LaunchStats --section Occupancy"
ncu -o /tmp/smallcnn --nvtx $S --section MemoryWorkloadAnalysis --metrics $M python3 ../h200_smallcnn/capture_model.py
ncu -i /tmp/smallcnn.ncu-rep --csv --page raw | gzip -9 > smallcnn_raw_auto.csv.gz
ncu -i /tmp/smallcnn.ncu-rep --csv --page raw --print-units base | gzip -9 > smallcnn_raw_base.csv.gz
ncu -i /tmp/smallcnn.ncu-rep --csv --page details | gzip -9 > smallcnn_details_auto.csv.gz
ncu -o /tmp/tensor --nvtx $S --metrics $M,$T python3 tensor_model.py
ncu -i /tmp/tensor.ncu-rep --csv --page raw | gzip -9 > tensor_raw_auto.csv.gz
ncu -i /tmp/tensor.ncu-rep --csv --page raw --print-units base | gzip -9 > tensor_raw_base.csv.gz
# A run whose kernel filter matches nothing: ncu's "No kernels were profiled." output.
ncu --csv --page raw -k regex:no_such_kernel_xyz python3 ../h200_smallcnn/capture_model.py > empty_run.log 2>&1
ncu --version > ncu_version.txt
