# Every target creates or reuses .venv and installs the package into it first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all lint bench bench-routing clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/handoff-builder demo

test: $(STAMP)
	$(BIN)/ruff check src tests samples evals
	$(BIN)/pyright
	$(BIN)/coverage run -m pytest
	$(BIN)/coverage report

# `make test` beside the servers .ci/run starts (a Temporal dev server of its own, and this
# machine's PostgreSQL), so that no test is skipped.
test-all: $(STAMP)
	$(BIN)/python .ci/with_servers.py $(MAKE) test

lint: $(STAMP)
	$(BIN)/ruff check src tests samples evals
	$(BIN)/ruff format --check src tests samples evals
	$(BIN)/pyright

bench:
	bash benchmarks/run.sh

# Routing accuracy on a real local model (docs/evals.md, "Measured on a local model"): needs the
# model server of ../shared/real-model (REAL_MODEL_VENV=... make bench-routing) and takes 30 to 90
# minutes on 2 shared cores; never part of `make test`.
ROUTING_OUT ?= $(or $(TMPDIR),/tmp)/bench-routing
bench-routing: $(STAMP)
	bash evals/bench_routing.sh $(ROUTING_OUT)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
