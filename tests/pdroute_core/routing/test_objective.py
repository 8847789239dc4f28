"""The objective (latency, goodput) and the admission signals of the queue-aware model."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.route_fields import CHOICES, RECENT_WINDOW_MS
from pdroute_core.routing import RouteColumns, RouteInputs, build_model
from pdroute_core.routing.objective import ADMISSIONS, OBJECTIVES, admission, lateness_ms, parse_objective
from pdroute_core.routing.queue_aware import QueueAwareModel
from pdroute_core.routing.resolve import resolve
from tests.factories import qa_model, route_inputs_st

# A long prompt that no path serves within 200 ms / 50 ms (its chunks beside 64 decodes take
# ~300 ms), and 40 prompts queued on a 2-GPU pool, whose wait alone is past the TTFT target.
HOPELESS = RouteInputs(
    8192, 200, 64, 64, 512,
    prefill_queue_requests=40, prefill_pool_gpus=2, ttft_slo_ms=200.0, tpot_slo_ms=50.0,
)  # fmt: skip


def goodput_of(model: QueueAwareModel) -> QueueAwareModel:
    return model.with_objective("goodput")


def test_latency_is_the_model_as_before_bit_for_bit() -> None:
    plain = qa_model()
    latency = QueueAwareModel(plain.params, objective="latency")
    for x in (HOPELESS, dataclasses.replace(HOPELESS, prefill_queue_requests=0), RouteInputs(100, 10, 0)):
        a, b = plain.decide(x), latency.decide(x)
        assert a == b and a.objective == "latency"


def test_goodput_sends_a_hopeless_request_to_a_pool_already_past_its_target() -> None:
    latency, goodput = qa_model(), goodput_of(qa_model())
    a, b = latency.decide(HOPELESS), goodput.decide(HOPELESS)
    assert not a.meets_slo and not b.meets_slo and b.reason == "slo_none_feasible"
    # The premise: the pool's wait alone is past the TTFT target (the queued prompts miss it anyway).
    assert HOPELESS.ttft_slo_ms is not None and b.prefill_wait_ms > HOPELESS.ttft_slo_ms
    # Latency counts the 40 queued prompts as victims and keeps it local; goodput does not.
    assert (a.decision, b.decision) == ("collocated", "disaggregated")
    assert b.objective == "goodput"
    # With a pool that still serves in time, the queued prompts count again: as latency decides.
    short = dataclasses.replace(HOPELESS, prefill_queue_requests=1)
    c = goodput.decide(short)
    assert not c.meets_slo and c.ttft_disaggregated_ms - c.prefill_ms - c.transfer_ms <= 200.0
    assert dataclasses.replace(c, objective="latency") == latency.decide(short)


@settings(max_examples=60, deadline=None)
@given(st.lists(route_inputs_st, min_size=1, max_size=40))
def test_goodput_decides_as_latency_wherever_a_path_meets_the_targets(rows: list[RouteInputs]) -> None:
    latency = qa_model(chunk_ms_per_token_sq=1e-5, chunk_ms_per_token_seq=2e-5)
    goodput = goodput_of(latency)
    for x in rows:
        a, b = latency.decide(x), goodput.decide(x)
        if a.meets_slo and dataclasses.replace(b, objective="latency") != a:
            # A collocation would make the decodes beside it late: spread over their steps, or
            # all its delay past the least slack reported.
            slo = x.tpot_slo_ms
            D = max(1.0, x.predicted_output_len - 1.0)
            col = qa_model(chunk_ms_per_token_sq=1e-5, chunk_ms_per_token_seq=2e-5).collocated(resolve(x))
            ahead = col.chunk * (x.pending_prefill_tokens or 0) / col.chunk_tokens + col.ahead_ms
            slack = x.colloc_tpot_slack_ms
            own = _spread(x) * D
            doomed = slack is not None and ahead > 0.9 * slack >= own  # late whatever it does
            past_slack = slack is not None and own + ahead > slack and not doomed
            assert a.ttft_collocated_ms / (x.ttft_slo_ms or math.inf) <= 0.9
            spread_late = slo is not None and (a.tpot_collocated_ms + _spread(x)) / slo > 0.9
            if a.reason == "slo_only_feasible" and a.decision == "collocated":
                # Only collocation served it in time, surely past that slack (were the delay 10 %
                # shorter), for a request the other path may still serve, or two or more decodes
                # surely late (past the second least slack too; not reported, the spread test says
                # so of two or more running); or at least one decode is expected to join while its
                # chunks run and the spread test makes it late: no path does now.
                late_d = max(
                    a.ttft_disaggregated_ms / (x.ttft_slo_ms or math.inf),
                    a.tpot_disaggregated_ms / (slo or math.inf),
                )
                slack2 = x.colloc_tpot_slack2_ms
                two = spread_late and x.system_load >= 2  # the spread test's count, not reported
                many = 0.9 * (own + ahead) > slack2 if slack2 is not None else two
                surely = past_slack and slack is not None and 0.9 * (own + ahead) > slack
                assert (surely and (many or 0.9 * late_d <= 1.0)) or (spread_late and _coming(x) >= 1.0)
                assert not b.meets_slo and b.reason == "slo_none_feasible"
                continue
            # Both paths meet the targets.
            assert b.meets_slo and (b.decision, b.reason) == ("disaggregated", "less_harm")
            # Decodes there whose slack is not reported, or decodes to come (routes or a rate).
            coming = x.colloc_feasible_routes != 0 or x.colloc_arrivals_per_s is not None
            beside = (x.system_load > 0 and slack is None) or coming
            assert past_slack or (spread_late and beside)
        assert (a.predicted_lateness_ms, a.admission) == (b.predicted_lateness_ms, b.admission) or (
            a.decision != b.decision
        )


def _coming(x: RouteInputs) -> float:
    """The decodes expected to join the collocation GPU during this prompt's prefill there: at
    the gateway's rate where reported, else its routes of the recent window as a rate."""
    own = qa_model(chunk_ms_per_token_sq=1e-5, chunk_ms_per_token_seq=2e-5).collocated(resolve(x)).own
    if x.colloc_arrivals_per_s is not None:
        return x.colloc_arrivals_per_s * own / 1000.0
    return 0.0 if x.colloc_feasible_routes is None else x.colloc_feasible_routes * own / RECENT_WINDOW_MS


