"""The reference optimum (solver/plan/reference.py) against a brute-force search over x and both
batches, and as an upper bound of every CUF/TUF candidate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings

from solver.plan.baseline import phase_limits
from solver.plan.curves import PiecewiseLinear, QuadraticFit, throughput_at
from solver.plan.fitted import FittedCurves, fit_curves
from solver.plan.reference import reference_optimum, search_grid, throughput_peaks
from solver.plan.split import concat, cuf_candidates, tuf_candidates
from tests.solver.plan.curve_factory import make_curve_set
from tests.solver.plan.plan_strategies import planner_cases


def _brute_force(model: FittedCurves, machines: int, prompt_len: int, output_len: int, points: int) -> float:
    """max over x, B_p and n_d of min((X - x)*T_p(B_p)/L_p, x*T_d(n_d)/L_d): a full 3-D grid."""
    limits = phase_limits(model, prompt_len)
    grids = []
    for curve, lo, hi in (
        (model.prefill.throughput, float(prompt_len), limits.prefill.batch),
        (model.decode.throughput, 1.0, limits.decode.batch),
    ):
        grid = np.linspace(lo, hi, points)
        if isinstance(curve, PiecewiseLinear):
            b = np.asarray(curve.batches)
            grid = np.concatenate((grid, b[(b >= lo) & (b <= hi)]))
        grids.append(grid)
    t_p = throughput_at(model.prefill.throughput, grids[0])
    t_d = throughput_at(model.decode.throughput, grids[1])
    best = 0.0
    for x in range(1, machines):
        rates = np.minimum.outer((machines - x) * t_p / prompt_len, x * t_d / output_len)
        best = max(best, float(rates.max()))
    return best


def test_closed_form_instance_a() -> None:
    model = fit_curves(make_curve_set())
    ref = reference_optimum(
        model.prefill.throughput, model.decode.throughput, phase_limits(model, 100), 10, 100, 50
    )
    # T_p is flat at 5000; T_d peaks at the decode limit 80 (1200 tokens/s):
    # min(50*(10 - x), 24*x) -> 150 at x = 7
    assert (ref.decode_machines, ref.prefill_machines) == (7, 3)
    assert ref.rate_rps == pytest.approx(150.0)
    assert ref.decode_batch == pytest.approx(80.0)
    assert ref.prefill_tokens_per_s == pytest.approx(150.0 * 100)


def test_search_grid_holds_breakpoints_and_the_vertex() -> None:
    model = fit_curves(make_curve_set(decode_throughput=((1, 100), (37, 900), (100, 200))))
    assert 37.0 in search_grid(model.decode.throughput, 1.0, 80.0)
    quad = fit_curves(make_curve_set(decode_throughput=((1, 100), (30, 1000), (60, 100))), "quadratic")
    fit = quad.decode.throughput
    assert not isinstance(fit, PiecewiseLinear)
    assert -fit.c1 / (2 * fit.c2) in search_grid(fit, 1.0, 80.0)


@settings(max_examples=30, deadline=None)
@given(case=planner_cases(max_machines=12, fit="piecewise"))
def test_reference_equals_brute_force_on_piecewise_curves(case: tuple[FittedCurves, int, int, int]) -> None:
    model, machines, prompt_len, output_len = case
    ref = reference_optimum(
        model.prefill.throughput,
        model.decode.throughput,
        phase_limits(model, prompt_len),
        machines,
        prompt_len,
        output_len,
    )
    assert ref.rate_rps == pytest.approx(
        _brute_force(model, machines, prompt_len, output_len, 200), rel=1e-12
    )


@settings(max_examples=30, deadline=None)
@given(case=planner_cases(max_machines=12, fit="quadratic"))
def test_reference_bounds_a_dense_brute_force_on_quadratic_fits(
    case: tuple[FittedCurves, int, int, int],
) -> None:
    model, machines, prompt_len, output_len = case
    limits = phase_limits(model, prompt_len)
    ref = reference_optimum(
        model.prefill.throughput, model.decode.throughput, limits, machines, prompt_len, output_len
    )
    brute = _brute_force(model, machines, prompt_len, output_len, 1000)
    assert ref.rate_rps >= brute * (1 - 1e-12)
    # exact: a parabola's maximum on [lo, hi] is at an end or at its vertex (a grid, however
    # dense, only approaches it: steep parabolas leave a dense grid short by more than 1e-3)
    best = []
    for fit, lo, hi in (
        (model.prefill.throughput, float(prompt_len), limits.prefill.batch),
        (model.decode.throughput, 1.0, limits.decode.batch),
    ):
        assert isinstance(fit, QuadraticFit)
        at = [lo, hi] + ([-fit.c1 / (2 * fit.c2)] if fit.c2 < 0 else [])
        best.append(max(float(throughput_at(fit, b)) for b in at if lo <= b <= hi))
    xs = range(1, machines)
    exact = max(min((machines - x) * best[0] / prompt_len, x * best[1] / output_len) for x in xs)
    assert ref.rate_rps == pytest.approx(exact, rel=1e-12)
    # the reported batches achieve the reported rate
    x = ref.decode_machines
    t_p = float(throughput_at(model.prefill.throughput, ref.prefill_batch_tokens))
    t_d = float(throughput_at(model.decode.throughput, ref.decode_batch))
    assert ref.rate_rps == pytest.approx(min((machines - x) * t_p / prompt_len, x * t_d / output_len))


@settings(max_examples=60, deadline=None)
@given(case=planner_cases())
def test_reference_is_never_below_any_candidate(case: tuple[FittedCurves, int, int, int]) -> None:
    model, machines, prompt_len, output_len = case
    limits = phase_limits(model, prompt_len)
    table = concat(
        [
            cuf_candidates(model, limits, machines, prompt_len, output_len),
            tuf_candidates(model, limits, machines, prompt_len, output_len)[0],
        ]
    )
    ref = reference_optimum(
        model.prefill.throughput, model.decode.throughput, limits, machines, prompt_len, output_len
    )
    if len(table):
        assert ref.rate_rps >= float(table.rate_rps.max()) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(case=planner_cases(max_machines=40))
def test_reference_rate_never_drops_when_machines_grow(case: tuple[FittedCurves, int, int, int]) -> None:
    """Unlike the CUF/TUF pick (tests/solver/plan/test_plan.py), for any curves."""
    model, machines, prompt_len, output_len = case
    limits = phase_limits(model, prompt_len)
    rates = [
        reference_optimum(
            model.prefill.throughput, model.decode.throughput, limits, m, prompt_len, output_len
        ).rate_rps
        for m in range(machines, machines + 4)
    ]
    assert all(b >= a for a, b in itertools.pairwise(rates))


@settings(max_examples=40, deadline=None)
@given(case=planner_cases())
def test_reference_from_precomputed_peaks_is_the_same(case: tuple[FittedCurves, int, int, int]) -> None:
    model, machines, prompt_len, output_len = case
    limits = phase_limits(model, prompt_len)
    prefill, decode = model.prefill.throughput, model.decode.throughput
    peaks = throughput_peaks(prefill, decode, limits, prompt_len)
    assert reference_optimum(prefill, decode, limits, machines, prompt_len, output_len, peaks) == (
        reference_optimum(prefill, decode, limits, machines, prompt_len, output_len)
    )
