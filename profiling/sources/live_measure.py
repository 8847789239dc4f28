"""The design's four measurements taken through a live engine's API (streamed token times, no torch).

Every prompt is fresh random token ids, so the engine's prefix cache never shortens one. Times
are milliseconds; each point keeps its raw samples, and its value is their median.

- prefill(L): the TTFT of a lone request of L prompt tokens with ``max_tokens: 1``.
- decode(kv, B): the inter-token time of B concurrent streams whose prompts hold kv tokens,
  counted once every stream has its first token (so that no prefill shares the steps).
- interference(P, B): B streams decoding at context ``kv`` (their baseline inter-token time
  taken first), then a lone prompt of P tokens: the longest inter-token gap of each stream
  between sending the prompt and its first token is the step that carried the prompt's chunk
  (``T_mixed``); the mean gap over that window says how much slower the decodes ran while it
  was prefilled. The chunk in that step is ``min(P, budget - B)`` when the engine's token
  budget is known.
- hand-off(L): the prefill engine's TTFT, then the decode engine's TTFT on the handed-over
  prompt (the KV loaded over the connector): that second time is the hand-off's cost.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from profiling.sources.engine_api import EngineAPIError, fresh_prompt, handoff, stream_completion

Tick = Callable[[], None]  # advances the progress bar by one sample


@dataclass(frozen=True)
class InterferenceSample:
    mixed_ms: float  # the longest decode gap while the prompt was prefilled (median over streams)
    baseline_ms: float  # the decodes' median gap just before the prompt was sent
    window_mean_ms: float  # the decodes' mean gap over the prefill window
    prefill_ttft_ms: float  # the prompt's own TTFT beside the decodes


@dataclass
class Engine:
    """One engine as the measurements call it."""

    client: httpx.AsyncClient
    url: str
    model: str
    vocab_size: int
    max_model_len: int
    rng: random.Random

    def prompt(self, num_tokens: int) -> list[int]:
        return fresh_prompt(self.rng, num_tokens, self.vocab_size)


async def prefill_samples(
    engine: Engine, prompt_len: int, warmup: int, repeats: int, tick: Tick
) -> list[float]:
    out = []
    for i in range(warmup + repeats):
        stream = await stream_completion(
            engine.client, engine.url, engine.model, engine.prompt(prompt_len), 1
        )
        if i >= warmup:
            out.append(stream.ttft_ms)
            tick()
    return out


async def decode_samples(
    engine: Engine, kv_len: int, batch: int, warmup: int, repeats: int, tick: Tick
) -> list[float]:
    """``repeats`` decode steps (the median over the streams of each step's gap)."""
    steps = warmup + repeats + 1
    prompts = [engine.prompt(kv_len) for _ in range(batch)]
    streams = await asyncio.gather(
        *(stream_completion(engine.client, engine.url, engine.model, p, steps + 2) for p in prompts)
    )
    start = max(s.token_times[0] for s in streams)
    per_stream = [s.gaps_ms(after=start) for s in streams]
    n = min(len(g) for g in per_stream)
    if n <= warmup:
        raise EngineAPIError(f"{engine.url}: decode({kv_len}x{batch}) streamed too few tokens to time")
    out = [statistics.median(g[i] for g in per_stream) for i in range(warmup, n)][:repeats]
    for _ in out:
        tick()
    return out


async def interference_samples(
    engine: Engine, prompt_len: int, batch: int, kv_len: int, repeats: int, tick: Tick
) -> list[InterferenceSample]:
    """``repeats`` prompts of ``prompt_len`` tokens, each beside ``batch`` freshly started decodes."""
    out = []
    for _ in range(repeats):
        out.append(await _one_interference(engine, prompt_len, batch, kv_len))
        tick()
    return out


BASELINE_STEPS = 6  # decode-only steps timed before each prompt


async def _one_interference(engine: Engine, prompt_len: int, batch: int, kv_len: int) -> InterferenceSample:
    # The decodes outlive the measurement (cancelled after it) but stay within the model's length.
    max_tokens = max(16, min(2048, engine.max_model_len - kv_len - 1))
    sinks: list[list[float]] = [[] for _ in range(batch)]
    tasks = [
        asyncio.create_task(
            stream_completion(
                engine.client, engine.url, engine.model, engine.prompt(kv_len), max_tokens, times=sink
            )
        )
        for sink in sinks
    ]
    try:
        await _wait_tokens(sinks, tasks, lambda s: len(s) >= 2)  # all prefilled, decoding together
        start = [len(s) for s in sinks]
        await _wait_tokens(sinks, tasks, lambda s: len(s) >= max(start) + BASELINE_STEPS)
        stream = await stream_completion(
            engine.client, engine.url, engine.model, engine.prompt(prompt_len), 1
        )
        first = stream.token_times[0]
        await _wait_tokens(sinks, tasks, lambda s: s[-1] > first)  # the mixed step's decode tokens
        return interference_sample(sinks, stream.sent_at, first, stream.ttft_ms)
    finally:
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, Exception):
                raise r


async def _wait_tokens(
    sinks: list[list[float]],
    tasks: Sequence[asyncio.Task[Any]],
    ready: Callable[[list[float]], bool],
    timeout_s: float = 600,
) -> None:
    """Until ``ready`` holds for every stream's token times; a stream that ended first is an error."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not all(s and ready(s) for s in sinks):
        for t in tasks:
            if t.done():
                t.result()  # raises the stream's own error
                raise EngineAPIError("interference: a decode stream ended before its prompt was prefilled")
        if loop.time() > deadline:
            raise EngineAPIError(f"interference: decodes not streaming after {timeout_s:.0f} s")
        await asyncio.sleep(0.005)


def _gaps(times: list[float], lo: float, hi: float) -> list[float]:
    """Gaps (ms) of the tokens that arrived in ``(lo, hi]``."""
    return [(times[i] - times[i - 1]) * 1e3 for i in range(1, len(times)) if lo < times[i] <= hi]


def interference_sample(
    sinks: list[list[float]], sent: float, first: float, ttft_ms: float
) -> InterferenceSample:
    """The running decodes' step times around one prompt: per stream, the median gap before the
    prompt was sent (baseline), the longest gap up to its first token after the prompt's (the
    mixed step) and the mean gap over that window; times in seconds, steps in ms."""
    base, mixed, window = [], [], []
    for times in sinks:
        before = _gaps(times, float("-inf"), sent)[-BASELINE_STEPS:]
        # Up to and including the stream's first token after the prompt's: the mixed step.
        end = next(t for t in times if t > first)
        during = _gaps(times, sent, end)
        if not before or not during:
            raise EngineAPIError("interference: a decode stream emitted no token around the prompt")
        base.append(statistics.median(before))
        mixed.append(max(during))
        window.append(statistics.fmean(during))
    return InterferenceSample(
        mixed_ms=statistics.median(mixed),
        baseline_ms=statistics.median(base),
        window_mean_ms=statistics.median(window),
        prefill_ttft_ms=ttft_ms,
    )


async def handoff_samples(
    engine: Engine, decode_url: str, prompt_len: int, block_size: int, warmup: int, repeats: int, tick: Tick
) -> list[tuple[float, float]]:
    """(prefill engine TTFT, decode engine TTFT) in ms per hand-off of ``prompt_len`` tokens."""
    out = []
    for i in range(warmup + repeats):
        done = await handoff(
            engine.client, engine.url, decode_url, engine.model, engine.prompt(prompt_len), 1, block_size
        )
        if i >= warmup:
            out.append((done.prefill.ttft_ms, done.decode.ttft_ms))
            tick()
    return out
