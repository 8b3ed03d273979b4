#!/bin/bash
# Device run for #16.6 (chrome normalize within 5% of 9ed9a13, before chrome.py's split): the 100 MB bench trace
# (bench_chrome.generate) normalized by base = 9ed9a13 (carried in .dev/i16-chrome/9ed9a13), head = this tree and
# base again (an A/A control: what the harness reads as a difference between two copies of one tree), each run
# through the same harness (benchmarks/bench_chrome_trees.py: every module from bytecode, rounds in random order,
# SEED=N picks the orders), taskset -c 0,1.
#   run(command="bash benchmarks/device_i16_trees.sh 24 [REV]", carry=[".dev/i16-chrome", ".whl"], timeout_s=600)
set -e
exec > >(tee "$OUT/device_log.txt") 2>&1
source benchmarks/device_i16_setup.sh
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg); python $(python3 -V)"
# A second argument names another carried tree (.dev/i16-chrome/REV), run as "prev" beside them.
PREV=""
if [ -n "$2" ]; then cp -r ".dev/i16-chrome/$2" /tmp/prev && PREV="prev=/tmp/prev"; fi
taskset -c 0,1 python3 benchmarks/bench_chrome_trees.py /tmp/t100.json --repeat "${1:-24}" base=/tmp/base head=/tmp/head base2=/tmp/base2 $PREV --seed "${SEED:-0}" \
  | tee "$OUT/bench_chrome_trees_h200.txt"
date -u
