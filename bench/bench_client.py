"""The gateway client's overhead: its remote call against a bare httpx call, and its local tier.

    .venv/bin/python -m bench.bench_client [--calls 2000] [--rounds 3]

Starts ``pdroute serve`` (one worker, loopback, the embedded params: queue-aware) in a child
process, so the server does not share this process's interpreter, then times per call, in
alternating rounds (the best round of each is kept):

- bare: ``httpx.Client.post("/route")`` on a keep-alive connection, JSON parsed;
- bare on a worker: the same call run on a pool thread, the caller waiting on its future (the
  transport ``Client`` uses for its total deadline, without the client);
- bare async, loop thread: ``httpx.AsyncClient.post`` on an event loop in another thread, the
  caller waiting on ``run_coroutine_threadsafe`` (the alternative transport, measured to choose);
- client remote: ``Client.route`` (argument checks, the breaker, parsing, metrics);
- client local: ``Client.route`` with the breaker held open (the local tier through the client);
- local model: ``ServedParams.decide`` alone (the pdroute_core decision on cached params).

It prints microseconds per call and the ratios to bare of client remote, client local and both
cross-thread transports. On a 2-core box the figures move by 10 % from run to run: compare the
ratios of one run, not microseconds across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import httpx
from prometheus_client import CollectorRegistry

from bench.proxy_client import free_port, wait_healthy
from pdroute_client import BreakerConfig, Client, RouteQuery

QUERY = RouteQuery(
    prompt_len=1024,
    system_load=8,
    predicted_output_len=200,
    decode_batch_size=12,
    prefill_queue_requests=3,
    prefill_queue_tokens=6000,
    prefill_pool_gpus=2,
    ttft_slo_ms=1000.0,
    tpot_slo_ms=50.0,
)


def _per_call_us(fn: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        try:
            wait_healthy(url, server, "pdroute serve", path="/readyz")
        except RuntimeError as exc:
            raise SystemExit("pdroute serve did not start") from exc
        body = QUERY.body()
        clock_now = [0.0]
        open_breaker = BreakerConfig(consecutive_failures=1, cool_down_s=1e9)
        loop = asyncio.new_event_loop()
        loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
        loop_thread.start()
        bare_async = httpx.AsyncClient(base_url=url, timeout=1.0)
        with (
            concurrent.futures.ThreadPoolExecutor(max_workers=4) as workers,
            httpx.Client(base_url=url, timeout=1.0) as bare,
            Client(url, deadline_s=1.0, registry=CollectorRegistry()) as client,
            Client(url, breaker=open_breaker, clock=lambda: clock_now[0], start=False) as local,
        ):
            if not (client.wait_for_params(10) and local.refresh_params()):
                raise SystemExit("no params from the service")
            local.breaker.record(False)  # held open: every call answers from the local tier
            served = client.params
            if served is None:
                raise SystemExit("no params from the service")
            cases: dict[str, Callable[[], object]] = {
                "bare httpx": lambda: bare.post("/route", json=body).json(),
                "bare on a worker": lambda: workers.submit(bare.post, "/route", json=body).result(1).json(),
                "bare async, loop": lambda: (
                    asyncio.run_coroutine_threadsafe(bare_async.post("/route", json=body), loop)
                    .result(1)
                    .json()
                ),
                "client remote": lambda: client.route(QUERY),
                "client local": lambda: local.route(QUERY),
                "local model": lambda: served.decide(QUERY, "local: bench"),
            }
            for fn in cases.values():
                fn()  # warm up
            if client.route(QUERY).tier != "remote" or local.route(QUERY).tier != "local":
                raise SystemExit("the tiers are not the ones measured")
            best = {name: float("inf") for name in cases}
            for _ in range(args.rounds):
                for name, fn in cases.items():
                    best[name] = min(best[name], _per_call_us(fn, args.calls))
            asyncio.run_coroutine_threadsafe(bare_async.aclose(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            loop_thread.join(5)
            loop.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    for name, us in best.items():
        print(f"{name:17s} {us:9.1f} us/call")
    for name in ("client remote", "client local", "bare on a worker", "bare async, loop"):
        print(f"{name:17s} / bare httpx: {best[name] / best['bare httpx']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
