# The two commands: `make run` (the plane) and `make test` (lint, types, tests).
VENV ?= .venv
PYTHON ?= $(shell for p in python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && command -v $$p && break; done)
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-suite test-rabbitmq lint typecheck unit install bench clean bytecode

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

# Lint, types and the two test legs run side by side (make -j; each one's output is printed whole
# when it ends, so they do not interleave): the whole suite with Redis as broker on TEST_WORKERS
# pytest-xdist workers, and the broker-relevant acceptance tests with RabbitMQ as broker on
# LEG_WORKERS (one line saying it skipped when no RabbitMQ is reachable; CI=true requires it).
# Every worker has its own database, Redis and Celery queues (tests/support/stores.py). The suite
# ends with its 15 slowest tests. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 4
LEG_WORKERS ?= 2
test: $(STAMP) bytecode
	@$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck test-suite test-rabbitmq

# (`make test` compiled the bytecode before it starts these.)
test-suite: $(STAMP)
	$(BIN)/pytest -q -ra -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

test-rabbitmq: $(STAMP)
	$(BIN)/python -m tests.support.rabbitmq_leg -n $(LEG_WORKERS) --dist loadfile --no-loadscope-reorder $(LEG_ARGS)

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Every benchmark in turn (bench/summary.py lists them), then one table of key figures and targets.
bench: $(STAMP) bytecode
	$(BIN)/python -m bench.summary $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .inner-plane-test .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
