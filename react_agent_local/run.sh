#!/usr/bin/env sh
# Start the runner with an explicitly chosen Python:
#   PYTHON=/path/to/python ./run.sh [runner options]     or     ./run.sh /path/to/python [runner options]
# The runner reports (GET /status) the dependencies of exactly that interpreter.
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
  PYTHON="$1"
  shift
fi
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  echo "note: no Python given; using 'python3' from PATH (set PYTHON=/path/to/python or pass it first)" >&2
fi
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "error: Python interpreter '$PYTHON' not found; pass PYTHON=/path/to/python" >&2
  exit 2
fi
exec "$PYTHON" "$HERE/algolab_local_runner.py" "$@"
