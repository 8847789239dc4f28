"""The co-located baseline and the per-machine limits (solver/plan/baseline.py).

Instance A (tests/solver/plan/curve_factory.py defaults): C_p(n*L_p) + C_d(n) - C_w = C reads
20 + 0.01*L_p*n + n = 100, so n = 80 / (1 + 0.01*L_p); with L_p = 100, L_d = 50: n = 40,
T_p = 5000 -> a_p = 50, T_d(40) = 800 -> a_d = 16, alpha = 16/66 and R_u = X*50*16/66.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from solver.errors import InfeasiblePlan
from solver.plan.baseline import phase_limits, solve_baseline
from solver.plan.curves import throughput_at
from solver.plan.fitted import FittedCurves, fit_curves
from tests.solver.plan.curve_factory import make_curve_set
from tests.solver.plan.plan_strategies import planner_cases


def test_baseline_closed_form() -> None:
    b = solve_baseline(fit_curves(make_curve_set()), 10, 100, 50)
    assert b.concurrency == pytest.approx(40.0)
    assert b.prefill_batch_tokens == pytest.approx(4000.0)
    assert b.prefill_time_share == pytest.approx(16 / 66)
    assert b.rate_rps == pytest.approx(10 * 50 * 16 / 66)
    assert b.prefill_tokens_per_s == pytest.approx(b.rate_rps * 100)
    assert b.decode_tokens_per_s == pytest.approx(b.rate_rps * 50)
    assert b.memory_gb == pytest.approx(100.0)
    assert b.capacity.is_exact


@pytest.mark.parametrize("prompt_len", [1, 50, 400, 2000])
def test_baseline_concurrency_follows_the_prompt_length(prompt_len: int) -> None:
    b = solve_baseline(fit_curves(make_curve_set()), 10, prompt_len, 50)
    n = 80 / (1 + 0.01 * prompt_len)
    assert b.concurrency == pytest.approx(n)
    a_p, a_d = 5000 / prompt_len, (400 + 10 * n) / 50
    assert b.rate_rps == pytest.approx(10 * a_p * a_d / (a_p + a_d))


def test_baseline_domain_boundary_is_flagged() -> None:
    b = solve_baseline(fit_curves(make_curve_set(decode_max_batch=30)), 10, 100, 50)
    assert b.concurrency == 30.0 and not b.capacity.is_exact and b.capacity.boundary == "upper"
    assert b.capacity.fit_root == pytest.approx(40.0)


def test_one_request_that_does_not_fit_colocated_is_infeasible() -> None:
    model = fit_curves(make_curve_set())
    with pytest.raises(InfeasiblePlan, match="one request of 7950 prompt tokens"):
        solve_baseline(model, 10, 7950, 50)


def test_prompt_longer_than_the_prefill_limit_is_infeasible() -> None:
    with pytest.raises(InfeasiblePlan, match="prompt_len 8001 does not fit a prefill machine"):
        phase_limits(fit_curves(make_curve_set()), 8001)


def test_zero_throughput_baseline_names_the_fit() -> None:
    # a quadratic through (1, 100), (50, 50), (100, 0) is zero at n = 100 and negative beyond
    curves = make_curve_set(decode_throughput=((1, 100), (50, 50.5), (100, 1)), decode_gb_per_request=0.1)
    model = fit_curves(curves, "quadratic")
    with pytest.raises(InfeasiblePlan, match="quadratic throughput fit gives zero tokens/s"):
        solve_baseline(model, 10, 1, 50)


@settings(max_examples=60, deadline=None)
@given(case=planner_cases())
def test_baseline_is_flow_balanced_and_within_memory(case: tuple[FittedCurves, int, int, int]) -> None:
    model, machines, prompt_len, output_len = case
    try:
        b = solve_baseline(model, machines, prompt_len, output_len)
    except InfeasiblePlan as exc:  # only a zero throughput may stop it: the strategy fits one request
        assert "zero tokens/s" in str(exc)
        return
    t_p = float(throughput_at(model.prefill.throughput, b.prefill_batch_tokens))
    t_d = float(throughput_at(model.decode.throughput, b.concurrency))
    alpha = b.prefill_time_share
    # 1 - alpha is exact only to ~1e-16 absolute: with alpha near 1 that is its whole error
    decode_rps = (1 - alpha) * t_d / output_len
    assert alpha * t_p / prompt_len == pytest.approx(decode_rps, rel=1e-9, abs=1e-12 * t_d / output_len)
    assert b.prefill_tokens_per_s / prompt_len == pytest.approx(b.rate_rps, rel=1e-12)
    assert b.decode_tokens_per_s / output_len == pytest.approx(b.rate_rps, rel=1e-12)
    assert b.prefill_tokens_per_s == pytest.approx(alpha * machines * t_p, rel=1e-9)
    assert b.memory_gb <= model.memory_gb * (1 + 1e-9)
    assert b.concurrency >= 1.0