def _spread(x: RouteInputs) -> float:
    """The delay a collocation's chunks add to each decode beside it, per step: the model's own
    path terms, spread over this request's D steps."""
    col = qa_model(chunk_ms_per_token_sq=1e-5, chunk_ms_per_token_seq=2e-5).collocated(resolve(x))
    D = max(1.0, x.predicted_output_len - 1.0)
    return float(col.u * col.chunk / (col.chunk_tokens * D) + col.prefix_ms / D)


# 4 decodes on the collocation GPU, a 4,000-token prompt in chunks of 252 (16 steps, each
# 2.52 ms longer for them: 40 ms in all), 5 output tokens: 10 ms more per step of a decode's
# 4, with its own step at 5.3 ms and a 12 ms TPOT target: it would be late beside this prompt.
BESIDE = RouteInputs(4000, 5, 4, 4, 256, prefill_pool_gpus=1, ttft_slo_ms=2000.0, tpot_slo_ms=12.0)


def test_goodput_does_not_collocate_a_prompt_that_would_make_the_decodes_beside_it_late() -> None:
    latency, goodput = qa_model(), goodput_of(qa_model())
    a, b = latency.decide(BESIDE), goodput.decide(BESIDE)
    assert a.meets_slo and b.meets_slo  # both paths serve this request in time
    assert a.ttft_collocated_ms <= 0.9 * 2000.0 and a.ttft_disaggregated_ms <= 0.9 * 2000.0
    assert (a.decision, b.decision) == ("collocated", "disaggregated") and b.reason == "less_harm"
    spread = 4000 * 0.01 / 4  # the chunks' 40 ms over the decodes' 4 steps
    assert b.tpot_collocated_ms <= 0.9 * 12.0 < b.tpot_collocated_ms + spread
    # Spread over 400 steps the same chunks leave them in time: as latency decides.
    long = dataclasses.replace(BESIDE, predicted_output_len=401)
    assert goodput.decide(long).decision == latency.decide(long).decision == "collocated"
    # With nothing running beside it the test still holds where decodes will join while its
    # chunks run: without a word from the gateway some are taken to ...
    idle = dataclasses.replace(BESIDE, system_load=0, decode_batch_size=0)
    assert goodput.decide(idle).reason == "less_harm"
    assert latency.decide(idle).reason != "less_harm"

    def as_latency(x: RouteInputs) -> bool:
        return dataclasses.replace(goodput.decide(x), objective="latency") == latency.decide(x)

    # ... and with it, where at least one is expected during its 208 ms prefill there: at the
    # gateway's rate (5 requests/s: 1.04), or its routes of two seconds as a rate (10: 1.04).
    for coming in ({"colloc_arrivals_per_s": 5.0}, {"colloc_feasible_routes": 10}):
        assert goodput.decide(dataclasses.replace(idle, **coming)).reason == "less_harm"
    # Fewer, or none (no request in time lately): decided as latency decides.
    for quiet in (
        {"colloc_arrivals_per_s": 4.0},
        {"colloc_feasible_routes": 9},
        {"colloc_feasible_routes": 0},
    ):
        assert as_latency(dataclasses.replace(idle, **quiet))
    # The rate, where reported, is read instead of the routes.
    assert as_latency(dataclasses.replace(idle, colloc_arrivals_per_s=4.0, colloc_feasible_routes=10))
    assert goodput.decide(
        dataclasses.replace(idle, colloc_arrivals_per_s=5.0, colloc_feasible_routes=0)
    ).reason == ("less_harm")
    # Running decodes are beside it whatever the routes say.
    assert goodput.decide(dataclasses.replace(BESIDE, colloc_feasible_routes=0)).reason == "less_harm"


