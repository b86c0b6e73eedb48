# The two commands: `make run` (the plane) and `make test` (lint, types, tests).
VENV ?= .venv
PYTHON ?= $(shell for p in python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && command -v $$p && break; done)
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit install bench clean bytecode

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11+ is required" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) bytecode

# The project's own bytecode, written once (up-to-date files are skipped): where
# PYTHONDONTWRITEBYTECODE is set (CI machines), every process would otherwise compile the
# package from source at start, about 150 ms of each CLI command and worker.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 inner_plane workers beat_schedule

run: $(STAMP) bytecode
	$(BIN)/inner-plane up

lint: $(STAMP)
	$(BIN)/python -m tests.support.conflict_markers
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy --strict inner_plane workers beat_schedule

# Two legs: the whole suite with Redis as broker, then the broker-relevant acceptance tests with
# RabbitMQ as broker (one line saying it skipped when no RabbitMQ is reachable; CI=true requires it).
test: lint typecheck bytecode
	$(BIN)/pytest -q -ra $(PYTEST_ARGS)
	$(BIN)/python -m tests.support.rabbitmq_leg

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Every benchmark in turn (bench/summary.py lists them), then one table of key figures and targets.
bench: $(STAMP) bytecode
	$(BIN)/python -m bench.summary $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .inner-plane-test .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
