"""Where the client reads a disaggregated request's first token, and the decode engine's first
steps bounded by the tokens actually pending there."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.calibration_terms import contributions
from pdroute_core.routing import RouteColumns, RouteInputs, build_model
from pdroute_core.routing.queue_aware import FIRST_TOKEN_PREFILL, FIRST_TOKEN_SOURCES, QueueAwareModel
from tests.factories import XFER, qa_model, route_inputs_st

# 10 decodes on the decode GPU holding 20,000 tokens, chunk 2,048, 21 output tokens (D = 20).
X = RouteInputs(1000, 21, 10, 10, 2048, decode_context_tokens=20_000, prefill_pool_gpus=1)
S_BOUNDARY = 5.0 + 0.01 * 10 + 1e-5 * 20_000  # s(B', K')
S_FIRST = 5.0 + 0.01 * 11 + 1e-5 * 21_000  # s(B' + 1, K' + L)
PREFILL = 10.0 + 0.02 * (1000 - 100)  # T_P(1000)


def prefill_token(model: QueueAwareModel) -> QueueAwareModel:
    return QueueAwareModel(model.params, first_token=FIRST_TOKEN_PREFILL)


def test_decode_engine_first_token_waits_for_transfer_and_first_steps() -> None:
    b = qa_model().decide(X)
    assert b.ttft_disaggregated_ms == pytest.approx(PREFILL + 1000 * XFER + 1.5 * S_BOUNDARY + S_FIRST)


def test_prefill_engine_first_token_is_the_prefill_and_the_gap_moves_into_tpot() -> None:
    engine, proxy = qa_model().decide(X), prefill_token(qa_model()).decide(X)
    assert proxy.ttft_disaggregated_ms == pytest.approx(PREFILL)  # no wait: an idle pool
    gap = 1000 * XFER + 1.5 * S_BOUNDARY + S_FIRST  # the transfer and the decode engine's first steps
    # The decode engine's timeline is the same: so is the end; the gap comes before the second token.
    assert proxy.t_disaggregated_ms == pytest.approx(engine.t_disaggregated_ms)
    assert proxy.tpot_disaggregated_ms == pytest.approx(engine.tpot_disaggregated_ms + gap / 20)
    # The collocated path does not change.
    assert (proxy.ttft_collocated_ms, proxy.tpot_collocated_ms) == (
        engine.ttft_collocated_ms,
        engine.tpot_collocated_ms,
    )
    # A one-token answer has no second token to delay.
    one = dataclasses.replace(X, predicted_output_len=1)
    a, b = qa_model().decide(one), prefill_token(qa_model()).decide(one)
    assert b.tpot_disaggregated_ms == a.tpot_disaggregated_ms and b.ttft_disaggregated_ms == pytest.approx(
        PREFILL
    )


def test_prefill_engine_token_makes_a_tight_ttft_target_reachable_disaggregated() -> None:
    # 6 decodes and 3,000 tokens pending on the collocation GPU: collocated, this prompt waits
    # for them; the decode engine's own first token comes late, the prefill engine's in time.
    x = dataclasses.replace(X, pending_prefill_tokens=3000, ttft_slo_ms=PREFILL / 0.85, tpot_slo_ms=100.0)
    engine, proxy = qa_model().decide(x), prefill_token(qa_model()).decide(x)
    assert engine.ttft_disaggregated_ms > PREFILL / 0.85 * 0.9
    assert proxy.ttft_disaggregated_ms <= PREFILL / 0.85 * 0.9 and proxy.decision == "disaggregated"


def test_first_token_is_validated_and_kept_by_every_variant() -> None:
    with pytest.raises(ValueError, match="first_token: expected one of decode-engine, prefill-engine"):
        QueueAwareModel(qa_model().params, first_token="gateway")
    model = prefill_token(qa_model())
    assert model.with_objective("goodput").first_token == FIRST_TOKEN_PREFILL
    built = build_model("queue-aware", model.params, first_token=FIRST_TOKEN_PREFILL)
    assert isinstance(built, QueueAwareModel) and built.first_token == FIRST_TOKEN_PREFILL
    assert FIRST_TOKEN_SOURCES == ("decode-engine", "prefill-engine")


@settings(max_examples=60, deadline=None)
@given(st.lists(route_inputs_st, min_size=1, max_size=40), st.sampled_from(("latency", "goodput")))
def test_decide_many_equals_decide_bit_for_bit_with_the_prefill_engines_token(
    rows: list[RouteInputs], objective: str
) -> None:
    model = QueueAwareModel(
        qa_model(chunk_ms_per_token_sq=1e-5, chunk_ms_per_token_seq=2e-5).params,
        objective=objective,
        first_token=FIRST_TOKEN_PREFILL,
    )
    assert model.decide_many(RouteColumns.from_inputs(rows)).rows() == [model.decide(r) for r in rows]


def test_calibration_terms_follow_the_first_token() -> None:
    x = dataclasses.replace(X, decode_pending_prefill_tokens=500)
    for model in (qa_model(), prefill_token(qa_model())):
        b = model.decide(x)
        parts = contributions(model, x, "disaggregated")
        assert sum(parts.ttft.values()) == pytest.approx(b.ttft_disaggregated_ms)
        assert sum(parts.tpot.values()) == pytest.approx(b.tpot_disaggregated_ms)
    assert set(contributions(prefill_token(qa_model()), x, "disaggregated").ttft) == {"queue_wait", "prefill"}


def test_boundary_steps_carry_no_more_than_the_tokens_pending_there() -> None:
    # 1.5 chunks of 2,038 tokens (the budget less the 10 decodes) would be 3,057 tokens of
    # prefill; only 300 are pending, so the boundary steps carry those 300 and no more. Past
    # 3,057 pending, 1.5 chunks.
    base = qa_model().decide(X).ttft_disaggregated_ms
    few = qa_model().decide(dataclasses.replace(X, decode_pending_prefill_tokens=300))
    assert few.ttft_disaggregated_ms == pytest.approx(base + 0.01 * 300)
    many = qa_model().decide(dataclasses.replace(X, decode_pending_prefill_tokens=4000))
    assert many.ttft_disaggregated_ms == pytest.approx(base + 1.5 * 0.01 * 2038)
    ttfts = [
        qa_model().decide(dataclasses.replace(X, decode_pending_prefill_tokens=p)).ttft_disaggregated_ms
        for p in (1, 300, 3100, 4000)
    ]
    assert ttfts == sorted(ttfts) and ttfts[2] == ttfts[3]


STEP_WITH_CHUNK = S_BOUNDARY + 0.01 * 2038  # s(B', K') + f(c_B', B'), c_B' = 2,048 - 10


@pytest.mark.parametrize(
    ("pending", "chunk_steps"),
    [(4000, 1), (5000, 2), (100_000, 49)],  # ceil((P' - 2,038) / 2,038) steps before its turn
)
def test_the_kv_waits_behind_the_prompts_pending_on_the_decode_gpu(pending: int, chunk_steps: int) -> None:
    # The decode engine takes its one waiting line in order while a step's budget lasts: the
    # request is admitted once the prompts pending there have started, all but the last step's
    # worth. What that takes beyond its KV's arrival (the prefill and transfer, 39.4 ms on an
    # idle pool) adds to its TTFT; 4,000 tokens take one step (25.7 ms), no more than that.
    base = qa_model().decide(X).ttft_disaggregated_ms + 1.5 * 0.01 * 2038  # the boundary chunks
    arrival = PREFILL + 1000 * XFER
    b = qa_model().decide(dataclasses.replace(X, decode_pending_prefill_tokens=pending))
    held = max(0.0, chunk_steps * STEP_WITH_CHUNK - arrival)
    assert b.ttft_disaggregated_ms == pytest.approx(base + held)
    assert (held > 0.0) == (pending > 4000)
    # A longer wait for the prefill pool leaves the decode GPU time to start them: nothing is added.
    queued = dataclasses.replace(X, decode_pending_prefill_tokens=5000, prefill_queue_requests=1)
    with_queue = qa_model().decide(queued)
    without = qa_model().decide(dataclasses.replace(queued, decode_pending_prefill_tokens=4000))
    assert with_queue.ttft_disaggregated_ms == pytest.approx(without.ttft_disaggregated_ms)
    # The collocated path does not change.
    assert (
        b.ttft_collocated_ms
        == qa_model().decide(dataclasses.replace(X, decode_pending_prefill_tokens=4000)).ttft_collocated_ms
    )


def test_an_idle_decode_gpu_starts_its_pending_prompts_in_prefill_passes() -> None:
    # No decode there: each step is a prefill pass of c = 2,048 tokens, T_P(2,048) = 48.96 ms;
    # 10,000 tokens pending take ceil(7,952 / 2,048) = 4 of them before the request's turn.
    x = dataclasses.replace(X, decode_batch_size=0, decode_context_tokens=0)
    b0 = qa_model().decide(dataclasses.replace(x, decode_pending_prefill_tokens=2000))
    b = qa_model().decide(dataclasses.replace(x, decode_pending_prefill_tokens=10_000))
    pass_ms = 10.0 + 0.02 * (2048 - 100)
    boundary = min(1.5 * 0.01 * 2048, 0.01 * 2000)
    assert b.ttft_disaggregated_ms - b0.ttft_disaggregated_ms == pytest.approx(
        1.5 * 0.01 * 2048 - boundary + 4 * pass_ms - (PREFILL + 1000 * XFER)
    )
