"""``/route`` throughput and latency against a bare ASGI app, plus in-process decisions/s.

    .venv/bin/python -m bench.bench_route [--seconds 5] [--connections 64] [--rounds 2]

Both servers run under the same uvicorn settings as ``pdroute serve`` (one worker, loopback,
its HTTP protocol with bounded request heads), one after the other,
alternating rounds, loaded by the same generator. Prints absolute figures and the ratio
pdroute/bare (target >= 0.5). Then times the cost model in-process: scalar ``route`` and
vectorised ``route_many`` (target >= 1,000,000 decisions/s vectorised).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import httpx
import numpy as np

from app.http_protocol import HTTP_PROTOCOL, MAX_HEAD_BYTES
from app.settings import embedded_params_path
from bench.loadgen import LoadResult, run_load
from solver.params import load_params
from solver.routing.design import AnalyticalCostModel

BODY = json.dumps({"prompt_len": 1024, "predicted_output_len": 200, "system_load": 8}).encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start(target: list[str], port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "uvicorn", *target, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--workers", "1", "--log-level", "warning", "--no-access-log"]
    # The HTTP protocol `pdroute serve` uses (bounded heads, request timeout), for both servers.
    cmd += ["--http", HTTP_PROTOCOL, "--h11-max-incomplete-event-size", str(MAX_HEAD_BYTES)]
    proc = subprocess.Popen(cmd, env={**os.environ, **env})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.post(f"http://127.0.0.1:{port}/route", content=BODY, timeout=1)
            return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"server {target} did not start")


def _measure(target: list[str], env: dict[str, str], connections: int, seconds: float) -> LoadResult:
    port = _free_port()
    proc = _start(target, port, env)
    try:
        run_load("127.0.0.1", port, "/route", BODY, connections, 1.0)  # warm-up
        return run_load("127.0.0.1", port, "/route", BODY, connections, seconds)
    finally:
        proc.terminate()
        proc.wait()


def _fmt(name: str, r: LoadResult) -> str:
    return (
        f"{name:<8} {r.rps:>9.0f} req/s  p50 {r.percentile_ms(50):6.2f} ms  p99 {r.percentile_ms(99):6.2f} ms"
        f"  ({r.requests} requests, {r.errors} errors)"
    )


def http_bench(params: str, connections: int, seconds: float, rounds: int) -> None:
    env = {"PDROUTE_PARAMS_PATH": params, "PDROUTE_WATCH_PARAMS": "false"}
    pd_target = ["--factory", "app.main:create_app_from_env"]
    bare_target = ["bench.bare_app:app"]
    bare: list[LoadResult] = []
    pd: list[LoadResult] = []
    for _ in range(rounds):
        bare.append(_measure(bare_target, env, connections, seconds))
        pd.append(_measure(pd_target, env, connections, seconds))
    print(f"HTTP POST /route, {connections} connections, {rounds} x {seconds:.0f} s per server, one worker")
    for i in range(rounds):
        print(_fmt("bare", bare[i]))
        print(_fmt("pdroute", pd[i]))
    bare_rps = sum(r.requests for r in bare) / sum(r.seconds for r in bare)
    pd_rps = sum(r.requests for r in pd) / sum(r.seconds for r in pd)
    print(f"throughput ratio pdroute/bare = {pd_rps / bare_rps:.2f}  (target >= 0.50)")


def inprocess_bench(params: str) -> None:
    model = AnalyticalCostModel(load_params(params))
    rng = np.random.default_rng(0)
    n = 1_000_000
    L = rng.integers(1, 8192, n)
    out = rng.integers(1, 1024, n)
    load = rng.integers(0, 64, n)
    dbs = rng.integers(0, 64, n)
    # Scalar: a Python loop over a slice.
    m = 100_000
    Ls, outs, loads, dbss = L[:m].tolist(), out[:m].tolist(), load[:m].tolist(), dbs[:m].tolist()
    start = time.perf_counter()
    for i in range(m):
        model.route(Ls[i], outs[i], loads[i], dbss[i])
    scalar = m / (time.perf_counter() - start)
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        model.route_many(L, out, load, dbs)
        best = max(best, n / (time.perf_counter() - start))
    print(f"in-process scalar route:     {scalar:>12,.0f} decisions/s")
    print(f"in-process route_many (1M):  {best:>12,.0f} decisions/s  (target >= 1,000,000)")
    print(f"vectorised/scalar ratio = {best / scalar:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--skip-http", action="store_true")
    ap.add_argument("--params", default=str(embedded_params_path()), help="params.json to serve")
    args = ap.parse_args()
    if not args.skip_http:
        http_bench(args.params, args.connections, args.seconds, args.rounds)
    inprocess_bench(args.params)


if __name__ == "__main__":
    main()
