#!/usr/bin/env bash
# Build the gateway client's wheel (pdroute-client: pdroute_client + pdroute_core, nothing else).
#
#   scripts/build-client.sh            # -> dist/pdroute_client-<version>-py3-none-any.whl
#   scripts/build-client.sh OUT_DIR
#
# Offline and without build isolation: setuptools comes from the current environment
# (PYTHON overrides the interpreter; default .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-dist}"
if [ -n "${PYTHON:-}" ]; then
  python="$PYTHON"
elif [ -x .venv/bin/python ]; then
  python=.venv/bin/python
else
  python=python3
fi
"$python" -m pip wheel --quiet --no-build-isolation --no-deps --no-index clients/python -w "$out"
rm -rf clients/python/build clients/python/*.egg-info
ls "$out"/pdroute_client-*.whl
