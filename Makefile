# Conveyor developer entry points. README: `make demo` to see it run, `make check` to test it all.
VENV := .venv
PY   := $(VENV)/bin/python

.PHONY: setup demo test lint check bench
.NOTPARALLEL:

setup:            ## install redis-server, chromium and the .venv (idempotent)
	bash scripts/setup.sh

demo: setup       ## run the built-in demo on the embedded default backend
	$(VENV)/bin/conveyor demo

test: setup       ## full test suite (pytest's exit code, incl. 5 = no tests, is propagated)
	$(PY) -m pytest -q

lint: setup       ## style (ruff check incl. complexity C90, ruff format --check) and strict typing
	$(VENV)/bin/ruff check src tests examples bench
	$(VENV)/bin/ruff format --check src tests examples bench
	$(VENV)/bin/mypy --strict src/

check: lint test  ## THE test command: setup, ruff, mypy --strict, pytest

bench: setup      ## side-by-side benchmarks against the peers (bench/README.md); ARGS=--quick etc.
	bash bench/run.sh $(ARGS)
