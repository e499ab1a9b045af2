#!/usr/bin/env bash
# Run every test: the runtime (scripted policy), tools, backends, runner, course site, the browser
# tests in Chromium and the real-model tier (Qwen2.5-Coder GGUF models through llama.cpp; the 1.5B
# must get the tasks right). See react_agent_local/tests/README.md for the tiers and their cost.
# The set-up is the only step that uses the network; the 490 MB download test (marked network)
# and the CUDA test (marked gpu) are deselected by react_agent_local/pytest.ini.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser --model qwen2.5-coder-0.5b-gguf --model qwen2.5-coder-1.5b-gguf
MODELS=${REACT_AGENT_MODEL_DIR:-$HOME/.cache/react-agent-local/models}
export REACT_AGENT_E2E_MODEL=${REACT_AGENT_E2E_MODEL:-$MODELS/qwen2.5-coder-1.5b-gguf/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
mkdir -p test-output
status=0
( cd react_agent_local && ../.venv/bin/python -m pytest -q -p no:cacheprovider "$@" ) || status=$?
.venv/bin/python -m pytest -q -p no:cacheprovider algolab/tests "$@" || status=$?
exit $status
