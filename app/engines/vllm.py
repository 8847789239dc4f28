"""vLLM (V1 engine) ``/metrics``: what it publishes and how it maps to an ``EngineSample``.

Gauges and one counter (``vllm/v1/metrics/loggers.py``), one series per engine core, labelled ``engine`` (the
data-parallel rank) and ``model_name``; the pod's load is the sum over engines:

- ``vllm:num_requests_running``: requests in the running batch -> ``running``
- ``vllm:num_requests_waiting``: requests queued -> ``waiting``
- ``vllm:kv_cache_usage_perc``: KV blocks in use, a fraction 0..1 (despite the name)
- ``vllm:prompt_tokens_total``: counter of every request's prompt tokens (``vllm:prompt_tokens``
  in the source), the ones served from the prefix cache or loaded by a KV connector too, less
  ``vllm:prompt_tokens_cached_total`` (those cached tokens, local and external) where the engine
  publishes it -> ``prompt_tokens_total``: the prompt tokens computed there. Its rate between two
  readings is the GPU's prefill rate. Without the cached counter (releases before it) the rate
  also counts cached and handed-off prompts: on a decode engine taking KV hand-offs, prompts it
  never prefilled.
- ``vllm:cache_config_info``: value 1, the cache config as labels; ``num_gpu_blocks`` x
  ``block_size`` is the KV capacity in tokens (per engine when it carries ``engine``)

``kv_used_tokens`` = sum over engines of usage x capacity (blocks in use x block size: an upper
bound on the tokens, the last block of each sequence being partly filled). vLLM publishes no
count of prompt tokens waiting or not yet prefilled: those stay missing.
"""

from __future__ import annotations

from app.engines.sample import EngineSample, Reader

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
CACHE_CONFIG = "vllm:cache_config_info"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
PROMPT_TOKENS_CACHED = "vllm:prompt_tokens_cached_total"
NAMES = frozenset((RUNNING, WAITING, KV_USAGE, CACHE_CONFIG, PROMPT_TOKENS, PROMPT_TOKENS_CACHED))


def _capacity_tokens(labels: dict[str, str]) -> float | None:
    try:
        blocks = int(labels["num_gpu_blocks"])
        block_size = int(labels["block_size"])
    except (KeyError, ValueError):  # "None" before the engine has profiled its memory
        return None
    return float(blocks * block_size) if blocks > 0 and block_size > 0 else None


def kv_used_tokens(reader: Reader) -> float | None:
    """KV tokens in use over the pod's engines; None without a usable capacity for every engine."""
    usage = reader.by_label(KV_USAGE, "engine")
    if usage is None:
        return None
    if any(u > 1.0 for u in usage.values()):
        reader.problems.append(f"{KV_USAGE} above 1: {max(usage.values())}")
        return None
    capacity: dict[str, float] = {}
    for labels in reader.labels_of(CACHE_CONFIG):
        cap = _capacity_tokens(labels)
        if cap is not None:
            capacity[labels.get("engine", "")] = cap
    total = 0.0
    for engine, fraction in usage.items():
        cap = capacity.get(engine, capacity.get(""))  # "": one config for every engine
        if cap is None:
            return None
        total += fraction * cap
    return total


def computed_prompt_tokens(reader: Reader) -> float | None:
    """Prompt tokens computed over the pod's engines: all of them less the cached ones, when published."""
    total = reader.total(PROMPT_TOKENS)
    cached = reader.total(PROMPT_TOKENS_CACHED)
    if total is None or cached is None:
        return total
    return total - cached


def read(reader: Reader) -> EngineSample:
    return reader.sample(
        running=reader.total(RUNNING),
        waiting=reader.total(WAITING),
        kv_used_tokens=kv_used_tokens(reader),
        prompt_tokens_total=computed_prompt_tokens(reader),
    )
