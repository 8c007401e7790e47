# zbus: the Makefile targets are the project's interface.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# Every dependency's version, for `make install` and the images alike (`make constraints`).
CONSTRAINTS := deploy/constraints.txt

.DEFAULT_GOAL := help
.PHONY: help install up up-ha down test unit lint bench validate images constraints clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip -c $(CONSTRAINTS)
	$(PY) -m pip install --quiet -e '.[spark]' --group dev -c $(CONSTRAINTS)
	touch $(STAMP)

install: $(STAMP) ## create .venv and install zbus with its test tools (idempotent)

up: install ## run the whole local cluster on 127.0.0.1 (Ctrl-C or `make down` stops it)
	$(BIN)/zbus up

up-ha: install ## the same with the event bus as three replicas led through etcd (etcd-server)
	$(BIN)/zbus up --ha

down: ## stop a cluster started by `make up` or `make up-ha`
	@if test -x $(BIN)/zbus; then $(BIN)/zbus down; else echo "nothing to stop"; fi

test: install lint ## lint, then the whole test suite
	$(BIN)/pytest $(PYTEST_ARGS)

lint: install ## ruff (lint + format check), mypy --strict and the import layers (lint-imports)
	$(BIN)/ruff check services tests deploy
	$(BIN)/ruff format --check services tests deploy
	$(BIN)/mypy
	$(BIN)/mypy --strict deploy/images.py
	$(BIN)/lint-imports

bench: install ## benchmarks: figures and ratios to a baseline measured in the same run
	$(PY) -m pip install --quiet --group bench -c $(CONSTRAINTS)
	@command -v redis-server >/dev/null && command -v nats-server >/dev/null || \
	    (apt-get update -qq && apt-get install -y -qq redis-server nats-server >/dev/null)
	$(PY) -m tests.bench

validate: install ## offline checks of the deploy files
	$(PY) -m tests.validate

images: install ## build the images with no registry: a base made from Debian packages, a wheelhouse
	$(PY) deploy/images.py

constraints: ## resolve every dependency afresh and pin the result in deploy/constraints.txt
	rm -rf .cache/lock
	$(PYTHON) -m venv .cache/lock
	.cache/lock/bin/pip install --quiet --upgrade pip
	.cache/lock/bin/pip install --quiet '.[spark]' --group dev --group bench 'setuptools>=77'
	rm -rf build  # what setuptools left while building zbus: a later build would ship it
	{ echo "# Every dependency of zbus, its Spark extra, its dev tools, its benchmarks' comparisons"; \
	  echo '# and its build backend, pinned: `make install`, `make bench` and the images'; \
	  echo '# (deploy/Dockerfile*) install with `-c deploy/constraints.txt`. Regenerate with'; \
	  echo '# `make constraints`.'; \
	  .cache/lock/bin/pip freeze --all --exclude zbus; } > $(CONSTRAINTS)
	rm -rf .cache/lock

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
