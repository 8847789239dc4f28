"""The recommendation (solver/plan/recommend.py): hand-computed cases, the BLOOM-176B case where
the design's pick is far below the reference optimum, and invariants over random curve sets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from solver.errors import InfeasiblePlan
from solver.plan import FittedCurves, builtin_fit, fit_curves, recommend, solve_plan
from solver.plan.recommend import PICK_TOLERANCE
from tests.solver.plan.curve_factory import make_curve_set
from tests.solver.plan.plan_strategies import planner_cases


def test_instance_a_recommends_the_pick() -> None:
    # instance A (test_split.py): pick CUF-P at x = 7, 150 req/s, equal to the reference optimum;
    # baseline 8000/66 req/s
    r = recommend(solve_plan(fit_curves(make_curve_set()), 10, 100, 50))
    assert (r.action, r.source, r.policy) == ("split", "pick", "CUF-P")
    assert (r.decode_machines, r.prefill_machines) == (7, 3)
    assert r.rate_rps == pytest.approx(150.0)
    assert r.speedup == pytest.approx(150 * 66 / 8000)
    assert r.pick_to_reference == pytest.approx(1.0)
    assert "design's pick" in r.reason


def test_flat_curves_where_no_integer_split_beats_co_location_stay_co_located() -> None:
    """T_p = 5000 and T_d = 1000 tokens/s flat; capacity as instance A, so the baseline runs
    n = 40 with a_p = 5000/100 = 50 and a_d = 1000/50 = 20: R_u = 10*50*20/70 = 142.86 req/s.
    A split serves min(50*(10 - x), 20*x): 140 at x = 7, the best integer x, below R_u."""
    model = fit_curves(make_curve_set(decode_throughput=((1, 1000), (100, 1000))))
    plan = solve_plan(model, 10, 100, 50)
    assert plan.baseline.rate_rps == pytest.approx(10 * 50 * 20 / 70)
    assert plan.reference.rate_rps == pytest.approx(140.0)
    r = recommend(plan)
    assert (r.action, r.source, r.policy) == ("co-located", "baseline", "co-located")
    assert (r.decode_machines, r.prefill_machines) == (10, 10)
    assert r.decode_batch == pytest.approx(40.0) and r.prefill_batch_tokens == pytest.approx(4000.0)
    assert r.rate_rps == pytest.approx(10 * 50 * 20 / 70) and r.speedup == 1.0
    assert "no split beats co-location" in r.reason and "0.98x" in r.reason


def test_bloom_at_8_machines_recommends_the_reference_optimum_not_the_pick() -> None:
    # quadratic fits, prompt 1,500, output 200: the pick is a TUF split at 0.54x co-located
    plan = solve_plan(builtin_fit("bloom-176b-8xh100", "quadratic"), 8, 1500, 200)
    assert plan.best.policy.startswith("TUF") and plan.speedup == pytest.approx(0.54, abs=0.005)
    r = recommend(plan)
    assert (r.action, r.source, r.policy) == ("split", "reference", "reference")
    ref = plan.reference
    assert (r.decode_machines, r.prefill_machines) == (ref.decode_machines, ref.prefill_machines)
    assert (r.prefill_batch_tokens, r.decode_batch) == (ref.prefill_batch_tokens, ref.decode_batch)
    assert r.speedup == pytest.approx(1.34, abs=0.005)
    assert r.pick_to_reference == pytest.approx(plan.best.rate_rps / ref.rate_rps)
    assert "reference optimum serves 1.34x" in r.reason and "0.54x co-located" in r.reason


@settings(max_examples=60, deadline=None)
@given(case=planner_cases())
def test_the_recommendation_is_never_worse_than_co_location(case: tuple[FittedCurves, int, int, int]) -> None:
    model, machines, prompt_len, output_len = case
    try:
        plan = solve_plan(model, machines, prompt_len, output_len)
    except InfeasiblePlan as exc:
        assert "zero" in str(exc)  # as in test_plan.py: only zero throughputs stop these workloads
        return
    r = recommend(plan)
    base, ref = plan.baseline.rate_rps, plan.reference.rate_rps
    assert r.rate_rps >= base
    if r.action == "co-located":
        assert ref <= base and r.rate_rps == base
    else:
        assert r.decode_machines + r.prefill_machines == machines and r.rate_rps > base
        assert r.rate_rps >= (1.0 - PICK_TOLERANCE) * ref
        assert r.source == ("pick" if r.rate_rps == plan.best.rate_rps else "reference")
