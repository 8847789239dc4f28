#!/usr/bin/env bash
# Refresh the image's hash locks from pyproject.toml (run after changing a dependency):
#   requirements/service.txt  the service's dependencies ([project] dependencies), every platform
#   requirements/build.txt    what builds pdroute's wheel ([build-system] requires)
# uv (pinned below) resolves them into a throwaway virtualenv's copy; it needs PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9
PY="${PYTHON:-python3}"
tools="$(mktemp -d)"
trap 'rm -rf "$tools"' EXIT
"$PY" -m venv "$tools/venv"
"$tools/venv/bin/python" -m pip install --quiet "uv==$UV_VERSION"
uv=("$tools/venv/bin/uv" pip compile --quiet --generate-hashes --universal --python-version 3.11
    --custom-compile-command scripts/lock.sh)
"${uv[@]}" pyproject.toml -o requirements/service.txt
"$tools/venv/bin/python" -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires']))" \
  | "${uv[@]}" - -o requirements/build.txt
echo "lock.sh: wrote requirements/service.txt and requirements/build.txt" >&2
