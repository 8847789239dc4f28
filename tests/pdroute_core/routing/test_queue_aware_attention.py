"""The attention terms of the queue-aware forms: by hand, their physical consistency, and the
bits of every params file without them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from pdroute_core.errors import InvalidParams
from pdroute_core.params import params_from_dict
from pdroute_core.queue_params import QueueAwareParams
from pdroute_core.routing import QueueAwareModel, RouteInputs
from tests.factories import FORMS, TEST_PARAMS, qa_model, route_inputs_st

Q, E = 4e-7, 8e-7  # the order of Qwen3-8B on H100's fit to 32k (docs/decision-model.md)


def _idle(prompt: int, chunk: int, **more: Any) -> RouteInputs:
    return RouteInputs(prompt, 100, 0, 0, chunk, pending_prefill_tokens=0, prefill_queue_requests=0, **more)


def test_the_prefill_adds_q_u_squared() -> None:
    plain, long = qa_model(), qa_model(prefill_ms_per_token_sq=Q)
    for n in (1.0, 512.0, 32768.0):
        assert long.forms.prefill_ms(n) == plain.forms.prefill_ms(n) + Q * n * n
    x = _idle(32768, 512)
    assert long.decide(x).prefill_ms == pytest.approx(10 + 0.02 * (32768 - 100) + Q * 32768**2)


def test_a_chunked_prompt_on_an_idle_gpu_by_hand() -> None:
    # 2048 tokens in 512-token passes: piece k sits over 512 k tokens, sum_k s_k p_k = 512 * 3072.
    model = qa_model(prefill_ms_per_token_sq=Q, chunk_ms_per_token_prefix=E)
    b = model.decide(_idle(2048, 512))
    one_pass = 10 + 0.02 * (512 - 100) + Q * 512**2
    assert b.ttft_collocated_ms == pytest.approx(4 * one_pass + E * 512 * 3072)
    assert b.chunk_steps == 4.0
    # A cached prefix is attended too: 1024 cached, 1024 new in two passes over 1024 and 1536.
    hit = model.decide(_idle(2048, 512, cached_prompt_tokens=1024))
    assert hit.ttft_collocated_ms == pytest.approx(2 * one_pass + E * 512 * (1024 + 1536))


def test_chunking_keeps_the_prompts_attention_when_e_is_2q() -> None:
    # A causal pass scores u^2 / 2 pairs: in chunks, q sum s_k^2 inside them plus e sum s_k p_k
    # across them is q u^2 again, one pass's attention (the linear parts differ, so compare the
    # attention alone: each model minus the same model without it).
    with_it = qa_model(prefill_ms_per_token_sq=Q, chunk_ms_per_token_prefix=2 * Q)
    for prompt, chunk in ((2048, 512), (5000, 768), (32768, 2048)):
        x = _idle(prompt, chunk)
        attention = with_it.decide(x).ttft_collocated_ms - qa_model().decide(x).ttft_collocated_ms
        assert attention == pytest.approx(Q * prompt**2, rel=1e-9)


def test_a_busy_gpus_chunks_and_their_harm_by_hand() -> None:
    # 8 decodes, budget 520: chunks of 512, the prompt's 1024 tokens after 256 pending ones:
    # pieces 256, 512, 256 over 0, 256, 768 tokens of the prompt.
    x = RouteInputs(1024, 100, 8, 0, 520, pending_prefill_tokens=256, prefill_queue_requests=0)
    plain, long = qa_model(), qa_model(chunk_ms_per_token_prefix=E)
    a = E * (512 * 256 + 256 * 768)
    p, q = plain.decide(x), long.decide(x)
    assert q.ttft_collocated_ms == pytest.approx(p.ttft_collocated_ms + a, rel=1e-12)
    # Each running decode waits for the longer chunk steps.
    assert q.harm_collocated_ms == pytest.approx(p.harm_collocated_ms + 8 * a, rel=1e-12)
    # The prefix term is this prompt's: the backlog's share is the one without it.
    assert q.local_backlog_ms == p.local_backlog_ms
    assert q.local_prefill_ms == pytest.approx(p.local_prefill_ms + a, rel=1e-12)
    # The disaggregated path has no chunks of this prompt: unchanged.
    assert q.ttft_disaggregated_ms == p.ttft_disaggregated_ms


def test_the_budget_rule_counts_the_prefix_term() -> None:
    # Neither path meets a tight TTFT target: the request goes where it uses less of the others'
    # targets. The chunks' attention over a long prompt is a share of each running decode's TPOT
    # target, so with it the same request leaves the busy GPU.
    x = RouteInputs(
        32768, 16, 64, 64, 2048, prefill_queue_requests=1, prefill_pool_gpus=1,
        pending_prefill_tokens=0, ttft_slo_ms=10.0, tpot_slo_ms=30.0,
    )  # fmt: skip
    plain, long = qa_model().decide(x), qa_model(chunk_ms_per_token_prefix=E).decide(x)
    assert not plain.meets_slo and not long.meets_slo
    assert (plain.decision, long.decision) == ("collocated", "disaggregated")


@settings(max_examples=100, deadline=None)
@given(route_inputs_st)
def test_zero_terms_written_or_not_give_the_same_params_and_bits(x: RouteInputs) -> None:
    base: dict[str, Any] = {**TEST_PARAMS, "schema_version": 2, "queue_aware": FORMS}
    zeros: dict[str, Any] = {
        **base,
        "queue_aware": {**FORMS, "prefill_ms_per_token_sq": 0.0, "chunk_ms_per_token_prefix": 0},
    }
    a, b = params_from_dict(base), params_from_dict(zeros)
    assert a == b and a.params_id == b.params_id and b.to_dict() == a.to_dict()
    assert QueueAwareModel(a).decide(x) == QueueAwareModel(b).decide(x)


def test_non_zero_terms_round_trip_and_change_the_params_id() -> None:
    forms = {**FORMS, "prefill_ms_per_token_sq": Q, "chunk_ms_per_token_prefix": E}
    p = params_from_dict({**TEST_PARAMS, "schema_version": 2, "queue_aware": forms})
    assert p.to_dict()["queue_aware"] == forms and params_from_dict(p.to_dict()) == p
    old = params_from_dict({**TEST_PARAMS, "schema_version": 2, "queue_aware": FORMS})
    assert "prefill_ms_per_token_sq" not in old.to_dict()["queue_aware"]
    assert p.params_id != old.params_id
    assert QueueAwareParams(**FORMS).prefill_ms_per_token_sq == 0.0


@pytest.mark.parametrize("name", ["prefill_ms_per_token_sq", "chunk_ms_per_token_prefix"])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1e-7, "must be >= 0"),
        ("x", "expected a number"),
        (True, "expected a number"),
        (1e300, "plausible bound"),
        (float("nan"), "must be finite"),
    ],
)
def test_bad_attention_terms_name_the_field(name: str, value: Any, message: str) -> None:
    doc: dict[str, Any] = {**TEST_PARAMS, "schema_version": 2, "queue_aware": {**FORMS, name: value}}
    with pytest.raises(InvalidParams, match=f"queue_aware.{name}: .*{message}"):
        params_from_dict(doc)
