# Every target creates or reuses .venv and installs the package into it first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/handoff-builder demo

test: $(STAMP)
	$(BIN)/ruff check src tests samples
	$(BIN)/pyright
	$(BIN)/coverage run -m pytest
	$(BIN)/coverage report

# `make test` beside the servers .ci/run starts (a Temporal dev server of its own, and this
# machine's PostgreSQL), so that no test is skipped.
test-all: $(STAMP)
	$(BIN)/python .ci/with_servers.py $(MAKE) test

lint: $(STAMP)
	$(BIN)/ruff check src tests samples
	$(BIN)/ruff format --check src tests samples
	$(BIN)/pyright

bench:
	bash benchmarks/run.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