def test_goodput_judges_the_running_decodes_by_their_slack_where_it_is_reported() -> None:
    # Spread over this request's 4 steps its 40 ms of chunks look like 10 ms on every step of
    # the 4 decodes running beside it (test above); a gateway that reports their least slack
    # says what they can take: 1 s absorbs the whole 40 ms, so no decode goes late.
    latency, goodput = qa_model(), goodput_of(qa_model())
    roomy = dataclasses.replace(BESIDE, colloc_tpot_slack_ms=1000.0, colloc_feasible_routes=0)
    b = goodput.decide(roomy)
    assert (b.decision, b.meets_slo) == ("collocated", True) and b.reason != "less_harm"
    assert dataclasses.replace(b, objective="latency") == latency.decide(roomy)
    # 30 ms of slack does not: spared (the slack test).
    assert goodput.decide(dataclasses.replace(roomy, colloc_tpot_slack_ms=30.0)).reason == "less_harm"
    # Decodes still to come have no slack yet: the spread test judges them where at least one is
    # expected during its 123 ms of prefill there (10 requests/s: 1.2; 5: 0.6, none).
    assert goodput.decide(dataclasses.replace(roomy, colloc_arrivals_per_s=10.0)).reason == "less_harm"
    assert goodput.decide(dataclasses.replace(roomy, colloc_arrivals_per_s=5.0)).reason != "less_harm"


def test_goodput_does_not_collocate_past_the_least_slack_of_the_decodes_beside_it() -> None:
    # Spread over 400 steps the chunks' 40 ms leave this request's like in time (test above)...
    latency, goodput = qa_model(), goodput_of(qa_model())
    long = dataclasses.replace(BESIDE, predicted_output_len=401)
    assert goodput.decide(long).decision == "collocated"
    # ...but a decode beside it with 30 ms of slack left goes late with the whole 40 ms.
    tight = dataclasses.replace(long, colloc_tpot_slack_ms=30.0)
    b = goodput.decide(tight)
    assert (b.decision, b.reason, b.meets_slo) == ("disaggregated", "less_harm", True)
    assert "colloc_tpot_slack_ms" not in b.assumed  # not reported is not an assumption
    # 50 ms of slack absorbs it: the answer without the input, bit for bit.
    assert goodput.decide(dataclasses.replace(long, colloc_tpot_slack_ms=50.0)) == goodput.decide(long)
    # Unless 1,000 tokens pending there come first: their 10 ms of chunks take it to 50 ms.
    pending = dataclasses.replace(long, colloc_tpot_slack_ms=45.0, pending_prefill_tokens=1000)
    assert goodput.decide(pending).reason == "less_harm"
    # 5,000 tokens pending (50 ms) take a decode with 45 ms of slack past 0.9 of it whatever this
    # request does, and its own 40 ms alone would not: the answer is the one without the input.
    lost = dataclasses.replace(pending, pending_prefill_tokens=5000)
    unknown = dataclasses.replace(lost, colloc_tpot_slack_ms=None)
    assert goodput.decide(lost).reason != "less_harm"
    assert dataclasses.replace(goodput.decide(lost), assumed=()) == dataclasses.replace(
        goodput.decide(unknown), assumed=()
    )
    # With 30 ms of slack its own 40 ms alone would sink such a decode: spared as before.
    assert goodput.decide(dataclasses.replace(lost, colloc_tpot_slack_ms=30.0)).reason == "less_harm"
    # latency does not read it.
    assert latency.decide(tight) == latency.decide(long)


