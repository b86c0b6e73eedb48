# The two commands: `make run` (the plane) and `make test` (lint, types, tests).
VENV ?= .venv
PYTHON ?= $(shell for p in python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && command -v $$p && break; done)
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-suite test-rabbitmq lint typecheck unit install bench clean bytecode rewritten

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11+ is required" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# uv installs the same packages from the same index as pip would, and compiles them, in
	# seconds where pip's resolver and installer take about a minute of CPU. pip is the fallback
	# where uv cannot be had; pip compiles one file at a time, so compileall does it on every core.
	{ $(BIN)/python -m pip install --quiet uv \
	  && $(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -e '.[dev]'; } \
	  || { $(BIN)/python -m pip install --quiet --no-compile -e '.[dev]' \
	    && $(BIN)/python -m compileall -q -j 0 \
		"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; }
	touch $(STAMP)

install: $(STAMP) bytecode

# The project's own bytecode, written once (up-to-date files are skipped): where
# PYTHONDONTWRITEBYTECODE is set (CI machines), every process would otherwise compile the
# package from source at start, about 150 ms of each CLI command and worker. The tests' and
# benchmarks' helpers too: each pytest process of `make test` (six at once) and every child
# that imports one would compile them again, about 3 s of CPU per pytest process.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 inner_plane workers beat_schedule tests bench

# pytest's cache of the test modules (and of its plugins' modules) with their asserts rewritten,
# which it does not write under PYTHONDONTWRITEBYTECODE either: each pytest process of `make test`
# rewrote them all again, about 12 s of CPU before its first test (tests/support/rewrite_cache.py).
rewritten: $(STAMP)
	$(BIN)/python -m tests.support.rewrite_cache

run: $(STAMP) bytecode
	$(BIN)/inner-plane up

lint: $(STAMP)
	$(BIN)/python -m tests.support.conflict_markers
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy --strict inner_plane workers beat_schedule bench tests/support

# Lint first (seconds), then types and the two test legs side by side (make -j; each one's output
# is printed whole when it ends, so they do not interleave): the whole suite with Redis as broker
# on TEST_WORKERS pytest-xdist workers, and the broker-relevant acceptance tests with RabbitMQ as
# broker on LEG_WORKERS (one line saying it skipped when no RabbitMQ is reachable; CI=true requires
# it). Every worker has its own database, Redis and Celery queues (tests/support/stores.py); each
# file goes whole to one worker, longest first (tests/support/timing.py). The suite ends with its
# 15 slowest tests. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 4
LEG_WORKERS ?= 2
XDIST = --dist loadfile --no-loadscope-reorder
# Each leg's temporary files under the worktree: pytest makes /tmp/pytest-of-USER private again
# whenever any session starts, which cuts off the embedded PostgreSQL (it runs as a user of its
# own under root) of a test whose plane lives in its tmp_path.
BASETEMP = .inner-plane-test/tmp
test: lint bytecode rewritten
	@$(MAKE) --no-print-directory -j3 --output-sync=target typecheck test-suite test-rabbitmq

# (`make test` compiled the bytecode before it starts these.)
test-suite: $(STAMP)
	mkdir -p $(BASETEMP)
	$(BIN)/pytest -q -ra -n $(TEST_WORKERS) $(XDIST) --basetemp=$(BASETEMP)/suite \
		--durations=15 $(PYTEST_ARGS)

test-rabbitmq: $(STAMP)
	mkdir -p $(BASETEMP)
	$(BIN)/python -m tests.support.rabbitmq_leg -n $(LEG_WORKERS) $(XDIST) \
		--basetemp=$(BASETEMP)/rabbitmq $(LEG_ARGS)

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Every benchmark in turn (bench/summary.py lists them), then one table of key figures and targets.
bench: $(STAMP) bytecode
	$(BIN)/python -m bench.summary $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .inner-plane-test .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
