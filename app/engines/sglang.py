"""SGLang ``/metrics``: what it publishes and how it maps to an ``EngineSample``.

Gauges (``sglang/srt/metrics/collector.py``, ``SchedulerMetricsCollector``), one series per
exporting scheduler, labelled ``model_name`` (and the parallel ranks); the pod's load is the sum:

- ``sglang:num_running_reqs`` -> ``running``
- ``sglang:num_queue_reqs`` + ``sglang:num_prefill_prealloc_queue_reqs`` (a disaggregated
  prefill server's bootstrap queue: not started either) -> ``waiting``
- ``sglang:num_decode_transfer_queue_reqs`` + ``sglang:num_decode_prealloc_queue_reqs`` (a
  disaggregated decode server: admitted, KV still arriving) -> ``decode_incoming``
- ``sglang:num_used_tokens`` (KV tokens held by requests) -> ``kv_used_tokens``; without it
  ``sglang:token_usage`` (0..1) x ``sglang:max_total_num_tokens`` (the KV pool in tokens)
- ``sglang:kv_transfer_speed_gb_s`` -> ``kv_transfer_gbps`` (reported only: the model's transfer
  rate is the fitted bandwidth in the params)
- ``sglang:prompt_tokens_total`` (a counter of the tokenizer manager's
  ``TokenizerMetricsCollector``: prompt tokens prefilled) -> ``prompt_tokens_total``; its rate
  between two readings is the GPU's prefill rate

SGLang publishes no count of prompt tokens waiting or not yet prefilled: those stay missing.
"""

from __future__ import annotations

from app.engines.sample import EngineSample, Reader, add

RUNNING = "sglang:num_running_reqs"
QUEUE = "sglang:num_queue_reqs"
PREFILL_PREALLOC = "sglang:num_prefill_prealloc_queue_reqs"
DECODE_TRANSFER = "sglang:num_decode_transfer_queue_reqs"
DECODE_PREALLOC = "sglang:num_decode_prealloc_queue_reqs"
USED_TOKENS = "sglang:num_used_tokens"
TOKEN_USAGE = "sglang:token_usage"
MAX_TOKENS = "sglang:max_total_num_tokens"
TRANSFER_SPEED = "sglang:kv_transfer_speed_gb_s"
PROMPT_TOKENS = "sglang:prompt_tokens_total"
NAMES = frozenset(
    (
        RUNNING,
        QUEUE,
        PREFILL_PREALLOC,
        DECODE_TRANSFER,
        DECODE_PREALLOC,
        USED_TOKENS,
        TOKEN_USAGE,
        MAX_TOKENS,
        TRANSFER_SPEED,
        PROMPT_TOKENS,
    )
)


def kv_used_tokens(reader: Reader) -> float | None:
    if USED_TOKENS in reader.series:  # published: its value, or None if refused (no fallback then)
        return reader.total(USED_TOKENS)
    usage = reader.total(TOKEN_USAGE)
    capacity = reader.total(MAX_TOKENS)
    if usage is None or capacity is None:
        return None
    if usage > 1.0:
        reader.problems.append(f"{TOKEN_USAGE} above 1: {usage}")
        return None
    return usage * capacity


def read(reader: Reader) -> EngineSample:
    queue = reader.total(QUEUE)
    return reader.sample(
        running=reader.total(RUNNING),
        waiting=None if queue is None else add(queue, reader.total(PREFILL_PREALLOC)),
        decode_incoming=add(reader.total(DECODE_TRANSFER), reader.total(DECODE_PREALLOC)),
        kv_used_tokens=kv_used_tokens(reader),
        kv_transfer_gbps=reader.total(TRANSFER_SPEED),
        prompt_tokens_total=reader.total(PROMPT_TOKENS),
    )
