"""read_exposition: only the kind's metrics reach the parser, with the same answer as a full parse."""

from __future__ import annotations

import pytest

from app.engines import sglang, trtllm, vllm
from app.engines.config import Endpoint, EngineKind
from app.engines.kinds import read_exposition
from app.engines.sample import ExpositionError, KindReader, NoMetrics, Reader, parse_series, select_lines
from tests.app.engines.expositions import TRTLLM_HISTOGRAMS_ONLY, sglang_text, trtllm_text, vllm_text


@pytest.mark.parametrize(
    ("kind", "text", "read"),
    [
        ("vllm", vllm_text(), vllm.read),
        ("sglang", sglang_text(), sglang.read),
        ("trtllm", trtllm_text(), trtllm.read),
    ],
)
def test_filtered_reading_equals_the_full_parse(kind: EngineKind, text: str, read: KindReader) -> None:
    endpoint = Endpoint("e", "http://h:1/metrics", kind, "decode")
    full = read(Reader(parse_series(text)))
    assert read_exposition(text, endpoint) == full
    assert read_exposition(text, endpoint).running is not None


def test_histograms_and_other_metrics_are_dropped_before_parsing() -> None:
    kept = select_lines(vllm_text(), vllm.NAMES)
    assert "vllm:num_requests_running{" in kept
    assert "vllm:prompt_tokens_total{" in kept  # the counter whose rate is the prefill rate
    assert "time_to_first_token" not in kept and "generation_tokens_total" not in kept
    # A name that merely starts like a wanted one is not kept.
    assert select_lines("vllm:num_requests_running_extra 1\n", vllm.NAMES).strip() == ""


def test_garbage_is_a_parse_error_and_foreign_text_has_no_metrics() -> None:
    endpoint = Endpoint("e", "http://h:1/metrics", "trtllm", "decode")
    with pytest.raises(ExpositionError):
        read_exposition("<html>502 Bad Gateway</html>", endpoint)
    with pytest.raises(NoMetrics):
        read_exposition(TRTLLM_HISTOGRAMS_ONLY, endpoint)
    with pytest.raises(NoMetrics):
        read_exposition(vllm_text(), endpoint)  # a vLLM pod listed as trtllm


def test_custom_reads_only_its_named_metrics() -> None:
    spec = (("running", "vllm:num_requests_running", (("engine", "1"),), 1.0),)
    endpoint = Endpoint("e", "http://h:1/metrics", "custom", "mixed", spec)
    assert read_exposition(vllm_text(), endpoint).running == 5.0
