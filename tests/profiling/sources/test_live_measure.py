"""The live-engine profile's pure parts: the hand-off prompt, the interference window, metrics."""

from __future__ import annotations

import pytest

from profiling.sources.engine_api import (
    EngineInfo,
    Stream,
    external_tokens,
    handoff_prompt,
    metric_sum,
    parse_metrics,
)
from profiling.sources.live_measure import interference_sample

EXPOSITION = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:prompt_tokens_by_source counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 5.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 96.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="32",kv_cache_memory_bytes="134217728",kv_cache_size_tokens="65536"} 1.0
"""


@pytest.mark.parametrize(
    ("prompt_len", "sent_len", "loaded"),
    [(100, 101, 96), (128, 128, 96), (127, 128, 96), (129, 130, 128), (257, 258, 256), (32, 32, 0)],
)
def test_the_decode_engine_is_sent_the_prompt_plus_its_first_token_unless_block_aligned(
    prompt_len: int, sent_len: int, loaded: int
) -> None:
    sent = handoff_prompt(list(range(prompt_len)), 7, 32)
    assert len(sent) == sent_len
    assert sent[:prompt_len] == list(range(prompt_len))
    assert external_tokens(sent_len, 32) == loaded


def test_metrics_are_summed_by_label() -> None:
    samples = parse_metrics(EXPOSITION)
    assert metric_sum(samples, "vllm:num_requests_running") == 3.0
    assert metric_sum(samples, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 96.0
    assert metric_sum(samples, "vllm:prompt_tokens_by_source_total") == 101.0
    assert metric_sum(samples, "vllm:nothing") is None
    config = samples["vllm:cache_config_info"][0][0]
    info = EngineInfo("http://e", "m", "0.32.0", 4096, config, "vllm")
    assert info.block_size == 32
    assert info.kv_bytes_per_token == 2048


def test_interference_takes_the_longest_gap_around_the_prompt_and_the_steps_before() -> None:
    # Two decodes stepping every 10 ms; a prompt sent at t=1.000 s whose token comes at 1.100 s:
    # the step that carried it ends at 1.101 (decode 0) and 1.102 (decode 1).
    base = [0.95 + 0.01 * i for i in range(6)]  # 0.95 ... 1.00
    s0 = [*base, 1.101, 1.111, 1.121]
    s1 = [*base, 1.102, 1.112]
    sample = interference_sample([s0, s1], sent=1.0005, first=1.100, ttft_ms=99.5)
    assert sample.baseline_ms == pytest.approx(10.0)
    assert sample.mixed_ms == pytest.approx((101.0 + 102.0) / 2)
    assert sample.window_mean_ms == pytest.approx((101.0 + 102.0) / 2)
    assert sample.prefill_ttft_ms == 99.5


def test_a_stream_knows_its_ttft_and_gaps() -> None:
    stream = Stream(sent_at=1.0, token_times=(1.05, 1.06, 1.08), token_ids=(1, 2, 3))
    assert stream.ttft_ms == pytest.approx(50.0)
    assert stream.gaps_ms() == pytest.approx([10.0, 20.0])
    assert stream.gaps_ms(after=1.07) == pytest.approx([20.0])
