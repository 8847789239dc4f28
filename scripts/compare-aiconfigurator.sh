#!/usr/bin/env bash
# pdroute's fleet plan next to NVIDIA aiconfigurator's aggregated-vs-disaggregated pick for the
# same workload, for the shipped model/GPU pairs (CPU only; about 20 s per case on 2 cores).
#
#   scripts/compare-aiconfigurator.sh                   # 16 GPUs, ISL/OSL 1024/200 and 4096/256
#   scripts/compare-aiconfigurator.sh --gpus 8 --workloads "2048/128"
#   scripts/compare-aiconfigurator.sh --keep DIR        # keep aiconfigurator's saved results
#
# For every case it runs, and prints one table row from:
#   pdroute plan --profile NAME --machines GPUS/TP --prompt-len ISL --output-len OSL --verify \
#       --allow-extrapolation   (the workloads reach past the profiles' 2,048-token grids)
#   aiconfigurator cli default --model M --system S --backend vllm --backend-version 0.24.0 \
#       --total-gpus GPUS --isl ISL --osl OSL --ttft 1000 --tpot 50 --save-dir DIR
#   aiconfigurator cli exp --yaml-path DIR/same.yaml   (the same, with aiconfigurator held to
#       pdroute's machine, TP, and to pdroute's model: no latency corrections, no rate-matching
#       degradation in disaggregated serving)
# TTFT <= 1000 ms and TPOT <= 50 ms are the limits `pdroute plan --verify` simulates against.
# Rates are requests/s of the whole fleet. docs/planning.md explains every column.
# PDROUTE and AICONFIGURATOR override the commands.
set -euo pipefail
cd "$(dirname "$0")/.."

gpus=16
workloads="1024/200 4096/256"
keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) gpus="$2"; shift 2 ;;
    --workloads) workloads="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    *) echo "compare-aiconfigurator.sh: unknown option '$1' (--gpus N, --workloads \"ISL/OSL ...\", --keep DIR)" >&2; exit 2 ;;
  esac
done
case "$gpus" in '' | *[!0-9]*) gpus_ok=0 ;; *) gpus_ok=$((gpus >= 4 && gpus % 2 == 0 && gpus <= 1024)) ;; esac
if [ "$gpus_ok" != 1 ]; then
  # Qwen3-32B runs on TP2 machines and a plan needs two of them.
  echo "compare-aiconfigurator.sh: --gpus must be an even integer in 4..1024, got '$gpus'" >&2
  exit 2
fi

for wl in $workloads; do
  case "$wl" in
    [1-9]*/[1-9]*) case "$wl" in *[!0-9/]* | */*/*) bad=1 ;; *) bad=0 ;; esac ;;
    *) bad=1 ;;
  esac
  if [ "$bad" = 1 ]; then
    echo "compare-aiconfigurator.sh: workload '$wl' is not ISL/OSL (positive integers, e.g. 1024/200)" >&2
    exit 2
  fi
done

if [ -n "${AICONFIGURATOR:-}" ]; then
  read -r -a aic <<< "$AICONFIGURATOR"
elif [ -x .venv/bin/aiconfigurator ]; then
  aic=(.venv/bin/aiconfigurator)
else
  aic=(aiconfigurator)
fi
if ! command -v "${aic[0]}" > /dev/null 2>&1; then
  echo "compare-aiconfigurator.sh: aiconfigurator is not installed (pip install 'pdroute[aiconfigurator]'); nothing to compare"
  exit 0
fi
if [ -n "${PDROUTE:-}" ]; then
  read -r -a pdroute <<< "$PDROUTE"
elif [ -x .venv/bin/pdroute ]; then
  pdroute=(.venv/bin/pdroute)
else
  pdroute=(pdroute)
fi

if [ -n "$keep" ]; then
  work="$keep"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi

# shipped profile | model | system | tensor-parallel size of one pdroute machine
PAIRS=(
  "default|Qwen/Qwen3-8B|h100_sxm|1"
  "qwen3-8b_h200_sxm_vllm_nvlink|Qwen/Qwen3-8B|h200_sxm|1"
  "qwen3-32b_h100_sxm_vllm_tp2_nvlink|Qwen/Qwen3-32B|h100_sxm|2"
)
SLO=(--ttft 1000 --tpot 50)

# Field NAME of the first data row (the best) of aiconfigurator's best_config_topn.csv.
csv_field() {
  awk -F, -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
                        NR == 2 { if (c) print $c; else print "?"; exit }' "$1"
}
# The best row of aiconfigurator's saved MODE results under DIR, as "fleet rate (shape)", or
# "none" when no configuration met the SLO. request_rate and num_total_gpus in the CSV are per
# replica (one aggregated worker, or one xPyD group): the fleet runs GPUS / num_total_gpus of them.
best_row() {
  local dir="$1" mode="$2" f per reps
  f="$(find "$dir" -path "*/$mode/best_config_topn.csv" | head -n 1)"
  if [ -z "$f" ] || [ "$(wc -l < "$f")" -lt 2 ]; then echo "none"; return; fi
  per="$(csv_field "$f" num_total_gpus)"
  reps=$((gpus / per))
  if [ "${mode#agg}" != "$mode" ]; then
    awk -v r="$(csv_field "$f" request_rate)" -v n="$reps" -v tp="$(csv_field "$f" tp)" -v bs="$(csv_field "$f" bs)" \
      'BEGIN { printf "%.1f (%d x tp%s, bs %s)", r * n, n, tp, bs }'
  else
    awk -v r="$(csv_field "$f" request_rate)" -v n="$reps" \
      -v pw="$(csv_field "$f" '(p)workers')" -v ptp="$(csv_field "$f" '(p)tp')" \
      -v dw="$(csv_field "$f" '(d)workers')" -v dtp="$(csv_field "$f" '(d)tp')" -v bs="$(csv_field "$f" '(d)bs')" \
      'BEGIN { printf "%.1f (%d x (%sP tp%s + %sD tp%s), decode bs %s)", r * n, n, pw, ptp, dw, dtp, bs }'
  fi
}
# One experiment of the like-for-like YAML.
same_yaml() {
  local model="$1" system="$2" tp="$3" isl="$4" osl="$5"
  local common="  total_gpus: $gpus
  isl: $isl
  osl: $osl
  ttft: 1000.0
  tpot: 50.0"
  cat << EOF
agg_same:
  serving_mode: agg
$common
  model_path: $model
  system_name: $system
  backend_name: vllm
  backend_version: 0.24.0
  agg_num_gpu_candidates: [$tp]
  agg_tp_candidates: [$tp]
  agg_pp_candidates: [1]
  agg_dp_candidates: [1]
disagg_same:
  serving_mode: disagg
$common
  prefill_model_path: $model
  prefill_system_name: $system
  prefill_backend_name: vllm
  prefill_backend_version: 0.24.0
  prefill_num_gpu_candidates: [$tp]
  prefill_tp_candidates: [$tp]
  prefill_pp_candidates: [1]
  prefill_dp_candidates: [1]
  decode_model_path: $model
  decode_system_name: $system
  decode_backend_name: vllm
  decode_backend_version: 0.24.0
  decode_num_gpu_candidates: [$tp]
  decode_tp_candidates: [$tp]
  decode_pp_candidates: [1]
  decode_dp_candidates: [1]
  prefill_latency_correction: 1.0
  decode_latency_correction: 1.0
  rate_match_prefill_degradation: 1.0
  rate_match_decode_degradation: 1.0
EOF
}

