"""SGLang exposition text -> sample: queues, KV tokens, the disaggregated decode queues."""

from __future__ import annotations

from app.engines import sglang
from app.engines.sample import EngineSample, Reader, parse_series
from tests.app.engines.expositions import sglang_text


def read(text: str) -> EngineSample:
    return sglang.read(Reader(parse_series(text)))


def test_gauges_map_to_the_sample() -> None:
    s = read(sglang_text())
    assert s.running == 9.0
    assert s.waiting == 4.0  # waiting queue + prefill bootstrap (prealloc) queue, 0 here
    assert s.decode_incoming == 3.0  # transfer 2 + prealloc 1
    assert s.kv_used_tokens == 30000.0
    assert s.kv_transfer_gbps == 21.5
    assert (s.queue_prompt_tokens, s.pending_prefill_tokens) == (None, None)
    assert s.problems == ()


def test_kv_tokens_from_usage_times_pool_without_num_used_tokens() -> None:
    text = "".join(line + "\n" for line in sglang_text().splitlines() if "num_used_tokens" not in line)
    assert read(text).kv_used_tokens == 0.15 * 200000.0


def test_two_schedulers_are_summed() -> None:
    text = sglang_text(running=3.0) + sglang_text(running=4.0).replace(
        'tp_rank="0"', 'tp_rank="0",dp_rank="1"'
    )
    # The second scheduler's families repeat the names: the parser reads them as more samples.
    assert read(text).running == 7.0


def test_nan_used_tokens_is_refused_not_replaced() -> None:
    s = read(sglang_text(used_tokens="NaN"))
    assert s.kv_used_tokens is None
    assert any("num_used_tokens" in p for p in s.problems)


def test_prompt_token_counter_is_read_and_its_created_sample_ignored() -> None:
    s = read(sglang_text(prompt_tokens=8128902.0))
    assert s.prompt_tokens_total == 8128902.0
    assert read(sglang_text(prompt_tokens=17.0)).prompt_tokens_total == 17.0