def test_goodput_spares_a_coming_decode_only_where_the_prefill_step_cannot_fill_past_the_target() -> None:
    # No decode runs on the collocation GPU, but one on its way there (its KV in flight) has
    # 30 ms of slack: goodput sends the prompt to the pool (218.8 ms, within 0.9 x 300 ms) to
    # spare it, though its collocation (208 ms) is in time too and faster.
    goodput = goodput_of(qa_model())
    tight = dataclasses.replace(
        BESIDE,
        predicted_output_len=401,
        system_load=0,
        colloc_tpot_slack_ms=30.0,
        ttft_slo_ms=300.0,
        prefill_running_requests=1,
        prefill_queue_requests=1,
        prefill_queue_tokens=2000,
    )
    b = goodput.decide(tight)
    assert (b.decision, b.reason, b.meets_slo) == ("disaggregated", "less_harm", True)
    assert b.ttft_collocated_ms < b.ttft_disaggregated_ms <= 0.9 * 300.0
    # A busy prefill engine that batches 16,384 tokens a step, prompts arriving there: its next
    # step has 10,384 tokens of room that later prompts can fill before it starts, 207.7 ms at
    # 0.02 ms a token, which would take the pool past 270 ms. With fewer than one decode beside
    # it (none running, none expected during its prefill), that risk to this request outweighs
    # them: the request is decided as latency decides it, collocated.
    step = dataclasses.replace(tight, prefill_step_tokens=16_384, prefill_arrival_tokens_per_s=1000.0)
    c = goodput.decide(step)
    assert c.ttft_disaggregated_ms + 0.02 * (16_384 - 4000 - 2000) > 0.9 * 300.0 >= c.ttft_disaggregated_ms
    assert (c.decision, c.meets_slo) == ("collocated", True)
    assert dataclasses.replace(c, objective="latency") == qa_model().decide(step)
    # 100 tokens of room (2 ms) cannot: the decode is spared as before.
    small = dataclasses.replace(step, prefill_step_tokens=6100)
    assert goodput.decide(small).reason == "less_harm"
    # Nothing arriving there, or the step's size not reported: as before.
    assert goodput.decide(dataclasses.replace(step, prefill_arrival_tokens_per_s=None)).reason == "less_harm"
    assert goodput.decide(dataclasses.replace(step, prefill_step_tokens=None)).reason == "less_harm"
    # One or four decodes running beside it, or two expected to join during its 208 ms there (10
    # requests a second): the risk to this one request does not outweigh them.
    for beside in ({"system_load": 1}, {"system_load": 4}, {"colloc_arrivals_per_s": 10.0}):
        spared = goodput.decide(dataclasses.replace(step, **beside))
        assert (spared.decision, spared.reason, spared.meets_slo) == ("disaggregated", "less_harm", True)
    # 0.4 expected (2 a second): fewer than one, collocated.
    assert goodput.decide(dataclasses.replace(step, colloc_arrivals_per_s=2.0)).decision == "collocated"


