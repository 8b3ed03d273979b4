#!/bin/bash
# Device run for #16.6: the per-step wall timeline of one 100 MB chrome normalize (benchmarks/chrome_timeline.py),
# base = 9ed9a13 (carried in .dev/i16-chrome/9ed9a13) vs head = this tree, both copied to /tmp and byte-compiled,
# 3 interleaved pairs under taskset -c 0,1. ~20 s.
#   run(command="bash benchmarks/device_chrome_timeline.sh", carry=[".dev/i16-chrome", ".whl"], timeout_s=200)
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/duckdb-*.whl .whl/msgspec-*.whl 2>/dev/null || true
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
[ -d /tmp/base ] || { cp -r .dev/i16-chrome/9ed9a13 /tmp/base && python3 -m compileall -q /tmp/base/pipeline >/dev/null; }
rm -rf /tmp/head && mkdir /tmp/head && cp -r pipeline sql docs benchmarks pyproject.toml /tmp/head/ && python3 -m compileall -q /tmp/head/pipeline >/dev/null
[ -f /tmp/t100.json ] || PYTHONPATH=$PWD:$PYTHONPATH python3 -c "from pathlib import Path; from benchmarks.bench_chrome import generate; generate(Path('/tmp/t100.json'), 100)"
for i in 1 2 3; do for t in /tmp/base /tmp/head; do echo "== $t"; taskset -c 0,1 python3 benchmarks/chrome_timeline.py $t /tmp/t100.json; done; done 2>&1 | tee $OUT/timeline.txt
