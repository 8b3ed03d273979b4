# tracepipe: make demo (normalize + analyze + report on sample_traces/), make test.
PY      ?= .venv/bin/python
TP      := .venv/bin/tracepipe
TRACES  ?= sample_traces
BUILD   ?= build
NORM    := $(BUILD)/normalized
ANALYSIS:= $(BUILD)/analysis
REPORT  ?= report

.PHONY: install normalize analyze report demo test lint bench mutants clean chromium has-chromium check-report

# The pipeline itself (normalize/analyze/report/sql) needs no torch.
.venv/.installed: pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e '.[dev]'
	touch $@

# The tests also cover the capture code (torch, nvtx) and Dask. torch is pinned to the CPU build that the CI
# machines keep on disk: a loose requirement would pull a multi-GB CUDA build.
.venv/.installed-test: .venv/.installed
	.venv/bin/pip install -q torch==2.13.0
	.venv/bin/pip install -q -e '.[dev,capture,dask]'
	touch $@

install: .venv/.installed

# Incremental: tracepipe skips inputs whose output is newer (use FORCE=1 to redo all).
normalize: install
	$(TP) normalize $(TRACES) --out $(NORM) $(if $(FORCE),--force)

analyze: normalize
	$(TP) analyze $(NORM) --out $(ANALYSIS)

report: analyze
	$(TP) report $(ANALYSIS) --out $(REPORT)

demo: report

# The report tests render report.html in headless Chromium (pipeline/report/browser_check.py): no browser, no pass.
# `make chromium` installs it system-wide with apt-get (root; .ci/run does it on the CI machine); `make test` and
# `make check-report` only check that it is there and say how to get it, they install nothing outside .venv.
BROWSER_MISSING := no chromium on PATH: the report tests render report.html in it. Install it with your package \
  manager (Debian/Ubuntu: apt-get install chromium), or run 'make chromium' (apt-get, as root)
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null \
	  || (echo "make chromium: apt-get install chromium (system-wide)" && apt-get update -qq \
	      && apt-get install -y -qq chromium >/dev/null)

has-chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null \
	  || (echo "$(BROWSER_MISSING)" >&2; exit 1)

test: .venv/.installed-test has-chromium
	$(PY) -m pytest

# Fails when anything in report.html overflows a 1400 px viewport or a figure is drawn shrunk or cut.
check-report: report has-chromium
	$(PY) -m pipeline.report.browser_check $(REPORT)/report.html

# Break each rule once on purpose (scripts/mutants.py, docs/testing.md); fails on a surviving mutant.
# Slow (minutes): kept out of `make test`.  RECORD=1 rewrites benchmarks/results/mutants.txt.
mutants: .venv/.installed-test
	$(PY) scripts/mutants.py $(if $(RECORD),--record)

lint: install
	.venv/bin/ruff check pipeline tests benchmarks scripts
	.venv/bin/ruff format --check pipeline tests benchmarks scripts

# Quick sizes; run each script without arguments for the issue-sized runs (minutes).
bench: install
	$(PY) benchmarks/bench_attribution.py --kernels 1e6
	$(PY) benchmarks/bench_chrome.py --mb 50

clean:
	rm -rf $(BUILD) $(REPORT) .pytest_cache .ruff_cache
