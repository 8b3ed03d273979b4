#!/bin/bash
# i19 device run: ncu with per-SM counters (--sm-counters) of ResNet-18 b8, the small CNN, and ResNet-50 bf16 b16
# (conv1, layer4, fc only). Each capture folder is tarred into $OUT as soon as it is done.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PYTHONPATH
D=$PWD/.dev/i19-work
cd $D
C=/tmp/cap; mkdir -p $C
pack() { (cd $C && tar czf $OUT/$1.tar.gz $1); }
{
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -m pipeline.cli capture ncu -m $D/smallcnn_model.py:make -i 8,3,64,64 -o $C/h200_sm_spread_smallcnn \
  --launch-count 0 --sm-counters
pack h200_sm_spread_smallcnn; date -u
python3 -m pipeline.cli capture ncu -m torchvision.models:resnet18 -i 8,3,224,224 -o $C/h200_sm_spread_resnet18 \
  --launch-count 0 --sm-counters
pack h200_sm_spread_resnet18; date -u
python3 -m pipeline.cli capture ncu -m torchvision.models:resnet50 -i 16,3,224,224 --dtype bfloat16 \
  -o $C/h200_resnet50_bf16 --launch-count 0 --sm-counters \
  --nvtx-include 'step/model/conv1/' --nvtx-include 'step/model/layer4/' --nvtx-include 'step/model/fc/'
ls -la $C/h200_resnet50_bf16; wc -l $C/h200_resnet50_bf16/ncu_raw.csv
pack h200_resnet50_bf16; date -u
} 2>&1 | tee $OUT/run_log.txt
