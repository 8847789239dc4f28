"""``best-static``: the grid, run sharing that changes no result, and the pick by goodput."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from solver.profile_result import ProfileResult
from solver.sim import (
    BestStatic,
    OutputPrediction,
    PromptAndQueueThreshold,
    PromptThreshold,
    SloLimits,
    Workload,
    parse_length_spec,
    poisson_workload,
    run_sweep,
    simulate,
    summarize,
)
from solver.sim.hindsight import GOODPUT_TIE, StaticRuns, pick_best, rule_setting
from solver.sim.latency import StepLatency
from tests.solver.sim.profiles import linear_fleet

FLEET = linear_fleet(num_prefill=1, num_decode=3, max_num_seqs=64)
SLO = SloLimits(400.0, 30.0)
GRID = BestStatic(thresholds=(0, 500, 1000, 4000), queue_limits=(1, 3, 50))


@pytest.fixture(scope="module")
def workload() -> Workload:
    return poisson_workload(600, 1.0, parse_length_spec("lognormal:1100,60"), seed=2)


def test_grid_covers_always_never_and_every_pair() -> None:
    rules = BestStatic().rules()
    settings = [rule_setting(r) for r in rules]
    assert settings[:2] == ["collocated", "disaggregated"]
    assert "threshold T=0" in settings and "threshold T=8192" in settings
    assert "threshold-queue T=1024 Q=4" in settings
    assert len(rules) == 2 + 7 + 7 * 6
    assert len(set(settings)) == len(settings)


def test_shared_runs_equal_fresh_runs(profile: ProfileResult, workload: Workload) -> None:
    latency = StepLatency(profile)
    wl = workload.at_rate(9.0)
    runs = StaticRuns(lambda p: simulate(latency, wl, p, FLEET))
    for rule in GRID.rules():
        shared = runs.records(rule)
        fresh = simulate(latency, wl, rule, FLEET)
        assert shared.policy == rule.name
        for name in ("first_token_ms", "finish_ms", "is_disaggregated", "prefill_queue_requests"):
            assert np.array_equal(getattr(shared, name), getattr(fresh, name), equal_nan=True), (rule, name)
    assert runs.num_simulated < len(GRID.rules())  # some rules did share a run


@pytest.mark.parametrize("rate", [3.0, 9.0, 16.0])
def test_best_static_is_never_worse_than_a_rule_of_its_grid(
    profile: ProfileResult, workload: Workload, rate: float
) -> None:
    wl = workload.at_rate(rate)
    result = run_sweep(profile, [wl], [GRID], FLEET, OutputPrediction(), SLO)
    (best,) = result.metrics
    assert best.policy == "best-static" and best.label == f"best-static[{best.setting}]"
    each = {
        rule_setting(r): summarize(simulate(profile, wl, r, FLEET, slo=SLO), wl.mean_rate or 0.0, SLO)
        for r in GRID.rules()
    }
    top = max(m.goodput_rps for m in each.values())
    assert best.goodput_rps >= top * (1 - GOODPUT_TIE)
    # The winner is the named rule's own run.
    assert best.goodput_rps == each[best.setting or ""].goodput_rps
    assert best.ttft_ms == each[best.setting or ""].ttft_ms
    near_top = [m.ttft_ms.p99 or 0.0 for m in each.values() if m.goodput_rps >= top * (1 - GOODPUT_TIE)]
    assert (best.ttft_ms.p99 or 0.0) <= min(near_top)


def test_best_static_beats_the_rules_as_shipped_under_overload(
    profile: ProfileResult, workload: Workload
) -> None:
    wl = workload.at_rate(16.0)
    rules: list[PromptThreshold | PromptAndQueueThreshold] = [
        PromptThreshold(1000),
        PromptAndQueueThreshold(1000, 2),
    ]
    result = run_sweep(profile, [wl], [*rules, GRID], FLEET, OutputPrediction(), SLO)
    by_name = {m.policy: m for m in result.metrics}
    assert by_name["best-static"].goodput_rps >= max(by_name[r.name].goodput_rps for r in rules)
    assert result.settings["num_runs_simulated"] < len(GRID.rules()) + 2


def test_pick_best_breaks_near_ties_by_ttft_p99(profile: ProfileResult, workload: Workload) -> None:
    wl = workload.at_rate(3.0)
    m = summarize(simulate(profile, wl, PromptThreshold(500), FLEET), 3.0, SLO)
    faster = m.ttft_ms.__class__(m.ttft_ms.mean, m.ttft_ms.p50, m.ttft_ms.p90, (m.ttft_ms.p99 or 0.0) / 2)
    slightly_lower = replace(m, goodput_rps=m.goodput_rps * (1 - GOODPUT_TIE / 2), ttft_ms=faster)
    clearly_lower = replace(m, goodput_rps=m.goodput_rps * (1 - 3 * GOODPUT_TIE), ttft_ms=faster)
    assert pick_best([("a", m), ("b", slightly_lower)])[0] == "b"
    assert pick_best([("a", m), ("c", clearly_lower)])[0] == "a"
    assert pick_best([("a", m), ("d", m)])[0] == "a"  # exact tie: grid order


def test_shared_runs_equal_fresh_runs_with_prefix_caches(profile: ProfileResult) -> None:
    # The rules compare the non-cached part of the prompt, in the vectorised replay too.
    from solver.sim.sessions import SHAPE_DEFAULTS, session_workload

    latency = StepLatency(profile)
    wl = session_workload(replace(SHAPE_DEFAULTS["chat"], sessions=80), 3.0, 0)
    fleet = replace(FLEET, prefix_cache_tokens=50_000)
    runs = StaticRuns(lambda p: simulate(latency, wl, p, fleet))
    for rule in GRID.rules():
        shared = runs.records(rule)
        fresh = simulate(latency, wl, rule, fleet)
        assert fresh.cached_prompt_tokens is not None and fresh.cached_prompt_tokens.any()
        for name in ("first_token_ms", "finish_ms", "is_disaggregated"):
            assert np.array_equal(getattr(shared, name), getattr(fresh, name), equal_nan=True), (rule, name)
