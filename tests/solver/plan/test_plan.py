"""The planner's answer (solver/plan/plan.py): the pick, S_p/S_d, notes, invariants and the grid.

Instance A (see tests/solver/plan/test_split.py): X = 10, L_p = 100, L_d = 50 picks CUF-P at x = 7
with R_s = 150 req/s; the baseline gives R_u = 10*50*16/66, so S_p = S_d = 150*66/8000.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings

from solver.errors import InfeasiblePlan
from solver.plan.fitted import FittedCurves, fit_curves
from solver.plan.plan import solve_grid, solve_plan
from solver.plan.report import plan_to_dict
from tests.solver.plan.curve_factory import make_curve_set
from tests.solver.plan.plan_strategies import planner_cases


def test_instance_a_closed_form() -> None:
    plan = solve_plan(fit_curves(make_curve_set()), 10, 100, 50)
    assert (plan.best.policy, plan.best.decode_machines, plan.best.prefill_machines) == ("CUF-P", 7, 3)
    assert plan.best.rate_rps == pytest.approx(150.0)
    assert plan.baseline.rate_rps == pytest.approx(8000 / 66)
    assert plan.speedup == pytest.approx(150 * 66 / 8000)
    assert plan.s_p == pytest.approx(plan.speedup) and plan.s_d == pytest.approx(plan.speedup)
    assert plan.reference.rate_rps == pytest.approx(150.0) and plan.reference_gap_rps == pytest.approx(0.0)
    assert plan.cuf_balanced_decode_machines == 5
    assert [label for label, _ in plan.tuf_roots] == ["TUF-P"]
    assert plan.tuf_roots[0][1] == pytest.approx(10 * 34 / 42, abs=1e-7)
    assert len(plan.candidates) == 9 + 2
    assert plan.notes == ()  # every batch inside the observed ranges, every inverse exact


def test_tuf_wins_when_decode_throughput_peaks_below_the_limit() -> None:
    """Decode peaks at n = 20 (600 tokens/s) and falls to 225 at the limit 80: CUF runs decode at
    80 (best min(50*(10-x), 4.5*x) = 40.5), TUF-P at x = 8 runs it at n = 20: min(100, 96) = 96."""
    model = fit_curves(make_curve_set(decode_throughput=((1, 410), (20, 600), (100, 100))))
    plan = solve_plan(model, 10, 100, 50)
    assert (plan.best.policy, plan.best.decode_machines) == ("TUF-P", 8)
    assert plan.best.rate_rps == pytest.approx(96.0)
    assert plan.best.decode_batch == pytest.approx(20.0)
    assert plan.reference.rate_rps == pytest.approx(96.0)
    # TUF leaves the rate residual: the sides are not balanced, so S_p and S_d differ
    assert plan.best.rate_residual == pytest.approx(0.04)
    assert plan.s_p != pytest.approx(plan.s_d)


def test_notes_record_clamps_and_boundaries() -> None:
    curves = make_curve_set(decode_throughput=((1, 410), (50, 900)), decode_max_batch=60)
    plan = solve_plan(fit_curves(curves), 10, 100, 50)
    text = "\n".join(plan.notes)
    assert "decode limit: capacity fit reaches it at 80 requests; took the domain upper bound 60" in text
    assert (
        "decode throughput at 60 requests is outside the observed [1, 50], clamped to the end value" in text
    )
    plan_q = solve_plan(fit_curves(curves, "quadratic"), 10, 100, 50)
    assert any("extrapolated" in n for n in plan_q.notes)


def test_reference_clamps_are_noted() -> None:
    """A prompt beyond the measured prefill batches puts the reference's prefill batch (at least
    L_p) outside the observed range [100, 10000]: that clamp is recorded too."""
    plan = solve_plan(fit_curves(make_curve_set(memory_gb=200.0)), 10, 12000, 50)  # limit 18000 tokens
    assert plan.reference.prefill_batch_tokens == 12000.0
    assert (
        f"reference (x={plan.reference.decode_machines}): prefill throughput at 1.2e+04 tokens is "
        "outside the observed [100, 10000], clamped to the end value"
    ) in plan.notes


def test_non_finite_figures_are_infeasible_not_inf() -> None:
    """Decode throughput points 1e-148 apart fit a parabola with c2 ~ 5e307: T_d at the decode limit
    overflows. The plan says so instead of answering inf or NaN."""
    curves = make_curve_set(decode_throughput=((1e-148, 5.0), (2e-148, 6.0), (3e-148, 1e12)))
    model = fit_curves(curves, "quadratic")
    assert np.isfinite(model.decode.throughput.c2)  # type: ignore[union-attr]
    with pytest.raises(InfeasiblePlan, match="numerical overflow"):
        solve_plan(model, 10, 100, 50)


@pytest.mark.parametrize(
    ("machines", "message"),
    [(1, "machines = 1: no feasible x"), (0, "machines = 0: no feasible x"), (2.5, "expected an integer")],
)
def test_too_few_machines_is_infeasible(machines: object, message: str) -> None:
    with pytest.raises(InfeasiblePlan, match=message):
        solve_plan(fit_curves(make_curve_set()), machines, 100, 50)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(case=planner_cases())
def test_plan_invariants(case: tuple[FittedCurves, int, int, int]) -> None:
    model, machines, prompt_len, output_len = case
    try:
        plan = solve_plan(model, machines, prompt_len, output_len)
    except InfeasiblePlan as exc:
        assert "zero" in str(exc)  # only zero throughputs can stop these workloads
        return
    rates = plan.candidates.rate_rps
    assert plan.best.rate_rps == float(rates.max())
    assert plan.reference.rate_rps >= plan.best.rate_rps * (1 - 1e-12)
    assert plan.speedup == pytest.approx(plan.best.rate_rps / plan.baseline.rate_rps)
    if plan.best.rate_residual == 0.0:
        assert plan.s_p == pytest.approx(plan.s_d, rel=1e-12)
        assert plan.s_p == pytest.approx(plan.speedup, rel=1e-12)
    assert 1 <= plan.best.decode_machines <= machines - 1
    assert plan.best.decode_machines + plan.best.prefill_machines == machines
    # S_p = S_d for every flow-balanced candidate (every CUF row), not only the pick
    table, base = plan.candidates, plan.baseline
    balanced = table.rate_residual == 0.0
    assert np.count_nonzero(balanced) >= np.count_nonzero(np.char.startswith(np.array(table.policy), "CUF"))
    s_p = table.prefill_tokens_per_s[balanced] / base.prefill_tokens_per_s
    s_d = table.decode_tokens_per_s[balanced] / base.decode_tokens_per_s
    assert s_p == pytest.approx(s_d, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(case=planner_cases(monotone=True, max_machines=40, fit="piecewise"))
def test_best_rate_never_drops_when_machines_grow(case: tuple[FittedCurves, int, int, int]) -> None:
    """With non-decreasing (piecewise-linear) throughput curves, more machines never lower the best rate."""
    model, machines, prompt_len, output_len = case
    rates = [
        solve_plan(model, m, prompt_len, output_len).best.rate_rps for m in range(machines, machines + 4)
    ]
    assert all(b >= a * (1 - 1e-12) for a, b in itertools.pairwise(rates))


def test_a_spiky_curve_can_lower_the_pick_when_machines_grow_but_not_the_reference() -> None:
    """Why the property above needs non-decreasing curves: decode throughput spikes at n_d = 20.
    At X = 10, TUF-P's balance lands x = 8 on the spike (n_d = 80*2/8 = 20); at X = 11 no integer x
    does, and every candidate is back on the flat 10 tokens/s. The reference keeps the spike."""
    spike = ((1, 10), (19.9, 10), (20, 10000), (20.1, 10), (100, 10))
    model = fit_curves(make_curve_set(decode_throughput=spike))
    at_10, at_11 = solve_plan(model, 10, 100, 50), solve_plan(model, 11, 100, 50)
    assert (at_10.best.policy, at_10.best.decode_machines) == ("TUF-P", 8)
    assert at_10.best.decode_batch == pytest.approx(20.0)
    assert at_11.best.rate_rps < at_10.best.rate_rps
    assert at_11.reference.rate_rps >= at_10.reference.rate_rps


def test_grid_matches_single_plans_and_keeps_infeasible_reasons() -> None:
    model = fit_curves(make_curve_set())
    grid = solve_grid(model, 10, [100, 400, 9000], [50, 200])
    assert grid.s_p.shape == (3, 2) and len(grid.policy) == 3 and len(grid.policy[0]) == 2
    for i, prompt_len in enumerate([100, 400]):
        for j, output_len in enumerate([50, 200]):
            plan = solve_plan(model, 10, prompt_len, output_len)
            assert grid.s_p[i, j] == plan.s_p and grid.s_d[i, j] == plan.s_d
            assert grid.policy[i][j] == plan.best.policy
            assert grid.infeasible[i][j] is None
    assert np.all(np.isnan(grid.s_p[2])) and grid.policy[2] == (None, None)
    assert "prompt_len 9000 does not fit" in str(grid.infeasible[2][0])
    assert grid.plans[2][1] is None


def test_grid_without_any_feasible_cell_raises_the_first_reason() -> None:
    with pytest.raises(InfeasiblePlan, match="grid: no feasible cell; first: prompt_len 9000"):
        solve_grid(fit_curves(make_curve_set()), 10, [9000], [50])
    with pytest.raises(InfeasiblePlan, match="at least one prompt length"):
        solve_grid(fit_curves(make_curve_set()), 10, [], [50])


@settings(max_examples=25, deadline=None)
@given(case=planner_cases())
def test_every_grid_cell_is_the_single_plan(case: tuple[FittedCurves, int, int, int]) -> None:
    # the grid computes each prompt length's limits and peaks once; every figure must still be
    # the single plan's, and an infeasible cell must carry the single plan's reason
    model, machines, prompt_len, output_len = case
    prompt_lens, output_lens = [prompt_len, 1, prompt_len * 7, 0], [output_len, 3, output_len * 5]
    try:
        grid = solve_grid(model, machines, prompt_lens, output_lens)
    except InfeasiblePlan:
        return
    for i, p in enumerate(prompt_lens):
        for j, o in enumerate(output_lens):
            cell = grid.plans[i][j]
            try:
                single = solve_plan(model, machines, p, o)
            except InfeasiblePlan as exc:
                assert cell is None and grid.infeasible[i][j] == str(exc)
                continue
            assert cell is not None and grid.infeasible[i][j] is None
            assert plan_to_dict(cell, all_candidates=True) == plan_to_dict(single, all_candidates=True)
