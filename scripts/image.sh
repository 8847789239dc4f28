#!/usr/bin/env bash
# Build the service image from the Dockerfile with buildah, run it as an operator would and check
# it (scripts/image_check.py: /readyz, /route, /metrics, a read-only mounted params file, a bad
# one, uid 10001 on a read-only root, the HEALTHCHECK, SIGTERM), then remove everything it made.
#
#   scripts/image.sh             as root on Debian or Ubuntu (installs buildah and mmdebstrap with apt)
#
# With no registry to pull python:3.11-slim from, the base is built here: mmdebstrap makes a
# minimal Debian bookworm root with python3.11, which buildah commits as an image.
#   PDROUTE_PYTHON_IMAGE=python:3.11-slim-bookworm   use a registry base instead
#   PDROUTE_BASE_TAR=/var/cache/pdroute-base.tar      keep the local base's tar there, reuse it next time
#   PDROUTE_IMAGE_LOAD_S=10                           seconds of wrk load for the RSS figure (0: none)
# All images and containers live in a private buildah store under a scratch directory that is
# deleted at exit. Prints the figures (build time, size, start-up, RSS) on success; any failure
# is one line naming the step, after the tail of its log, and a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
log_tail=40

fail() {
  echo "image.sh: $*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || fail "needs root (buildah with chroot isolation, mount namespaces)"

need=()
command -v buildah >/dev/null 2>&1 || need+=(buildah)
[ -n "${PDROUTE_PYTHON_IMAGE:-}" ] || command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
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
    step "the base root (mmdebstrap)" nice -n 10 mmdebstrap --variant=minbase \
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
t_base=$((SECONDS - t0))

# pip in the RUN steps trusts what this host trusts (a TLS-inspecting proxy's CA, say): the host's
# CA bundle and a pip.conf naming it are bind-mounted for the RUN steps only, never into the image.
trust=()
host_ca=/etc/ssl/certs/ca-certificates.crt
if [ -s "$host_ca" ]; then
  printf '[global]\ncert = %s\n' "$host_ca" >"$work/pip.conf"
  trust=(--volume "$host_ca:$host_ca:ro" --volume "$work/pip.conf:/etc/pip.conf:ro")
fi
image=localhost/pdroute:check
step "building the service image" nice -n 10 "${B[@]}" build --isolation chroot --format docker \
  "${trust[@]}" --pull="$pull" --target service --build-arg "PYTHON_IMAGE=$base" -t "$image" -f Dockerfile "$repo"
t_build=$((SECONDS - t0 - t_base))
size=$("${B[@]}" images --json "$image" | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)[0]["size"])')
base_size=$("${B[@]}" images --json "$base" | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)[0]["size"])')

mkdir "$work/check"
if ! figures=$(.venv/bin/python -m scripts.image_check --image "$image" --work "$work/check" \
  --load-s "${PDROUTE_IMAGE_LOAD_S:-10}" -- "${B[@]}" 2>"$work/check.err"); then
  for f in "$work"/check/*.log; do [ -e "$f" ] && { echo "--- $(basename "$f")"; tail -n 15 "$f"; } >&2; done
  fail "$(tail -n 1 "$work/check.err")"
fi
mib() { .venv/bin/python -c "print(f'{$1 / 2**20:.0f}')"; }
echo "image.sh: ok: base ${t_base} s, build ${t_build} s, image $(mib "$size") MiB (base $(mib "$base_size") MiB), $figures"
