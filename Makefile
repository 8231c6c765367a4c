# Two entry points, each doing all set-up on a fresh machine (Python 3.11 with venv):
#   make demo   - install the core package, then build the offline demo dataset into out/demo
#   make test   - install everything (dev tools and every extra, onnxruntime included), run the tests
# The demo's config (configs/default.yaml: procedural scenes and cutouts) needs no extra, so `make demo`
# installs only the core (no torch, no CUDA wheels); `make test` adds the extras so every path is tested.
PYTHON ?= python3
VENV := .venv
CORE_STAMP := $(VENV)/.installed-core
# .installed: everything (dev tools and all extras); .installed-core: the core package only
ALL_STAMP := $(VENV)/.installed

.PHONY: demo test install bench docs

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip

$(CORE_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet -e .
	touch $(CORE_STAMP)

$(ALL_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet -e ".[dev,all]"
	touch $(ALL_STAMP) $(CORE_STAMP)

install: $(ALL_STAMP)

demo: $(CORE_STAMP)
	$(VENV)/bin/synrail build --config configs/default.yaml --out out/demo

test: $(ALL_STAMP)
	$(VENV)/bin/ruff check .
	$(MAKE) docs
	$(VENV)/bin/python -m pytest -q -n 2 tests

# the documentation site (docs/, mkdocs.yml), built strictly: a broken link or a missing page fails
docs: $(ALL_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -d "$$(mktemp -d)"

bench: $(CORE_STAMP)
	$(VENV)/bin/python benchmarks/compose.py
