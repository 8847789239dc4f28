"""``/route`` under ``wrk`` against a bare ASGI app, per decision model, plus in-process decisions/s.

    .venv/bin/python -m bench.bench_route [--seconds 5] [--connections 64] [--rounds 2] [--autofill]

Needs ``wrk`` (``scripts/system-deps.sh`` installs Debian's). Both servers run under the same
uvicorn settings as ``pdroute serve`` (one worker, loopback, its HTTP protocol with bounded
request heads), one after the other, alternating rounds. ``wrk`` is written in C with one
thread: a Python load generator sharing the cores with the server flatters the slower server.
For each model (``design`` on the embedded params, ``queue-aware`` on params fitted from the
embedded profile unless ``--qa-params`` is given) it prints req/s and p50/p99 at
``--connections`` connections and at one, and the ratio pdroute/bare (bar: 0.35 for both
models; p99 at one connection <= 0.5 ms). Then the vectorised ``decide_many`` of both models
in-process, on 1M requests and on a ``/route/batch`` at its cap of 4,096 (no bar: a figure).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from starlette.types import ASGIApp

from app.http.protocol import HTTP_PROTOCOL, MAX_HEAD_BYTES
from app.settings import embedded_params_path
from pdroute_core.routing import RouteColumns, build_model
from solver.params import load_params

DESIGN_BODY: dict[str, object] = {"prompt_len": 1024, "predicted_output_len": 200, "system_load": 8}
# What a gateway that reports its queues sends to the queue-aware model.
QA_BODY: dict[str, object] = {
    **DESIGN_BODY,
    "decode_batch_size": 12,
    "prefill_queue_requests": 3,
    "prefill_queue_tokens": 6000,
    "prefill_pool_gpus": 2,
    "pending_prefill_tokens": 512,
    "colloc_context_tokens": 20000,
    "decode_context_tokens": 30000,
    "ttft_slo_ms": 1000.0,
    "tpot_slo_ms": 50.0,
}
BARS = {"design": 0.35, "queue-aware": 0.35}
P99_BAR_MS = 0.5
BATCH_CAP = 4096  # the service's default PDROUTE_MAX_BATCH_REQUESTS
_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


@dataclass(frozen=True)
class WrkResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int  # non-2xx answers and socket errors
    cpu_us_per_request: float = 0.0  # the server process's CPU time (user + system) per request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _grab(pattern: str, output: str) -> str:
    """The first group of ``pattern`` in wrk's output (multi-line); a clear error if absent."""
    found = re.search(pattern, output, re.M)
    if found is None:
        raise RuntimeError(f"wrk printed no match for {pattern!r}:\n{output}")
    return found[1]


