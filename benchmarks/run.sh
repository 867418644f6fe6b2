#!/usr/bin/env bash
# Create (or reuse) .venv-bench with the peer frameworks and this package (-e .), then run the
# benchmarks; prints the Markdown tables on stdout (progress on stderr). The benchmarks always run
# one after the other: never run two at once on a small shared machine.
#
#   bash benchmarks/run.sh                       # bench_turn only (default budget 360 s, ~7 min)
#   bash benchmarks/run.sh all                   # bench_turn, bench_checkpoint, bench_memory, bench_import, bench_tracing (~21 min)
#   bash benchmarks/run.sh checkpoint --budget 60   # one benchmark: turn | checkpoint | memory | import | tracing
#   BUDGET=120 SIZES=0,10,100,1000 bash benchmarks/run.sh --json /tmp/turn.json
#   PYTHON=python3.12 VENV=/tmp/venv bash benchmarks/run.sh
#   .venv/bin/python benchmarks/bench_hosted.py --seconds 5 --rounds 2   # ConversationHost: SQLite vs PostgreSQL (needs a server; not run here)
#
# Without a benchmark name, or with `turn`, extra arguments go to bench_turn.py; after
# `checkpoint`, `memory`, `import` or `tracing` they go to that script. `all` takes no extra arguments; its
# settings come from the environment:
#   BUDGET, SIZES, ADAPTERS               bench_turn       (360, 0,100,1000, ours + floor + peers)
#   CKPT_BUDGET, CKPT_SIZES, CKPT_ROUNDS  bench_checkpoint (150, 0,100,1000, 3 rounds at least)
#   MEM_ADAPTERS                          bench_memory     (bench_turn's adapters and handoff_builder_hosted)
#   IMPORT_ROUNDS                         bench_import     (9)
#   TRACE_ROUNDS                          bench_tracing    (7)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv-bench}
BUDGET=${BUDGET:-360}
SIZES=${SIZES:-0,100,1000}
ADAPTERS=${ADAPTERS:-baseline floor handoff_builder agent_framework openai_agents langgraph_swarm}
CKPT_BUDGET=${CKPT_BUDGET:-150}
CKPT_SIZES=${CKPT_SIZES:-0,100,1000}
CKPT_ROUNDS=${CKPT_ROUNDS:-3}
MEM_ADAPTERS=${MEM_ADAPTERS:-$ADAPTERS handoff_builder_hosted}
IMPORT_ROUNDS=${IMPORT_ROUNDS:-9}
TRACE_ROUNDS=${TRACE_ROUNDS:-7}
STAMP="$VENV/.bench-installed"

if [[ ! -f "$STAMP" || pyproject.toml -nt "$STAMP" ]]; then
  test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet \
    agent-framework-core==1.23.0 agent-framework-orchestrations openai-agents \
    langgraph langgraph-swarm langchain langchain-core langgraph-checkpoint-sqlite opentelemetry-sdk >&2
  "$VENV/bin/python" -m pip install --quiet -e . >&2
  touch "$STAMP"
fi
PY="$VENV/bin/python"

# shellcheck disable=SC2086  # ADAPTERS / MEM_ADAPTERS are space-separated lists on purpose
run_turn() { "$PY" benchmarks/bench_turn.py --adapters $ADAPTERS --sizes "$SIZES" --budget "$BUDGET" "$@"; }
run_checkpoint() {
  "$PY" benchmarks/bench_checkpoint.py --sizes "$CKPT_SIZES" --budget "$CKPT_BUDGET" --min-rounds "$CKPT_ROUNDS" "$@"
}
# shellcheck disable=SC2086
run_memory() { "$PY" benchmarks/bench_memory.py --adapters $MEM_ADAPTERS "$@"; }
run_import() { "$PY" benchmarks/bench_import.py --rounds "$IMPORT_ROUNDS" "$@"; }
run_tracing() { "$PY" benchmarks/bench_tracing.py --rounds "$TRACE_ROUNDS" "$@"; }

case "${1:-}" in
  all)
    shift
    if [[ $# -gt 0 ]]; then
      echo "run.sh all takes no extra arguments (use the environment variables above)" >&2
      exit 2
    fi
    for bench in turn checkpoint memory import tracing; do
      echo "== bench_$bench ($(date +%H:%M:%S))" >&2
      echo "## bench_$bench"
      echo
      "run_$bench"
      echo
    done
    ;;
  turn | checkpoint | memory | import | tracing)
    bench=$1
    shift
    "run_$bench" "$@"
    ;;
  *)
    run_turn "$@"
    ;;
esac
