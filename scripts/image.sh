#!/usr/bin/env bash
# Build an image from the Dockerfile with buildah, run it as an operator would and check it
# (scripts/image_check.py), then remove everything it made. As root on Debian or Ubuntu (installs
# buildah, mmdebstrap and wrk with apt when missing).
#
#   scripts/image.sh [service]   the service: /readyz, /route, /metrics, a read-only mounted params
#                                file, a bad one, uid 10001 on a read-only root, the HEALTHCHECK, SIGTERM
#   scripts/image.sh profiler    the profiler on a CPU torch instead of the CUDA base: `pdroute profile
#                                --help`, then its entry point (profile and fit) on a tiny model
#
# With no registry to pull python:3.11-slim from, the base is built here: mmdebstrap makes a
# minimal Debian bookworm root with python3.11, which buildah commits as an image.
#   PDROUTE_PYTHON_IMAGE=python:3.11-slim-bookworm   use a registry base instead
#   PDROUTE_BASE_TAR=/var/cache/pdroute-base.tar      keep the local base's tar there, reuse it next time
#   PDROUTE_IMAGE_LOAD_S=10                           seconds of wrk load for the RSS figure (0: none)
#   PDROUTE_PYTORCH_IMAGE=pytorch/pytorch:...          profiler: a registry base with torch instead
#   PDROUTE_TORCH=torch==2.13.0                        profiler: the torch that pip downloads here (a
#                                                     CPU build where pip finds one; PyPI's is CUDA's)
# All images and containers live in a private buildah store under a scratch directory that is
# deleted at exit. Prints the figures (build time, size, start-up, RSS) on success; any failure
# is one line naming the step, after the tail of its log, and a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
log_tail=40
target="${1:-service}"

fail() {
  echo "image.sh: $*" >&2
  exit 1
}
case "$target" in service | profiler) ;; *) fail "unknown target '$target' (service or profiler)" ;; esac
[ "$(id -u)" = 0 ] || fail "needs root (buildah with chroot isolation, mount namespaces)"

need=()
command -v buildah >/dev/null 2>&1 || need+=(buildah)
[ -n "${PDROUTE_PYTHON_IMAGE:-}" ] || command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
[ "$target" != service ] || [ "${PDROUTE_IMAGE_LOAD_S:-10}" = 0 ] || command -v wrk >/dev/null 2>&1 || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || fail "needs ${need[*]} and has no apt-get to install them"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}") \
    >/dev/null 2>&1 || fail "apt-get could not install ${need[*]}"
fi
for tool in unshare nsenter chroot; do command -v "$tool" >/dev/null 2>&1 || fail "needs $tool (util-linux, coreutils)"; done
[ -x .venv/bin/python ] || scripts/setup.sh service >/dev/null || fail "scripts/setup.sh service failed"

work="$(mktemp -d "${TMPDIR:-/var/tmp}/pdroute-image.XXXXXX")"
# vfs: works on any file system, overlay-on-overlay (a CI container) included.
B=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
cleanup() {
  "${B[@]}" rm --all >/dev/null 2>&1 || true
  "${B[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# step NAME CMD...: run CMD with its output in the log; on failure, the log's tail and one line.
step() {
  local name="$1"
  shift
  echo "== $name: $*" >>"$work/log"
  if ! "$@" >>"$work/log" 2>&1; then
    tail -n "$log_tail" "$work/log" >&2
    fail "$name failed (the lines above are the end of its log)"
  fi
}

t0=$SECONDS
if [ -n "${PDROUTE_PYTHON_IMAGE:-}" ]; then
  base="$PDROUTE_PYTHON_IMAGE"
  pull=missing
else
  tar="${PDROUTE_BASE_TAR:-$work/base.tar}"
  if [ ! -s "$tar" ]; then
    step "the base root (mmdebstrap)" nice -n 10 mmdebstrap --variant=minbase --format=tar \
      --include=python3.11,python3.11-venv,ca-certificates bookworm "$tar.part"
    mv "$tar.part" "$tar"
  fi
  base=localhost/pdroute-python:3.11-bookworm
  ctr="$("${B[@]}" from scratch)"
  mnt="$("${B[@]}" mount "$ctr")"
  step "unpacking the base" tar -C "$mnt" -xf "$tar"
  step "configuring the base" "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr"
  step "committing the base" "${B[@]}" commit --rm --quiet "$ctr" "$base"
  pull=never
fi

# pip in the RUN steps trusts what this host trusts (a TLS-inspecting proxy's CA, say): the host's
# CA bundle and a pip.conf naming it are bind-mounted for the RUN steps only, never into the image.
trust=()
host_ca=/etc/ssl/certs/ca-certificates.crt
if [ -s "$host_ca" ]; then
  printf '[global]\ncert = %s\n' "$host_ca" >"$work/pip.conf"
  trust=(--volume "$host_ca:$host_ca:ro" --volume "$work/pip.conf:/etc/pip.conf:ro")
fi

python_base="$base"
if [ "$target" = profiler ] && [ -n "${PDROUTE_PYTORCH_IMAGE:-}" ]; then
  base="$PDROUTE_PYTORCH_IMAGE"
  pull=missing
elif [ "$target" = profiler ]; then
  # Stands in for the CUDA PyTorch base: the Python base with torch in a venv that is first on PATH.
  torch_base=localhost/pdroute-torch:cpu
  step "downloading torch" .venv/bin/python -m pip download --quiet --no-deps -d "$work/wheels" "${PDROUTE_TORCH:-torch==2.13.0}"
  ctr="$("${B[@]}" from --pull="$pull" "$base")"
  step "copying torch" "${B[@]}" copy "$ctr" "$work/wheels" /tmp/wheels
  step "installing torch" nice -n 10 "${B[@]}" run --isolation chroot "${trust[@]}" "$ctr" -- sh -c \
    'python3 -m venv /opt/torch && /opt/torch/bin/pip install --no-cache-dir /tmp/wheels/*.whl && rm -rf /tmp/wheels'
  step "configuring the torch base" "${B[@]}" config \
    --env PATH=/opt/torch/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  step "committing the torch base" "${B[@]}" commit --rm --quiet "$ctr" "$torch_base"
  base="$torch_base"
fi
t_base=$((SECONDS - t0))

image="localhost/pdroute-$target:check"
step "building the $target image" nice -n 10 "${B[@]}" build --isolation chroot --format docker \
  "${trust[@]}" --pull="$pull" --target "$target" --build-arg "PYTHON_IMAGE=$python_base" \
  --build-arg "PYTORCH_IMAGE=$base" -t "$image" -f Dockerfile "$repo"
t_build=$((SECONDS - t0 - t_base))
size="$("${B[@]}" images --format '{{.Size}}' "$image")"
base_size="$("${B[@]}" images --format '{{.Size}}' "$base")"

mkdir "$work/check"
if ! figures=$(.venv/bin/python -m scripts.image_check --target "$target" --image "$image" --work "$work/check" \
  --load-s "${PDROUTE_IMAGE_LOAD_S:-10}" -- "${B[@]}" 2>"$work/check.err"); then
  for f in "$work"/check/*.log; do [ -e "$f" ] && { echo "--- $(basename "$f")"; tail -n 15 "$f"; } >&2; done
  fail "$(tail -n 1 "$work/check.err")"
fi
echo "image.sh: $target ok: base ${t_base} s, build ${t_build} s, image $size (base $base_size), $figures"
