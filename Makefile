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

MANUALS := /usr/share/doc/python3.11/html/index.html /usr/share/doc/postgresql-doc-15/html/index.html

.PHONY: install docs up down status lint test unit demo clean-local

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

up: install
	$(RAGSTREAM) infra up $(UP_FLAGS)

down: install
	$(RAGSTREAM) infra down

status: install
	$(RAGSTREAM) infra status

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: install
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# pytest exits 5 when it collects no test; make treats that as the failure it is.
test: install docs
	$(RAGSTREAM) infra up --postgres
	$(MAKE) lint
	$(BIN)/pytest $(PYTEST_ARGS)

demo: docs up
	$(RAGSTREAM) db upgrade
	$(RAGSTREAM) health
	$(RAGSTREAM) infra status
