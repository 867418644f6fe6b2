# Every target creates or reuses .venv and installs the package into it first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

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

lint: $(STAMP)
	$(BIN)/ruff check src tests samples
	$(BIN)/ruff format --check src tests samples
	$(BIN)/pyright

bench:
	bash benchmarks/run.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
