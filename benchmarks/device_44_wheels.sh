#!/bin/bash
# Fills the git-ignored .whl/ that benchmarks/device_44.sh installs on the GPU host (Python 3.12, no network there;
# its image has torch, transformers, numpy, pyarrow 25, networkx, pillow, yaml): ours (duckdb as here, msgspec,
# ADBC's sqlite driver, click/rich/filelock in case), HTA 0.5.0 with only what its two breakdowns import (.whl/hta/),
# and the libdw/libelf debs nsys's importer needs (from ../shared/gpu_host/). ~55 MiB: under run's 64 MiB carry.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
dl() { "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$@"; }
ver() { "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }
rm -rf .whl && mkdir -p .whl/hta
dl -d .whl "duckdb==$(ver duckdb)" "msgspec==$(ver msgspec)" "adbc-driver-manager==$(ver adbc-driver-manager)" \
    "adbc-driver-sqlite==$(ver adbc-driver-sqlite)" "click==$(ver click)" "filelock==$(ver filelock)" \
    "rich==$(ver rich)" markdown-it-py mdurl "psutil==$(ver psutil)"
dl -d .whl/hta HolisticTraceAnalysis==0.5.0 "pandas==2.3.3" plotly narwhals pytz tzdata python-dateutil six xarray \
    pyyaml "psutil==$(ver psutil)"
cp ../shared/gpu_host/*.deb .whl/
du -sh .whl .whl/hta