echo "GPUs $gpus; SLO TTFT <= 1000 ms, TPOT <= 50 ms; rates in req/s of the whole fleet"
echo "| pair | ISL/OSL | pdroute co-located | pdroute best split (reference optimum) | pdroute recommends | simulator capacity | aic agg | aic disagg | aic picks | aic same machine, no derating: agg / disagg |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for pair in "${PAIRS[@]}"; do
  IFS='|' read -r profile model system tp <<< "$pair"
  machines=$((gpus / tp))
  for wl in $workloads; do
    isl="${wl%/*}"
    osl="${wl#*/}"
    tag="$(basename "$model")_${system}_${isl}_${osl}"
    plan="$("${pdroute[@]}" plan --profile "$profile" --machines "$machines" --prompt-len "$isl" --output-len "$osl" --verify --allow-extrapolation 2>&1)" || {
      echo "compare-aiconfigurator.sh: pdroute plan failed for $tag: $(printf '%s\n' "$plan" | tail -n 1)" >&2
      exit 1
    }
    co="$(printf '%s\n' "$plan" | awk '$1 == "co-located" { print $NF; exit }')"
    split="$(printf '%s\n' "$plan" | awk '$1 == "reference" { printf "%s (%sP + %sD)", $NF, $3, $2; exit }')"
    rec="$(printf '%s\n' "$plan" | sed -n 's/^recommendation: \([^:;,]*\).*/\1/p' | head -n 1)"
    cap="$(printf '%s\n' "$plan" | sed -n 's/^verify: capacity at 1.5x the plan.s rate \([0-9.]*\) req\/s.*/\1/p')"
    if ! "${aic[@]}" cli default --model "$model" --system "$system" --backend vllm --backend-version 0.24.0 \
      --total-gpus "$gpus" --isl "$isl" --osl "$osl" "${SLO[@]}" --no-color \
      --save-dir "$work/$tag/default" > "$work/$tag.default.log" 2>&1; then
      echo "compare-aiconfigurator.sh: aiconfigurator cli default failed for $tag: $(tail -n 1 "$work/$tag.default.log")" >&2
      exit 1
    fi
    best="$(sed -n 's/.*Best Experiment Chosen: \([a-z]*\) at .*(\(agg\|disagg\) \([0-9.]*x\) better.*/\1, \3/p' "$work/$tag.default.log" | head -n 1)"
    same_yaml "$model" "$system" "$tp" "$isl" "$osl" > "$work/$tag.same.yaml"
    if ! "${aic[@]}" cli exp --yaml-path "$work/$tag.same.yaml" --no-color \
      --save-dir "$work/$tag/same" > "$work/$tag.same.log" 2>&1; then
      echo "compare-aiconfigurator.sh: aiconfigurator cli exp failed for $tag: $(tail -n 1 "$work/$tag.same.log")" >&2
      exit 1
    fi
    echo "| $(basename "$model") $system ($machines x tp$tp) | $isl/$osl | $co | $split | $rec | ${cap:-?} |" \
      "$(best_row "$work/$tag/default" agg) | $(best_row "$work/$tag/default" disagg) | ${best:-?} |" \
      "$(best_row "$work/$tag/same" agg_same) / $(best_row "$work/$tag/same" disagg_same) |"
  done
done
