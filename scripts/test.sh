#!/usr/bin/env bash
# Set up everything and run the whole suite: ruff, mypy, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
scripts/system-deps.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest "$@"
