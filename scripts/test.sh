#!/usr/bin/env bash
# Set up everything and run the whole suite: ruff, mypy, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/setup.sh test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest "$@"
