"""The proxy's own added latency: TTFT and time per token through ``pdroute proxy`` against
calling the same engine directly, and through a bare relay, in the same run, at light load (one
request at a time).

    PDROUTE_ENGINES_VENV=/work/venvs/engines .venv/bin/python -m bench.bench_proxy_overhead \\
        [--requests 200] [--prompt-len 128] [--max-tokens 16] [--engine vllm|echo] [--engine-url URL]

Without ``--engine-url`` a tiny collocated vLLM CPU engine is started on core 1 (localfleet) and
stopped at the end; with ``--engine echo`` the upstream is ``bench.echo_engine`` (tokens every 5
ms at no cost), which isolates the proxy's own work from the engine's noise. The proxy runs as
its own process, policy pdroute (the embedded params' model decides every request in-process;
the fleet has no prefill pool, so a disaggregated decision is served collocated, as counted).
The baseline is ``bench.bare_relay``: the same uvicorn and upstream client
(``pdroute_proxy.http1``) forwarding bytes with no work of its own, the least any Python proxy
adds. Each round sends one request directly, one through the relay and one through the proxy, in
a rotating order, each with a fresh prompt, so all three see the same engine and the same noise;
the table gives p50 and p99 of each pair, the added milliseconds (quantile minus quantile) and
the ratio: proxy over direct (the bar: at most 1 ms added to the p99 TTFT), the relay over
direct (the hop itself) and the proxy over the relay (its own work).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.proxy_client import ProxyProcess, Timed, free_port, quantile, session, timed_stream, wait_healthy

BAR_MS = 1.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(urls: dict[str, str], args: argparse.Namespace) -> dict[str, list[Timed]]:
    """Each round sends one request to each of ``urls`` (name -> API root), in a rotating order."""
    rng = random.Random(7)
    timed: dict[str, list[Timed]] = {name: [] for name in urls}
    names = list(urls)
    async with session(connections=4, timeout_s=120) as client:
        for i in range(args.warmup + args.requests):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                prompt = [rng.randrange(1, 31_000) for _ in range(args.prompt_len)]
                body = {
                    "model": args.model,
                    "prompt": prompt,
                    "max_tokens": args.max_tokens,
                    "ignore_eos": True,
                    "return_token_ids": True,
                }
                t = await timed_stream(client, f"{urls[name]}/v1/completions", body)
                if i >= args.warmup:
                    timed[name].append(t)
    return timed


def _row(name: str, base: list[float], other: list[float]) -> str:
    cells = []
    for q in (0.5, 0.99):
        a, b = quantile(base, q) * 1e3, quantile(other, q) * 1e3
        cells.append(f"{a:9.3f} {b:9.3f} {b - a:+8.3f} {b / a:6.3f}")
    return f"{name:<22} " + "   ".join(cells)


def _start_relay(upstream: str) -> tuple[subprocess.Popen[bytes], str]:
    """``bench.bare_relay`` under the proxy's uvicorn settings (uvloop and httptools where
    installed, no access log), forwarding to ``upstream`` (its ``/health`` too)."""
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "bench.bare_relay:app", "--port", str(port)]
    cmd += ["--log-level", "warning", "--no-access-log"]
    proc = subprocess.Popen(cmd, env={**os.environ, "PDROUTE_BENCH_UPSTREAM": upstream})
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, "the bare relay")
    return proc, url


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        proc.terminate()
        proc.wait()


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
    parser.add_argument(
        "--idle-s", type=float, default=5.0, help="seconds of the proxy's idle CPU to subtract (default 5)"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pdroute-bench-proxy-"))
    fleet = None
    echo = None
    relay = None
    if args.engine_url is None and args.engine == "echo":
        port = free_port()
        echo = subprocess.Popen([sys.executable, "-m", "bench.echo_engine", "--port", str(port)])
        args.engine_url = f"http://127.0.0.1:{port}"
        wait_healthy(args.engine_url, echo, "the echo engine")
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
    rounds = args.requests + args.warmup
    try:
        relay, relay_url = _start_relay(url)
        idle_s = args.idle_s
        cpu0 = cpu_seconds(proxy.proc.pid)
        time.sleep(idle_s)  # the scraper's background cost, to subtract
        cpu1 = cpu_seconds(proxy.proc.pid)
        echo0 = cpu_seconds(echo.pid) if echo is not None else 0.0
        relay0 = cpu_seconds(relay.pid)
        started = time.perf_counter()
        timed = asyncio.run(_measure({"direct": url, "relay": relay_url, "proxy": proxy.url}, args))
        wall_s = time.perf_counter() - started
        cpu2 = cpu_seconds(proxy.proc.pid)
        relay_ms = (cpu_seconds(relay.pid) - relay0) / rounds * 1e3
        echo_ms = None
        if echo is not None:  # it served every request of all three kinds: one hop's worth each
            echo_ms = (cpu_seconds(echo.pid) - echo0) / (3 * rounds) * 1e3
    finally:
        proxy.stop()
        _stop(relay)
        if fleet is not None:
            fleet.stop()
        _stop(echo)
    bad = sum(not t.ok for runs in timed.values() for t in runs)
    if bad:
        print(f"{bad} requests failed")
        return 1
    direct, relayed, proxied = timed["direct"], timed["relay"], timed["proxy"]
    print(
        f"{args.requests} requests each way (direct, bare relay, proxy in rotating order); prompt "
        f"{args.prompt_len} tokens, {args.max_tokens} streamed tokens; engine {url}"
    )
    print(
        f"{'':<22} {'p50 ms: base':>13} {'other':>9} {'added':>8} {'ratio':>6}   "
        f"{'p99: base':>9} {'other':>9} {'added':>8} {'ratio':>6}"
    )
    for metric, of in (("TTFT", _ttfts), ("per token", _tpots)):
        print(_row(f"{metric}, proxy - direct", of(direct), of(proxied)))
        print(_row(f"{metric}, relay - direct", of(direct), of(relayed)))
        print(_row(f"{metric}, proxy - relay", of(relayed), of(proxied)))
    background = (cpu1 - cpu0) / idle_s * wall_s
    per_request_ms = (cpu2 - cpu1 - background) / rounds * 1e3
    print(
        f"proxy CPU per proxied request {per_request_ms:.2f} ms (process CPU over the run, less its idle"
        f" rate of {(cpu1 - cpu0) / idle_s * 1e3:.1f} ms/s); the bare relay's {relay_ms:.2f} ms"
    )
    if echo_ms is not None:
        print(
            f"the echo engine's CPU per request (one server hop, same run) {echo_ms:.2f} ms:"
            f" proxy / echo {per_request_ms / echo_ms:.2f}"
        )
    added = (quantile(_ttfts(proxied), 0.99) - quantile(_ttfts(direct), 0.99)) * 1e3
    floor = (quantile(_ttfts(relayed), 0.99) - quantile(_ttfts(direct), 0.99)) * 1e3
    verdict = "meets" if added <= BAR_MS else "misses"
    print(
        f"added p99 TTFT {added:+.3f} ms: {verdict} the bar of {BAR_MS:g} ms "
        f"(a bare relay adds {floor:+.3f} ms in the same run)"
    )
    return 0


def _ttfts(runs: list[Timed]) -> list[float]:
    return [t.ttft_s for t in runs]


def _tpots(runs: list[Timed]) -> list[float]:
    return [t.tpot_s for t in runs if t.tpot_s is not None]


if __name__ == "__main__":
    raise SystemExit(main())