def _ms(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(us|ms|s)", text)
    if match is None:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(match[1]) * _UNITS_MS[match[2]]


def parse_wrk(output: str) -> WrkResult:
    """req/s, p50/p99 (ms) and counts from ``wrk --latency`` output."""
    rps = float(_grab(r"Requests/sec:\s+([0-9.]+)", output))
    p50 = _ms(_grab(r"^\s+50%\s+(\S+)", output))
    p99 = _ms(_grab(r"^\s+99%\s+(\S+)", output))
    requests = int(_grab(r"(\d+) requests in", output))
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", output))
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    if socket_errors is not None:
        errors += sum(int(n) for n in socket_errors.groups())
    return WrkResult(rps, p50, p99, requests, errors)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(pid: int, port: int, script: Path, connections: int, seconds: float) -> WrkResult:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency", "-s", str(script)]
    cpu = _cpu_seconds(pid)
    out = subprocess.run([*cmd, f"http://127.0.0.1:{port}/route"], capture_output=True, text=True, check=True)
    result = parse_wrk(out.stdout)
    cpu_us = (_cpu_seconds(pid) - cpu) * 1e6 / max(result.requests, 1)
    return dataclasses.replace(result, cpu_us_per_request=cpu_us)


def start_server(target: list[str], port: int, env: dict[str, str], body: bytes) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "uvicorn", *target, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--workers", "1", "--log-level", "warning", "--no-access-log"]
    # The HTTP protocol `pdroute serve` uses (bounded heads, request timeout), for both servers.
    cmd += ["--http", HTTP_PROTOCOL, "--h11-max-incomplete-event-size", str(MAX_HEAD_BYTES)]
    proc = subprocess.Popen(cmd, env={**os.environ, **env})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"POST /route HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"server {target} did not start (or did not answer 200)")


def measure(
    target: list[str], env: dict[str, str], body: bytes, script: Path, connections: int, seconds: float
) -> tuple[WrkResult, WrkResult]:
    """(many connections, one connection) against one server process."""
    port = free_port()
    proc = start_server(target, port, env, body)
    try:
        run_wrk(proc.pid, port, script, connections, 1.0)  # warm-up
        return (
            run_wrk(proc.pid, port, script, connections, seconds),
            run_wrk(proc.pid, port, script, 1, seconds),
        )
    finally:
        proc.terminate()
        proc.wait()


def fmt_result(name: str, r: WrkResult) -> str:
    return (
        f"  {name:<8} {r.rps:>9.0f} req/s  p50 {r.p50_ms:6.3f} ms  p99 {r.p99_ms:6.3f} ms"
        f"  server CPU {r.cpu_us_per_request:5.1f} us/request  ({r.requests} requests, {r.errors} errors)"
    )


def http_bench(
    model: str, params: str, body: dict[str, object], connections: int, seconds: float, rounds: int
) -> bool:
    """Print one model's figures; True when its bars are met."""
    raw = json.dumps(body).encode()
    env = {"PDROUTE_PARAMS_PATH": params, "PDROUTE_WATCH_PARAMS": "false", "PDROUTE_DECISION_MODEL": model}
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(f'wrk.method = "POST"\nwrk.body = {json.dumps(raw.decode())}\n')
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
        script = Path(f.name)
    bare: list[tuple[WrkResult, WrkResult]] = []
    pd: list[tuple[WrkResult, WrkResult]] = []
    try:
        for _ in range(rounds):
            bare.append(measure(["bench.bare_app:app"], env, raw, script, connections, seconds))
            pd.append(
                measure(["--factory", "app.main:create_app_from_env"], env, raw, script, connections, seconds)
            )
    finally:
        script.unlink()
    print(f"POST /route, model {model}: wrk -t1, {rounds} x {seconds:g} s per server and load, one worker")
    for i in range(rounds):
        print(f" round {i + 1}, {connections} connections")
        print(fmt_result("bare", bare[i][0]))
        print(fmt_result("pdroute", pd[i][0]))
        print(f" round {i + 1}, 1 connection")
        print(fmt_result("bare", bare[i][1]))
        print(fmt_result("pdroute", pd[i][1]))
    bare_rps = sum(r.requests for r, _ in bare)
    pd_rps = sum(r.requests for r, _ in pd)  # equal durations: the request counts give the ratio
    ratio = pd_rps / bare_rps
    p99_one = max(one.p99_ms for _, one in pd)
    errors = sum(r.errors + one.errors for r, one in pd)
    ok = ratio >= BARS[model] and p99_one <= P99_BAR_MS and errors == 0
    rounds_ratios = sorted(p.requests / b.requests for (b, _), (p, _) in zip(bare, pd, strict=True))
    cpu_ratio = sum(b.cpu_us_per_request for b, _ in bare) / sum(p.cpu_us_per_request for p, _ in pd)
    print(
        f" per-round ratios {', '.join(f'{r:.2f}' for r in rounds_ratios)}; server CPU per request "
        f"bare/pdroute = {cpu_ratio:.2f} (what the ratio would be with the server alone on a core)"
    )
    print(
        f" ratio pdroute/bare = {ratio:.2f} (bar >= {BARS[model]:.2f}); worst p99 at 1 connection "
        f"{p99_one:.3f} ms (bar <= {P99_BAR_MS}); {errors} errors -> {'met' if ok else 'NOT met'}"
    )
    return ok


def inprocess_bench(model_name: str, params: str, n: int = 1_000_000) -> float:
    """Vectorised decisions/s of one model on ``n`` random requests (best of three)."""
    model = build_model(model_name, load_params(params))
    rng = np.random.default_rng(0)
    columns = RouteColumns.design_only(
        rng.integers(1, 8192, n), rng.integers(1, 1024, n), rng.integers(0, 64, n), rng.integers(0, 64, n)
    )
    if model_name == "queue-aware":  # with every input a gateway can report
        opt = columns.optional
        for name in ("prefill_queue_requests", "prefill_running_requests"):
            opt[name][:] = rng.integers(0, 16, n)
        opt["prefill_pool_gpus"][:] = rng.integers(1, 8, n)
        for name in ("prefill_queue_tokens", "pending_prefill_tokens", "decode_pending_prefill_tokens"):
            opt[name][:] = rng.integers(0, 16_384, n)
        for name in ("colloc_context_tokens", "decode_context_tokens"):
            opt[name][:] = rng.integers(0, 200_000, n)
        opt["cached_prompt_tokens"][:] = rng.integers(0, 512, n)
        opt["ttft_slo_ms"][:] = 1000.0
        opt["tpot_slo_ms"][:] = 50.0
    best = 0.0
    for _ in range(3 if n >= 100_000 else 50):
        start = time.perf_counter()
        model.decide_many(columns)
        best = max(best, n / (time.perf_counter() - start))
    print(
        f"in-process decide_many, {model_name:<11} ({n:,}): {best:>14,.0f} decisions/s"
        f"  ({n / best * 1e3:.3f} ms a call)"
    )
    return best


def asgi_us(app: ASGIApp, body: bytes, n: int = 20_000) -> float:
    """Microseconds per ``POST /route`` through ``app`` called directly (no server, no socket;
    best of three): the app's own work with hot caches."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/route", "headers": headers}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        return None

    async def run() -> float:
        start = time.perf_counter()
        for _ in range(n):
            await app(dict(scope), receive, send)
        return (time.perf_counter() - start) / n * 1e6

    return min(asyncio.run(run()) for _ in range(3))


def inprocess_app_bench(model_name: str, params: str, body: dict[str, object]) -> None:
    """pdroute's whole ASGI app in-process against the bare app, on the same body."""
    from prometheus_client import CollectorRegistry

    from app.main import create_app
    from app.settings import Settings
    from bench.bare_app import app as bare

    raw = json.dumps(body).encode()
    settings = Settings.model_validate(
        {"params_path": params, "decision_model": model_name, "watch_params": False}
    )
    pdroute = asgi_us(create_app(settings, registry=CollectorRegistry()), raw)
    base = asgi_us(bare, raw)
    print(
        f"in-process ASGI app, {model_name:<11}: {pdroute:5.1f} us per request against {base:.1f} us "
        f"bare (pdroute's own work {pdroute - base:.1f} us; bench.bench_floor: what that costs under wrk)"
    )


def queue_aware_params(out_dir: Path) -> str:
    """Params with both models, fitted from the embedded profile by ``pdroute fit``."""
    profile = Path(str(embedded_params_path())).parents[1] / "profiles" / "default.json"
    out = out_dir / "qa.json"
    subprocess.run(
        [sys.executable, "-m", "app", "fit", str(profile), "-o", str(out)], check=True, capture_output=True
    )
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="design,queue-aware", help="comma list of design, queue-aware")
    ap.add_argument("--skip-http", action="store_true")
    ap.add_argument("--params", default=str(embedded_params_path()), help="params for the design model")
    ap.add_argument("--qa-params", help="params with the queue-aware forms (default: fitted now)")
    ap.add_argument(
        "--autofill",
        action="store_true",
        help="only the engine-metrics auto-fill comparison (bench.bench_autofill): bare, queue-aware "
        "with every field sent, queue-aware naming endpoint ids",
    )
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    if args.autofill:
        from bench.bench_autofill import autofill_bench

        if shutil.which("wrk") is None:
            raise SystemExit("bench_route needs wrk: run scripts/system-deps.sh (Debian's wrk package)")
        with tempfile.TemporaryDirectory() as tmp:
            qa = args.qa_params or queue_aware_params(Path(tmp))
            autofill_bench(qa, args.connections, args.seconds, args.rounds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        qa = args.qa_params or (queue_aware_params(Path(tmp)) if "queue-aware" in models else "")
        params = {"design": args.params, "queue-aware": qa}
        bodies: dict[str, dict[str, object]] = {"design": DESIGN_BODY, "queue-aware": QA_BODY}
        if not args.skip_http:
            if shutil.which("wrk") is None:
                raise SystemExit("bench_route needs wrk: run scripts/system-deps.sh (Debian's wrk package)")
            for model in models:
                http_bench(model, params[model], bodies[model], args.connections, args.seconds, args.rounds)
        for model in models:
            inprocess_app_bench(model, params[model], bodies[model])
        for model in models:
            inprocess_bench(model, params[model])
            inprocess_bench(model, params[model], BATCH_CAP)


if __name__ == "__main__":
    main()