def test_goodput_weighs_a_collocation_only_it_serves_in_time_against_the_decodes_it_makes_late() -> None:
    # The pool 20 prompts deep: only collocation serves this request in time, the pool 0.98 of
    # its TTFT target (past the feasible share, within the target)...
    latency, goodput = qa_model(), goodput_of(qa_model())
    alone = dataclasses.replace(BESIDE, predicted_output_len=401, prefill_queue_requests=20)
    a = latency.decide(alone)
    assert (a.decision, a.reason, a.meets_slo) == ("collocated", "slo_only_feasible", True)
    assert 0.9 * 2000.0 < a.ttft_disaggregated_ms <= 2000.0 and a.ttft_collocated_ms <= 0.9 * 2000.0
    assert goodput.decide(alone).decision == "collocated"  # no slack reported: as before
    # ...but with 30 ms of slack left beside it, its 40 ms of chunks would surely make a decode
    # late, for a request the pool may still serve: no path meets the targets, the budgets decide
    # (the 20 prompts queued on the pool, still in time, weigh more than the decodes: collocated).
    b = goodput.decide(dataclasses.replace(alone, colloc_tpot_slack_ms=30.0))
    assert (b.decision, b.reason, b.meets_slo) == ("collocated", "slo_none_feasible", False)
    assert b.admission == "defer" and b.predicted_lateness_ms == 0.0
    # 50 ms of slack absorbs the chunks: collocated, as without the input.
    c = goodput.decide(dataclasses.replace(alone, colloc_tpot_slack_ms=50.0))
    assert (c.decision, c.reason, c.meets_slo) == ("collocated", "slo_only_feasible", True)
    # 38 ms: past it, but not were the 40 ms 10 % less. A decode only probably late is no reason
    # to lose a request surely in time: collocated. (Both paths in time, it would be spared.)
    coin = goodput.decide(dataclasses.replace(alone, colloc_tpot_slack_ms=38.0))
    assert (coin.decision, coin.reason, coin.meets_slo) == ("collocated", "slo_only_feasible", True)
    spared = goodput.decide(dataclasses.replace(BESIDE, predicted_output_len=401, colloc_tpot_slack_ms=38.0))
    assert (spared.decision, spared.reason) == ("disaggregated", "less_harm")
    # 50 ms of slack behind 5,000 pending tokens (50 ms of chunks): that decode is late, or a
    # coin flip, whatever this request does, and its own 40 ms alone would not sink it: collocating
    # it trades no target, collocated, it alone in time. With 30 ms its own chunks would: refused.
    behind = dataclasses.replace(alone, colloc_tpot_slack_ms=50.0, pending_prefill_tokens=5000)
    d = goodput.decide(behind)
    assert (d.decision, d.reason, d.meets_slo) == ("collocated", "slo_only_feasible", True)
    e = goodput.decide(dataclasses.replace(behind, colloc_tpot_slack_ms=30.0))
    assert (e.reason, e.meets_slo) == ("slo_none_feasible", False)
    # latency does not read it.
    assert latency.decide(dataclasses.replace(alone, colloc_tpot_slack_ms=30.0)) == a
    # The pool 40 prompts deep, past the target even were it 10 % shorter: refused, the request is
    # surely lost, for the one decode surely late. One for one is no trade: collocated, as the
    # spread test says the other decodes beside it stay in time (its chunks over 400 steps)...
    deep = dataclasses.replace(alone, prefill_queue_requests=40, colloc_tpot_slack_ms=30.0)
    f = goodput.decide(deep)
    assert 0.9 * f.ttft_disaggregated_ms > 2000.0
    assert (f.decision, f.reason, f.meets_slo) == ("collocated", "slo_only_feasible", True)
    # ...but over 4 steps they go late too, four of them: refused, more targets than its own.
    short = dataclasses.replace(deep, predicted_output_len=5)
    g = goodput.decide(short)
    assert g.tpot_collocated_ms <= 0.9 * 12.0 < g.tpot_collocated_ms + 4000 * 0.01 / 4
    assert (g.decision, g.reason, g.meets_slo) == ("disaggregated", "slo_none_feasible", False)
    # One decode beside it: one for one again, collocated.
    one = goodput.decide(dataclasses.replace(short, system_load=1))
    assert (one.decision, one.reason, one.meets_slo) == ("collocated", "slo_only_feasible", True)
    assert goodput.decide(dataclasses.replace(short, colloc_tpot_slack_ms=None)).decision == "collocated"
    # The second least slack, reported, counts them instead: 1 s, the chunks pass one slack only
    # (collocated, where the spread test refused); 35 ms, two surely (refused, where it collocated).
    second = goodput.decide(dataclasses.replace(short, colloc_tpot_slack2_ms=1000.0))
    assert (second.decision, second.reason, second.meets_slo) == ("collocated", "slo_only_feasible", True)
    two = goodput.decide(dataclasses.replace(deep, colloc_tpot_slack2_ms=35.0))
    assert (two.decision, two.reason, two.meets_slo) == ("disaggregated", "slo_none_feasible", False)
    # 40 ms: past it, but not were the delay 10 % shorter: one decode surely late, collocated.
    assert goodput.decide(dataclasses.replace(deep, colloc_tpot_slack2_ms=40.0)).decision == "collocated"


def test_goodput_does_not_take_an_only_collocation_that_would_make_the_coming_decodes_late() -> None:
    # An idle GPU the gateway sent nothing in time lately, the pool 40 prompts deep: only
    # collocation serves this request in time (208 ms of chunks, 10 ms a step over its 4 steps).
    latency, goodput = qa_model(), goodput_of(qa_model())
    x = dataclasses.replace(
        BESIDE, system_load=0, decode_batch_size=0, prefill_queue_requests=40,
        colloc_feasible_routes=0, tpot_slo_ms=10.0,
    )  # fmt: skip
    a = goodput.decide(x)
    assert (a.decision, a.reason, a.meets_slo) == ("collocated", "slo_only_feasible", True)
    assert a.local_prefill_ms == pytest.approx(208.0)
    # At 4 requests/s fewer than one decode is expected during those 208 ms: as before, bit for bit.
    assert goodput.decide(dataclasses.replace(x, colloc_arrivals_per_s=4.0)) == a
    # At 5/s one is (1.04), and the chunks' delay (the first to arrive waits through all of it)
    # takes it from 5.05 ms a step past the target's feasible share (15.05 > 9 ms): one request
    # in time for another, no path meets the targets.
    b = goodput.decide(dataclasses.replace(x, colloc_arrivals_per_s=5.0))
    assert (b.decision, b.reason, b.meets_slo) == ("disaggregated", "slo_none_feasible", False)
    assert b.tpot_collocated_ms + 40.0 / 4 > 0.9 * 10.0 > b.tpot_collocated_ms
    # Not reported, the two-second routes stand for the rate: 10 routes are 5/s, 9 are 4.5/s.
    assert goodput.decide(dataclasses.replace(x, colloc_feasible_routes=10)).reason == "slo_none_feasible"
    assert goodput.decide(dataclasses.replace(x, colloc_feasible_routes=9)) == a
    # Reported, the rate is read instead of the routes.
    assert goodput.decide(
        dataclasses.replace(x, colloc_feasible_routes=20, colloc_arrivals_per_s=4.0)
    ).meets_slo
    # Spread over 400 steps the chunks leave the coming decodes in time.
    long = dataclasses.replace(x, predicted_output_len=401, colloc_arrivals_per_s=5.0)
    assert goodput.decide(long).reason == "slo_only_feasible"
    # latency does not read it.
    assert latency.decide(dataclasses.replace(x, colloc_arrivals_per_s=5.0)) == latency.decide(x)


