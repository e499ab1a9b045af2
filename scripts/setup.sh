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
# llama.cpp is compiled for the instruction sets this CPU reports, except AMX: a native build
# (-march=native) on a CPU that reports AMX uses AMX tiles for batched matrix products, and where the
# kernel or hypervisor does not grant them the first multi-token decode dies with SIGSEGV. AVX-512
# (with VNNI/BF16/VBMI where present) evaluates prompts 1.3x (1.5B) to 1.5x (0.5B) faster than the
# AVX2 baseline on a Xeon with both (issue 14). The wheel is built once per machine into a cache keyed
# by the version and these flags, so a CPU with other instruction sets gets its own build.
LLAMA_VERSION=$(sed -n 's/^llama-cpp-python==//p' react_agent_local/requirements.txt)
CPU_FLAGS=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2 || true) "
cpu_has() { case "$CPU_FLAGS" in *" $1 "*) return 0 ;; esac; return 1; }
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
if cpu_has avx512f && cpu_has avx512cd && cpu_has avx512vl && cpu_has avx512dq && cpu_has avx512bw; then
  LLAMA_CMAKE_ARGS="$LLAMA_CMAKE_ARGS -DGGML_AVX512=ON"
  cpu_has avx512vbmi && LLAMA_CMAKE_ARGS="$LLAMA_CMAKE_ARGS -DGGML_AVX512_VBMI=ON"
  cpu_has avx512_vnni && LLAMA_CMAKE_ARGS="$LLAMA_CMAKE_ARGS -DGGML_AVX512_VNNI=ON"
  cpu_has avx512_bf16 && LLAMA_CMAKE_ARGS="$LLAMA_CMAKE_ARGS -DGGML_AVX512_BF16=ON"
fi
cpu_has avx_vnni && LLAMA_CMAKE_ARGS="$LLAMA_CMAKE_ARGS -DGGML_AVX_VNNI=ON"
case "$(uname -m)" in x86_64|amd64) ;; *) LLAMA_CMAKE_ARGS="" ;; esac
LLAMA_KEY=$(printf '%s %s' "$LLAMA_VERSION" "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)
LLAMA_WHEELS=${REACT_AGENT_WHEEL_DIR:-$HOME/.cache/react-agent-local/wheels}/llama-cpp-python-$LLAMA_KEY
REQ_HASH=$( (cat react_agent_local/requirements.txt react_agent_local/requirements-dev.txt; echo "$LLAMA_KEY") | sha256sum | cut -c1-16)
if [ "$(cat .venv/.req-hash 2>/dev/null)" != "$REQ_HASH" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  if ! ls "$LLAMA_WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    step "building llama-cpp-python $LLAMA_VERSION from source (once per machine: ~7 min on 2 cores)"
    mkdir -p "$LLAMA_WHEELS"
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" .venv/bin/python -m pip wheel --no-deps --no-cache-dir \
      --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_VERSION" -w "$LLAMA_WHEELS"
  fi
  step "installing Python packages"
  .venv/bin/python -m pip install --force-reinstall --no-deps "$LLAMA_WHEELS"/llama_cpp_python-*.whl
  .venv/bin/python -m pip install --progress-bar on -r react_agent_local/requirements-dev.txt
  # The package itself, editable: `import agent` and the `react-agent` command work from anywhere.
  .venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e react_agent_local
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
