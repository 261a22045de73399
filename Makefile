# Microcosm: `make demo` runs the portal on the embedded default; `make test` runs lint (ruff, mypy) and the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUNTIME_STAMP := $(VENV)/.installed-runtime
DEV_STAMP := $(VENV)/.installed-dev
HOST ?= 127.0.0.1
PORT ?= 8000

# The test OpenID Connect provider (tests/oidc): oidc-provider from the npm registry, installed as locked.
OIDC_STAMP := tests/oidc/node_modules/.package-lock.json

.PHONY: demo test lint format install install-dev clean compile clean-compiled compiled-check

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(RUNTIME_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e .
	touch $@

# The development install (and so CI) runs the suite at the lowest release of each dependency
# constraints/lowest.txt pins: the code must work there, not only at the newest release pip picks.
$(DEV_STAMP): pyproject.toml constraints/lowest.txt | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[dev]' -c constraints/lowest.txt
	touch $@ $(RUNTIME_STAMP)

install: $(RUNTIME_STAMP)
install-dev: $(DEV_STAMP)

# The demo runs with DEBUG on and the development secret key: it is for a laptop, never for production.
# `demo run` starts the web server, a Celery worker and beat (filesystem broker under var/, no Redis) on the
# simulated fleet, feeds demo jobs, and stops every process it started on Ctrl-C.
demo: $(RUNTIME_STAMP)
	mkdir -p var
	DEBUG=1 $(PY) manage.py migrate --noinput
	DEBUG=1 $(PY) manage.py demo seed --url http://$(HOST):$(PORT)/
	DEBUG=1 $(PY) manage.py demo run --host $(HOST) --port $(PORT)

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(DEV_STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

$(OIDC_STAMP): tests/oidc/package-lock.json
	npm ci --prefix tests/oidc --no-audit --no-fund

# pytest exits 5 when it collected nothing: that is a broken setup, not a pass. The engine (scheduler/core)
# must stay at 100 % branch coverage: below it the run fails (pytest-cov combines the workers' coverage).
# A test that runs a whole benchmark command is @untraced (tests/untraced.py): tracing would make it four times
# slower, and the engine's own tests reach every branch without it.
# The suite runs in TEST_WORKERS pytest-xdist workers (CI has two cores), each test file in one worker, so that
# a module's fixtures start once; tests/workers.py says what keeps the workers apart. TEST_WORKERS=0 runs it in
# one process. Every test runs, the slow-marked ones too (the README's inner loop leaves those out).
# Files go to the workers slowest first (tests/slow_first.py), in that order, not in xdist's most-tests-first.
TEST_WORKERS ?= 2
test: lint $(OIDC_STAMP)
	$(VENV)/bin/pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --cov --cov-report=term; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests: the suite is misconfigured" >&2; exit 1; fi; \
	exit $$status

# The engine (scheduler/core) compiled by mypyc, in place (setup.py, MICROCOSM_COMPILE=1; docs/deploy.md, A compiled
# engine): this checkout then plans with it (`bench scale` prints "engine: compiled (mypyc …)"), and the suite fails on
# it (tests/scheduler/test_engine.py: tests and coverage run on the Python source) until `make clean-compiled`.
compile: $(DEV_STAMP)
	MICROCOSM_COMPILE=1 $(PY) setup.py build_ext --inplace

# The compiled engine plans as the Python source does: the plan digests (scheduler/sim/bench/digest.py: B5's
# 1,000-node cycle, both B2 mixes' replays, every scenario) of both, compared line for line. Code outside the engine
# that makes its objects other than by calling them runs on the compiled classes too (COMPILED_TESTS: the preview's
# state, unpickled without __init__, which a compiled class with a written __init__ refuses). .ci/run runs it after
# `make test`; the compiled modules are taken away again whatever the outcome.
COMPILED_TESTS = tests/scheduler/test_preview_state.py
compiled-check: $(DEV_STAMP)
	$(MAKE) clean-compiled
	mkdir -p var
	DEBUG=1 $(PY) -m scheduler.sim.bench.digest > var/digest-source.txt
	$(MAKE) compile > var/compile.log 2>&1 || { tail -n 40 var/compile.log; $(MAKE) clean-compiled; exit 1; }
	DEBUG=1 $(PY) -c 'from scheduler.engine import engine_label; print("engine:", engine_label())'
	DEBUG=1 $(PY) -m scheduler.sim.bench.digest > var/digest-compiled.txt; status=$$?; \
	if [ $$status -eq 0 ]; then $(VENV)/bin/pytest -p no:cacheprovider -q $(COMPILED_TESTS); status=$$?; fi; \
	$(MAKE) clean-compiled; if [ $$status -ne 0 ]; then exit $$status; fi
	diff var/digest-source.txt var/digest-compiled.txt && echo "the compiled engine plans as the source: $$(wc -l < var/digest-source.txt) digests equal"

clean-compiled:
	find scheduler/core -name '*.so' -delete
	rm -f microcosm_engine__mypyc.*.so scheduler/core/compiled_by.txt
	rm -rf build

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache .mypy_cache tests/oidc/node_modules
