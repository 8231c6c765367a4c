# Two entry points, each doing all set-up on a fresh machine (Python 3.11 with venv):
#   make demo   - install, then build the offline demo dataset into out/demo
#   make test   - install, then run the test suite
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test install bench

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/synrail build --config configs/default.yaml --out out/demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -q -n 2 tests

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/compose.py
