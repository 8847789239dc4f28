"""``bench.bench_proxy_overhead`` end to end on the echo engine: the proxy, the bare relay and
the direct calls all served, and the table printed (real processes on loopback)."""

from __future__ import annotations

import subprocess
import sys


def test_the_overhead_bench_measures_the_proxy_the_relay_and_direct_calls() -> None:
    cmd = [sys.executable, "-m", "bench.bench_proxy_overhead", "--engine", "echo"]
    cmd += ["--requests", "6", "--warmup", "1", "--max-tokens", "4", "--idle-s", "0.5"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "6 requests each way (direct, bare relay, proxy" in out
    rows = ("TTFT, proxy - direct", "TTFT, relay - direct", "TTFT, proxy - relay", "per token, proxy - relay")
    assert all(row in out for row in rows)
    assert "a bare relay adds" in out and "the bare relay's" in out
