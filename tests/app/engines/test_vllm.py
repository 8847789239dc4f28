"""vLLM exposition text -> sample: per-engine series summed per pod, KV tokens from the cache config."""

from __future__ import annotations

import pytest

from app.engines import vllm
from app.engines.sample import EngineSample, Reader, parse_series, select_lines
from tests.app.engines.expositions import VLLM_KV_TOKENS, VLLM_RUNNING, VLLM_WAITING, vllm_text


def read(text: str) -> EngineSample:
    return vllm.read(Reader(parse_series(text)))


def test_two_engines_are_summed_per_pod() -> None:
    s = read(vllm_text())
    assert (s.running, s.waiting, s.kv_used_tokens) == (VLLM_RUNNING, VLLM_WAITING, VLLM_KV_TOKENS)
    assert s.problems == ()
    # vLLM publishes neither prompt tokens waiting nor pending prefill tokens: never invented.
    assert (s.queue_prompt_tokens, s.pending_prefill_tokens, s.decode_incoming) == (None, None, None)


def test_kv_tokens_match_each_engine_to_its_own_cache_config() -> None:
    text = vllm_text(running=(1.0, 1.0), kv_usage=(0.5, 0.0)).replace(
        'engine="1",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",'
        'num_gpu_blocks="8192"',
        'engine="1",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",'
        'num_gpu_blocks="100"',
    )
    assert read(text).kv_used_tokens == 0.5 * 8192 * 16


def test_a_single_engine_without_the_engine_label_uses_the_one_config() -> None:
    text = "\n".join(
        line.replace('engine="0",', "")
        for line in vllm_text(running=(3.0,), waiting=(0.0,), kv_usage=(0.5,)).splitlines()
    )
    s = read(text + "\n")
    assert (s.running, s.kv_used_tokens) == (3.0, 0.5 * 8192 * 16)


def test_capacity_unknown_before_profiling_leaves_kv_missing() -> None:
    s = read(vllm_text(num_gpu_blocks="None"))
    assert s.kv_used_tokens is None
    assert s.running == VLLM_RUNNING


@pytest.mark.parametrize(
    ("running", "kv_usage", "field"),
    [
        ((float("nan"), 1.0), (0.1, 0.1), "running"),
        ((-1.0, 1.0), (0.1, 0.1), "running"),
        ((1.0, 1.0), (float("nan"), 0.1), "kv_used_tokens"),
        ((1.0, 1.0), (1.5, 0.1), "kv_used_tokens"),
        ((1.0, 1.0), (float("inf"), 0.1), "kv_used_tokens"),
    ],
)
def test_nan_negative_or_impossible_values_are_refused(
    running: tuple[float, ...], kv_usage: tuple[float, ...], field: str
) -> None:
    s = read(vllm_text(running=running, kv_usage=kv_usage))
    assert getattr(s, field) is None
    assert s.problems  # and said why
    assert s.waiting == VLLM_WAITING  # the other signals still count


def test_prompt_token_counters_are_summed_over_engines() -> None:
    s = read(vllm_text(prompt_tokens=(1000.0, 250.0)))
    assert s.prompt_tokens_total == 1250.0


def test_a_pod_without_the_prompt_token_counter_leaves_it_missing() -> None:
    text = "".join(line + "\n" for line in vllm_text().splitlines() if "prompt_tokens" not in line)
    s = read(text)
    assert s.prompt_tokens_total is None
    assert s.running == VLLM_RUNNING


def test_prompt_tokens_count_only_what_was_computed_when_the_cached_counter_is_published() -> None:
    # 1,000 + 500 prompt tokens, 600 + 100 of them cached (prefix hits, KV loaded by a connector).
    with_cached = read(vllm_text(prompt_tokens=(1000.0, 500.0), cached_tokens=(600.0, 100.0)))
    assert with_cached.prompt_tokens_total == 800.0
    # A release without the counter: every prompt token, as it publishes them.
    assert read(vllm_text(prompt_tokens=(1000.0, 500.0))).prompt_tokens_total == 1500.0
    # The filtered parse keeps the counter.
    text = vllm_text(cached_tokens=(1.0, 2.0))
    assert "vllm:prompt_tokens_cached_total{" in select_lines(text, vllm.NAMES)
