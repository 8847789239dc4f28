"""The event loop: exact latencies on an idle GPU, conservation, Little's law, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from pdroute_core.routing.types import COLLOCATED
from solver.errors import InvalidSimConfig
from solver.profile_result import ProfileResult
from solver.sim import (
    AlwaysCollocated,
    AlwaysDisaggregated,
    ClusterSimulation,
    FleetConfig,
    Policy,
    PolicyAnswer,
    PromptAndQueueThreshold,
    PromptThreshold,
    RouteView,
    SimRecords,
    Workload,
    littles_law,
    parse_length_spec,
    poisson_workload,
    simulate,
)
from solver.sim.latency import StepLatency
from tests.solver.sim import profiles as P
from tests.solver.sim.profiles import linear_fleet

ONE_GPU = linear_fleet(num_prefill=0, num_decode=1, max_num_batched_tokens=512)
ONE_PAIR = linear_fleet(num_prefill=1, num_decode=1, max_num_batched_tokens=512)


def one_request(prompt_len: int, output_len: int) -> Workload:
    return Workload(np.array([0.0]), np.array([prompt_len]), np.array([output_len]))


def decode_sum_ms(prompt_len: int, output_len: int) -> float:
    """Decode steps of one request alone: the i-th runs with context prompt_len + i (contexts
    below the smallest measured kv_len take its value: the table clamps below)."""
    kv_min = min(P.KV_LENS)
    return sum(P.decode_formula_ms(max(prompt_len + i, kv_min), 1) for i in range(1, output_len))


def chunked_prefill_ms(prompt_len: int, budget: int = 512) -> float:
    """A prompt prefilled alone in chunks of ``budget`` tokens: one pass per chunk. The synthetic
    prefill is linear, so a chunk's work over its prefix equals the fixed cost's removal and
    each pass costs ``T_prefill(chunk)``."""
    return sum(P.prefill_formula_ms(min(budget, prompt_len - d)) for d in range(0, prompt_len, budget))


def run_both(
    latency: StepLatency, fleet: FleetConfig, policy: Policy, workload: Workload
) -> list[SimRecords]:
    """The same run with one event per step and with decode runs as single events."""
    return [
        ClusterSimulation(fleet, latency, policy, use_runs=use_runs).run(workload, workload.output_len)
        for use_runs in (False, True)
    ]


@pytest.mark.parametrize("prompt_len", [64, 512, 2048])
@pytest.mark.parametrize("output_len", [1, 2, 40])
def test_one_request_alone_collocated_matches_the_table(
    profile: ProfileResult, latency: StepLatency, prompt_len: int, output_len: int
) -> None:
    for rec in run_both(latency, ONE_GPU, AlwaysCollocated(), one_request(prompt_len, output_len)):
        # TTFT is one pass per 512-token chunk (the table's prefill time for one chunk).
        prefill_ms = chunked_prefill_ms(prompt_len)
        if prompt_len <= 512:
            assert prefill_ms == profile.T_prefill[prompt_len]
        assert rec.ttft_ms[0] == pytest.approx(prefill_ms, rel=1e-12)
        expected = prefill_ms + decode_sum_ms(prompt_len, output_len)
        assert rec.e2e_ms[0] == pytest.approx(expected, rel=1e-12)
        assert not rec.is_disaggregated[0]
        assert not rec.was_policy_asked[0]  # no prefill GPU: only one path exists


def test_first_decode_step_is_the_table_value_at_a_grid_point(
    profile: ProfileResult, latency: StepLatency
) -> None:
    # Prompt 127 + one generated token = context 128, a measured kv_len; batch 1 is measured.
    rec = simulate(latency, one_request(127, 2), AlwaysCollocated(), ONE_GPU)
    assert rec.e2e_ms[0] - rec.ttft_ms[0] == profile.T_decode[(128, 1)]


@pytest.mark.parametrize("output_len", [1, 30])
def test_one_request_alone_disaggregated_adds_the_transfer(
    profile: ProfileResult, latency: StepLatency, output_len: int
) -> None:
    prompt_len = 1024
    transfer_ms = prompt_len * profile.bytes_per_token / (profile.p2p_bandwidth_GBps * 1e6)
    # The idle decode engine admits the request and sees its KV at once; its first decode step
    # (context: the prompt) makes the first token, each later step one more.
    first_ms = profile.T_prefill[prompt_len] + transfer_ms + P.decode_formula_ms(prompt_len, 1)
    for rec in run_both(latency, ONE_PAIR, AlwaysDisaggregated(), one_request(prompt_len, output_len)):
        assert rec.ttft_ms[0] == pytest.approx(first_ms, rel=1e-12)
        expected = first_ms + decode_sum_ms(prompt_len, output_len)
        assert rec.e2e_ms[0] == pytest.approx(expected, rel=1e-12)
        assert rec.is_disaggregated[0] and rec.was_policy_asked[0]


def test_a_prefill_arriving_during_decodes_runs_as_a_mixed_step(latency: StepLatency) -> None:
    # A (512 tokens, long output) decodes alone; B (256 tokens, 2 outputs) arrives at 100 ms.
    wl = Workload(np.array([0.0, 0.1]), np.array([512, 256]), np.array([200, 2]))
    t, j = P.prefill_formula_ms(512), 0
    while t <= 100.0:  # A's decode steps until the one in flight at 100 ms ends
        j += 1
        t += P.decode_formula_ms(512 + j, 1)
    mixed = P.decode_formula_ms(512 + j + 1, 1) + P.interference_formula_ms(256, 1)
    kv_mean = ((512 + j + 2) + (256 + 1)) / 2
    ttft_b = t + mixed - 100.0
    e2e_b = ttft_b + P.decode_formula_ms(kv_mean, 2)
    for rec in run_both(latency, ONE_GPU, AlwaysCollocated(), wl):
        assert rec.ttft_ms[1] == pytest.approx(ttft_b, rel=1e-12)
        assert rec.e2e_ms[1] == pytest.approx(e2e_b, rel=1e-12)


def test_transfers_into_one_decode_gpu_queue_behind_each_other(
    profile: ProfileResult, latency: StepLatency
) -> None:
    fleet = linear_fleet(num_prefill=2, num_decode=1)
    wl = Workload(np.zeros(2), np.array([1024, 1024]), np.array([1, 1]))
    rec = simulate(latency, wl, AlwaysDisaggregated(), fleet)
    transfer_ms = latency.transfer_ms(1024)
    prefill_ms = profile.T_prefill[1024] + P.decode_formula_ms(1024, 1)  # and the first decode step
    assert P.decode_formula_ms(1024, 1) < transfer_ms  # the first is out before the second lands
    assert sorted(rec.ttft_ms.tolist()) == pytest.approx(
        [prefill_ms + transfer_ms, prefill_ms + 2 * transfer_ms], rel=1e-12
    )


def test_prefill_gpus_serve_one_queue_in_order(profile: ProfileResult, latency: StepLatency) -> None:
    fleet = linear_fleet(num_prefill=1, num_decode=2)
    wl = Workload(np.zeros(3), np.array([512, 512, 512]), np.array([1, 1, 1]))
    rec = simulate(latency, wl, AlwaysDisaggregated(), fleet)
    # One prefill GPU: the prompts go through one after another.
    ends = np.sort(rec.ttft_ms - latency.transfer_ms(512) - P.decode_formula_ms(512, 1))
    assert ends == pytest.approx(np.array([1, 2, 3]) * profile.T_prefill[512], rel=1e-12)
    assert rec.num_prefill_forwards == 3


FLEETS = [
    linear_fleet(num_prefill=2, num_decode=4, max_num_seqs=16, max_num_batched_tokens=256),
    linear_fleet("pools", num_prefill=1, num_decode=2, num_mixed=3, max_num_seqs=24),
]
POLICIES: list[Policy] = [
    AlwaysCollocated(),
    AlwaysDisaggregated(),
    PromptThreshold(800),
    PromptAndQueueThreshold(800, 2),
]


@pytest.fixture(scope="module")
def busy_workload() -> Workload:
    return poisson_workload(1500, 12.0, parse_length_spec("lognormal:900,120"), seed=3)


@pytest.mark.parametrize("fleet", FLEETS, ids=["conditional", "pools"])
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_conservation_and_runs_match_single_steps(
    profile: ProfileResult, busy_workload: Workload, fleet: FleetConfig, policy: Policy
) -> None:
    ref, fast = run_both(StepLatency(profile), fleet, policy, busy_workload)
    for rec in (ref, fast):
        assert np.all(rec.finish_count == 1)  # every request finishes, once
        assert np.array_equal(rec.tokens_generated, busy_workload.output_len)
        assert rec.total_tokens_generated == int(np.sum(busy_workload.output_len))
        assert np.all(rec.first_token_ms > rec.arrival_ms)
        assert np.all(rec.finish_ms >= rec.first_token_ms)
        assert np.all(rec.system_load <= fleet.max_num_seqs)
    # Decode runs as one event change nothing: the same floating-point operations.
    for name in ("first_token_ms", "finish_ms", "is_disaggregated", "system_load", "engine_index"):
        assert np.array_equal(getattr(ref, name), getattr(fast, name)), name
    assert ref.num_engine_steps == fast.num_engine_steps


def test_max_num_seqs_binds_under_load(latency: StepLatency, busy_workload: Workload) -> None:
    fleet = linear_fleet(num_prefill=0, num_decode=2, max_num_seqs=4)
    rec = simulate(latency, busy_workload, AlwaysCollocated(), fleet)
    assert rec.system_load.max() == 4
    roomy = simulate(latency, busy_workload, AlwaysCollocated(), linear_fleet(num_prefill=0, num_decode=2))
    assert roomy.system_load.max() > 4
    assert np.mean(rec.e2e_ms) > np.mean(roomy.e2e_ms)


def test_pools_topology_sends_each_path_to_its_pool(latency: StepLatency, busy_workload: Workload) -> None:
    fleet = linear_fleet("pools", num_prefill=1, num_decode=2, num_mixed=3)
    rec = simulate(latency, busy_workload, PromptThreshold(900), fleet)
    assert rec.is_disaggregated.any() and (~rec.is_disaggregated).any()
    assert np.all(rec.engine_index[~rec.is_disaggregated] < 3)
    assert np.all(rec.engine_index[rec.is_disaggregated] >= 3)


def test_only_one_path_means_the_policy_is_not_asked(latency: StepLatency, busy_workload: Workload) -> None:
    wl = busy_workload.head(100)
    rec = simulate(latency, wl, AlwaysDisaggregated(), linear_fleet(num_prefill=0, num_decode=2))
    assert not rec.is_disaggregated.any() and not rec.was_policy_asked.any()
    rec = simulate(latency, wl, AlwaysCollocated(), linear_fleet("pools", num_prefill=1, num_decode=1))
    assert rec.is_disaggregated.all() and not rec.was_policy_asked.any()


def test_littles_law_holds_on_a_long_run(latency: StepLatency) -> None:
    wl = poisson_workload(12_000, 10.0, parse_length_spec("lognormal:800,100"), seed=11)
    rec = simulate(latency, wl, PromptThreshold(1000), linear_fleet(num_prefill=2, num_decode=4))
    span = rec.arrival_ms[-1]
    in_system, rate_times_sojourn = littles_law(rec, 0.1 * span, 0.9 * span)
    assert in_system > 1.0  # a loaded system, not a trivial one
    assert in_system == pytest.approx(rate_times_sojourn, rel=0.02)


def test_same_seed_same_run_other_seed_other_run(latency: StepLatency) -> None:
    lengths = parse_length_spec("lognormal:700,90")
    fleet = linear_fleet(num_prefill=1, num_decode=3)
    policy = PromptAndQueueThreshold(600, 1)
    runs = [
        simulate(latency, poisson_workload(800, 9.0, lengths, seed=seed), policy, fleet) for seed in (5, 5, 6)
    ]
    assert np.array_equal(runs[0].finish_ms, runs[1].finish_ms)
    assert np.array_equal(runs[0].is_disaggregated, runs[1].is_disaggregated)
    assert not np.array_equal(runs[0].finish_ms, runs[2].finish_ms)


def test_one_prediction_per_request_is_required(latency: StepLatency) -> None:
    wl = one_request(64, 4)
    with pytest.raises(InvalidSimConfig, match="prediction"):
        ClusterSimulation(ONE_GPU, latency, AlwaysCollocated()).run(wl, np.array([1, 2]))


class GivesUpOnLongPrompts:
    """Predicts nothing; answers "no path meets the SLO" for prompts over 1,200 tokens."""

    name = "gives-up"

    def decide(self, view: RouteView) -> PolicyAnswer:
        return PolicyAnswer(COLLOCATED, is_infeasible=view.prompt_len > 1200)


@pytest.mark.parametrize("fleet", FLEETS, ids=["conditional", "pools"])
def test_shedding_drops_infeasible_requests_before_the_fleet(
    latency: StepLatency, busy_workload: Workload, fleet: FleetConfig
) -> None:
    wl = busy_workload.head(600)
    infeasible = wl.prompt_len > 1200
    kept = simulate(latency, wl, GivesUpOnLongPrompts(), fleet)
    shed = simulate(latency, wl, GivesUpOnLongPrompts(), fleet, shed=True)
    assert infeasible.any() and not infeasible.all()
    # Without shedding the answer is recorded and the request still runs.
    assert np.array_equal(kept.is_infeasible, infeasible) and not kept.is_shed.any()
    assert np.all(kept.finish_count == 1)
    # With shedding it never enters the fleet: no token, no time, no engine work.
    assert np.array_equal(shed.is_shed, infeasible) and np.array_equal(shed.is_infeasible, infeasible)
    assert np.all(np.isnan(shed.first_token_ms[infeasible])) and np.all(np.isnan(shed.finish_ms[infeasible]))
    assert np.all(shed.finish_count[infeasible] == 0) and np.all(shed.tokens_generated[infeasible] == 0)
    assert np.all(shed.finish_count[~infeasible] == 1)
    assert np.array_equal(shed.tokens_generated[~infeasible], wl.output_len[~infeasible])
    assert shed.total_tokens_generated == int(np.sum(wl.output_len[~infeasible]))
    assert not shed.is_disaggregated[infeasible].any()
    # Less work in the fleet: the served requests wait less than with everyone admitted.
    assert np.mean(shed.e2e_ms[~infeasible]) < np.mean(kept.e2e_ms[~infeasible])
    assert shed.num_served == int(np.count_nonzero(~infeasible))


def test_rules_never_shed(latency: StepLatency, busy_workload: Workload) -> None:
    wl = busy_workload.head(300)
    fleet = FLEETS[0]
    plain = simulate(latency, wl, PromptThreshold(800), fleet)
    shed = simulate(latency, wl, PromptThreshold(800), fleet, shed=True)
    assert not shed.is_shed.any() and not shed.is_infeasible.any()
    assert np.array_equal(plain.finish_ms, shed.finish_ms)


class AdvisesByLength:
    """Infeasible past 1,200 tokens; advises ``defer`` up to 2,400 and ``shed`` beyond."""

    name = "advises"

    def decide(self, view: RouteView) -> PolicyAnswer:
        if view.prompt_len <= 1200:
            return PolicyAnswer(COLLOCATED, admission="admit")
        advice = "defer" if view.prompt_len <= 2400 else "shed"
        return PolicyAnswer(COLLOCATED, is_infeasible=True, admission=advice)


def test_shedding_follows_the_answers_admission(latency: StepLatency, busy_workload: Workload) -> None:
    wl = busy_workload.head(600)
    shed = simulate(latency, wl, AdvisesByLength(), FLEETS[0], shed=True)
    deferred, dropped = (wl.prompt_len > 1200) & (wl.prompt_len <= 2400), wl.prompt_len > 2400
    assert deferred.any() and dropped.any()
    # Only what the answer says to shed is dropped; a deferred request (infeasible) is served.
    assert np.array_equal(shed.is_shed, dropped) and np.array_equal(shed.is_infeasible, wl.prompt_len > 1200)
    assert np.all(shed.finish_count[~dropped] == 1)
