# Two commands matter on a fresh machine: `make run` and `make test`.
# Both create .venv on demand and reinstall only when pyproject.toml changes. `make run`
# installs only what the scheduler needs to run, so a first run starts in seconds; `make test`
# (and lint, synth, …) adds the dev extra: test tools, linters, the CDK.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.installed-runtime
PORT ?= 8080
PG_HOST ?= 127.0.0.1
PG_PORT ?= 5432
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.PHONY: install run test unit lint bench synth preflight deploy lock postgres clean screenshot docs

install: $(STAMP)

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cronledger needs Python >= 3.11, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)

$(RUNTIME_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing cronledger's runtime into $(VENV) (once; \`make test\` adds the dev tools)..."
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	@touch $(RUNTIME_STAMP)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing cronledger with its dev tools into $(VENV)..."
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP) $(RUNTIME_STAMP)

# `make run PORT=9000` serves the API (and the console) elsewhere.
run: $(RUNTIME_STAMP)
	$(BIN)/cronledger dev --demo --port $(PORT)

# PostgreSQL is not optional for the suite: start it if it is installed but down,
# and stop with a clear message if it still cannot be reached.
postgres:
	@if ! pg_isready -q -h $(PG_HOST) -p $(PG_PORT) 2>/dev/null; then \
		if [ -d /etc/postgresql ] && command -v pg_ctlcluster >/dev/null; then \
			echo "starting PostgreSQL $$(ls /etc/postgresql)"; \
			pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start || true; \
		fi; \
		for i in 1 2 3 4 5 6 7 8 9 10; do pg_isready -q -h $(PG_HOST) -p $(PG_PORT) 2>/dev/null && break; sleep 1; done; \
	fi
	@pg_isready -q -h $(PG_HOST) -p $(PG_PORT) 2>/dev/null || \
		{ echo "ERROR: PostgreSQL is not reachable at $(PG_HOST):$(PG_PORT); the ledger tests cannot run without it." >&2; exit 1; }

test: $(STAMP) postgres
	$(BIN)/python -m pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

# The loop to run while editing: the pure and fake-backed tests (tests/unit: no PostgreSQL, no
# browser, no CDK synth) on both cores, with Hypothesis' `dev` profile (a quarter of the
# examples; HYPOTHESIS_PROFILE=ci runs them all). `make test` runs everything. Compiled
# bytecode is kept even where PYTHONDONTWRITEBYTECODE is set: each run starts three
# interpreters and several command-line subprocesses, which would compile every module again.
unit: $(STAMP)
	PYTHONDONTWRITEBYTECODE= HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-dev} \
		$(BIN)/python -m pytest -q -n 2 \
		-p no:schemathesis -p no:anyio tests/unit $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check functions tests infra
	$(BIN)/ruff format --check functions tests infra
	$(BIN)/mypy

# The docs site (mkdocs.yml) into site/, offline, warnings as errors; the reference pages are
# generated from the code as it builds (docs_hooks/reference.py). `make test` builds it too
# (tests/docs/test_site.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP) postgres
	$(BIN)/python -m tests.bench

screenshot: $(STAMP) postgres
	CRONLEDGER_SCREENSHOT=docs/console.png $(BIN)/python -m pytest -q tests/browser -k "screenshot and sqlite"

# `make synth PROFILE=lean` (or ha); the default profile is standard.
synth: $(STAMP)
	$(BIN)/python infra/app.py $(if $(PROFILE),-c cronledger:profile=$(PROFILE))

# Before a deploy: the tools it needs (Python 3.13 for the asset's bytecode, Node.js >= 22 for
# the CDK CLI) and an account whose Lambda concurrency holds the reservations; each missing
# one is named, with its fix. CONTEXT="-c cronledger:alarm_email=ops@example.com ..." is
# passed to both the check and the deploy, so the reservations checked are the deploy's.
preflight: $(STAMP)
	PYTHONPATH=infra $(BIN)/python -m cronledger_infra.preflight $(CONTEXT)

deploy: preflight
	npx aws-cdk@2 deploy $(CONTEXT) $(CDK_ARGS)

# The code asset's lock file (requirements-lambda.txt), resolved for arm64 CPython 3.13 with
# hashes; run after changing [project].dependencies (needs PyPI). A test fails while it is stale.
lock: $(STAMP)
	PYTHONPATH=infra $(BIN)/python -m cronledger_infra.lockfile

clean:
	rm -rf $(VENV) cdk.out site .cronledger .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
