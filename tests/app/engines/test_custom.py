"""A custom endpoint: the operator names each signal's metric and label filter."""

from __future__ import annotations

from app.engines import custom
from app.engines.sample import Reader, parse_series

TEXT = """# TYPE myengine_active gauge
myengine_active{phase="decode",gpu="0"} 10
myengine_active{phase="prefill",gpu="0"} 2
# TYPE myengine_queue_tokens gauge
myengine_queue_tokens 4096
# TYPE myengine_kv_frac gauge
myengine_kv_frac 0.5
# TYPE myengine_kv_cap gauge
myengine_kv_cap 100000
# HELP myengine_prefilled_tokens_total Prompt tokens prefilled.
# TYPE myengine_prefilled_tokens_total counter
myengine_prefilled_tokens_total{gpu="0"} 52000
myengine_prefilled_tokens_created{gpu="0"} 1.7645e+09
"""


def test_named_metrics_with_label_filters() -> None:
    spec: custom.CustomSpec = (
        ("running", "myengine_active", (("phase", "decode"),), 1.0),
        ("waiting", "myengine_active", (("phase", "prefill"),), 1.0),
        ("queue_prompt_tokens", "myengine_queue_tokens", (), 1.0),
        ("kv_usage_fraction", "myengine_kv_frac", (), 1.0),
        ("kv_capacity_tokens", "myengine_kv_cap", (), 1.0),
    )
    s = custom.read(Reader(parse_series(TEXT)), spec)
    assert (s.running, s.waiting, s.queue_prompt_tokens, s.kv_used_tokens) == (10.0, 2.0, 4096.0, 50000.0)
    assert s.pending_prefill_tokens is None  # not configured: missing


def test_scale_and_absent_metric() -> None:
    spec: custom.CustomSpec = (
        ("kv_used_tokens", "myengine_kv_cap", (), 0.5),
        ("running", "not_published", (), 1.0),
    )
    s = custom.read(Reader(parse_series(TEXT)), spec)
    assert (s.kv_used_tokens, s.running) == (50000.0, None)


def test_an_operator_named_prompt_token_counter() -> None:
    spec: custom.CustomSpec = (
        ("prompt_tokens_total", "myengine_prefilled_tokens_total", (("gpu", "0"),), 1.0),
    )
    s = custom.read(Reader(parse_series(TEXT)), spec)
    assert s.prompt_tokens_total == 52000.0
    assert s.running is None
