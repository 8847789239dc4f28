"""Fits, clamped interpolation and capacity inverses (solver/plan/curves.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.errors import InfeasiblePlan, InvalidCurves
from solver.plan.curves import (
    QuadraticFit,
    fit_quadratic,
    invert_capacity,
    invert_quadratic,
    is_clamped,
    piecewise_from,
    throughput_at,
)
from solver.plan.fitted import fit_curves
from tests.solver.plan.curve_factory import make_curve_set, series


def test_quadratic_fit_recovers_exact_coefficients() -> None:
    c0, c1, c2 = 3.0, 0.25, -1e-4
    batches = [1.0, 10.0, 100.0, 500.0, 1000.0]
    fit = fit_quadratic(series("q", [(b, c0 + c1 * b + c2 * b * b) for b in batches]))
    assert fit.degree == 2
    assert fit.c0 == pytest.approx(c0, rel=1e-9)
    assert fit.c1 == pytest.approx(c1, rel=1e-9)
    assert fit.c2 == pytest.approx(c2, rel=1e-9)
    assert fit.rmse < 1e-9
    assert (fit.observed_min, fit.observed_max) == (1.0, 1000.0)


def test_quadratic_fit_is_least_squares_on_noisy_points() -> None:
    b = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    y = np.array([2.0, 3.5, 3.9, 6.1, 7.2, 9.9])
    fit = fit_quadratic(series("noisy", list(zip(b, y, strict=True))))
    expected = np.polynomial.polynomial.polyfit(b, y, 2)  # c0, c1, c2
    assert [fit.c0, fit.c1, fit.c2] == pytest.approx(list(expected), rel=1e-9)
    assert fit.rmse == pytest.approx(float(np.sqrt(np.mean((fit(b) - y) ** 2))))


def test_two_distinct_batches_fit_a_line() -> None:
    fit = fit_quadratic(series("line", [(2, 5.0), (4, 9.0), (4, 9.0)]))
    assert fit.degree == 1 and fit.c2 == 0.0
    assert (fit.c0, fit.c1) == pytest.approx((1.0, 2.0))


@pytest.mark.parametrize(
    "batches", [(1e-300, 2e-300, 3e-300), (1e-160, 2e-160, 3e-160)], ids=["underflow", "overflow"]
)
def test_a_fit_that_is_not_finite_names_the_series(batches: tuple[float, ...]) -> None:
    # rescaling by max(batch)**2 underflows to 0 (or overflows the coefficient): no finite quadratic
    points = list(zip(batches, (21.0, 22.0, 30.0), strict=True))
    with pytest.raises(InvalidCurves, match=r"decode.capacity: the quadratic fit .* is not finite"):
        fit_quadratic(series("c", points), "decode.capacity")
    if batches[0] == 1e-300:  # through a curve set: the error names the phase and the series
        with pytest.raises(InvalidCurves, match=r"decode.capacity: the quadratic fit"):
            fit_curves(make_curve_set(decode_capacity_batches=batches))


def test_piecewise_interpolates_inside_and_clamps_outside() -> None:
    curve = piecewise_from(series("t", [(100, 1000.0), (10, 200.0), (1000, 400.0)]))  # unsorted input
    assert curve.batches == (10.0, 100.0, 1000.0)
    assert float(curve(55)) == pytest.approx(600.0)  # halfway 10..100
    assert float(curve(550)) == pytest.approx(700.0)  # halfway 100..1000
    assert float(curve(1)) == 200.0 and float(curve(0.01)) == 200.0  # clamped low end
    assert float(curve(5000)) == 400.0 and float(curve(1e9)) == 400.0  # clamped high end, no extrapolation
    assert is_clamped(curve, 5) and is_clamped(curve, 1001) and not is_clamped(curve, 10)


@settings(max_examples=60, deadline=None)
@given(
    points=st.lists(
        st.tuples(st.floats(1, 1e5), st.floats(0, 1e5)), min_size=2, max_size=12, unique_by=lambda p: p[0]
    ),
    probe=st.floats(1e-3, 1e7),
)
def test_piecewise_stays_within_its_values_and_equals_end_values_outside(
    points: list[tuple[float, float]], probe: float
) -> None:
    curve = piecewise_from(series("t", points))
    value = float(curve(probe))
    assert min(curve.values) - 1e-9 <= value <= max(curve.values) + 1e-9
    if probe <= curve.observed_min:
        assert value == curve.values[0]
    if probe >= curve.observed_max:
        assert value == curve.values[-1]


def test_quadratic_throughput_is_floored_at_zero_and_extrapolates() -> None:
    fit = QuadraticFit(100.0, 1.0, -0.01, 2, 0.0, 1.0, 50.0)
    assert float(throughput_at(fit, 50)) == pytest.approx(125.0)
    assert float(throughput_at(fit, 150)) == pytest.approx(25.0)  # beyond the observed range: extrapolated
    assert float(throughput_at(fit, 1000)) == 0.0  # the parabola is negative there
    assert is_clamped(fit, 150) and not is_clamped(fit, 20)


def test_linear_inverse_is_exact() -> None:
    fit = QuadraticFit(20.0, 0.01, 0.0, 1, 0.0, 1.0, 100.0)
    inv = invert_capacity(fit, 100.0, 0.0, 1e6, "prefill")
    assert inv.is_exact and inv.boundary is None and inv.fit_root is None
    assert inv.batch == pytest.approx(8000.0)


def test_convex_quadratic_inverse_matches_the_formula() -> None:
    c0, c1, c2, memory = 10.0, 0.5, 0.002, 200.0
    inv = invert_quadratic(c0, c1, c2, memory, 0.0, 1e6, "x")
    expected = (-c1 + math.sqrt(c1 * c1 - 4 * c2 * (c0 - memory))) / (2 * c2)
    assert inv.is_exact and inv.batch == pytest.approx(expected, rel=1e-12)


def test_inverse_beyond_the_domain_takes_the_upper_boundary_and_is_flagged() -> None:
    inv = invert_quadratic(20.0, 0.01, 0.0, 100.0, 0.0, 5000.0, "prefill")
    assert not inv.is_exact and inv.boundary == "upper"
    assert inv.batch == 5000.0 and inv.fit_root == pytest.approx(8000.0)


def test_concave_fit_that_never_reaches_memory_is_flagged_inexact() -> None:
    # peaks at 20 + 0.5^2/(4*0.001) = 82.5 GB < 100 GB
    inv = invert_quadratic(20.0, 0.5, -0.001, 100.0, 0.0, 1e4, "decode")
    assert not inv.is_exact and inv.boundary == "upper" and inv.fit_root is None and inv.batch == 1e4


def test_concave_fit_that_crosses_uses_the_first_crossing() -> None:
    # 25 + 2b - 0.01b^2 = 100 at b = 50 (rising) and b = 150 (falling): the feasible set ends at 50
    inv = invert_quadratic(25.0, 2.0, -0.01, 100.0, 0.0, 1e4, "decode")
    assert inv.is_exact and inv.batch == pytest.approx(50.0)


def test_inverse_raises_when_the_smallest_batch_does_not_fit() -> None:
    with pytest.raises(InfeasiblePlan, match=r"decode capacity: 120.00 GB needed at batch 0"):
        invert_quadratic(120.0, 1.0, 0.0, 100.0, 0.0, 10.0, "decode capacity")


@settings(max_examples=100, deadline=None)
@given(
    c0=st.floats(0, 90),
    c1=st.floats(-5, 5),
    c2=st.floats(-0.01, 0.01),
    hi=st.floats(1, 1e4),
)
def test_inverse_never_exceeds_memory_on_its_interval(c0: float, c1: float, c2: float, hi: float) -> None:
    memory = 100.0
    inv = invert_quadratic(c0, c1, c2, memory, 0.0, hi, "x")
    grid = np.linspace(0.0, inv.batch, 257)
    assert np.all(c0 + grid * (c1 + grid * c2) <= memory * (1 + 1e-9) + 1e-9)
    if inv.is_exact:
        assert c0 + inv.batch * (c1 + inv.batch * c2) == pytest.approx(memory, rel=1e-7)
        assert inv.batch <= hi
    else:
        assert inv.batch == hi and inv.boundary == "upper"
