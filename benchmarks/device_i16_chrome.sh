# i16-chrome device run (#16.6 / #18.4), ~4 min on 1 H200 host.  From the repo root:
#   PYTHONUNBUFFERED=1 bash .dev/i16-chrome/run.sh 2>&1 | tee $OUT/i16_chrome.txt      (carry: .dev/i16-chrome, .whl)
#   (a copy of .dev/i16-chrome/run.sh, which the lead runs: .dev/i16-chrome holds the 9ed9a13 and pre trees, git archive of those commits)
# Part 1: chrome normalize of the 100 MB bench trace (bench_chrome.generate: 10,424 kernels, 35,181 cpu_ops,
# 336,174 python_function frames), 7 interleaved triples after one unmeasured warm-up of each, under taskset -c 0,1:
#   base = 9ed9a13 (before chrome.py's split), pre = 72b8c45 (main at the start of session 27), head = this tree
#   (main after s-chrome: HEAD_COMMIT).
#   Command per run: cd TREE && PYTHONPATH=TREE taskset -c 0,1 python3 benchmarks/bench_chrome.py --child ours /tmp/t100.json
#   (each tree's own bench child: timed section = import + normalize_file; CPU = process + reaped decode workers).
# Part 2: `tracepipe run` (normalize + analyze, one process) of the 500 MB bench trace, 3 runs, taskset -c 0,1:
#   wall, user+sys of the process tree, peak RSS, MB/s of JSON (#18.4 asks >= 150 MB/s end to end on 2 cores).
# Part 3: normalize alone of the 500 MB trace, pre vs head, 3 interleaved pairs (bench child, as part 1).
# Part 4: where the 100 MB normalize's CPU goes by thread (main, pandas warm-up, ops/call stacks, sha256, native,
#   children), base vs head, 3 interleaved pairs: says which step differs on this host.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PYTHONPATH
H=$PWD
D=$H/.dev/i16-chrome
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg); trees: base=9ed9a13 pre=$(cat $D/pre/COMMIT) head=$(cat $D/HEAD_COMMIT 2>/dev/null || echo working-tree)"
cd $H && PYTHONPATH=$H:$PYTHONPATH python3 -c "
from pathlib import Path; from benchmarks.bench_chrome import generate
print('t100 events', generate(Path('/tmp/t100.json'), 100)); print('t500 events', generate(Path('/tmp/t500.json'), 500))"
for t in $D/9ed9a13 $D/pre $H; do python3 -m compileall -q $t/pipeline >/dev/null; done
run() { cd $2 && PYTHONPATH=$2:$PYTHONPATH taskset -c 0,1 python3 benchmarks/bench_chrome.py --child ours ${3:-/tmp/t100.json} | tail -1 | sed "s/^/$1 /"; }
run warm-base $D/9ed9a13; run warm-pre $D/pre; run warm-head $H
for i in 1 2 3 4 5 6 7; do
  run base $D/9ed9a13; run pre $D/pre; run head $H
done
echo "## 500 MB: tracepipe run (normalize + analyze in one process), taskset -c 0,1"
cd $H && PYTHONPATH=$H:$PYTHONPATH taskset -c 0,1 python3 $D/measure_run.py /tmp/t500.json 3
echo "## 500 MB: normalize alone (bench child), pre vs head, 3 interleaved pairs, taskset -c 0,1"
for i in 1 2 3; do run pre500 $D/pre /tmp/t500.json; run head500 $H /tmp/t500.json; done
echo "## 100 MB: CPU by thread (benchmarks/chrome_threads.py of head), base vs head, 3 interleaved pairs"
for i in 1 2 3; do for t in $D/9ed9a13 $H; do cd $H && taskset -c 0,1 python3 benchmarks/chrome_threads.py $t /tmp/t100.json; done; done
