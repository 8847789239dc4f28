"""One collocated engine answers token-id completions, streamed and not, and publishes its load."""

from __future__ import annotations

import asyncio
import random

import httpx

from localfleet import BLOCK_SIZE, Engine
from profiling.sources.engine_api import (
    complete,
    discover,
    fresh_prompt,
    metric_sum,
    read_metrics,
    stream_completion,
)
from tests.real_engines.helpers import counter, run


def test_a_completion_generates_exactly_max_tokens_and_counts_the_prompt(tiny_engine: Engine) -> None:
    prompt = fresh_prompt(random.Random(1), 77)
    before = counter(tiny_engine.url, "vllm:prompt_tokens_total")
    answer = run(lambda c: complete(c, tiny_engine.url, "tiny", prompt, 9))
    assert answer["usage"] == {**answer["usage"], "prompt_tokens": 77, "completion_tokens": 9}
    assert len(answer["choices"][0]["token_ids"]) == 9
    assert answer["choices"][0]["finish_reason"] == "length"
    assert counter(tiny_engine.url, "vllm:prompt_tokens_total") - before == 77


def test_streaming_gives_one_event_per_token_in_order(tiny_engine: Engine) -> None:
    stream = run(
        lambda c: stream_completion(c, tiny_engine.url, "tiny", fresh_prompt(random.Random(2), 40), 12)
    )
    assert len(stream.token_times) == 12
    assert len(stream.token_ids) == 12
    assert list(stream.token_times) == sorted(stream.token_times)
    assert stream.token_times[0] > stream.sent_at
    assert len(stream.gaps_ms()) == 11


def test_running_requests_show_in_metrics_while_they_stream(tiny_engine: Engine) -> None:
    async def scenario(client: httpx.AsyncClient) -> tuple[float | None, float | None]:
        rng = random.Random(3)
        tasks = [
            asyncio.create_task(
                stream_completion(client, tiny_engine.url, "tiny", fresh_prompt(rng, 64), 400)
            )
            for _ in range(3)
        ]
        try:
            running = None
            for _ in range(200):  # until all three are admitted (prefilled in a step or two)
                samples = await read_metrics(client, tiny_engine.url)
                running = metric_sum(samples, "vllm:num_requests_running")
                if running == 3:
                    break
                await asyncio.sleep(0.05)
            usage = metric_sum(samples, "vllm:kv_cache_usage_perc")
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return running, usage

    running, usage = run(scenario)
    assert running == 3
    assert usage is not None and usage > 0


def test_discover_reads_the_model_version_and_cache_config(tiny_engine: Engine) -> None:
    info = run(lambda c: discover(c, tiny_engine.url))
    assert info.model == "tiny"
    assert info.kind == "vllm"
    assert info.version == "0.32.0"
    assert info.block_size == BLOCK_SIZE
    assert info.cache_config["kv_cache_memory_bytes"] == str(tiny_engine.spec.kv_cache_bytes)
    assert info.kv_bytes_per_token == tiny_engine.spec.kv_bytes_per_token
