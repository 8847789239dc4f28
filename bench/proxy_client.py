"""Timing one streamed completion (TTFT and the gaps between tokens), for the proxy benchmarks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from pdroute_proxy.upstream import READ_BUFFER_BYTES


@dataclass(frozen=True)
class Timed:
    """One request as the client saw it (seconds; ``num_tokens`` streamed)."""

    ok: bool
    ttft_s: float
    e2e_s: float
    num_tokens: int
    status: int

    @property
    def tpot_s(self) -> float | None:
        return (self.e2e_s - self.ttft_s) / (self.num_tokens - 1) if self.num_tokens > 1 else None


def session(connections: int = 1024, timeout_s: float = 600.0) -> aiohttp.ClientSession:
    """The benchmarks' client: aiohttp, whose own cost per streamed request (about 0.1 ms over a
    raw socket here) is a fifth of httpx's, so that it hides less of what is measured."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        read_bufsize=READ_BUFFER_BYTES,  # the proxy's own limit on an event line
    )


async def timed_stream(client: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Timed:
    """Stream ``body`` from ``url`` (a /v1/completions URL); time its first and last token."""
    started = time.perf_counter()
    first: float | None = None
    last = started
    tokens = 0
    try:
        async with client.post(url, json={**body, "stream": True}) as r:
            if r.status != 200:
                await r.read()
                return Timed(False, 0.0, time.perf_counter() - started, 0, r.status)
            async for line in r.content:
                if not line.startswith(b"data: {"):
                    continue
                event = json.loads(line[6:])
                if not event.get("choices"):
                    continue
                now = time.perf_counter()
                n = len(event["choices"][0].get("token_ids") or ()) or 1
                tokens += n
                if first is None:
                    first = now
                last = now
    except (aiohttp.ClientError, TimeoutError):
        return Timed(False, 0.0, time.perf_counter() - started, tokens, 0)
    if first is None:
        return Timed(False, 0.0, last - started, 0, 200)
    return Timed(True, first - started, last - started, tokens, 200)


def wait_healthy(
    url: str,
    proc: subprocess.Popen[bytes],
    what: str,
    timeout_s: float = 30.0,
    poll_s: float = 0.1,
    path: str = "/health",
) -> None:
    """Return once ``url`` + ``path`` answers 200; ``RuntimeError`` naming ``what`` if ``proc``
    exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}{path}", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} is not healthy in {timeout_s:g} s")
        time.sleep(poll_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ProxyProcess:
    """``pdroute proxy`` as a child process (its own interpreter, as an operator runs it)."""

    def __init__(self, engines_file: Path, log_path: Path, **env: str) -> None:
        self.port = free_port()
        full = {
            **os.environ,
            "PDROUTE_ENGINES_FILE": str(engines_file),
            "PDROUTE_PORT": str(self.port),
            "PDROUTE_LOG_LEVEL": "warning",
            "PDROUTE_WATCH_PARAMS": "false",
            **env,
        }
        self.log = log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "proxy"],
            env=full,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        wait_healthy(self.url, self.proc, f"pdroute proxy (see {log_path})", timeout_s=60.0, poll_s=0.2)

    def metrics_text(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(coro: Any) -> Any:
    return asyncio.run(coro)
