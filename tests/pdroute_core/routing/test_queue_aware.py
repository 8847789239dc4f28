"""The queue-aware model: hand-computed terms, the SLO rule, defaults, and scalar == vectorised."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.errors import InvalidParams
from pdroute_core.params import params_from_dict
from pdroute_core.queue_params import QueueAwareParams
from pdroute_core.routing import (
    AUTO,
    OPTIONAL_INPUTS,
    AnalyticalCostModel,
    QueueAwareBreakdown,
    QueueAwareModel,
    RouteColumns,
    RouteInputs,
    all_reasons,
    build_model,
    default_model_name,
    term_names,
)
from pdroute_core.routing.queue_aware import REASONS
from tests.factories import FORMS, TEST_PARAMS, XFER, qa_model, random_route_inputs, route_inputs_st


def test_collocated_terms_by_hand() -> None:
    # L=1000, O=101, B=10 decodes with K=20000 context tokens, budget 256, 100 tokens pending.
    b = qa_model().decide(
        RouteInputs(1000, 101, 10, 10, 256, pending_prefill_tokens=100, colloc_context_tokens=20_000)
    )
    # The 10 decodes take 10 of the 256 tokens: chunks of 246. P + u = 1100 -> n = ceil(1100/246)
    # = 5 steps, the last carrying 1100 - 4*246 = 116 tokens.
    step = 5.0 + 0.01 * 10 + 1e-5 * 20_000  # 5.3 ms
    # Half the step in flight, then the chunk steps: 2.65 + 26.5 + 9.84 + 1.16.
    steps = 5 * step + 4 * (0.01 * 246) + 0.01 * 116
    ttft = 0.5 * step + steps
    assert b.chunk_steps == 5.0
    assert b.ttft_collocated_ms == pytest.approx(ttft)
    assert b.local_backlog_ms == pytest.approx(0.5 * step + steps * 100 / 1100)
    # Decode steps with one more sequence; the pending tokens are all prefilled before the first token.
    tpot = 5.0 + 0.01 * 11 + 1e-5 * (20_000 + 1000 + 50.5)
    assert b.tpot_collocated_ms == pytest.approx(tpot)
    assert b.t_collocated_ms == pytest.approx(ttft + 100 * tpot)
    # Harm: 10 decodes wait 0.01 ms per prompt token, and share a slower step for 100 steps.
    join = 100 * (0.01 + 1e-5 * (1000 + 50.5))
    assert b.harm_collocated_ms == pytest.approx(10 * 1000 * 0.01 + 10 * join)


def test_a_prefill_rate_stretches_the_decode_step_by_hand() -> None:
    # 10 decodes, K = 20,000, no prompt pending; 20,000 prompt tokens/s prefilled there lately.
    x = RouteInputs(1000, 101, 10, 10, 256, pending_prefill_tokens=0, colloc_context_tokens=20_000)
    step = 5.0 + 0.01 * 11 + 1e-5 * (20_000 + 1000 + 50.5)
    chunk = 0.01 * 245  # beside 11 decodes a step carries 245 prompt tokens: f(245, 11) = 2.45 ms
    # 20,000 / 245 chunks per second of 2.45 ms each: a fifth of the GPU's time is prefill.
    rho = 20_000 * chunk / 245 / 1000
    assert rho == pytest.approx(0.2) and rho < chunk / (step + chunk)  # below the cap
    b = qa_model().decide(dataclasses.replace(x, colloc_prefill_tokens_per_s=20_000.0))
    assert b.tpot_collocated_ms == pytest.approx(step / (1 - rho))
    assert b.tpot_disaggregated_ms == qa_model().decide(x).tpot_disaggregated_ms  # the decode GPU's own rate
    d = qa_model().decide(dataclasses.replace(x, decode_prefill_tokens_per_s=20_000.0))
    assert d.tpot_disaggregated_ms == pytest.approx(
        (5.0 + 0.01 * 11 + 1e-5 * (10 * 1000 + 1050.5)) / (1 - rho)
    )
    # Beyond what the GPU can prefill, capped where every step carries a full chunk: s + f.
    capped = qa_model().decide(dataclasses.replace(x, colloc_prefill_tokens_per_s=1e9))
    assert capped.tpot_collocated_ms == pytest.approx(step + chunk)
    assert math.isfinite(capped.t_collocated_ms)
    # The prompts pending on the decode GPU are all started before a hand-off joins it (it waits
    # behind them in the engine's line): none is left for its decode steps, only the later ones.
    full = dataclasses.replace(x, decode_pending_prefill_tokens=40_000, decode_prefill_tokens_per_s=20_000.0)
    waited = qa_model().decide(full)
    assert waited.tpot_disaggregated_ms == pytest.approx(d.tpot_disaggregated_ms)
    assert waited.ttft_disaggregated_ms > 40_000 / 246 * (5.3 + 0.01 * 246) - 50.0  # behind them


def test_without_a_rate_every_answer_keeps_its_bits() -> None:
    x = RouteInputs(1000, 101, 10, 10, 256, pending_prefill_tokens=300, colloc_context_tokens=20_000)
    plain = qa_model().decide(x)
    zero = qa_model().decide(
        dataclasses.replace(x, colloc_prefill_tokens_per_s=0.0, decode_prefill_tokens_per_s=0.0)
    )
    assert zero == plain  # rho = 0: x / 1.0 == x, and the rates are not in ``assumed``
    assert "colloc_prefill_tokens_per_s" not in plain.assumed


def test_disaggregated_terms_by_hand() -> None:
    # 2 prefill GPUs, both busy, 3 requests holding 1,500 tokens waiting.
    b = qa_model().decide(
        RouteInputs(
            1000,
            101,
            10,
            4,
            256,
            prefill_queue_requests=3,
            prefill_queue_tokens=1500,
            prefill_running_requests=2,
            prefill_pool_gpus=2,
            decode_context_tokens=8000,
        )
    )
    t_ahead = 10.0 + 0.02 * (500 - 100)  # mean prompt ahead: 500 tokens -> 18 ms
    wait = t_ahead / 3 + 3 * t_ahead / 2  # first GPU frees after t/(G+1), then 3 more at G a time
    prefill = 10.0 + 0.02 * 900  # 28 ms
    assert b.prefill_wait_ms == pytest.approx(wait)
    assert b.prefill_ms == pytest.approx(prefill)
    assert b.transfer_ms == pytest.approx(1000 * XFER)
    # The decode engine: half a step of its 4 decodes to the boundary, one step to see the KV
    # (5.12 ms each), then the first decode step with the request in it (5.14 ms).
    first = 1.5 * (5.0 + 0.01 * 4 + 1e-5 * 8000) + (5.0 + 0.01 * 5 + 1e-5 * 9000)
    assert b.ttft_disaggregated_ms == pytest.approx(wait + prefill + 1000 * XFER + first)
    tpot = 5.0 + 0.01 * 5 + 1e-5 * (8000 + 1000 + 50.5)
    assert b.tpot_disaggregated_ms == pytest.approx(tpot)
    join = 100 * (0.01 + 1e-5 * (1000 + 50.5))
    assert b.harm_disaggregated_ms == pytest.approx(3 * prefill / 2 + 4 * join)


def test_prompts_arriving_before_its_prefill_step_starts_share_that_step() -> None:
    # The test params: T_P(u) = 10 + 0.02 * max(0, u - 100). Two busy prefill GPUs, 3 requests
    # holding 1,500 tokens waiting, 6,000 prompt tokens/s sent to the pool lately.
    pool = {
        "prefill_queue_requests": 3,
        "prefill_queue_tokens": 1500,
        "prefill_running_requests": 2,
        "prefill_pool_gpus": 2,
    }
    arrivals: dict[str, Any] = {"prefill_arrival_tokens_per_s": 6000.0, "prefill_step_tokens": 4096}
    alone = qa_model().decide(RouteInputs(1000, 101, 10, 4, 256, **pool))
    shared = qa_model().decide(RouteInputs(1000, 101, 10, 4, 256, **pool, **arrivals))
    first = (10.0 + 0.02 * 400) / 3  # the first GPU to free, in ms
    joined = 6000.0 / 2 * first / 1000.0  # tokens routed to each GPU meanwhile: they fit its step
    assert shared.prefill_wait_ms == pytest.approx(alone.prefill_wait_ms + 0.02 * joined)
    assert shared.prefill_ms == alone.prefill_ms
    assert shared.ttft_disaggregated_ms > alone.ttft_disaggregated_ms
    assert shared.ttft_collocated_ms == alone.ttft_collocated_ms
    # Only while they fit the step beside this prompt and the queued ones (750 per GPU here).
    tight = qa_model().decide(
        RouteInputs(1000, 101, 10, 4, 256, **pool, **{**arrivals, "prefill_step_tokens": 1800})
    )
    assert tight.prefill_wait_ms == pytest.approx(alone.prefill_wait_ms + 0.02 * min(joined, 50.0))
    full = qa_model().decide(
        RouteInputs(1000, 101, 10, 4, 256, **pool, **{**arrivals, "prefill_step_tokens": 1700})
    )
    assert full.prefill_wait_ms == alone.prefill_wait_ms  # no room: its step is full already
    # An idle pool starts it at once; without the rate or the budget, not modelled (bit for bit).
    idle = {"prefill_running_requests": 0, "prefill_pool_gpus": 2}
    assert qa_model().decide(RouteInputs(1000, 101, 10, 4, 256, **idle, **arrivals)) == qa_model().decide(
        RouteInputs(1000, 101, 10, 4, 256, **idle)
    )
    for partial in ({"prefill_arrival_tokens_per_s": 6000.0}, {"prefill_step_tokens": 4096}):
        assert qa_model().decide(RouteInputs(1000, 101, 10, 4, 256, **pool, **partial)) == alone


def test_idle_gpu_prefills_without_decode_steps() -> None:
    b = qa_model().decide(RouteInputs(600, 10, 0, 0, 256, pending_prefill_tokens=300))
    # 900 tokens in passes of 256, 256, 256 and 132: one pass per chunk.
    assert b.ttft_collocated_ms == pytest.approx(3 * (10 + 0.02 * 156) + (10 + 0.02 * 32))
    assert b.harm_collocated_ms == 0.0


def test_prefix_hit_saves_local_prefill_and_transfer() -> None:
    hit = qa_model().decide(RouteInputs(1000, 10, 4, 4, 256, cached_prompt_tokens=900))
    miss = qa_model().decide(RouteInputs(1000, 10, 4, 4, 256, cached_prompt_tokens=0))
    assert hit.chunk_steps == 1.0 and miss.chunk_steps == 4.0
    assert hit.transfer_ms == pytest.approx(100 * XFER)
    assert hit.prefill_ms == miss.prefill_ms  # the prefill GPU has no cache: full prompt
    # A hit never costs more than the whole prompt; a hit of the whole prompt still computes one token.
    assert qa_model().decide(
        RouteInputs(10, 10, 4, 4, 256, cached_prompt_tokens=10)
    ).transfer_ms == pytest.approx(XFER)


def test_the_collocation_gpus_own_hit_prices_the_collocated_path_alone() -> None:
    # Mixed GPU beside a decode pool: it holds 900 of the prompt's tokens, the decode GPU none.
    split = qa_model().decide(RouteInputs(1000, 10, 4, 4, 256, colloc_cached_prompt_tokens=900))
    there = qa_model().decide(RouteInputs(1000, 10, 4, 4, 256, cached_prompt_tokens=900))
    nowhere = qa_model().decide(RouteInputs(1000, 10, 4, 4, 256, cached_prompt_tokens=0))
    assert split.chunk_steps == 1.0 and split.ttft_collocated_ms == there.ttft_collocated_ms
    assert split.transfer_ms == nowhere.transfer_ms == pytest.approx(1000 * XFER)  # all sent
    assert split.ttft_disaggregated_ms == nowhere.ttft_disaggregated_ms
    # Not reported: the decode GPU's hit stands for it (one GPU), the answer bit for bit, unlisted.
    same = qa_model().decide(
        RouteInputs(1000, 10, 4, 4, 256, cached_prompt_tokens=900, colloc_cached_prompt_tokens=900)
    )
    assert same == there


def test_the_pending_prompts_attention_is_added_to_the_collocated_path_alone() -> None:
    model = qa_model(chunk_ms_per_token_prefix=8e-7)
    base = RouteInputs(1000, 10, 4, 4, 256, pending_prefill_tokens=20_000)
    unknown = model.decide(base)
    known = model.decide(dataclasses.replace(base, pending_prefill_prefix_tokens=8_000.0))
    # 20,000 pending tokens over a mean prefix of 8,000, in chunks of 256 - 4 = 252 tokens:
    # 20,000 * (8,000 - 126) token pairs at 8e-7 ms each, all before this prompt's first token.
    ahead = 8e-7 * 20_000 * (8_000 - 126)
    assert known.ttft_collocated_ms == pytest.approx(unknown.ttft_collocated_ms + ahead)
    assert known.local_backlog_ms == pytest.approx(unknown.local_backlog_ms + ahead)
    assert known.ttft_disaggregated_ms == unknown.ttft_disaggregated_ms
    assert known.tpot_collocated_ms == unknown.tpot_collocated_ms
    # Not reported, 0, or a prefix shorter than half a chunk: nothing added, bit for bit, unlisted.
    for mean_prefix in (0.0, 100.0):
        assert model.decide(dataclasses.replace(base, pending_prefill_prefix_tokens=mean_prefix)) == unknown
    assert "pending_prefill_prefix_tokens" not in unknown.assumed
    # Params without the chunk-over-prefix term: nothing to add.
    flat = qa_model()
    assert flat.decide(dataclasses.replace(base, pending_prefill_prefix_tokens=8_000.0)) == flat.decide(base)


def test_the_prefill_gpus_hit_shortens_the_pools_prefill_alone() -> None:
    full = qa_model().decide(RouteInputs(1000, 10, 4, 4, 256, prefill_queue_requests=2, prefill_pool_gpus=1))
    hit = qa_model().decide(
        RouteInputs(
            1000,
            10,
            4,
            4,
            256,
            prefill_queue_requests=2,
            prefill_pool_gpus=1,
            prefill_cached_prompt_tokens=900,
        )
    )
    # The rest, 100 tokens, over the 900 cached: T_P(100) plus what attending over them adds.
    assert hit.prefill_ms == pytest.approx(
        qa_model().forms.prefill_ms(100.0) + qa_model().forms.prefix_ms(0.0, 100.0, 100.0, 900.0)
    )
    assert hit.prefill_ms < full.prefill_ms
    assert hit.prefill_wait_ms == full.prefill_wait_ms  # the prompts ahead are not this one
    assert hit.transfer_ms == full.transfer_ms  # the decode GPU holds none of it
    assert hit.ttft_collocated_ms == full.ttft_collocated_ms
    # Not reported, or 0: the whole prompt, bit for bit and not listed.
    zero = qa_model().decide(
        RouteInputs(
            1000, 10, 4, 4, 256, prefill_queue_requests=2, prefill_pool_gpus=1, prefill_cached_prompt_tokens=0
        )
    )
    assert zero == full


def test_defaults_are_listed_and_used() -> None:
    b = qa_model().decide(RouteInputs(512, 100, 3, 3, 256))
    assert b.assumed == OPTIONAL_INPUTS
    given_all = RouteInputs(512, 100, 3, 3, 256, **{name: 1 for name in OPTIONAL_INPUTS})
    assert qa_model().decide(given_all).assumed == ()
    # Missing context means running decodes like this prompt: K = B * L.
    explicit = qa_model().decide(RouteInputs(512, 100, 3, 3, 256, colloc_context_tokens=3 * 512))
    assert explicit.ttft_collocated_ms == b.ttft_collocated_ms
    # No queue reported: no wait.
    assert b.prefill_wait_ms == 0.0


def test_a_long_prefill_queue_keeps_requests_local() -> None:
    model = qa_model()
    decisions = [
        model.decide(
            RouteInputs(
                2000,
                100,
                20,
                20,
                512,
                prefill_queue_requests=q,
                prefill_pool_gpus=2,
                pending_prefill_tokens=3000,
            )
        ).decision
        for q in range(0, 40)
    ]
    assert decisions[0] == "disaggregated"
    assert decisions[-1] == "collocated"
    # Monotone: once the queue keeps it local, a longer queue does too.
    first_local = decisions.index("collocated")
    assert set(decisions[first_local:]) == {"collocated"}
    b = model.decide(
        RouteInputs(
            2000,
            100,
            20,
            20,
            512,
            prefill_queue_requests=39,
            prefill_pool_gpus=2,
            pending_prefill_tokens=3000,
        )
    )
    assert b.reason == "prefill_queue"


def test_local_backlog_sends_requests_away() -> None:
    same_gpu = RouteInputs(
        2000, 100, 20, 20, 512, pending_prefill_tokens=20_000, decode_pending_prefill_tokens=20_000
    )
    b = qa_model().decide(same_gpu)
    assert b.decision == "disaggregated" and b.reason == "local_backlog"


def test_slo_decides_when_one_path_is_feasible() -> None:
    base = RouteInputs(2000, 100, 20, 20, 512, pending_prefill_tokens=4000)
    free = qa_model().decide(base)
    # A TTFT target between the two paths' TTFTs picks the faster one, whatever the cost.
    lo, hi = sorted((free.ttft_collocated_ms, free.ttft_disaggregated_ms))
    tight = qa_model(harm_weight=100.0).decide(dataclasses.replace(base, ttft_slo_ms=(lo + hi) / 2 / 0.9))
    assert tight.reason == "slo_only_feasible" and tight.meets_slo
    fast = "collocated" if free.ttft_collocated_ms < free.ttft_disaggregated_ms else "disaggregated"
    assert tight.decision == fast
    # Neither feasible: flagged, and sent where it uses less of other requests' targets. No
    # prefill queue: the pool delays no one's first token, while its chunks would delay the 20
    # running decodes here (the step both paths slow alike): disaggregated.
    targets = dataclasses.replace(base, ttft_slo_ms=lo / 2, tpot_slo_ms=50.0)
    none = qa_model().decide(targets)
    assert none.reason == "slo_none_feasible" and not none.meets_slo
    assert none.decision == "disaggregated"
    # 500 prompts queued on the pool would each start later: it stays local.
    queued = qa_model().decide(dataclasses.replace(targets, prefill_queue_requests=500))
    assert queued.decision == "collocated" and not queued.meets_slo
    # Without a TPOT target the decodes' delay breaks no target, and without a queue the pool
    # delays no one: a tie, collocated.
    assert qa_model().decide(dataclasses.replace(base, ttft_slo_ms=lo / 2)).decision == "collocated"


def test_harm_weight_prices_the_running_decodes() -> None:
    x = RouteInputs(1000, 200, 64, 64, 512, prefill_queue_requests=2, prefill_pool_gpus=2)
    selfish, social = qa_model(0.0).decide(x), qa_model(1.0).decide(x)
    assert selfish.cost_collocated_ms == selfish.t_collocated_ms
    assert social.cost_collocated_ms == pytest.approx(social.t_collocated_ms + social.harm_collocated_ms)
    assert social.harm_weight == 1.0
    # With targets, harm counts in proportion to how close its victims run to them.
    raw = social.harm_collocated_ms
    loose = qa_model(1.0).decide(dataclasses.replace(x, tpot_slo_ms=social.tpot_collocated_ms * 4))
    assert loose.harm_collocated_ms == pytest.approx(raw / 4)
    tight = qa_model(1.0).decide(dataclasses.replace(x, tpot_slo_ms=social.tpot_collocated_ms / 2))
    assert tight.harm_collocated_ms == pytest.approx(raw)


def test_breakdown_fields_and_reasons_are_bounded() -> None:
    terms = term_names(QueueAwareBreakdown)
    assert "meets_slo" in terms and "prefill_wait_ms" in terms
    assert set(REASONS) <= set(all_reasons())
    assert len(all_reasons()) == len(set(all_reasons()))


# --- scalar == vectorised, bit for bit -----------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    st.lists(route_inputs_st, min_size=1, max_size=40),
    st.sampled_from([0.0, 0.25, 1.0]),
    st.sampled_from([(0.0, 0.0), (4e-7, 8e-7), (1e-6, 0.0), (0.0, 3e-6)]),
)
def test_decide_many_equals_decide_bit_for_bit(
    rows: list[RouteInputs], w: float, attention: tuple[float, float]
) -> None:
    rows = [
        dataclasses.replace(r, cached_prompt_tokens=None) if r.cached_prompt_tokens is None else r
        for r in rows
    ]
    sq, prefix = attention  # the prefill's and the chunks' attention terms
    model = qa_model(
        w,
        chunk_ms_per_token_sq=1e-5,
        chunk_ms_per_token_seq=2e-5,
        prefill_ms_per_token_sq=sq,
        chunk_ms_per_token_prefix=prefix,
    )
    batch = model.decide_many(RouteColumns.from_inputs(rows))
    assert batch.rows() == [model.decide(r) for r in rows]
    assert batch.decisions() == [model.decide(r).decision for r in rows]


@pytest.mark.parametrize("attention", [0.0, 1e9])
def test_every_term_is_finite_at_the_bounds(attention: float) -> None:
    # The attention terms at their plausible bound: still finite for the largest request.
    big = RouteInputs(2**24, 2**24, 10**6, 10**6, 2**24, *(10**9,) * 9, 1e9, 1e9, 10**9)
    model = qa_model(prefill_ms_per_token_sq=attention, chunk_ms_per_token_prefix=attention)
    b = model.decide(big)
    assert all(math.isfinite(v) for v in dataclasses.astuple(b) if isinstance(v, float))
    batch = model.decide_many(RouteColumns.from_inputs([big]))
    assert all(np.isfinite(v).all() for v in batch.terms.values())


# --- registry and params --------------------------------------------------------------------------
def test_registry_builds_by_name_and_refuses_what_the_params_lack() -> None:
    v1 = params_from_dict(TEST_PARAMS)
    v2 = params_from_dict({**TEST_PARAMS, "schema_version": 2, "queue_aware": FORMS})
    assert default_model_name(v1) == "design" and default_model_name(v2) == "queue-aware"
    assert isinstance(build_model(AUTO, v1), AnalyticalCostModel)
    assert isinstance(build_model(AUTO, v2, harm_weight=0.5), QueueAwareModel)
    assert isinstance(build_model("design", v2), AnalyticalCostModel)
    with pytest.raises(InvalidParams, match="no queue_aware forms"):
        build_model("queue-aware", v1)
    with pytest.raises(InvalidParams, match="unknown"):
        build_model("magic", v2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["queue_aware"].pop("decode_base_ms"), "queue_aware.decode_base_ms: missing"),
        (lambda d: d["queue_aware"].update(extra=1.0), "queue_aware.extra: unknown parameter"),
        (lambda d: d["queue_aware"].update(chunk_ms_per_token=-1.0), "must be >= 0"),
        (lambda d: d["queue_aware"].update(prefill_ms_per_token=0.0), "must be > 0"),
        (lambda d: d["queue_aware"].update(decode_ms_per_seq="x"), "expected a number"),
        (lambda d: d["queue_aware"].update(decode_ms_per_seq=True), "expected a number"),
        (lambda d: d["queue_aware"].update(decode_ms_per_seq=1e300), "plausible bound"),
        (lambda d: d.update(queue_aware=[1]), "queue_aware: expected an object"),
        (lambda d: d.update(schema_version=1), "queue_aware: needs schema_version 2"),
        (lambda d: d.pop("queue_aware"), "queue_aware: missing"),
    ],
)
def test_bad_queue_aware_params_name_the_field(change: Any, message: str) -> None:
    doc: dict[str, Any] = {**TEST_PARAMS, "schema_version": 2, "queue_aware": dict(FORMS)}
    change(doc)
    with pytest.raises(InvalidParams, match=message):
        params_from_dict(doc)


def test_schema_two_round_trips_and_schema_one_keeps_its_bytes() -> None:
    v2 = params_from_dict({**TEST_PARAMS, "schema_version": 2, "queue_aware": FORMS})
    assert v2.schema_version == 2 and v2.to_dict()["queue_aware"] == FORMS
    assert params_from_dict(v2.to_dict()) == v2
    v1 = params_from_dict(TEST_PARAMS)
    assert v1.schema_version == 1 and "queue_aware" not in v1.to_dict()
    assert v2.params_id != v1.params_id
    assert QueueAwareParams(**FORMS).to_dict() == FORMS


def test_the_margin_keeps_predictions_clear_of_the_target() -> None:
    x = RouteInputs(1000, 100, 0, 0, 256, pending_prefill_tokens=0, prefill_queue_requests=0)
    ttft = qa_model().decide(x).ttft_collocated_ms
    # Predicted exactly at the target: met only without a margin.
    at_target = dataclasses.replace(x, ttft_slo_ms=ttft)
    doc: dict[str, Any] = {**TEST_PARAMS, "schema_version": 2, "queue_aware": FORMS}
    strict = QueueAwareModel(params_from_dict(doc), slo_margin=0.0).decide(at_target)
    assert strict.meets_slo
    assert not qa_model().decide(dataclasses.replace(x, ttft_slo_ms=ttft * 1.05)).meets_slo or (
        qa_model().decide(dataclasses.replace(x, ttft_slo_ms=ttft * 1.05)).ttft_disaggregated_ms
        <= ttft * 1.05 * 0.9
    )
    with pytest.raises(ValueError, match="slo_margin"):
        QueueAwareModel(params_from_dict(doc), slo_margin=1.0)


def test_design_only_columns_are_independent_arrays() -> None:
    cols = RouteColumns.design_only([10, 20], 5, 1)
    cols.optional["pending_prefill_tokens"][:] = 7.0
    assert all(np.isnan(v).all() for name, v in cols.optional.items() if name != "pending_prefill_tokens")


def test_decide_many_equals_decide_on_many_requests() -> None:
    # Reported and unreported inputs mixed per column, a large batch of them.
    rows = random_route_inputs(70_000, seed=7)
    model = qa_model(0.25, chunk_ms_per_token_sq=1e-5, chunk_ms_per_token_seq=2e-5)
    assert model.decide_many(RouteColumns.from_inputs(rows)).rows() == [model.decide(r) for r in rows]
