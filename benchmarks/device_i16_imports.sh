#!/bin/bash
# Device run for #16.6: where head's extra wall on the GPU host goes.  Per-module import times (python -X importtime)
# of one whole 100 MB chrome normalize (benchmarks/chrome_timeline.py) by base = 9ed9a13 and head, 3 interleaved
# pairs, first with duckdb/msgspec installed as device_i16_trees.sh installs them (--no-compile: on this host
# PYTHONDONTWRITEBYTECODE=1, so their modules are compiled again in every process), then with them byte-compiled
# as pip's default install leaves them; then bench_chrome_trees.py on the compiled install.
#   run(command="bash benchmarks/device_i16_imports.sh 12", carry=[".dev/i16-chrome", ".whl"], timeout_s=600)
set -e
exec > >(tee "$OUT/device_log.txt") 2>&1
source benchmarks/device_i16_setup.sh
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg); python $(python3 -V); PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE-unset}"
python3 -c "import filelock, msgspec, duckdb, pyarrow, numpy; [print(m.__name__, getattr(m, '__version__', '?'), m.__file__) for m in (filelock, msgspec, duckdb, pyarrow, numpy)]"
ls "$(python3 -c 'import filelock, os; print(os.path.dirname(filelock.__file__))')"/__pycache__ 2>&1 | head -3
for t in /tmp/base /tmp/head; do python3 -m compileall -q $t/pipeline >/dev/null; done
mkdir -p "$OUT/imports"
for variant in nocompile compiled; do
  [ $variant = compiled ] && python3 -m compileall -q /tmp/site >/dev/null
  for i in 1 2 3; do for t in /tmp/base /tmp/head; do
    taskset -c 0,1 python3 -X importtime benchmarks/chrome_timeline.py $t /tmp/t100.json \
      > "$OUT/imports/tl_${variant}_${i}_$(basename $t).txt" 2> "$OUT/imports/imp_${variant}_${i}_$(basename $t).txt"
    echo "$variant $i $(basename $t): $(head -2 "$OUT/imports/tl_${variant}_${i}_$(basename $t).txt" | tr -s ' ' | tr '\n' '|')"
  done; done
done
taskset -c 0,1 python3 benchmarks/bench_chrome_trees.py /tmp/t100.json --repeat "${1:-12}" base=/tmp/base head=/tmp/head base2=/tmp/base2 \
  | tee "$OUT/bench_chrome_trees_h200.txt"
date -u
