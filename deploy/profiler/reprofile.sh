#!/bin/sh
# Profile this machine's GPUs, fit params.json, and publish it when asked: the profiler
# image's entry point (Dockerfile target `profiler`) and the reprofile Job's command.
#
#   PDROUTE_OUT_DIR            where the outputs go (default /work)
#   PDROUTE_PROFILE_ARGS       arguments of `pdroute profile` (default: qwen3-8b, GPUs 0 and 1,
#                              so the direct P2P path is the one measured)
#   PDROUTE_PROFILE_FILE       the profile's file name under PDROUTE_OUT_DIR (default profile_data.pt;
#                              use profile.json with --source aiconfigurator)
#   PDROUTE_FIT_ARGS           extra arguments of `pdroute fit`
#   PDROUTE_PUBLISH_CONFIGMAP  publish params.json into this ConfigMap (in a cluster); unset: only
#                              write the file
#   PDROUTE_PUBLISH_ARGS       extra arguments of publish_params.py (e.g. --key, --namespace)
set -eu
out="${PDROUTE_OUT_DIR:-/work}"
profile="$out/${PDROUTE_PROFILE_FILE:-profile_data.pt}"
mkdir -p "$out"

# The argument lists are split into words on purpose.
# shellcheck disable=SC2086
pdroute profile ${PDROUTE_PROFILE_ARGS:---model qwen3-8b --src-gpu 0 --dst-gpu 1} -o "$profile"
# shellcheck disable=SC2086
pdroute fit "$profile" -o "$out/params.json" ${PDROUTE_FIT_ARGS:-}

if [ -n "${PDROUTE_PUBLISH_CONFIGMAP:-}" ]; then
  # shellcheck disable=SC2086
  exec python "$(dirname "$0")/publish_params.py" "$out/params.json" \
    --configmap "$PDROUTE_PUBLISH_CONFIGMAP" ${PDROUTE_PUBLISH_ARGS:-}
fi
echo "reprofile: wrote $out/params.json (set PDROUTE_PUBLISH_CONFIGMAP to publish it)"
