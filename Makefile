# One-command set-up: `make test` and `make demo` create .venv on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test test-full demo docs bench lint clean

$(VENV)/.installed: pyproject.toml constraints-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints-dev.txt -e ".[dev,docs]"
	touch $@

test: $(VENV)/.installed
	$(PY) -m pytest

# every property test at the example count written next to it (tests/conftest.py)
test-full: $(VENV)/.installed
	BUCKETLOADER_TESTS=full $(PY) -m pytest

demo: $(VENV)/.installed
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

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check bucketloader tests benchmarks
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build site *.egg-info
