#!/usr/bin/env bash
# Create (or reuse) .venv-bench with the peer frameworks and this package (-e .), then run
# bench_turn with handoff_builder, its floor and the peers; prints the Markdown tables on stdout
# (progress on stderr). Never run two benchmarks at once on a small shared machine.
#
#   bash benchmarks/run.sh                       # default budget: 360 s of sampling (~7 min)
#   BUDGET=120 SIZES=0,10,100,1000 bash benchmarks/run.sh --json /tmp/turn.json
#   PYTHON=python3.12 VENV=/tmp/venv bash benchmarks/run.sh
#
# Extra arguments are passed to bench_turn.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv-bench}
BUDGET=${BUDGET:-360}
SIZES=${SIZES:-0,100,1000}
ADAPTERS=${ADAPTERS:-baseline floor handoff_builder agent_framework openai_agents langgraph_swarm}
STAMP="$VENV/.bench-installed"

if [[ ! -f "$STAMP" || pyproject.toml -nt "$STAMP" ]]; then
  test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet \
    agent-framework-core==1.23.0 agent-framework-orchestrations openai-agents \
    langgraph langgraph-swarm langchain langchain-core langgraph-checkpoint-sqlite >&2
  "$VENV/bin/python" -m pip install --quiet -e . >&2
  touch "$STAMP"
fi

# shellcheck disable=SC2086  # ADAPTERS is a space-separated list on purpose
exec "$VENV/bin/python" benchmarks/bench_turn.py --adapters $ADAPTERS --sizes "$SIZES" --budget "$BUDGET" "$@"
