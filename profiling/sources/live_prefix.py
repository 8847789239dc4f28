"""``T_chunk_prefix`` of a live engine, through its prefix cache (httpx only, no torch).

A sample of ``(prefix_len, chunk)``: a fresh prompt of ``prefix_len`` tokens is sent with
``max_tokens: 1``, so its KV blocks enter the engine's prefix cache; then the same tokens
followed by ``chunk`` fresh ones. The engine serves the whole blocks of the prefix from its
cache and computes only the rest, so the second request's TTFT is the pass of the chunk over
the cached prefix (plus the ``prefix_len mod block_size`` tokens of a partial last block, which
no prefix cache holds: the grid's prefix lengths are best block multiples). Where the engine
publishes ``vllm:prefix_cache_hits_total`` (tokens), the hits counted across the second
request must cover the prefix's whole blocks, or the sample is refused: a prefix cache that is
off or too small would otherwise pass a full prefill off as a chunk's pass. Where it does not,
the profile says the hits were not verified. Like ``T_prefill`` here, the TTFT includes the
engine's scheduling and the HTTP round trip.

``kv_capacity_tokens`` is the engine's own figure: ``num_gpu_blocks x block_size`` of its
``vllm:cache_config_info`` (``EngineInfo.kv_capacity_tokens``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from profiling.sources.engine_api import (
    EngineAPIError,
    EngineInfo,
    fresh_prompt,
    metric_sum,
    read_metrics,
    stream_completion,
)
from profiling.sources.live_measure import Engine

PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"  # tokens served from the prefix cache


@dataclass(frozen=True)
class ChunkPrefixSample:
    ttft_ms: float  # the second request's TTFT: the chunk's pass over the cached prefix
    prefix_ttft_ms: float  # the first request's TTFT (the prefix's own prefill)
    hit_tokens: int | None  # prefix-cache hits across the second request; None: not published


def cacheable_tokens(prefix_len: int, block_size: int) -> int:
    """Tokens of a ``prefix_len`` prefix that a prefix cache holds: its whole blocks."""
    return prefix_len // block_size * block_size


def chunk_prefix_prompts(
    rng: random.Random, prefix_len: int, chunk: int, vocab_size: int
) -> tuple[list[int], list[int]]:
    """A fresh prefix, and the prefix followed by ``chunk`` fresh tokens."""
    prefix = fresh_prompt(rng, prefix_len, vocab_size)
    return prefix, [*prefix, *fresh_prompt(rng, chunk, vocab_size)]


def check_hits(hit_tokens: int | None, prefix_len: int, block_size: int, where: str) -> None:
    """Refuse a sample whose prefix was not served from the cache (module docstring)."""
    need = cacheable_tokens(prefix_len, block_size)
    if hit_tokens is not None and hit_tokens < need:
        raise EngineAPIError(
            f"{where}: the engine served {hit_tokens} of the prefix's {need} cacheable tokens from its "
            "prefix cache; enable prefix caching (vLLM: --enable-prefix-caching) with room for the prefix"
        )


def check_chunk_prefix_grid(
    info: EngineInfo, prefix_lens: tuple[int, ...], chunk_sizes: tuple[int, ...]
) -> int:
    """The engine's block size, after refusing a grid it cannot measure (one line each)."""
    block = info.block_size
    if block is None:
        raise EngineAPIError(
            f"{info.url}/metrics: no block_size in cache_config_info (needed by prefix_lens)"
        )
    if info.cache_config.get("enable_prefix_caching") == "False":
        raise EngineAPIError(
            f"{info.url}: prefix caching is off (needed by prefix_lens; vLLM: --enable-prefix-caching)"
        )
    need = max(prefix_lens) + max(chunk_sizes) + 1  # the request also generates one token
    if info.max_model_len is not None and need > info.max_model_len:
        raise EngineAPIError(
            f"grids.prefix_lens: a chunk after the longest prefix needs {need} positions but the "
            f"engine's max_model_len is {info.max_model_len}"
        )
    return block


async def _hits(engine: Engine) -> float | None:
    return metric_sum(await read_metrics(engine.client, engine.url), PREFIX_CACHE_HITS)


async def chunk_prefix_samples(
    engine: Engine,
    prefix_len: int,
    chunk: int,
    block_size: int,
    warmup: int,
    repeats: int,
    tick: Callable[[], None],
) -> list[ChunkPrefixSample]:
    """``repeats`` samples of one chunk over one cached prefix (module docstring)."""
    out = []
    for i in range(warmup + repeats):
        prefix, whole = chunk_prefix_prompts(engine.rng, prefix_len, chunk, engine.vocab_size)
        first = await stream_completion(engine.client, engine.url, engine.model, prefix, 1)
        before = await _hits(engine)
        second = await stream_completion(engine.client, engine.url, engine.model, whole, 1)
        after = await _hits(engine)
        hits = None if before is None or after is None else int(after - before)
        check_hits(hits, prefix_len, block_size, f"chunk_prefix/{prefix_len}x{chunk}")
        if i >= warmup:
            out.append(ChunkPrefixSample(second.ttft_ms, first.ttft_ms, hits))
            tick()
    return out
