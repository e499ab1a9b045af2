#!/usr/bin/env bash
# Run every test: the runtime (scripted policy), tools, backends, runner, course site, the browser
# tests in Chromium and the end-to-end tests with the real Qwen2.5-Coder-0.5B GGUF model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser --model qwen2.5-coder-0.5b-gguf
export REACT_AGENT_E2E_MODEL=${REACT_AGENT_E2E_MODEL:-${REACT_AGENT_MODEL_DIR:-$HOME/.cache/react-agent-local/models}/qwen2.5-coder-0.5b-gguf/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
mkdir -p test-output
status=0
( cd react_agent_local && ../.venv/bin/python -m pytest -q -p no:cacheprovider "$@" ) || status=$?
.venv/bin/python -m pytest -q -p no:cacheprovider algolab/tests "$@" || status=$?
exit $status
