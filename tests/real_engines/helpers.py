"""Small helpers of the real-engine tests: async calls from sync tests, metric deltas."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

from profiling.sources.engine_api import Samples, metric_sum, read_metrics

T = TypeVar("T")
TIMEOUT = httpx.Timeout(120.0, connect=5.0)


def run(make: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    """Run ``make(client)`` on a fresh event loop with a fresh client (no pooled state between tests)."""

    async def main() -> T:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            return await make(client)

    return asyncio.run(main())


def metrics(url: str) -> Samples:
    return run(lambda client: read_metrics(client, url))


def counter(url: str, name: str, **labels: str) -> float:
    value = metric_sum(metrics(url), name, **labels)
    if value is None:
        raise AssertionError(f"{url}/metrics has no {name} {labels}")
    return value


def by_source(url: str) -> dict[str, float]:
    """Prompt tokens by source (local_compute, local_cache_hit, external_kv_transfer) on ``url``."""
    samples = metrics(url)
    out: dict[str, float] = {}
    for labels, value in samples.get("vllm:prompt_tokens_by_source_total", []):
        out[labels["source"]] = out.get(labels["source"], 0.0) + value
    return out
