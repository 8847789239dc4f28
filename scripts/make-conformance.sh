#!/usr/bin/env bash
# Regenerate the conformance vectors from the served models (seconds, CPU only).
#
#   scripts/make-conformance.sh              # conformance/vectors-v1.json, in place
#   scripts/make-conformance.sh OUT.json     # elsewhere
#
# The file is the same byte for byte on every run (no clock, no randomness);
# tests/app/cli/test_conformance.py fails when the shipped file is not current.
# PDROUTE overrides the command (default: .venv/bin/pdroute, else pdroute on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-conformance/vectors-v1.json}"
if [ -n "${PDROUTE:-}" ]; then
  read -r -a pdroute <<< "$PDROUTE"
elif [ -x .venv/bin/pdroute ]; then
  pdroute=(.venv/bin/pdroute)
else
  pdroute=(pdroute)
fi
"${pdroute[@]}" conformance -o "$out"
