#!/usr/bin/env bash
# System tools some tests and benchmarks use (promtool and prometheus for the monitoring tests,
# wrk for bench/bench_route.py). Installed with apt when running as root; elsewhere those tests
# skip and say which tool is missing.
set -uo pipefail
need=()
# Debian's prometheus package carries both promtool (rule checks) and prometheus (the e2e test).
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || need+=(prometheus)
# wrk: the C load generator of the /route benchmark.
command -v wrk >/dev/null 2>&1 || need+=(wrk)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${need[*]} with apt-get" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}") >/dev/null \
    || echo "system-deps: could not install ${need[*]}; the tests that need them will skip" >&2
else
  echo "system-deps: ${need[*]} not installed (needs root and apt); the tests that need them will skip" >&2
fi
exit 0
