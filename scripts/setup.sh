#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine (idempotent; fast when already done):
#   - a virtual environment .venv with the runtime, the model backends and the test tools
#   - Debian's Chromium for the browser tests (only with --browser; needs root or sudo)
#   - a local Qwen2.5 GGUF model, verified by SHA-256 (only with --model PRESET)
# Models are cached outside the checkout: ${REACT_AGENT_MODEL_DIR:-~/.cache/react-agent-local/models}.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PYTHON=${PYTHON:-python3}
BROWSER=0
MODELS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --browser) BROWSER=1 ;;
    --model) MODELS+=("$2"); shift ;;
    *) echo "setup.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

step() { printf '\n==> %s\n' "$*"; }

if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $($PYTHON --version 2>&1)"
  "$PYTHON" -m venv .venv
fi
REQ_HASH=$(cat react_agent_local/requirements.txt react_agent_local/requirements-dev.txt | sha256sum | cut -c1-16)
if [ "$(cat .venv/.req-hash 2>/dev/null)" != "$REQ_HASH" ]; then
  step "installing Python packages (llama-cpp-python compiles from source the first time: ~7 min on 2 cores)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --progress-bar on -r react_agent_local/requirements-dev.txt
  echo "$REQ_HASH" > .venv/.req-hash
else
  step "Python packages are up to date"
fi

if [ "$BROWSER" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  step "installing Debian's Chromium for the browser tests"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium fonts-noto-cjk
fi

for preset in "${MODELS[@]}"; do
  step "model $preset"
  .venv/bin/python react_agent_local/download_model.py --preset "$preset"
done
