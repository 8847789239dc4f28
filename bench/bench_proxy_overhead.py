"""The proxy's own added latency: TTFT and time per token through ``pdroute proxy`` against
calling the same engine directly, in the same run, at light load (one request at a time).

    PDROUTE_ENGINES_VENV=/work/venvs/engines .venv/bin/python -m bench.bench_proxy_overhead \\
        [--requests 200] [--prompt-len 128] [--max-tokens 16] [--engine vllm|echo] [--engine-url URL]

Without ``--engine-url`` a tiny collocated vLLM CPU engine is started on core 1 (localfleet)
and stopped at the end; with ``--engine echo`` the upstream is ``bench.echo_engine`` (tokens
every 5 ms at no cost), which isolates the proxy's own work from the engine's noise. The
proxy runs as its own process, policy pdroute (the embedded params' model decides every
request in-process; the fleet has no prefill pool, so a disaggregated decision is served
collocated, as counted). Direct and proxied requests alternate, each with a
fresh prompt, so both see the same engine and the same noise; the table gives p50 and p99 of
each, the added milliseconds (proxied quantile minus direct quantile) and the ratio; the bar is
at most 1 ms added to the p99 TTFT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path

import httpx

from bench.proxy_client import ProxyProcess, Timed, quantile, session, timed_stream

BAR_MS = 1.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(
    direct_url: str, proxy_url: str, args: argparse.Namespace
) -> tuple[list[Timed], list[Timed]]:
    rng = random.Random(7)
    direct: list[Timed] = []
    proxied: list[Timed] = []
    async with session(connections=4, timeout_s=120) as client:
        for i in range(args.warmup + args.requests):
            order = [(direct_url, direct), (proxy_url, proxied)]
            if i % 2:
                order.reverse()
            for url, into in order:
                prompt = [rng.randrange(1, 31_000) for _ in range(args.prompt_len)]
                body = {
                    "model": args.model,
                    "prompt": prompt,
                    "max_tokens": args.max_tokens,
                    "ignore_eos": True,
                }
                t = await timed_stream(client, f"{url}/v1/completions", {**body, "return_token_ids": True})
                if i >= args.warmup:
                    into.append(t)
    return direct, proxied


def _row(name: str, d: list[float], p: list[float]) -> str:
    cells = []
    for q in (0.5, 0.99):
        a, b = quantile(d, q) * 1e3, quantile(p, q) * 1e3
        cells.append(f"{a:9.3f} {b:9.3f} {b - a:+8.3f} {b / a:6.3f}")
    return f"{name:<10} " + "   ".join(cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--engine-url", help="an engine already running (its API root)")
    parser.add_argument("--policy", default="pdroute", help="the proxy's PDROUTE_POLICY")
    parser.add_argument(
        "--engine", choices=("vllm", "echo"), default="vllm", help="what to start without a URL"
    )
    parser.add_argument(
        "--model", default=None, help="the served model name (default: asked from the engine)"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pdroute-bench-proxy-"))
    fleet = None
    echo = None
    if args.engine_url is None and args.engine == "echo":
        import subprocess
        import sys

        from bench.proxy_client import free_port

        port = free_port()
        echo = subprocess.Popen([sys.executable, "-m", "bench.echo_engine", "--port", str(port)])
        args.engine_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{args.engine_url}/health", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    if args.engine_url is None:
        from localfleet import TINY, EngineSpec, Fleet

        fleet = Fleet.start(
            [EngineSpec("c0", TINY, core=1, kv_cache_bytes=128 * 2**20)], run_dir=tmp / "fleet"
        )
        args.engine_url = fleet["c0"].url
        print(f"engine c0 (tiny, core 1) healthy in {fleet.start_s:.1f} s")
    url = args.engine_url.rstrip("/")
    if args.model is None:
        args.model = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
    engines = tmp / "engines.json"
    engines.write_text(
        json.dumps({"pools": {"mixed": [{"id": "c0", "url": f"{url}/metrics", "kind": "vllm"}]}})
    )
    proxy = ProxyProcess(engines, tmp / "proxy.log", PDROUTE_POLICY=args.policy)
    try:
        idle_s = 5.0
        cpu0 = cpu_seconds(proxy.proc.pid)
        time.sleep(idle_s)  # the scraper's background cost, to subtract
        cpu1 = cpu_seconds(proxy.proc.pid)
        echo0 = cpu_seconds(echo.pid) if echo is not None else 0.0
        started = time.perf_counter()
        direct, proxied = asyncio.run(_measure(url, proxy.url, args))
        wall_s = time.perf_counter() - started
        cpu2 = cpu_seconds(proxy.proc.pid)
        echo_ms = None
        if echo is not None:  # it served every request of both kinds: one hop's worth of work each
            echo_ms = (cpu_seconds(echo.pid) - echo0) / (2 * (args.requests + args.warmup)) * 1e3
    finally:
        proxy.stop()
        if fleet is not None:
            fleet.stop()
        if echo is not None:
            echo.terminate()
            echo.wait()
    bad = sum(not t.ok for t in (*direct, *proxied))
    if bad:
        print(f"{bad} requests failed")
        return 1
    print(
        f"{args.requests} requests each way, alternating; prompt {args.prompt_len} tokens, "
        f"{args.max_tokens} streamed tokens; engine {url}"
    )
    print(
        f"{'':<10} {'p50 ms: direct':>15} {'proxy':>9} {'added':>8} {'ratio':>6}   "
        f"{'p99: direct':>9} {'proxy':>9} {'added':>8} {'ratio':>6}"
    )
    print(_row("TTFT", [t.ttft_s for t in direct], [t.ttft_s for t in proxied]))
    tpot_d = [t.tpot_s for t in direct if t.tpot_s is not None]
    tpot_p = [t.tpot_s for t in proxied if t.tpot_s is not None]
    print(_row("per token", tpot_d, tpot_p))
    background = (cpu1 - cpu0) / idle_s * wall_s
    per_request_ms = (cpu2 - cpu1 - background) / (args.requests + args.warmup) * 1e3
    print(
        f"proxy CPU per proxied request {per_request_ms:.2f} ms (process CPU over the run, less its idle"
        f" rate of {(cpu1 - cpu0) / idle_s * 1e3:.1f} ms/s): an upper bound on what it adds on an idle core"
    )
    if echo_ms is not None:
        print(
            f"the echo engine's CPU per request (one server hop, same run) {echo_ms:.2f} ms:"
            f" proxy / echo {per_request_ms / echo_ms:.2f}"
        )
    added = (quantile([t.ttft_s for t in proxied], 0.99) - quantile([t.ttft_s for t in direct], 0.99)) * 1e3
    verdict = "meets" if added <= BAR_MS else "misses"
    print(f"added p99 TTFT {added:+.3f} ms: {verdict} the bar of {BAR_MS:g} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
