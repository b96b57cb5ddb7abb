# One Makefile for developers and CI.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_HOME ?= $(CURDIR)/.ragpg

.PHONY: install demo test test-fast lint typecheck bench bench-peers docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

install: $(PY)
	$(PY) -m pip install --quiet -e '.[test]'

demo: install
	RAGPG_HOME=$(DEMO_HOME) $(VENV)/bin/ragpg ingest examples/corpus
	RAGPG_HOME=$(DEMO_HOME) $(VENV)/bin/ragpg search "comment restaurer une sauvegarde ?" -k 3
	RAGPG_HOME=$(DEMO_HOME) $(VENV)/bin/ragpg search "how many connections should the pool have?" -k 3

test: install
	$(PY) -m pytest -q

lint: install
	$(PY) -m ruff check rag_pg tests

typecheck: install
	$(PY) -m mypy rag_pg

bench: install
	$(PY) bench/bench.py

bench-peers: install
	@if [ -d ../shared/bench ]; then \
		../shared/bench/run_all.sh --adapter ragpg=$(CURDIR)/$(PY):$(CURDIR)/bench/ragpg_adapter.py --peers baseline_raw,ragpg,llamaindex,langchain; \
	else echo "../shared/bench is not present: bench-peers needs the shared harness"; exit 2; fi

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache dist build *.egg-info $(DEMO_HOME)
