#!/bin/bash
# Device run for #16.6: the per-step wall timeline of one 100 MB chrome normalize (benchmarks/chrome_timeline.py),
# base = 9ed9a13 (carried in .dev/i16-chrome/9ed9a13) vs head = this tree, both copied to /tmp and byte-compiled,
# 3 interleaved pairs under taskset -c 0,1. ~20 s.
#   run(command="bash benchmarks/device_chrome_timeline.sh", carry=[".dev/i16-chrome", ".whl"], timeout_s=200)
set -e
source benchmarks/device_i16_setup.sh
for t in /tmp/base /tmp/head; do python3 -m compileall -q $t/pipeline >/dev/null; done
for i in 1 2 3; do for t in /tmp/base /tmp/head; do echo "== $t"; taskset -c 0,1 python3 benchmarks/chrome_timeline.py $t /tmp/t100.json; done; done 2>&1 | tee $OUT/timeline.txt