# Both paths late (a 50 ms TTFT target no 4,000-token prefill meets); the collocation GPU's
# steps on time (5.45 ms against a 7 ms TPOT target) but prompts chunked there at 2 M tokens/s,
# which stretch its predicted TPOT to a chunk per step (7.9 ms), past the target.
STRETCHED = RouteInputs(
    4000, 50, 8, 8, 256, prefill_pool_gpus=1, ttft_slo_ms=50.0, tpot_slo_ms=7.0,
    colloc_prefill_tokens_per_s=2e6, decode_prefill_tokens_per_s=2e6,
)  # fmt: skip


def test_goodput_counts_the_decodes_of_a_gpu_late_only_through_the_prompts_chunked_on_it() -> None:
    b = goodput_of(qa_model()).decide(STRETCHED)
    assert not b.meets_slo and b.reason == "slo_none_feasible"
    assert b.tpot_collocated_ms > 7.0 and b.tpot_disaggregated_ms > 7.0  # late with later chunks ...
    # ... on time without them (s(B + 1, K + L + O/2)): their decodes are not lost, they count.
    assert 5.0 + 0.01 * 9 + 1e-5 * (8 * 4000 + 4000 + 25) <= 7.0
    # The collocation's chunks use more of their budgets than the slower shared step alone.
    assert b.decision == "disaggregated"
    assert b.decision == qa_model().decide(STRETCHED).decision  # as latency, which counts every victim


# No path in time: the pool's one queued prompt is on time (its wait 252 ms of 300), and 6,000
# prompt tokens are pending on the collocation GPU, on time too (their share 125 ms); it is the
# decode GPU too (one GPU for both paths).
PENDING = RouteInputs(
    8000, 20, 2, 2, 512,
    prefill_queue_requests=1, prefill_pool_gpus=1, ttft_slo_ms=300.0, tpot_slo_ms=50.0,
    pending_prefill_tokens=6000, decode_pending_prefill_tokens=6000,
)  # fmt: skip


def test_goodput_counts_the_prompts_pending_on_the_gpu_as_it_counts_the_pools_queue() -> None:
    goodput = goodput_of(qa_model())
    unknown = goodput.decide(PENDING)
    known = goodput.decide(dataclasses.replace(PENDING, pending_prefill_requests=3))
    assert not unknown.meets_slo and not known.meets_slo
    assert unknown.prefill_wait_ms < 300.0 and unknown.local_backlog_ms < 300.0  # both queues on time
    # The pool's one queued prompt stands for those that would queue behind this one there; the
    # GPU's three pending prompts now stand for as many behind it here, and outweigh it.
    assert (unknown.decision, known.decision) == ("collocated", "disaggregated")
    # Zero pending prompts, or a GPU whose pending prompts are late already: as not reported.
    assert goodput.decide(dataclasses.replace(PENDING, pending_prefill_requests=0)) == unknown
    late = dataclasses.replace(PENDING, pending_prefill_tokens=60_000)
    assert goodput.decide(late).local_backlog_ms > 300.0
    assert goodput.decide(dataclasses.replace(late, pending_prefill_requests=30)) == goodput.decide(late)
    # A decode GPU with no local prefill work (a mixed GPU's pending prompts beside it): not counted.
    apart = dataclasses.replace(PENDING, decode_pending_prefill_tokens=None, pending_prefill_requests=3)
    assert goodput.decide(apart).decision == "collocated"
    # Latency counts every victim as before: the input changes nothing there.
    latency = qa_model()
    assert latency.decide(dataclasses.replace(PENDING, pending_prefill_requests=3)) == latency.decide(PENDING)


