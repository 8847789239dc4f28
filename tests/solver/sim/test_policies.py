"""Each policy's decisions follow its rule, on single views and inside full simulations."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.params import params_from_dict
from pdroute_core.route_fields import FIELD_NAMES
from pdroute_core.routing.design import AnalyticalCostModel
from pdroute_core.routing.queue_aware import QueueAwareModel
from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED
from solver.errors import InvalidSimConfig
from solver.fit_queue import fit_queue_aware
from solver.profile_result import ProfileResult
from solver.sim import (
    POLICY_NAMES,
    BestStatic,
    ModelPolicy,
    OutputPrediction,
    PolicyAnswer,
    PromptAndQueueThreshold,
    PromptThreshold,
    RouteView,
    Workload,
    make_policies,
    make_policy,
    parse_length_spec,
    parse_policy_names,
    parse_prediction,
    poisson_workload,
    simulate,
)
from tests.factories import TEST_PARAMS
from tests.solver.sim.profiles import linear_fleet
from tests.solver.synthetic_profiles import synthetic_profile

views = st.builds(
    RouteView,
    prompt_len=st.integers(1, 20_000),
    predicted_output_len=st.integers(1, 2_000),
    system_load=st.integers(0, 300),
    decode_batch_size=st.integers(0, 300),
    prefill_queue_requests=st.integers(0, 50),
    chunk_size=st.just(512),
)


def cost_model() -> AnalyticalCostModel:
    return AnalyticalCostModel(params_from_dict(TEST_PARAMS))


def queue_model() -> QueueAwareModel:
    profile = synthetic_profile()
    forms, _fits = fit_queue_aware(profile.T_prefill, profile.T_decode, profile.T_interference)
    return QueueAwareModel(dataclasses.replace(params_from_dict(TEST_PARAMS), queue_aware=forms))


# No deadline: the CI machine has 2 busy cores, and a slow example is not a wrong one.
@settings(deadline=None)
@given(views)
def test_rules_on_single_views(view: RouteView) -> None:
    assert make_policy("collocated").decide(view) == PolicyAnswer(COLLOCATED)
    assert make_policy("disaggregated").decide(view) == PolicyAnswer(DISAGGREGATED)
    long_prompt = view.prompt_len - view.cached_prompt_tokens > 1000  # the non-cached part
    assert (PromptThreshold(1000).decide(view).decision == DISAGGREGATED) == long_prompt
    short_queue = view.prefill_queue_requests < 3
    answer = PromptAndQueueThreshold(1000, 3).decide(view)
    assert (answer.decision == DISAGGREGATED) == (long_prompt and short_queue)
    assert answer.predicted_ttft_ms is None and answer.predicted_e2e_ms is None  # rules do not predict
    assert not answer.is_infeasible
    b = cost_model().explain(
        view.prompt_len, view.predicted_output_len, view.system_load, view.decode_batch_size
    )
    got = ModelPolicy(cost_model(), "cost-model").decide(view)
    assert got.decision == b.decision and not got.is_infeasible
    if b.decision == DISAGGREGATED:
        assert got.predicted_e2e_ms == b.t_disaggregated_ms
        assert got.predicted_ttft_ms == b.prefill_ms + b.transfer_ms
    else:
        assert got.predicted_e2e_ms == b.t_collocated_ms
        assert got.predicted_ttft_ms == b.prefill_ms + b.interference_ms


@pytest.fixture(scope="module")
def mixed_workload() -> Workload:
    return poisson_workload(1200, 14.0, parse_length_spec("lognormal:1000,150"), seed=21)


def test_threshold_decisions_in_a_simulation(profile: ProfileResult, mixed_workload: Workload) -> None:
    rec = simulate(profile, mixed_workload, PromptThreshold(900), linear_fleet(num_prefill=2, num_decode=4))
    assert rec.was_policy_asked.all()
    assert np.array_equal(rec.is_disaggregated, rec.prompt_len > 900)


def test_queue_threshold_decisions_in_a_simulation(profile: ProfileResult, mixed_workload: Workload) -> None:
    # One prefill GPU so that its queue really builds up.
    rec = simulate(
        profile, mixed_workload, PromptAndQueueThreshold(500, 2), linear_fleet(num_prefill=1, num_decode=4)
    )
    expected = (rec.prompt_len > 500) & (rec.prefill_queue_requests < 2)
    assert np.array_equal(rec.is_disaggregated, expected)
    assert rec.prefill_queue_requests.max() >= 2  # the queue condition was exercised
    assert ((rec.prompt_len > 500) & ~rec.is_disaggregated).any()


@pytest.mark.parametrize(
    "prediction",
    [OutputPrediction(), OutputPrediction("fixed", 64), *map(OutputPrediction, ("mean", "bucket-mean"))],
)
@pytest.mark.parametrize("topology", ["conditional", "pools"])
def test_cost_model_decisions_in_a_simulation(
    profile: ProfileResult, mixed_workload: Workload, prediction: OutputPrediction, topology: str
) -> None:
    fleet = (
        linear_fleet(num_prefill=2, num_decode=4)
        if topology == "conditional"
        else linear_fleet("pools", num_prefill=2, num_decode=2, num_mixed=2)
    )
    model = cost_model()
    rec = simulate(profile, mixed_workload, ModelPolicy(model, "cost-model"), fleet, prediction)
    assert np.array_equal(rec.predicted_output_len, prediction.predict(mixed_workload))
    batch = model.route_many(rec.prompt_len, rec.predicted_output_len, rec.system_load, rec.decode_batch_size)
    expected = batch.is_disaggregated
    assert np.array_equal(rec.is_disaggregated, expected)
    assert rec.is_disaggregated.any() and not rec.is_disaggregated.all()  # both branches taken
    # Its predictions for the chosen path, per request, as recorded.
    d = rec.is_disaggregated
    assert np.array_equal(rec.predicted_e2e_ms, np.where(d, batch.t_disaggregated_ms, batch.t_collocated_ms))
    ttft = batch.prefill_ms + np.where(d, batch.transfer_ms, batch.interference_ms)
    assert np.array_equal(rec.predicted_ttft_ms, ttft)
    assert not rec.is_infeasible.any()
    if topology == "conditional":  # both quantities are the one candidate GPU's batch
        assert np.array_equal(rec.system_load, rec.decode_batch_size)


def test_predictions() -> None:
    wl = Workload(np.zeros(3), np.array([10, 20, 30]), np.array([1, 2, 6]))
    assert OutputPrediction().predict(wl).tolist() == [1, 2, 6]
    assert OutputPrediction("fixed", 7).predict(wl).tolist() == [7, 7, 7]
    assert OutputPrediction("mean").predict(wl).tolist() == [3, 3, 3]
    assert parse_prediction("fixed:12") == OutputPrediction("fixed", 12)
    assert parse_prediction("mean") == OutputPrediction("mean")
    assert parse_prediction("fixed:12").label == "fixed:12"
    assert parse_prediction("bucket-mean") == OutputPrediction("bucket-mean")


def test_bucket_mean_is_the_mean_output_of_prompts_of_the_same_power_of_two() -> None:
    # Buckets [1, 2), [2, 4), [4, 8), ..., [1024, 2048), [4096, 8192).
    prompts = np.array([1, 3, 2, 3, 1024, 2047, 1500, 5000])
    outputs = np.array([9, 10, 21, 30, 100, 201, 300, 4])
    wl = Workload(np.zeros(len(prompts)), prompts, outputs)
    # [1,2): 9; [2,4): (10+21+30)/3 = 20.33 -> 20; [1024,2048): 601/3 = 200.33 -> 200; 5000: 4.
    assert OutputPrediction("bucket-mean").predict(wl).tolist() == [9, 20, 20, 20, 200, 200, 200, 4]


@pytest.mark.parametrize("text", ["fixed", "fixed:x", "fixed:0", "median", "exact:3", "bucket-mean:2"])
def test_bad_predictions_are_rejected(text: str) -> None:
    with pytest.raises(InvalidSimConfig):
        parse_prediction(text)


def test_policy_names() -> None:
    assert parse_policy_names("all") == (*POLICY_NAMES, "best-static")
    assert parse_policy_names("best-static,cost-model") == ("best-static", "cost-model")
    assert parse_policy_names("threshold, collocated,threshold") == ("threshold", "collocated")
    with pytest.raises(InvalidSimConfig, match="unknown policy 'fastest'"):
        parse_policy_names("collocated,fastest")
    with pytest.raises(InvalidSimConfig, match="no policy"):
        parse_policy_names(" , ")
    with pytest.raises(InvalidSimConfig, match="params"):
        make_policy("cost-model")
    with pytest.raises(InvalidSimConfig, match="queue-aware forms"):
        make_policy("queue-aware", model=cost_model())
    for name in POLICY_NAMES:
        assert make_policy(name, model=cost_model(), queue_model=queue_model()).name == name
    with pytest.raises(InvalidSimConfig, match="make_policies"):
        make_policy("best-static")
    entries = make_policies(["threshold", "best-static"], threshold_tokens=77, max_queue_depth=3)
    assert entries == [PromptThreshold(77), BestStatic().including(77, 3)]
    grid = BestStatic().including(77, 3)
    assert grid.thresholds == (0, 77, 256, 512, 1024, 2048, 4096, 8192)
    assert grid.queue_limits == (1, 2, 3, 4, 8, 16, 32)


class Spy:
    """A policy that records every view it is shown (and alternates its decisions)."""

    name = "spy"

    def __init__(self) -> None:
        self.views: list[RouteView] = []

    def decide(self, view: RouteView) -> PolicyAnswer:
        self.views.append(view)
        return PolicyAnswer(DISAGGREGATED if len(self.views) % 2 else COLLOCATED)


def test_policies_see_only_what_a_gateway_sees(profile: ProfileResult, mixed_workload: Workload) -> None:
    # The view holds the request's prompt, the *prediction* and live load; no true output
    # length, no arrival or finish times of other requests.
    assert list(RouteView._fields) == [
        "prompt_len",
        "predicted_output_len",
        "system_load",
        "decode_batch_size",
        "prefill_queue_requests",
        "chunk_size",
        "colloc_context_tokens",
        "pending_prefill_tokens",
        "colloc_num_waiting",
        "decode_context_tokens",
        "decode_pending_prefill_tokens",
        "prefill_queue_tokens",
        "prefill_running_requests",
        "prefill_running_tokens",
        "prefill_pool_gpus",
        "ttft_slo_ms",
        "tpot_slo_ms",
        "colloc_prefill_tokens_per_s",
        "decode_prefill_tokens_per_s",
        "cached_prompt_tokens",
        "prefill_running_elapsed_ms",
        "colloc_tpot_slack_ms",
        "colloc_feasible_routes",
        "decode_feasible_routes",
        "colloc_cached_prompt_tokens",
        "prefill_cached_prompt_tokens",
        "pending_prefill_prefix_tokens",
        "pending_prefill_requests",
        "prefill_arrival_tokens_per_s",
        "prefill_step_tokens",
        "colloc_arrivals_per_s",
        "colloc_tpot_slack2_ms",
    ]
    # Every input of a decision model, by the model's own name (the rest is the simulator's).
    assert set(FIELD_NAMES) <= set(RouteView._fields)
    spy = Spy()
    fleet = linear_fleet(num_prefill=1, num_decode=3, max_num_batched_tokens=256)
    rec = simulate(profile, mixed_workload, spy, fleet, OutputPrediction("fixed", 64))
    assert len(spy.views) == mixed_workload.num_requests  # asked once per request, in arrival order
    assert {v.predicted_output_len for v in spy.views} == {64}  # never the true length
    assert len(set(mixed_workload.output_len.tolist())) > 1
    assert [v.prompt_len for v in spy.views] == mixed_workload.prompt_len.tolist()
    assert [v.system_load for v in spy.views] == rec.system_load.tolist()
    assert [v.prefill_queue_requests for v in spy.views] == rec.prefill_queue_requests.tolist()
    assert {v.chunk_size for v in spy.views} == {256}
    assert {(v.ttft_slo_ms, v.tpot_slo_ms) for v in spy.views} == {(1000.0, 50.0)}  # the run's SLO
    assert {v.prefill_pool_gpus for v in spy.views} == {1}
    # Collocated requests were prefilled locally: their chunks show as a recent prefill rate.
    rates = [v.colloc_prefill_tokens_per_s for v in spy.views]
    assert rates[0] == 0.0 and max(rates) > 0.0 and min(rates) >= 0.0
    assert rec.is_disaggregated.tolist() == [i % 2 == 0 for i in range(mixed_workload.num_requests)]


@pytest.mark.parametrize(("cached", "expected"), [(0, DISAGGREGATED), (99, DISAGGREGATED), (100, COLLOCATED)])
def test_threshold_rules_compare_the_non_cached_part(cached: int, expected: str) -> None:
    view = RouteView(1100, 100, 0, 0, 0, 512, cached_prompt_tokens=cached)
    assert PromptThreshold(1000).decide(view).decision == expected
    assert PromptAndQueueThreshold(1000, 2).decide(view).decision == expected
