#!/usr/bin/env bash
# Set up and start the service on the embedded default params at 127.0.0.1:8000.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh service
exec .venv/bin/pdroute serve --host "${PDROUTE_HOST:-127.0.0.1}" --port "${PDROUTE_PORT:-8000}" "$@"