def test_goodput_keeps_counting_a_late_pool_that_a_decode_gpu_depends_on_alone() -> None:
    # HOPELESS: the pool's wait alone is past the target; goodput parks the request there.
    goodput = goodput_of(qa_model())
    assert goodput.decide(HOPELESS).decision == "disaggregated"
    # The gateway reports that the decode GPU has no prompts of its own to prefill: the pool is
    # all it is fed by, and its queue counts, late or not: as latency decides.
    alone = dataclasses.replace(HOPELESS, decode_pending_prefill_tokens=0)
    b = goodput.decide(alone)
    assert (b.decision, b.reason, b.meets_slo) == ("collocated", "slo_none_feasible", False)
    assert dataclasses.replace(b, objective="latency") == qa_model().decide(alone)
    # With local prefill work pending there, the late pool costs nothing more, as before.
    assert goodput.decide(dataclasses.replace(HOPELESS, decode_pending_prefill_tokens=512)).decision == (
        "disaggregated"
    )


def test_goodput_takes_a_gpu_that_serves_nobody_in_time_for_the_late_requests() -> None:
    latency, goodput = qa_model(), goodput_of(qa_model())
    # The pool past its target is where HOPELESS goes while the collocation GPU's decodes count.
    assert goodput.decide(HOPELESS).decision == "disaggregated"
    # Requests expected in time sent there lately: as when not reported, bit for bit.
    for routes in (1, 7):
        x = dataclasses.replace(HOPELESS, colloc_feasible_routes=routes, decode_feasible_routes=routes)
        assert goodput.decide(x) == goodput.decide(HOPELESS)  # neither is listed in assumed
    # None: its decodes are late requests (or nothing was sent there lately that could make its
    # targets), so it serves nobody in time and this request costs nobody there ...
    sink = dataclasses.replace(HOPELESS, colloc_feasible_routes=0)
    b = goodput.decide(sink)
    assert not b.meets_slo and b.reason == "slo_none_feasible"
    assert b.decision == "collocated"  # ... while the decode GPU's share still counts
    # Latency reads neither count.
    assert latency.decide(sink) == latency.decide(HOPELESS)


def test_goodput_with_no_victims_in_time_anywhere_goes_where_it_is_later() -> None:
    goodput = goodput_of(qa_model())
    both = dataclasses.replace(HOPELESS, colloc_feasible_routes=0, decode_feasible_routes=0)
    b = goodput.decide(both)
    # The pool is late and neither GPU serves anyone in time: every budget is 0. The request goes
    # to the resource further from recovering, where it is predicted later.
    assert b.prefill_wait_ms > 200.0 and not b.meets_slo
    assert b.ttft_disaggregated_ms > b.ttft_collocated_ms and b.decision == "disaggregated"
    # The other way round: a long local backlog (150,000 prompt tokens pending) is the later one.
    backlog = dataclasses.replace(both, pending_prefill_tokens=150_000)
    c = goodput.decide(backlog)
    assert c.ttft_collocated_ms > c.ttft_disaggregated_ms and c.decision == "collocated"
    # With the pool and the collocation GPU both in time and no victim either way, the prompt is
    # prefilled on the pool: its chunks would hold the GPU every request decodes on.
    idle = RouteInputs(8192, 200, 0, 0, 512, ttft_slo_ms=100.0, tpot_slo_ms=50.0)
    d = goodput.decide(idle)
    assert not d.meets_slo and d.prefill_wait_ms == 0.0
    assert d.decision == "disaggregated" and d.reason == "slo_none_feasible"
    assert qa_model().decide(idle).decision == "collocated"  # latency: ties collocate


