# Sourced by the #16.6 device runs (device_i16_trees.sh, device_i16_imports.sh, device_chrome_timeline.sh), from the
# carried checkout: duckdb + msgspec from .whl into /tmp/site (on PYTHONPATH), base = 9ed9a13 and base2 (a second
# copy: the A/A control) from .dev/i16-chrome, head = this tree, all copied to /tmp (one file system, none read from
# the carried checkout), and the 100 MB bench trace (bench_chrome.generate) at /tmp/t100.json.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/duckdb-*.whl .whl/msgspec-*.whl 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
rm -rf /tmp/base /tmp/base2 /tmp/head && mkdir /tmp/head
cp -r .dev/i16-chrome/9ed9a13 /tmp/base && cp -r .dev/i16-chrome/9ed9a13 /tmp/base2
cp -r pipeline sql docs benchmarks pyproject.toml /tmp/head/
[ -f /tmp/t100.json ] || PYTHONPATH=$PWD:$PYTHONPATH python3 -c "
from pathlib import Path; from benchmarks.bench_chrome import generate
print('t100 events', generate(Path('/tmp/t100.json'), 100))"
