"""The objective (latency, goodput) and the admission signals of the queue-aware model."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.route_fields import CHOICES
from pdroute_core.routing import RouteColumns, RouteInputs, build_model
from pdroute_core.routing.objective import ADMISSIONS, OBJECTIVES, admission, lateness_ms, parse_objective
from pdroute_core.routing.queue_aware import QueueAwareModel
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
        if a.meets_slo:
            assert dataclasses.replace(b, objective="latency") == a
        assert (a.predicted_lateness_ms, a.admission) == (b.predicted_lateness_ms, b.admission) or (
            a.decision != b.decision
        )


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
    model = QueueAwareModel(qa_model().params, harm_weight=0.5, slo_margin=0.2, queue_wait_scale=1.5)
    variant = model.with_objective("goodput")
    assert variant is model.with_objective("goodput") and model.with_objective("latency") is model
    assert (variant.harm_weight, variant.slo_margin, variant.queue_wait_scale) == (0.5, 0.2, 1.5)
    built = build_model("queue-aware", model.params, objective="goodput")
    assert isinstance(built, QueueAwareModel) and built.objective == "goodput"