def test_goodput_counts_the_decodes_that_will_join_the_gpu_during_a_long_prefill() -> None:
    goodput = goodput_of(qa_model())
    # A prompt no path serves in time (its prefill alone past the TTFT target), one decode
    # running on the GPU it would be chunked on, one prompt queued on the pool.
    x = RouteInputs(
        60_000, 24, 1, 1, 512, prefill_queue_requests=1, prefill_pool_gpus=1,
        ttft_slo_ms=1000.0, tpot_slo_ms=50.0, decode_pending_prefill_tokens=0,
    )  # fmt: skip
    quiet = goodput.decide(x)
    assert not quiet.meets_slo and quiet.decision == "collocated"  # one decode beside it
    # The gateway sent that GPU 8 requests in time over its window: about 5 will arrive during
    # the 1.3 s prefill, each stalled behind its chunks. On the pool it delays one queued prompt.
    busy = goodput.decide(dataclasses.replace(x, colloc_feasible_routes=8, decode_feasible_routes=8))
    assert not busy.meets_slo and busy.ttft_collocated_ms > 1000.0
    assert busy.decision == "disaggregated" and busy.reason == "slo_none_feasible"
    # Fewer recent arrivals: the one queued prompt weighs more.
    assert goodput.decide(dataclasses.replace(x, colloc_feasible_routes=2)).decision == "collocated"
    # A gateway's rate over a longer window is read instead of the routes: 4 requests/s is
    # what the 8 routes of two seconds say; none coming, the decode beside it decides.
    rate = dataclasses.replace(
        x, colloc_feasible_routes=8, decode_feasible_routes=8, colloc_arrivals_per_s=4.0
    )
    assert goodput.decide(rate) == busy
    assert goodput.decide(dataclasses.replace(rate, colloc_arrivals_per_s=0.0)).decision == "collocated"
    # Under latency, recent routes change nothing.
    assert qa_model().decide(dataclasses.replace(x, colloc_feasible_routes=8)).decision == "collocated"
    assert qa_model().decide(rate).decision == "collocated"


@settings(max_examples=60, deadline=None)
@given(st.lists(route_inputs_st, min_size=1, max_size=40), st.sampled_from(OBJECTIVES))
def test_decide_many_equals_decide_bit_for_bit_under_each_objective(
    rows: list[RouteInputs], objective: str
) -> None:
    model = qa_model(chunk_ms_per_token_sq=1e-5, chunk_ms_per_token_seq=2e-5).with_objective(objective)
    assert model.decide_many(RouteColumns.from_inputs(rows)).rows() == [model.decide(r) for r in rows]


def test_admission_and_lateness_follow_the_chosen_path() -> None:
    b = qa_model().decide(HOPELESS)
    assert b.admission == "shed"  # far past the target
    assert b.predicted_lateness_ms == pytest.approx(b.chosen_ttft_ms - 200.0)
    on_time = qa_model().decide(RouteInputs(100, 10, 0, ttft_slo_ms=1000.0, tpot_slo_ms=50.0))
    assert on_time.meets_slo and on_time.admission == "admit" and on_time.predicted_lateness_ms == 0.0
    # Without targets nothing is late.
    bare = qa_model().decide(dataclasses.replace(HOPELESS, ttft_slo_ms=None, tpot_slo_ms=None))
    assert bare.admission == "admit" and bare.predicted_lateness_ms == 0.0
    # Just past the target (within the model's own error of it): defer; further: shed.
    ttft = on_time.chosen_ttft_ms
    near = qa_model().decide(RouteInputs(100, 10, 0, ttft_slo_ms=ttft / 1.05, tpot_slo_ms=50.0))
    assert not near.meets_slo and near.admission == "defer"
    assert near.predicted_lateness_ms == pytest.approx(ttft - ttft / 1.05)


@pytest.mark.parametrize(
    ("meets", "ratio", "expected"),
    [(True, 5.0, "admit"), (False, 0.95, "defer"), (False, 1.1, "defer"), (False, 1.1001, "shed")],
)
def test_admission_bands(meets: bool, ratio: float, expected: str) -> None:
    assert admission(meets, ratio, 0.1) == expected


def test_lateness_ms_is_zero_on_time_and_without_a_target() -> None:
    assert lateness_ms(900.0, 1000.0) == 0.0
    assert lateness_ms(1500.0, 1000.0) == 500.0
    assert lateness_ms(1e9, math.inf) == 0.0


def test_a_bad_objective_is_refused_naming_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match="objective: expected one of latency, goodput, got 'fast'"):
        parse_objective("fast")
    with pytest.raises(ValueError, match="objective"):
        QueueAwareModel(qa_model().params, objective="fast")
    assert CHOICES["objective"].values == OBJECTIVES
    assert (
        CHOICES["objective"].problem("fast") is not None and CHOICES["objective"].problem("goodput") is None
    )
    assert len(ADMISSIONS) == 3


def test_with_objective_keeps_every_other_setting() -> None:
    model = QueueAwareModel(
        qa_model().params, harm_weight=0.5, slo_margin=0.2, queue_wait_scale=1.5, first_token="prefill-engine"
    )
    variant = model.with_objective("goodput")
    assert variant is model.with_objective("goodput") and model.with_objective("latency") is model
    assert (variant.harm_weight, variant.slo_margin, variant.queue_wait_scale) == (0.5, 0.2, 1.5)
    assert variant.first_token == "prefill-engine"
    built = build_model("queue-aware", model.params, objective="goodput")
    assert isinstance(built, QueueAwareModel) and built.objective == "goodput"
