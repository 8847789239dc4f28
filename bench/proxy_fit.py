"""A quick fit of the queue-aware model's forms from a few measurements of the live engines,
for the replay benchmark (``bench.bench_proxy_replay``): minutes, not the full live-engine profile.

Measured on the decode engine through its OpenAI API, fresh prompts, medians of repeats:

- prefill: a lone request's TTFT (``max_tokens: 1``) at a few prompt lengths, fitted as
  ``floor + per_token * u`` (knee 0); the chunk cost per token is the same slope;
- decode step: the inter-token time of B concurrent streams, fitted as ``base + per_seq * B``;
- hand-off: the decode engine's TTFT of prompt + first token after the prefill engine saved the
  KV, less a decode step, as an effective bandwidth over the model's KV bytes per token.

The design's six parameters are set from the same figures (alpha the slope, beta the base step,
gamma the slope). The result is a schema-2 params dict (``solver.params`` validates it).
"""

from __future__ import annotations

import asyncio
import random
import statistics
from datetime import UTC, datetime
from typing import Any

import aiohttp
import numpy as np

from bench.proxy_client import session, timed_stream

PREFILL_LENGTHS = (64, 256, 512, 1024, 2048)
DECODE_BATCHES = (1, 4, 8)


def _prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1, 31_000) for _ in range(n)]


async def _ttft(client: aiohttp.ClientSession, url: str, prompt: list[int], max_tokens: int = 1) -> float:
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "return_token_ids": True}
    t = await timed_stream(client, f"{url}/v1/completions", body)
    if not t.ok:
        raise RuntimeError(f"engine {url}: a measurement request failed (HTTP {t.status})")
    return t.ttft_s * 1e3


async def measure(
    prefill_url: str, decode_url: str, kv_bytes_per_token: int, repeats: int = 3
) -> dict[str, Any]:
    rng = random.Random(11)
    async with session(timeout_s=300) as client:
        await _ttft(client, decode_url, _prompt(rng, 64))  # warm-up
        prefill = {
            n: statistics.median([await _ttft(client, decode_url, _prompt(rng, n)) for _ in range(repeats)])
            for n in PREFILL_LENGTHS
        }
        steps: dict[int, float] = {}
        for b in DECODE_BATCHES:
            body = {"max_tokens": 24, "ignore_eos": True, "return_token_ids": True}
            runs = await asyncio.gather(
                *(
                    timed_stream(client, f"{decode_url}/v1/completions", {**body, "prompt": _prompt(rng, 64)})
                    for _ in range(b)
                )
            )
            steps[b] = statistics.median([t.tpot_s * 1e3 for t in runs if t.tpot_s is not None])
        extra: list[float] = []
        for n in (511, 2047):  # prompt + first token is not a block multiple
            prompt = _prompt(rng, n)
            async with client.post(
                f"{prefill_url}/v1/completions",
                json={"prompt": prompt, "max_tokens": 1, "return_token_ids": True},
            ) as response:
                answer = await response.json()
            token = answer["choices"][0]["token_ids"][0]
            extra.append(max(0.1, await _ttft(client, decode_url, [*prompt, token]) - steps[1]) / (n + 1))
    slope, intercept = np.polyfit(list(prefill), list(prefill.values()), 1)
    per_seq, base = np.polyfit(list(steps), list(steps.values()), 1)
    ms_per_token_moved = statistics.median(extra)
    bandwidth_gbps = kv_bytes_per_token / (ms_per_token_moved * 1e-3) / 1e9
    return {
        "prefill_ttft_ms": prefill,
        "decode_step_ms": steps,
        "prefill_ms_per_token": max(float(slope), 1e-4),
        "prefill_floor_ms": max(float(intercept), 1.0),
        "decode_base_ms": max(float(base), 0.1),
        "decode_ms_per_seq": max(float(per_seq), 0.0),
        "handoff_bandwidth_GBps": bandwidth_gbps,
    }


def params_of(fit: dict[str, Any], kv_bytes_per_token: int, model: str) -> dict[str, Any]:
    slope = fit["prefill_ms_per_token"]
    return {
        "schema_version": 2,
        "alpha": slope,
        "beta": fit["decode_base_ms"],
        "batch_thresh": 64,
        "gamma": slope,
        "bandwidth_GBps": fit["handoff_bandwidth_GBps"],
        "bytes_per_token": kv_bytes_per_token,
        "metadata": {
            "model": model,
            "hardware": "vllm-cpu, one core per engine",
            "transfer_path": "ExampleConnector over /dev/shm",
            "source": "bench.proxy_fit quick fit of the live engines",
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        "queue_aware": {
            "prefill_floor_ms": fit["prefill_floor_ms"],
            "prefill_ms_per_token": slope,
            "prefill_knee_tokens": 0.0,
            "decode_base_ms": fit["decode_base_ms"],
            "decode_ms_per_seq": fit["decode_ms_per_seq"],
            "decode_ms_per_context_token": 0.0,
            "chunk_ms_per_token": slope,
            "chunk_ms_per_token_sq": 0.0,
            "chunk_ms_per_token_seq": 0.0,
        },
    }
