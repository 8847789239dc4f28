"""The fitted plan model (solver/plan/fitted.py): weights overrides, the fit kinds, and the
per-process cache of the built-in sets' fits."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.errors import InfeasiblePlan, InvalidCurves
from solver.plan.curves import PiecewiseLinear, QuadraticFit, ThroughputFitKind
from solver.plan.curvesets import builtin_curve_set_names, load_builtin_curve_set
from solver.plan.fitted import builtin_fit, fit_curves, with_machine
from tests.solver.plan.curve_factory import make_curve_set


def test_build_model_shifts_capacity_by_the_weights_override() -> None:
    curves = make_curve_set()
    model = fit_curves(curves, "piecewise", weights_gb=30.0)
    assert model.prefill.capacity.c0 == pytest.approx(30.0)
    assert model.decode.capacity.c0 == pytest.approx(30.0)
    assert model.weights_gb == 30.0 and model.memory_gb == 100.0
    assert isinstance(model.prefill.throughput, PiecewiseLinear)
    assert isinstance(fit_curves(curves, "quadratic").decode.throughput, QuadraticFit)


def test_build_model_rejects_weights_larger_than_memory() -> None:
    with pytest.raises(InfeasiblePlan, match=r"weights .* larger than machine memory"):
        fit_curves(make_curve_set(), memory_gb=25.0, weights_gb=30.0)


def test_build_model_rejects_an_unknown_fit() -> None:
    with pytest.raises(InvalidCurves, match="throughput_fit"):
        fit_curves(make_curve_set(), "cubic")  # type: ignore[arg-type]  # a bad value on purpose


def test_model_to_dict_lists_coefficients_and_ranges() -> None:
    d = fit_curves(make_curve_set()).to_dict()
    assert d["prefill"]["capacity"]["kind"] == "quadratic"
    assert d["prefill"]["capacity"]["c1"] == pytest.approx(0.01)
    assert d["decode"]["throughput"]["kind"] == "piecewise"
    assert d["decode"]["throughput"]["observed_range"] == [1.0, 100.0]


@pytest.mark.parametrize("fit", ["piecewise", "quadratic"])
def test_builtin_model_is_fitted_once_per_name_and_fit(fit: ThroughputFitKind) -> None:
    for name in builtin_curve_set_names():
        model = builtin_fit(name, fit)
        hits = builtin_fit.cache_info().hits
        assert builtin_fit(name, fit) is model
        assert builtin_fit.cache_info().hits == hits + 1
        assert model == fit_curves(load_builtin_curve_set(name), fit)  # what a fresh fit gives
        other = builtin_fit(name, "quadratic" if fit == "piecewise" else "piecewise")
        assert other is not model and other.throughput_fit != fit


def test_unknown_builtin_or_fit_is_refused_and_never_cached() -> None:
    builtin_fit("bloom-176b-8xh100")
    size = builtin_fit.cache_info().currsize
    with pytest.raises(InvalidCurves, match="unknown built-in curve set 'nope'"):
        builtin_fit("nope")
    with pytest.raises(InvalidCurves, match="throughput_fit"):
        builtin_fit("bloom-176b-8xh100", "cubic")
    assert builtin_fit.cache_info().currsize == size


@settings(max_examples=60, deadline=None)
@given(
    memory=st.one_of(st.none(), st.floats(1.0, 2000.0)),
    weights=st.one_of(st.none(), st.floats(1.0, 1000.0)),
    fit=st.sampled_from(["piecewise", "quadratic"]),
)
def test_an_override_on_the_cached_fit_equals_fitting_with_it(
    memory: float | None, weights: float | None, fit: ThroughputFitKind
) -> None:
    name = "llama2-70b-8xh100"
    curves = load_builtin_curve_set(name)
    try:
        expected = fit_curves(curves, fit, memory, weights)
    except InfeasiblePlan as exc:
        with pytest.raises(InfeasiblePlan, match=re.escape(str(exc))):
            with_machine(builtin_fit(name, fit), memory, weights)
        return
    assert with_machine(builtin_fit(name, fit), memory, weights) == expected


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_with_machine_rejects_a_bad_figure(bad: float) -> None:
    with pytest.raises(InvalidCurves, match="memory_gb: must be a finite number > 0"):
        with_machine(builtin_fit("bloom-176b-8xh100"), memory_gb=bad)
