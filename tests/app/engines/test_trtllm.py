"""TensorRT-LLM exposition text -> sample."""

from __future__ import annotations

from app.engines import trtllm
from app.engines.sample import EngineSample, Reader, parse_series
from tests.app.engines.expositions import TRTLLM_HISTOGRAMS_ONLY, trtllm_text


def read(text: str) -> EngineSample:
    return trtllm.read(Reader(parse_series(text)))


def test_iteration_gauges_map_to_the_sample() -> None:
    s = read(trtllm_text())
    assert (s.running, s.waiting, s.kv_used_tokens) == (6.0, 3.0, 300.0 * 32.0)
    assert s.problems == ()


def test_releases_with_request_histograms_only_give_an_empty_sample() -> None:
    s = read(TRTLLM_HISTOGRAMS_ONLY)
    assert (s.running, s.waiting, s.kv_used_tokens) == (None, None, None)


def test_negative_blocks_are_refused() -> None:
    s = read(trtllm_text(used_blocks=-3.0))
    assert s.kv_used_tokens is None
    assert s.problems
