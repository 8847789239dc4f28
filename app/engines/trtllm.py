"""TensorRT-LLM (``trtllm-serve``) Prometheus metrics and how they map to an ``EngineSample``.

``trtllm-serve`` serves them at ``/prometheus/metrics`` (``tensorrt_llm/metrics/collector.py``,
prefix ``trtllm_``, labels ``model_name`` and ``engine_type``). The iteration gauges used here:

- ``trtllm_num_requests_running`` (active requests) -> ``running``
- ``trtllm_num_requests_waiting`` (queued requests) -> ``waiting``
- ``trtllm_kv_cache_used_blocks`` x ``trtllm_kv_cache_tokens_per_block`` -> ``kv_used_tokens``
  (blocks in use x block size: an upper bound on the tokens)

Releases before these iteration gauges (1.1 and earlier publish request histograms only) give
an empty sample: every signal missing, nothing invented. No prompt-token queue is published.
"""

from __future__ import annotations

from app.engines.sample import EngineSample, Reader

RUNNING = "trtllm_num_requests_running"
WAITING = "trtllm_num_requests_waiting"
USED_BLOCKS = "trtllm_kv_cache_used_blocks"
TOKENS_PER_BLOCK = "trtllm_kv_cache_tokens_per_block"
NAMES = frozenset((RUNNING, WAITING, USED_BLOCKS, TOKENS_PER_BLOCK))


def kv_used_tokens(reader: Reader) -> float | None:
    blocks = reader.total(USED_BLOCKS)
    per_block = reader.setting(TOKENS_PER_BLOCK)  # a setting: taken once, not summed
    if blocks is None or per_block is None:
        return None
    return blocks * per_block


def read(reader: Reader) -> EngineSample:
    return reader.sample(
        running=reader.total(RUNNING),
        waiting=reader.total(WAITING),
        kv_used_tokens=kv_used_tokens(reader),
    )
