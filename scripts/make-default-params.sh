#!/usr/bin/env bash
# Regenerate the shipped parameter files from NVIDIA aiconfigurator's database (CPU only, seconds).
#
#   scripts/make-default-params.sh                       # all files, in place
#   scripts/make-default-params.sh --only default        # one of them
#   scripts/make-default-params.sh --out /tmp/x --no-plots   # elsewhere (same relative paths)
#
# For each NAME below it runs the three documented commands:
#   pdroute profile --source aiconfigurator ... -o solver/data/profiles/NAME.json
#   pdroute fit solver/data/profiles/NAME.json -o solver/data/params/NAME.json   (+ NAME.fit_report.json)
#   pdroute plot solver/data/params/NAME.json --profile ... -o docs/params/NAME/
# The database is deterministic and nothing records the wall clock, so with the same
# aiconfigurator version the profiles and params come out byte for byte the same
# (tests/profiling/sources/test_aiconfigurator.py checks this for default.json).
# PDROUTE overrides the command (default: .venv/bin/pdroute, else pdroute on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

out="."
only=""
plots=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --no-plots) plots=0; shift ;;
    *) echo "make-default-params.sh: unknown option '$1' (--out DIR, --only NAME, --no-plots)" >&2; exit 2 ;;
  esac
done
if [ -n "${PDROUTE:-}" ]; then
  read -r -a pdroute <<< "$PDROUTE"
elif [ -x .venv/bin/pdroute ]; then
  pdroute=(.venv/bin/pdroute)
else
  pdroute=(pdroute)
fi

# The design's grids carried to long context, with decode measured up to batch 256 (decode
# stays nearly flat well past the design's batch 32) and interference at decode batches up to
# 256 (around batch_thresh):
# - prompts doubling to 32,768 and Qwen3's full 40,960 positions (prefill turns superlinear);
# - decode contexts to 32,768 (the points whose KV cache does not fit the GPU are left out and
#   listed in the profile's provenance.omitted_points);
# - T_chunk_prefix over prefixes of 512 to 32,256 tokens for every chunk size (64..512): the
#   longest, 32,256 + 512, ends at 32,768 like the longest decode context, and 40,448 + 512
#   ends at the model's 40,960 positions like the longest prompt.
GRID=(
  --prompt-lens 64,128,256,512,1024,2048,4096,8192,16384,32768,40960
  --kv-lens 128,512,1024,2048,4096,8192,16384,32768
  --batch-sizes 1,4,8,16,32,64,128,256 --decode-batches 4,8,16,32,64,128,256
  --prefix-lens 512,2048,8192,16384,32256,40448
)

# NAME | profile arguments (the backend version is pinned so a newer database cannot drift in)
SHIPPED=(
  "default|--model Qwen/Qwen3-8B --system h100_sxm --backend vllm --backend-version 0.24.0 --transfer nvlink --tp 1"
  "qwen3-8b_h200_sxm_vllm_nvlink|--model Qwen/Qwen3-8B --system h200_sxm --backend vllm --backend-version 0.24.0 --transfer nvlink --tp 1"
  "qwen3-8b_h100_sxm_vllm_network|--model Qwen/Qwen3-8B --system h100_sxm --backend vllm --backend-version 0.24.0 --transfer network --tp 1"
  "qwen3-32b_h100_sxm_vllm_tp2_nvlink|--model Qwen/Qwen3-32B --system h100_sxm --backend vllm --backend-version 0.24.0 --transfer nvlink --tp 2"
)

found=0
for entry in "${SHIPPED[@]}"; do
  name="${entry%%|*}"
  read -r -a args <<< "${entry#*|}"
  if [ -n "$only" ] && [ "$only" != "$name" ]; then continue; fi
  found=1
  profile="$out/solver/data/profiles/$name.json"
  params="$out/solver/data/params/$name.json"
  mkdir -p "$(dirname "$profile")" "$(dirname "$params")"
  echo "== $name"
  "${pdroute[@]}" profile --source aiconfigurator "${args[@]}" "${GRID[@]}" -o "$profile"
  "${pdroute[@]}" fit "$profile" -o "$params"
  if [ "$plots" = 1 ]; then
    "${pdroute[@]}" plot "$params" --profile "$profile" -o "$out/docs/params/$name"
  fi
  if [ "$name" = default ]; then
    # kustomize reads only files inside its folder: the base keeps a copy of the default.
    mkdir -p "$out/deploy/kubernetes/base"
    cp "$params" "$out/deploy/kubernetes/base/params.json"
  fi
done
if [ "$found" = 0 ]; then
  echo "make-default-params.sh: no shipped file named '$only'" >&2
  exit 2
fi
