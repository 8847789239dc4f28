"""JSON forms of planner results (solver/plan/report.py)."""

from __future__ import annotations

import json

import pytest

from solver.plan.fitted import fit_curves
from solver.plan.plan import solve_grid, solve_plan
from solver.plan.report import grid_to_dict, model_parameters, plan_to_dict, summary_indices
from tests.solver.plan.curve_factory import make_curve_set


def test_plan_dict_is_strict_json_with_the_summary() -> None:
    plan = solve_plan(fit_curves(make_curve_set()), 10, 100, 50)
    d = json.loads(json.dumps(plan_to_dict(plan), allow_nan=False))
    assert d["best"]["policy"] == "CUF-P" and d["best"]["decode_machines"] == 7
    assert d["speedup"] == pytest.approx(plan.speedup) and d["s_p"] == d["s_d"]
    assert d["reference_optimum"]["gap_fraction"] == pytest.approx(0.0, abs=1e-12)
    # the CUF row at the concurrency-balanced x = 5: min(50*5, 24*5) = 120 req/s
    balanced = d["cuf_balanced"]
    assert (balanced["decode_machines"], balanced["x_real"]) == (5, pytest.approx(5.0))
    assert balanced["rate_rps"] == pytest.approx(120.0)
    assert d["num_candidates"] == 11
    policies = [c["policy"] for c in d["candidates"]]
    assert policies[0] == "CUF-P" and {"CUF-D", "TUF-P"} <= set(policies)
    rates = [c["rate_rps"] for c in d["candidates"]]
    assert rates == sorted(rates, reverse=True)
    assert d["limits"]["prefill_tokens"]["is_exact"] is True
    assert d["fits"]["prefill"]["capacity"]["c1"] == pytest.approx(0.01)
    assert len(plan_to_dict(plan, all_candidates=True)["candidates"]) == 11


def test_summary_keeps_the_best_row_of_each_policy() -> None:
    plan = solve_plan(fit_curves(make_curve_set()), 10, 100, 50)
    rows = summary_indices(plan)
    best_by_policy: dict[str, float] = {}
    for i, p in enumerate(plan.candidates.policy):
        best_by_policy[p] = max(best_by_policy.get(p, 0.0), float(plan.candidates.rate_rps[i]))
    shown = {(plan.candidates.policy[i], float(plan.candidates.rate_rps[i])) for i in rows}
    assert all((p, r) in shown for p, r in best_by_policy.items())


def test_grid_dict_and_model_parameters_mark_infeasible_cells() -> None:
    curves = make_curve_set(decode_max_batch=60)
    model = fit_curves(curves)
    grid = solve_grid(model, 10, [100, 9000], [50])
    d = json.loads(json.dumps(grid_to_dict(grid), allow_nan=False))
    assert d["s_p"][1] == [None] and d["policy"][1] == [None]
    assert d["infeasible"][0] == [None] and "9000" in d["infeasible"][1][0]
    params = json.loads(json.dumps(model_parameters(curves, model, grid), allow_nan=False))
    assert params["fits"]["decode"]["capacity"]["c1"] == pytest.approx(1.0)
    assert params["assumptions"] == ["hand-made test curves"]
    first, second = params["cells"]
    assert first["decode_limit"]["is_exact"] is False and first["decode_limit"]["boundary"] == "upper"
    assert first["decode_limit"]["fit_root"] == pytest.approx(80.0)
    assert any("took the domain upper bound 60" in n for n in first["notes"])
    assert second["infeasible"].startswith("prompt_len 9000")
