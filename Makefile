# One-command set-up: `make test` and `make demo` create .venv on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test test-full demo docs bench lint ci clean

# The virtual environment itself (pip upgraded once).
$(VENV)/.venv:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	touch $@

# The library and its plots: what the demo needs (no test, docs or engine packages).
$(VENV)/.core: pyproject.toml constraints-dev.txt $(VENV)/.venv
	$(PY) -m pip install -q -c constraints-dev.txt -e ".[plot]"
	touch $@

# Everything the tests and the docs need: the dev extra (Ray, Spark, torchdata, transformers, ...)
# and the docs extra (MkDocs).
$(VENV)/.installed: pyproject.toml constraints-dev.txt $(VENV)/.venv
	$(PY) -m pip install -q -c constraints-dev.txt -e ".[dev,docs]"
	touch $@

# The suite on TEST_WORKERS processes (pytest-xdist), one test file per worker at a time (a
# file's module fixtures, e.g. the Spark session and the Ray cluster, start once); each worker's
# torch gets its share of the cores (tests/conftest.py). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# Bytecode on (this sandbox sets PYTHONDONTWRITEBYTECODE=1): without a cache every pytest
# process parses and rewrites every test module and plugin again (about 13 CPU-s a worker).
# The package's own bytecode is compiled first, once for both workers (a fresh clone: 1 s on
# 2 cores, where each worker compiled it for itself, about 5 CPU-s each, at collection).
test: $(VENV)/.installed
	PYTHONDONTWRITEBYTECODE= $(PY) -m compileall -q -j 0 bucketloader
	PYTHONDONTWRITEBYTECODE= $(PYTEST)

# every property test at the example count written next to it (tests/conftest.py)
test-full: $(VENV)/.installed
	PYTHONDONTWRITEBYTECODE= $(PY) -m compileall -q -j 0 bucketloader
	PYTHONDONTWRITEBYTECODE= BUCKETLOADER_TESTS=full $(PYTEST)

demo: $(VENV)/.core
	$(VENV)/bin/bucketloader demo

# The documentation site, into site/; strict: any warning (a broken link, a docstring that does
# not render) fails the build.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(VENV)/.installed
	$(PY) -m pip install -q -c constraints-dev.txt -e ".[dev,bench]"
	$(PY) benchmarks/strategies.py
	$(PY) benchmarks/sampler.py
	$(PY) benchmarks/cache.py
	$(PY) benchmarks/hf_lengths.py
	$(PY) benchmarks/subsampler.py
	$(PY) benchmarks/compile_e2e.py
	$(PY) benchmarks/packing.py
	$(PY) benchmarks/filters.py
	$(PY) benchmarks/stream_ranks.py
	$(PY) benchmarks/hf_models.py
	$(PY) benchmarks/scale.py
	$(PY) benchmarks/shard_memory.py
	$(PY) benchmarks/engines.py
	$(PY) benchmarks/joint.py
	$(PY) benchmarks/joint_budget.py
	$(PY) benchmarks/joint_dropfew.py
	$(PY) benchmarks/pareto.py
	$(PY) benchmarks/filler.py
	$(PY) benchmarks/small_costs.py
	$(PY) benchmarks/pack_balance.py
	$(PY) benchmarks/gpu.py
	$(PY) benchmarks/first_day.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check bucketloader tests benchmarks
	$(VENV)/bin/mypy

# What CI runs: lint (ruff, mypy), the strict docs build, then the README's test command.
ci: lint docs test

clean:
	rm -rf $(VENV) build site *.egg-info
