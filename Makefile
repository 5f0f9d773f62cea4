# The few commands a person needs. Everything installs itself on first use.
#   make demo   run the main job end to end
#   make test   install, start the services, lint, run the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RAGSTREAM := $(BIN)/ragstream
POSTGRES ?=
UP_FLAGS := $(if $(POSTGRES),--postgres,)
PYTEST_ARGS ?=

# Where `make bench` writes; one folder per UTC day (bench/results/latest is a copy of the last).
BENCH_DIR := bench/results/$(shell date -u +%Y-%m-%d)

MANUALS := /usr/share/doc/python3.11/html/index.html /usr/share/doc/postgresql-doc-15/html/index.html

.PHONY: install docs browser up down status lint test unit demo stop bench clean-local

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# The real corpus: the Python 3.11 and PostgreSQL 15 HTML manuals (Debian packages).
docs:
	@for f in $(MANUALS); do test -f $$f || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11-doc postgresql-doc-15; \
	fi

# Debian's Chromium and its matching chromedriver, for the headless-browser test of /docs
# (tests/integration/test_api_docs_browser.py); nothing else downloads a browser.
browser:
	@if ! test -x /usr/bin/chromium || ! test -x /usr/bin/chromedriver; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	fi

up: install
	$(RAGSTREAM) infra up $(UP_FLAGS)

down: install
	$(RAGSTREAM) infra down

# The services, then the demo's processes with their restarts (entry/supervisor.py).
status: install
	$(RAGSTREAM) infra status
	$(RAGSTREAM) demo status

# The last step is the import direction of README's Layout (tests/unit/test_layering.py).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -q tests/unit/test_layering.py

unit: install
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# pytest exits 5 when it collects no test; make treats that as the failure it is.
test: install docs browser
	$(RAGSTREAM) infra up --postgres
	$(MAKE) lint
	$(BIN)/pytest $(PYTEST_ARGS)

# Starts every process (Procfile, under entry/supervisor.py), ingests both manuals as a Celery job, asks ten
# questions through the API, and leaves everything running. `make stop` stops the processes.
demo: export PATH := $(CURDIR)/$(BIN):$(PATH)
demo: docs up
	$(RAGSTREAM) demo run

stop: install
	$(RAGSTREAM) demo stop

# Benchmarks (numbers, not tests): ingest, bus, query, evaluation -> $(BENCH_DIR)/ (JSON,
# Markdown, PNG) and bench/results/latest/summary.json. The query benchmark and the evaluation
# need both manuals ingested for tenant "default"; run on an otherwise idle machine.
# With the demo running (`make demo`), `bench api` also times an exact-cache hit through its API
# with the demo's key (a failure there, e.g. the demo stopped, does not stop the run).
DEMO_KEY := .local/demo/api_key
# The team's shared question set when this checkout sits beside it; else the sample set.
EVAL_QUESTIONS := $(wildcard ../shared/eval/questions.jsonl)
BENCH_API_ARGS = $(if $(wildcard $(DEMO_KEY)),--api-url http://127.0.0.1:8000 --api-key $$(cat $(DEMO_KEY)),)
bench: install docs up
	mkdir -p $(BENCH_DIR)
	$(RAGSTREAM) bench ingest --out $(BENCH_DIR)/ingest.json
	$(RAGSTREAM) bench bus --out $(BENCH_DIR)/bus.json
	$(RAGSTREAM) index optimize
	$(RAGSTREAM) bench query --replicas retrieval=2 --out $(BENCH_DIR)/query.json
	$(if $(wildcard $(DEMO_KEY)),-$(RAGSTREAM) bench api $(BENCH_API_ARGS) --out $(BENCH_DIR)/api.json,)
	$(RAGSTREAM) eval $(EVAL_QUESTIONS) --out $(BENCH_DIR)/eval
	$(RAGSTREAM) bench summary $(BENCH_DIR) --latest bench/results/latest
