# tracepipe: make demo (normalize + analyze + report on sample_traces/), make test.
PY      ?= .venv/bin/python
TP      := .venv/bin/tracepipe
TRACES  ?= sample_traces
BUILD   ?= build
NORM    := $(BUILD)/normalized
ANALYSIS:= $(BUILD)/analysis
REPORT  ?= report

.PHONY: install normalize analyze report demo test lint bench clean

.venv/.installed: pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	@# torch only for the [capture] extra: pin the CPU build that the CI image ships on disk.
	.venv/bin/pip install -q -e '.[dev]'
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

test: install
	$(PY) -m pytest

lint: install
	.venv/bin/ruff check pipeline tests benchmarks
	.venv/bin/ruff format --check pipeline tests benchmarks

# Quick sizes; run each script without arguments for the issue-sized runs (minutes).
bench: install
	$(PY) benchmarks/bench_attribution.py --kernels 1e6
	$(PY) benchmarks/bench_chrome.py --mb 50

clean:
	rm -rf $(BUILD) $(REPORT) .pytest_cache .ruff_cache
